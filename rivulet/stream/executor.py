"""Executors and the context they run in.

An actor runs a chain of executors. Each executor consumes the messages of its input and
yields its own: chunks transformed, barriers passed on. A stateful executor seals its state
tables when a barrier passes it, handing the epoch's writes to the barrier manager, which
commits them once every actor has passed that barrier.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Protocol, TypeVar

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.types import DataType, arrow_type_of
from rivulet.storage.state_service import StoreReader
from rivulet.storage.state_store import StateStore
from rivulet.storage.state_table import CommittedReader, MemTable, StateTable, StateTableSchema
from rivulet.stream.expression import RowErrors
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Barrier, Message
from rivulet.stream.row_errors import RowErrorLog

T = TypeVar("T")

# Chunks up to this many rows run their DuckDB-free work on the loop (``run_compute``).
INLINE_ROWS = 1024


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: DataType


class Schema(tuple[Field, ...]):
    """The columns of a stream, in order."""

    @property
    def names(self) -> list[str]:
        return [f.name for f in self]

    @property
    def types(self) -> list[DataType]:
        return [f.type for f in self]

    def arrow(self) -> pa.Schema:
        return pa.schema([pa.field(f.name, arrow_type_of(f.type)) for f in self])


class BarrierSink(Protocol):
    """What actors report to (the barrier manager implements it)."""

    @property
    def write_epoch(self) -> int: ...

    def register_actor(self, actor_id: int, inbox: Inbox | None = None) -> None: ...

    def unregister_actor(self, actor_id: int) -> None: ...

    def report_sealed(self, epoch: int, table: StateTable, memtable: MemTable) -> None: ...

    def collect(self, actor_id: int, barrier: Barrier) -> None: ...

    def actor_failed(self, actor_id: int, error: BaseException) -> None: ...


class BackfillTracker(Protocol):
    """Where backfilling scans report their progress and read their rate limit (the
    engine's ``BackfillProgress``; the job status and SHOW JOBS are built on it)."""

    def report(
        self, job_id: int, actor_id: int, epoch: int, consumed: int, total: int, done: bool
    ) -> None: ...

    def rate_limit(self, job_id: int) -> int | None:
        """Rows per second per actor; None: unlimited; 0: paused."""
        ...

    def track(self, job_id: int, actor_ids: Collection[int]) -> None:
        """The (re)built job's scan actors, before they start: from the moment all of them
        have reported, the job's progress is theirs (the runtime calls it)."""
        ...


class StreamServices(Protocol):
    """Engine services the stream runtime needs."""

    # Read-only (properties): an implementation may hold a subtype of each.
    @property
    def store(self) -> StateStore | None:
        """The store, where it is in this process (a compute node reads through
        ``committed_reader``)."""
        ...

    @property
    def barrier_sink(self) -> BarrierSink: ...
    @property
    def row_errors(self) -> RowErrorLog: ...
    @property
    def backfill(self) -> BackfillTracker: ...
    @property
    def committed_reader(self) -> CommittedReader | None:
        """Where state tables read committed rows; None: from ``store`` directly."""
        ...

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T: ...

    async def wait_committed(self, epoch: int) -> int: ...


@dataclass
class ActorContext:
    actor_id: int
    fragment_id: int
    job_id: int
    vnodes: np.ndarray  # bool[256]: the vnodes this actor owns
    services: StreamServices

    def state_table(self, schema: StateTableSchema) -> StateTable:
        """One of this actor's state tables, reading committed rows where the services
        say (the store in this process, or the storage service)."""
        return StateTable(schema, self.services.committed_reader)

    def committed_reads(self) -> CommittedReader:
        """Reads of committed state beyond a state table's own (a backfill's scans of
        its upstream): through the services' reader, or from the store here."""
        reader = self.services.committed_reader
        if reader is not None:
            return reader
        assert self.services.store is not None, "no store here and no reader"
        return StoreReader(self.services.store)

    def report_row_errors(self, operator: str, errors: RowErrors | None) -> None:
        """Rows whose expressions failed in ``operator`` (they got NULL instead); safe to
        call from a query thread."""
        if errors is not None:
            self.services.row_errors.record(self.job_id, self.fragment_id, operator, errors)

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        return await self.services.run_blocking(fn)

    async def run_compute(self, fn: Callable[[], T], rows: int) -> T:
        """Work that never touches DuckDB: on the event loop for a small chunk (a hop to
        a thread and back costs more than the work: ~0.25 ms, a few per epoch of a
        single-row INSERT), else off it like ``run_blocking``."""
        if rows <= INLINE_ROWS:
            return fn()
        return await self.services.run_blocking(lambda _cur: fn())


class Executor:
    """One stage of an actor's pipeline."""

    def __init__(self, ctx: ActorContext, schema: Schema) -> None:
        self.ctx = ctx
        self.schema = schema
        self.state_tables: list[StateTable] = []

    def execute(self) -> AsyncIterator[Message]:
        raise NotImplementedError

    def seal(self, barrier: Barrier) -> None:
        """Hand this epoch's state writes to the barrier manager."""
        for table in self.state_tables:
            memtable = table.seal(barrier.epoch)
            if memtable is not None:
                self.ctx.services.barrier_sink.report_sealed(barrier.epoch, table, memtable)
