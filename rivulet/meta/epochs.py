"""What the barrier manager keeps about each epoch in flight (``_Epoch``: the actors yet
to collect its barrier, the state sealed in it, its catalog changes) and about each
statement waiting for a commit (``_Waiter``). A module of their own so that the
recovery part (``barrier_recovery``), which drops parts of them, shares them without
importing the manager.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_table import MemTable, StateTable
from rivulet.stream.message import Mutation


@dataclass
class _Waiter:
    future: asyncio.Future[int]
    # The jobs whose writes the waiter needs (None: the epoch as a whole).
    jobs: frozenset[int] | None = None


@dataclass
class _Epoch:
    epoch: int
    expected: set[int]
    sealed: list[tuple[StateTable, MemTable]] = field(default_factory=list)
    changes: list[CatalogChange] = field(default_factory=list)
    mutation: Mutation | None = None
    collected: asyncio.Event = field(default_factory=asyncio.Event)
    committed: asyncio.Future[int] | None = None
