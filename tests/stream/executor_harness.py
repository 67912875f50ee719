"""A harness for testing one executor (or a short chain) on its own, without an engine.

Chunks are written as literals, one string per row: the op, then the values separated by
spaces (``NULL`` for a null; values cannot contain spaces)::

    kv = Rows(k=VARCHAR, v=BIGINT)          # the schema, given once
    kv("+ a 1", "- b 2", "U- c 3", "U+ c 4")  # a StreamChunk: Insert, Delete, update pair

An executor is fed by ``Scripted``: a given list of chunks and barriers, after which it
waits forever, as an idle upstream does. ``Harness.run`` drives the executor under test
until a number of barriers came out of it and returns an ``Output``: the messages, grouped
per epoch and readable in the same notation. Every output is checked for what any
executor owes its downstream: update pairs whole (an UpdateDelete directly followed by its
UpdateInsert, in one chunk), epochs increasing, chunks in the executor's schema.

State lives in a real in-memory ``StateStore`` (DuckDB). The harness is the actor's
barrier sink: an executor seals its state tables at a barrier, and once that barrier has
come out of the executor under test the epoch is committed as the barrier manager does it
(the job's state tables created with its first commit, then ``flush_sealed`` in one
transaction). A second executor built over the same state tables then is a *rebuilt
actor*, as after a recovery or a reschedule: it reads what was committed, and nothing of
what was not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.chunk import Op, StreamChunk
from rivulet.common.types import DataType
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.storage.state_table import (
    CommittedReader,
    MemTable,
    StateTable,
    StateTableSchema,
    flush_sealed,
)
from rivulet.stream.executor import ActorContext, BackfillTracker, Executor, Field, Schema
from rivulet.stream.expression import ExprSet
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Barrier, Message
from rivulet.stream.row_errors import RowErrorLog

__all__ = [
    "Barrier",
    "Harness",
    "Output",
    "Rows",
    "Scripted",
    "consolidate",
    "exprs",
    "unordered",
    "update_pairs_broken",
]

OPS = {"+": Op.INSERT, "-": Op.DELETE, "U-": Op.UPDATE_DELETE, "U+": Op.UPDATE_INSERT}
OP_NAMES = {int(op): name for name, op in OPS.items()}
T = TypeVar("T")
_SIGN = {Op.INSERT: 1, Op.UPDATE_INSERT: 1, Op.DELETE: -1, Op.UPDATE_DELETE: -1}


# ---------------------------------------------------------------- literals
def _parse(token: str, type_: pa.DataType) -> object:
    if token == "NULL":
        return None
    if pa.types.is_integer(type_):
        return int(token)
    if pa.types.is_floating(type_):
        return float(token)
    if pa.types.is_decimal(type_):
        return Decimal(token)
    if pa.types.is_boolean(type_):
        if token not in ("true", "false"):
            raise ValueError(f"not a boolean: {token!r}")
        return token == "true"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return token
    raise NotImplementedError(f"no literal for {type_}")


def show(value: object) -> str:
    """A value as the literals write it."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def show_row(row: Sequence[object]) -> str:
    return " ".join(show(v) for v in row)


class Rows:
    """A schema, and chunks of it written as literals (see the module doc)."""

    def __init__(self, **columns: DataType) -> None:
        self.schema = Schema(Field(name, t) for name, t in columns.items())
        self._arrow = self.schema.arrow()

    def __call__(self, *lines: str) -> StreamChunk:
        ops: list[int] = []
        values: list[list[object]] = [[] for _ in self.schema]
        for line in lines:
            op, *tokens = line.split()
            if op not in OPS:
                raise ValueError(f"unknown op {op!r} in {line!r} (one of {', '.join(OPS)})")
            if len(tokens) != len(self.schema):
                raise ValueError(f"{line!r}: expected {len(self.schema)} values")
            ops.append(OPS[op])
            for column, token, f in zip(values, tokens, self._arrow):
                column.append(_parse(token, f.type))
        data = pa.table(
            [pa.array(v, f.type) for v, f in zip(values, self._arrow)], schema=self._arrow
        )
        return StreamChunk(data, np.array(ops, dtype=np.int8))


