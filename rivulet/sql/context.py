"""What the SQL layer needs from the engine below it, in one place."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import duckdb
import numpy as np

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog, TableCatalog
from rivulet.meta.ddl_controller import DdlController
from rivulet.meta.system_params import SystemParams
from rivulet.sql.activity import Activity
from rivulet.sql.query_pool import QueryPool
from rivulet.sql.system_catalog import SystemCatalog
from rivulet.storage.state_store import StateStore
from rivulet.storage.state_table import StateTableSchema, quote_ident
from rivulet.stream.runtime import StreamRuntime

T = TypeVar("T")


class ClientSession(Protocol):
    """What the engine-wide views need of a client's session (``sql.session.Session``)."""

    def activity(self) -> Activity: ...

    def cancel(self) -> None: ...

    def terminate(self) -> None: ...


class RowIdGenerator:
    """Fresh ``_row_id`` values for one table: unique, increasing, never reused while the
    process runs. Starts after the largest committed id."""

    def __init__(self, state: StateTableSchema) -> None:
        self.state = state
        self._next: int | None = None

    @property
    def ready(self) -> bool:
        return self._next is not None

    def committed_max(self, cur: duckdb.DuckDBPyConnection) -> int:
        """The largest committed id (blocking: call from a query thread)."""
        rows = cur.execute(
            f"SELECT max({quote_ident(ROW_ID_COLUMN)}) FROM {self.state.physical_name}"
        ).fetchall()
        top = rows[0][0] if rows else None
        return int(top) if top is not None else 0

    def start_after(self, top: int) -> None:
        """Begin after ``top``, unless a concurrent statement began already (call on the
        event loop, where this check-and-set cannot interleave)."""
        if self._next is None:
            self._next = top + 1

    def allocate(self, n: int) -> np.ndarray:
        assert self._next is not None, "load() first"
        start = self._next
        self._next += n
        return np.arange(start, start + n, dtype=np.int64)


@dataclass
class FrontendContext:
    """Shared by every session of one engine."""

    store: StateStore
    catalog: Catalog
    system: SystemCatalog
    runtime: StreamRuntime
    barrier: BarrierManager
    ddl: DdlController
    params: SystemParams
    queries: QueryPool
    session_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    # The client sessions (pg_stat_activity, pg_cancel_backend), by id.
    sessions: dict[int, ClientSession] = field(default_factory=dict)
    database: str = "dev"
    _row_ids: dict[int, RowIdGenerator] = field(default_factory=dict)

    def activity(self) -> list[Activity]:
        """What every client session is doing (pg_stat_activity)."""
        return [session.activity() for session in list(self.sessions.values())]

    def signal_backend(self, pid: int, terminate: bool) -> bool:
        """pg_cancel_backend / pg_terminate_backend (from any thread): whether a session
        with that pid exists (and was signalled)."""
        session = self.sessions.get(pid)
        if session is None:
            return False
        if terminate:
            session.terminate()
        else:
            session.cancel()
        return True

    def row_ids(self, table: TableCatalog) -> RowIdGenerator:
        """The ``_row_id`` generator of a table without a primary key."""
        generator = self._row_ids.get(table.id)
        if generator is None:
            generator = self._row_ids[table.id] = RowIdGenerator(table.state_schema())
        return generator
