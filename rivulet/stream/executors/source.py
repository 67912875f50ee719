"""Source: a connector's rows, paced, cut into epochs by the barriers in the actor's inbox.

A source actor has no upstream: the barrier manager puts barriers (and their mutations:
stop, add outputs) in its inbox, and the executor checks the inbox between the chunks it
generates, so a barrier is never stuck behind more than one chunk. It owns the splits
whose home vnode (``split * 256 // split_num``) it owns, keeps each split's next offset in
memory, and writes the offsets that moved into its state table at every barrier - so the
offsets committed with epoch ``e`` are exactly where the rows committed downstream with
``e`` end. After a restart it resumes from them; the connector's rows being a function of
their offset, nothing is lost or doubled.

It produces nothing before its first barrier, and reads its offsets only once that
barrier's epoch is committed (for a new source its state table is created by that
commit). Rows are paced per split (``datagen.rows.per.second``, nexmark's event gap; after a
stall a split catches up at most a second's worth): the rows due go out when a barrier
comes and in between at most every half second. Unpaced sources generate as fast as
possible. Chunks hold up to ``chunk_rows`` rows and are generated off the event loop.

Back-pressure from the commit: a source that passed ``MAX_EPOCHS_AHEAD`` barriers whose
epochs are not committed yet generates nothing until the oldest of them commits (rows
wait at the source, not in memory downstream or in the commit queue). It never holds a
barrier for that: a barrier that comes meanwhile goes on at once.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.chunk import StreamChunk
from rivulet.common.vnode import VNODE_COUNT
from rivulet.storage.state_table import StateTable
from rivulet.stream.connectors import Connector
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Barrier, Message

# A paced source emits the rows due when a barrier comes (they belong to its epoch) and
# in between at most every this many seconds: every chunk costs each operator downstream
# a fixed overhead, and rows only become visible at a barrier anyway.
_MIN_WAIT = 0.5
# A paced split that fell further behind than this (seconds) catches up only this much.
_MAX_LAG = 1.0
# A source generates rows while fewer than this many of the epochs it passed are not
# committed: with two, the next epoch's rows are generated while the last one commits.
MAX_EPOCHS_AHEAD = 2


def home_vnode(split: int, split_num: int) -> int:
    """The vnode whose owner reads ``split``: splits spread evenly over the vnodes, so an
    even mapping gives each actor its share."""
    return split * VNODE_COUNT // split_num


class SourceExecutor(Executor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        inbox: Inbox,
        connector: Connector,
        state: StateTable,
        wait_committed: Callable[[int], Awaitable[int]],
    ) -> None:
        super().__init__(ctx, schema)
        self.inbox = inbox
        self.connector = connector
        self.state = state
        self.state_tables = [state]
        self.wait_committed = wait_committed
        self.splits = owned_splits(ctx.vnodes, connector.split_num)
        self.offsets: dict[int, int] = {}
        self._start_offsets: dict[int, int] = {}
        self._ends = {s: connector.end_offset(s) for s in self.splits}
        self._moved: set[int] = set()
        self._arrow = schema.arrow()
        self._names = schema.names
        # Per split: when its pacing clock started (moved on when it fell far behind).
        self._started: dict[int, float] = {}
        # Rows emitted by this actor (for tests and progress reporting).
        self.rows_emitted = 0
        # Not paced: every chunk goes as soon as it is generated.
        self._unpaced = connector.due_offset(0, 0, 0.0) is None
        # An unpaced source generates its next chunk while the one before travels down
        # its actor (generation runs off the loop): the chunk and the offsets after it.
        self._ahead: asyncio.Future[tuple[pa.Table, dict[int, int]]] | None = None
        # Epochs of the barriers passed since the last known commit, and that commit.
        self._passed: list[int] = []
        self._committed = 0
        self._commit_wait: asyncio.Future[int] | None = None

    async def execute(self) -> AsyncIterator[Message]:
        first = await self.inbox.get()
        assert isinstance(first, Barrier), "a source's inbox holds barriers only"
        self.seal(first)
        yield first
        if first.stops(self.ctx.actor_id):
            return
        self._committed = await self.wait_committed(first.epoch)
        committed = await self.ctx.run_blocking(self._load_offsets)
        self.offsets = {s: committed.get(s, 0) for s in self.splits}
        self._start_offsets = dict(self.offsets)
        loop = asyncio.get_running_loop()
        self._started = {s: loop.time() for s in self.splits}
        last_emit = loop.time()
        try:
            while True:
                msg = self.inbox.get_nowait()
                if msg is None and (commit := self._commit_lag()) is not None:
                    msg = await self._wait_commit_or_barrier(commit)
                    if msg is None:
                        continue
                if msg is None:
                    now = loop.time()
                    plan = self._due(now)
                    rows = sum(n for _, _, n in plan)
                    eager = self._unpaced or rows >= self.connector.chunk_rows
                    if self._ahead is not None:
                        yield await self._take_ahead(read_ahead=True)
                        last_emit = now
                        await asyncio.sleep(0)
                        continue
                    if plan and (eager or now - last_emit >= _MIN_WAIT):
                        yield await self._emit(plan, read_ahead=self._unpaced)
                        last_emit = now
                        # Let barriers and other actors in even when every await above ran
                        # inline (the deterministic mode).
                        await asyncio.sleep(0)
                        continue
                    msg = await self._wait(self._next_wake(now, last_emit))
                    if msg is None:
                        continue
                assert isinstance(msg, Barrier), "a source's inbox holds barriers only"
                # The rows due by the barrier belong to its epoch (a chunk read ahead first).
                if self._ahead is not None:
                    yield await self._take_ahead(read_ahead=False)
                    last_emit = loop.time()
                plan = self._due(loop.time()) if self._commit_lag() is None else []
                if plan and not self._unpaced:
                    yield await self._emit(plan)
                    last_emit = loop.time()
                self._write_offsets()
                self.seal(msg)
                yield msg
                if msg.stops(self.ctx.actor_id):
                    return
                if msg.checkpoint:
                    self._passed.append(msg.epoch)
        finally:
            if self._ahead is not None:  # stopped or cancelled: the read-ahead is dropped
                self._ahead.cancel()
                self._ahead = None
            if self._commit_wait is not None:
                self._commit_wait.cancel()
                self._commit_wait = None

    # ------------------------------------------------------- back-pressure
    def _commit_lag(self) -> asyncio.Future[int] | None:
        """The commit to wait for before generating more rows (None: go on)."""
        if self._commit_wait is not None and self._commit_wait.done():
            self._committed = max(self._committed, self._commit_wait.result())
            self._commit_wait = None
        self._passed = [e for e in self._passed if e > self._committed]
        if len(self._passed) < MAX_EPOCHS_AHEAD:
            return None
        if self._commit_wait is None:
            self._commit_wait = asyncio.ensure_future(
                self.wait_committed(self._passed[-MAX_EPOCHS_AHEAD])
            )
        return self._commit_wait

    async def _wait_commit_or_barrier(self, commit: asyncio.Future[int]) -> Message | None:
        """The next inbox message if it comes before ``commit`` (None: committed)."""
        get: asyncio.Future[Message] = asyncio.ensure_future(self.inbox.get())
        waits: set[asyncio.Future[Any]] = {get, commit}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not get.done():
                get.cancel()  # a cancelled Queue.get leaves its message in the queue
        return get.result() if get.done() and not get.cancelled() else None

    async def _emit(
        self, plan: list[tuple[int, int, int]], *, read_ahead: bool = False
    ) -> StreamChunk:
        data, offsets = await self.ctx.run_blocking(lambda _cur: self._generate(plan))
        return self._emitted(data, offsets, read_ahead)

    async def _take_ahead(self, *, read_ahead: bool) -> StreamChunk:
        assert self._ahead is not None
        data, offsets = await self._ahead
        self._ahead = None
        return self._emitted(data, offsets, read_ahead)

    def _emitted(self, data: pa.Table, offsets: dict[int, int], read_ahead: bool) -> StreamChunk:
        """Rows about to leave: their offsets count from now on (a barrier writes only
        the offsets of rows that left before it). With ``read_ahead``, the next chunk's
        generation starts before this one goes down the actor."""
        self.offsets.update(offsets)
        self._moved.update(offsets)
        self.rows_emitted += data.num_rows
        if read_ahead:
            plan = self._due(asyncio.get_running_loop().time())
            if plan:
                self._ahead = asyncio.ensure_future(
                    self.ctx.run_blocking(lambda _cur: self._generate(plan))
                )
        return StreamChunk.inserts(data)

    # ------------------------------------------------------------- offsets
    def _load_offsets(self, cur: duckdb.DuckDBPyConnection) -> dict[int, int]:
        """The committed next offset of each owned split (absent: 0)."""
        if not self.splits:
            return {}
        keys = self.state.with_vnodes(pa.table({"split_id": pa.array(self.splits, pa.int64())}))
        rows = self.state.lookup(keys, self.state.overlay_layers(), cur)
        return dict(
            zip(rows.column("split_id").to_pylist(), rows.column("offset").to_pylist(), strict=True)
        )

    def _write_offsets(self) -> None:
        if not self._moved:
            return
        splits = sorted(self._moved)
        self._moved.clear()
        rows = pa.table(
            {
                "split_id": pa.array(splits, pa.int64()),
                "offset": pa.array([self.offsets[s] for s in splits], pa.int64()),
            }
        )
        data = self.state.with_vnodes(rows).cast(self.state.arrow_schema())
        self.state.write(StreamChunk.inserts(data), overwrites=True)

    # ------------------------------------------------------------- pacing
    def _active(self) -> list[int]:
        return [s for s in self.splits if self._ends[s] is None or self.offsets[s] < self._ends[s]]

    def _due(self, now: float) -> list[tuple[int, int, int]]:
        """(split, offset, count) of the rows to generate now (at most a chunk)."""
        active = self._active()
        if not active:
            return []
        share = max(1, self.connector.chunk_rows // len(active))
        plan = []
        for s in active:
            offset = self.offsets[s]
            start = self._start_offsets[s]
            behind = now - self._started[s] - self.connector.due_time(s, start, offset)
            if behind > _MAX_LAG:
                # Stalled (an overloaded process): catch up one second, not the whole gap.
                self._started[s] += behind - _MAX_LAG
            due = self.connector.due_offset(s, start, now - self._started[s])
            limit = offset + share if due is None else min(due, offset + share)
            end = self._ends[s]
            if end is not None:
                limit = min(limit, end)
            if limit > offset:
                plan.append((s, offset, limit - offset))
        return plan

    def _next_wake(self, now: float, last_emit: float) -> float | None:
        """Seconds until rows should be emitted: once one is due, and not sooner than
        ``_MIN_WAIT`` after the last chunk (None: every split is exhausted)."""
        active = self._active()
        if not active:
            return None
        due = min(
            self._started[s] + self.connector.due_time(s, self._start_offsets[s], self.offsets[s])
            for s in active
        )
        if math.isinf(due):
            return None
        return max(due, last_emit + _MIN_WAIT) - now + 0.001

    async def _wait(self, timeout: float | None) -> Message | None:
        """The next inbox message, or None once ``timeout`` seconds passed."""
        if timeout is None:
            return await self.inbox.get()
        try:
            return await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            return None

    # ---------------------------------------------------------- generating
    def _generate(self, plan: list[tuple[int, int, int]]) -> tuple[pa.Table, dict[int, int]]:
        """The plan's rows and each split's offset after them (not applied here)."""
        parts = []
        offsets = {}
        for split, offset, count in plan:
            batch = self.connector.read(split, offset, count, self._names)
            offsets[split] = batch.next_offset
            parts.append(batch.data)
        data = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return data.cast(self._arrow), offsets


def owned_splits(vnodes: np.ndarray, split_num: int) -> list[int]:
    """The splits an actor with this vnode bitmap reads."""
    return [s for s in range(split_num) if vnodes[home_vnode(s, split_num)]]
