"""What the SQL layer needs from the engine below it, in one place."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb

from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog
from rivulet.meta.ddl_controller import DdlController
from rivulet.sql.system_catalog import SystemCatalog
from rivulet.storage.state_store import StateStore
from rivulet.stream.runtime import StreamRuntime

T = TypeVar("T")


@dataclass
class FrontendContext:
    """Shared by every session of one engine."""

    store: StateStore
    catalog: Catalog
    system: SystemCatalog
    runtime: StreamRuntime
    barrier: BarrierManager
    ddl: DdlController
    query_executor: ThreadPoolExecutor
    session_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    database: str = "dev"

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``fn(cursor)`` on a query thread with that thread's own DuckDB cursor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.query_executor, lambda: fn(self.store.cursor()))