def exprs(*sql: str) -> ExprSet:
    """Expressions (DuckDB SQL over the input columns ``c0, c1, ...``) that cannot fail."""
    return ExprSet.plain(list(sql))


def lines(chunk: StreamChunk) -> list[str]:
    """A chunk's rows in the literals' notation, in order."""
    rows: list[tuple[object, ...]] = list(zip(*(c.to_pylist() for c in chunk.data.columns)))
    rows = rows or [()] * chunk.num_rows  # a chunk without columns still has its rows
    return [f"{OP_NAMES[int(op)]} {show_row(row)}".rstrip() for op, row in zip(chunk.ops, rows)]


def unordered(*items: str) -> list[str]:
    """Expected lines or changes whose order does not matter (compare with ``changes``
    or ``consolidate``, which sort theirs)."""
    return sorted(items)


# ------------------------------------------------------------------ checks
def update_pairs_broken(messages: Iterable[Message]) -> list[str]:
    """Where an UpdateDelete is not directly followed by an UpdateInsert in its chunk, or
    an UpdateInsert not directly preceded by one (empty: every pair whole)."""
    problems = []
    chunks = [m for m in messages if isinstance(m, StreamChunk)]
    for n, chunk in enumerate(chunks):
        ops = [int(o) for o in chunk.ops]
        rows = lines(chunk)
        for i, op in enumerate(ops):
            if op == Op.UPDATE_DELETE and (i + 1 == len(ops) or ops[i + 1] != Op.UPDATE_INSERT):
                problems.append(f"chunk {n} row {i}: {rows[i]!r} without its U+")
            if op == Op.UPDATE_INSERT and (i == 0 or ops[i - 1] != Op.UPDATE_DELETE):
                problems.append(f"chunk {n} row {i}: {rows[i]!r} without its U-")
    return problems


def consolidate(*outputs: Output | Iterable[Message]) -> list[str]:
    """The rows the changes add up to (retractions applied), sorted, a row repeated as
    often as it is present. Changes that retract a row more often than it was added
    fail: the downstream would have nothing to delete."""
    count: Counter[tuple[object, ...]] = Counter()
    for output in outputs:
        messages = output.messages if isinstance(output, Output) else output
        for msg in messages:
            if not isinstance(msg, StreamChunk):
                continue
            rows = zip(*(c.to_pylist() for c in msg.data.columns))
            for op, row in zip(msg.ops, rows):
                count[row] += _SIGN[Op(int(op))]
                if count[row] < 0:
                    raise AssertionError(f"{show_row(row)!r} deleted but not present")
    return sorted(show_row(row) for row, n in count.items() for _ in range(n))


# ----------------------------------------------------------------- outputs
@dataclass
class Output:
    """What came out of an executor: every message, in order."""

    messages: list[Message]

    @property
    def barriers(self) -> list[Barrier]:
        return [m for m in self.messages if isinstance(m, Barrier)]

    @property
    def epochs(self) -> list[int]:
        return [b.epoch for b in self.barriers]

    def chunks(self, epoch: int) -> list[StreamChunk]:
        """The chunks of epoch ``epoch``: those that came out before its barrier and
        after the barrier before it."""
        out: list[StreamChunk] = []
        for msg in self.messages:
            if isinstance(msg, Barrier):
                if msg.epoch == epoch:
                    return out
                out = []
            else:
                out.append(msg)
        raise AssertionError(f"no barrier {epoch} came out (epochs: {self.epochs})")

    def epoch(self, epoch: int) -> list[str]:
        """The rows of epoch ``epoch`` in order, as literals (``"U- a 1"``)."""
        return [line for chunk in self.chunks(epoch) for line in lines(chunk)]

    def changes(self, epoch: int) -> list[str]:
        """The changes of epoch ``epoch``, sorted: ``"+ a 1"``, ``"- a 1"``, and an
        update pair as one change, ``"a 1 -> a 2"`` (for outputs whose order within an
        epoch is unspecified; the pairs are checked whole by ``Harness.run``)."""
        out: list[str] = []
        for chunk in self.chunks(epoch):
            rows = lines(chunk)
            i = 0
            while i < len(rows):
                if chunk.ops[i] == Op.UPDATE_DELETE:
                    out.append(f"{rows[i][3:]} -> {rows[i + 1][3:]}")
                    i += 2
                else:
                    out.append(rows[i])
                    i += 1
        return sorted(out)

    def trace(self) -> list[str]:
        """Every row as a literal and every barrier as ``"| <epoch>"``, in order."""
        out: list[str] = []
        for msg in self.messages:
            if isinstance(msg, Barrier):
                out.append(f"| {msg.epoch}")
            else:
                out.extend(lines(msg))
        return out


# ----------------------------------------------------------------- scripts
class Scripted(Executor):
    """An input that yields ``messages`` (chunks and barriers), then waits forever as an
    idle upstream does (``end=True``: then ends, as a finished input does)."""

    def __init__(
        self, ctx: ActorContext, schema: Schema, messages: Sequence[Message], *, end: bool = False
    ) -> None:
        super().__init__(ctx, schema)
        epochs = [m.epoch for m in messages if isinstance(m, Barrier)]
        if epochs != sorted(set(epochs)):
            raise ValueError(f"a script's barriers need increasing epochs, got {epochs}")
        self.messages = list(messages)
        self.end = end

    async def execute(self) -> AsyncIterator[Message]:
        for msg in self.messages:
            await asyncio.sleep(0)  # let other tasks run between messages, as a channel does
            yield msg
        if not self.end:
            await asyncio.Event().wait()


# ----------------------------------------------------------------- harness
@dataclass
class Harness:
    """The services an actor runs with: a real in-memory state store, a row error log,
    and a barrier sink that commits each epoch once its barrier came out of the executor
    under test. Close it (or use it as a context manager) to close the store."""

    store: StateStore = field(
        default_factory=lambda: StateStore(None, StoreOptions(memory_limit="256MB", threads=1))
    )
    row_errors: RowErrorLog = field(default_factory=RowErrorLog)
    backfill: BackfillTracker = None  # type: ignore[assignment]  # no backfill here
    committed_reader: CommittedReader | None = None  # committed rows from ``store``
    committed: int = 0
    # Sealed memtables of epochs not yet committed, by epoch.
    sealed: dict[int, list[tuple[StateTable, MemTable]]] = field(default_factory=dict)
    _known: dict[int, StateTableSchema] = field(default_factory=dict)
    _created: set[int] = field(default_factory=set)
    _tables: list[StateTable] = field(default_factory=list)
    _committed_event: asyncio.Event | None = None
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------- building actors
    def ctx(self, actor_id: int = 1) -> ActorContext:
        """An actor's context; the actor owns every vnode."""
        return ActorContext(actor_id, 1, 1, np.ones(256, dtype=bool), services=self)

    def table_ids(self, schemas: Iterable[StateTableSchema]) -> list[StateTableSchema]:
        """State table layouts (as ``state_layouts`` makes them, with id 0) given ids of
        their own, as the fragmenter gives them."""
        return [dataclasses.replace(s, table_id=next(self._ids)) for s in schemas]

    def script(self, schema: Schema | Rows, *messages: Message, end: bool = False) -> Scripted:
        if isinstance(schema, Rows):
            schema = schema.schema
        return Scripted(self.ctx(), schema, messages, end=end)

    # ------------------------------------------------------------ services
    @property
    def barrier_sink(self) -> Harness:
        return self

    @property
    def write_epoch(self) -> int:
        return self.committed + 1

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        return fn(self.store.cursor())  # inline, as a deterministic engine does

    async def wait_committed(self, epoch: int) -> int:
        while self.committed < epoch:
            if self._committed_event is None:
                self._committed_event = asyncio.Event()
            await self._committed_event.wait()
        return self.committed

    def register_actor(self, actor_id: int, inbox: Inbox | None = None) -> None:
        pass

    def unregister_actor(self, actor_id: int) -> None:
        pass

    def collect(self, actor_id: int, barrier: Barrier) -> None:
        pass

    def actor_failed(self, actor_id: int, error: BaseException) -> None:
        raise error

    def report_sealed(self, epoch: int, table: StateTable, memtable: MemTable) -> None:
        if epoch <= self.committed:
            raise AssertionError(
                f"epoch {epoch} sealed after it was committed (the epochs of one harness"
                f" go on across its runs: the next one is {self.committed + 1})"
            )
        self.sealed.setdefault(epoch, []).append((table, memtable))

    # -------------------------------------------------------------- commits
    def commit(self, epoch: int) -> None:
        """Commit every epoch up to ``epoch``, each in its own transaction, as the barrier
        manager does: a job's state tables are created with its first commit."""
        for e in range(self.committed + 1, epoch + 1):
            sealed = self.sealed.pop(e, [])
            new = [s for i, s in self._known.items() if i not in self._created]

            def write(
                cur: duckdb.DuckDBPyConnection,
                new: list[StateTableSchema] = new,
                sealed: list[tuple[StateTable, MemTable]] = sealed,
            ) -> None:
                for schema in new:
                    cur.execute(schema.create_sql())
                if sealed:
                    flush_sealed(sealed, cur)

            if new or sealed:
                self.store.commit_epoch(e, [write])
                self._created.update(s.table_id for s in new)
            for table in self._tables:
                table.committed(e)
            self.committed = e
        if self._committed_event is not None:
            self._committed_event.set()
            self._committed_event = None

    def discard_uncommitted(self) -> None:
        """Forget the sealed epochs not committed (the actors that wrote them are gone)."""
        self.sealed.clear()

    def stored(self, schema: StateTableSchema) -> list[tuple[object, ...]]:
        """The committed rows of a state table (without ``_vnode``), sorted."""
        if schema.table_id not in self._created:
            return []
        cols = ", ".join(f'"{c}"' for c in schema.column_names)
        rows = self.store.cursor().sql(f"SELECT {cols} FROM {schema.physical_name}").fetchall()
        return sorted(rows, key=repr)

    # -------------------------------------------------------------- running
    def _register(self, executor: Executor) -> None:
        """The state tables of ``executor`` and of the executors it reads."""
        for table in executor.state_tables:
            self._known.setdefault(table.schema.table_id, table.schema)
            if table not in self._tables:
                self._tables.append(table)
        for value in vars(executor).values():
            children = value if isinstance(value, (list, tuple)) else [value]
            for child in children:
                if isinstance(child, Executor) and child is not executor:
                    self._register(child)

    def run(
        self, executor: Executor, barriers: int, *, commit: bool = True, timeout: float = 10
    ) -> Output:
        """Drive ``executor`` until ``barriers`` barriers came out of it; ``commit``: each
        epoch is committed as soon as its barrier came out. Fails if the output breaks an
        update pair, repeats or reorders an epoch, or does not match the schema."""
        self._register(executor)
        messages: list[Message] = []

        async def drive() -> None:
            stream = executor.execute()
            try:
                async for msg in stream:
                    messages.append(msg)
                    if isinstance(msg, Barrier):
                        if commit:
                            self.commit(msg.epoch)
                        if len(Output(messages).barriers) == barriers:
                            return
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

        async def main() -> None:
            try:
                await asyncio.wait_for(drive(), timeout)
            except TimeoutError:
                got = Output(messages).epochs
                raise AssertionError(
                    f"{barriers} barriers expected within {timeout}s, got {got}"
                ) from None

        asyncio.run(main())
        out = Output(messages)
        self._check(executor, out)
        return out

    @staticmethod
    def _check(executor: Executor, out: Output) -> None:
        broken = update_pairs_broken(out.messages)
        assert not broken, "update pairs broken: " + "; ".join(broken)
        epochs = out.epochs
        assert epochs == sorted(set(epochs)), f"barrier epochs out of order: {epochs}"
        want = executor.schema.arrow()
        for msg in out.messages:
            if isinstance(msg, StreamChunk):
                assert msg.num_rows, "an empty chunk came out"
                assert msg.data.schema.types == want.types, (
                    f"chunk types {msg.data.schema.types} differ from the schema's {want.types}"
                )
