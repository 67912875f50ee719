"""Backfill: a new job reads its upstream table's or MV's history while the upstream's
changes keep arriving, and merges both without loss or duplication.

The epoch argument (as in ``stream_scan.py``): after barrier ``e`` has passed this actor,
the executor waits for ``e`` to commit and reads the upstream's state then: that is the
state at ``e`` exactly (no later epoch can commit before this actor passes the next
barrier), and what it emits belongs to ``e + 1``, as do the changes that arrive next.

Progress is kept per vnode in the progress table (key ``_vnode``): the last upstream pk
read (NULL: nothing yet), whether the vnode is done, and how many rows were read. An
upstream change of vnode ``v`` is forwarded when ``v`` is done or its pk is <= ``v``'s
last pk (the downstream has that key's history), and dropped otherwise (a later read of
the state, which includes it, emits it). Progress travels with its vnode: an actor
rebuilt with other vnodes (reschedule, recovery, restart) resumes from theirs.

* ``arrangement``: reads in (vnode, pk) order, a vnode after the other, one query per
  read over the unfinished vnodes (a prefix of them, sized by per-vnode row estimates so
  the query stays cheap).
* ``no_shuffle``: one scan position per actor - reads its vnodes together in pk order;
  the position is stored in every vnode's row (state is keyed by vnode).
* ``snapshot``: reads the upstream's state as of the creation epoch, over several epochs
  and in bounded slices like ``arrangement``, through a read transaction of the store
  held open for it (MVCC keeps that state for it while commits go on), while the
  changes that arrive meanwhile go to a log (a state table), replayed once the snapshot
  is read. A rebuilt snapshot scan (its transaction is gone)
  replays the logged changes of the keys it has emitted, drops the rest and goes on as
  ``arrangement`` from its progress: the log of what it emitted plus the state now is
  exactly what the downstream lacks.

Reads follow the job's rate limit (``services.backfill.rate_limit``: rows per second per
actor, None unlimited, 0 paused), asked at every epoch so a change applies at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.common.types import arrow_type_of
from rivulet.common.vnode import VNODE_COUNT, compute_vnodes
from rivulet.storage.state_service import StateServiceError
from rivulet.storage.state_table import PositionedScan, StateTable, StateTableSchema
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Barrier, Message
from rivulet.stream.state_layouts import LOG_OP, LOG_SEQ, PROGRESS_DONE, PROGRESS_ROW_COUNT

T = TypeVar("T")

# Rows per emitted chunk.
EMIT_CHUNK_ROWS = 65536
# Rows one snapshot query reads at most: a vnode-prefix query (arrangement) stays cheap,
# a pk-ordered one (no_shuffle) scans every vnode of the actor, so it reads more at once.
ARRANGEMENT_QUERY_ROWS = 262144
NO_SHUFFLE_QUERY_ROWS = 1 << 20
# Unlimited: keep reading within an epoch for this long (the next barrier waits behind),
# at most this many rows.
EPOCH_READ_SECONDS = 0.5
MAX_EPOCH_ROWS = 4 << 20
# A rate limit accumulates at most this many seconds' worth of rows, and reads once it
# has this many seconds' worth (frequent epochs do not each pay for a query).
BURST_SECONDS = 1.0
MIN_READ_SECONDS = 0.2


# ------------------------------------------------------------------ vectorized helpers
def _bools(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _flat(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def lex_le(cols: list[pa.Array], bounds: list[pa.Array]) -> np.ndarray:
    """Rows whose key ``cols`` is <= ``bounds`` (row-aligned), lexicographically, NULL
    after every value (DuckDB's ``NULLS LAST``, the order the snapshot is read in)."""
    n = len(cols[0])
    le = np.zeros(n, dtype=bool)
    eq = np.ones(n, dtype=bool)
    for c, b in zip(cols, bounds):
        c, b = _flat(c), _flat(b)
        if b.type != c.type:
            b = b.cast(c.type)
        c_null, b_null = _bools(c.is_null()), _bools(b.is_null())
        lt = _bools(pc.less(c, b).fill_null(False)) | (~c_null & b_null)
        same = _bools(pc.equal(c, b).fill_null(False)) | (c_null & b_null)
        le |= eq & lt
        eq &= same
    return le | eq


class VnodeProgress:
    """Per-vnode backfill progress in memory (arrays over the 256 vnodes)."""

    def __init__(self, pk_types: list[pa.DataType]) -> None:
        self.done = np.zeros(VNODE_COUNT, dtype=bool)
        self.started = np.zeros(VNODE_COUNT, dtype=bool)
        self.count = np.zeros(VNODE_COUNT, dtype=np.int64)
        self.last: list[pa.Array] = [pa.nulls(VNODE_COUNT, t) for t in pk_types]
        # Vnodes whose row changed since it was last written.
        self.dirty = np.zeros(VNODE_COUNT, dtype=bool)

    def load(self, rows: pa.Table) -> None:
        """Rows of the progress table (``[_vnode, pk0.., done, row_count]``)."""
        if rows.num_rows == 0:
            return
        vn = np.asarray(rows.column(VNODE_COLUMN).to_numpy(), dtype=np.int64)
        self.done[vn] = _bools(rows.column(PROGRESS_DONE).fill_null(False))
        self.count[vn] = np.asarray(
            rows.column(PROGRESS_ROW_COUNT).fill_null(0).to_numpy(), np.int64
        )
        position = np.full(VNODE_COUNT, -1, dtype=np.int64)
        position[vn] = np.arange(len(vn))
        index = pa.array(position, mask=position < 0)
        started = self.count > 0
        for i in range(len(self.last)):
            col = rows.column(f"pk{i}").combine_chunks().cast(self.last[i].type)
            self.last[i] = col.take(index)
            started |= ~_bools(self.last[i].is_null())
        self.started |= started

    def rows(self, vnodes: np.ndarray, schema: pa.Schema) -> pa.Table:
        """Progress rows of ``vnodes`` (indices), in the progress table's Arrow schema."""
        index = pa.array(vnodes.astype(np.int64))
        cols: list[pa.Array] = [pa.array(vnodes.astype(np.int16), pa.int16())]
        cols += [col.take(index) for col in self.last]
        cols += [pa.array(self.done[vnodes]), pa.array(self.count[vnodes])]
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, schema)], schema=schema)

    def set_last(self, mask: np.ndarray, key: list[pa.Scalar]) -> None:
        """Last pk of the vnodes in ``mask`` := ``key``."""
        if not mask.any():
            return
        m = pa.array(mask)
        self.last = [pc.if_else(m, k.cast(col.type), col) for col, k in zip(self.last, key)]
        self.started |= mask

    def keep(self, vnodes: np.ndarray, pk: list[pa.Array]) -> np.ndarray:
        """Which changes (of these vnodes, with these pks) the downstream must get."""
        done = self.done[vnodes]
        if done.all():
            return done
        started = self.started[vnodes]
        if not started.any():
            return done
        if not pk:  # no key (a global aggregate's single row): started is all there is
            return done | started
        index = pa.array(vnodes.astype(np.int64))
        bounds = [col.take(index) for col in self.last]
        return done | (started & lex_le(pk, bounds))


# ------------------------------------------------------------------ the executor
class BackfillExecutor(Executor):
    """``arrangement``, ``no_shuffle`` and ``snapshot`` scans (see the module doc)."""

    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        upstream: StateTableSchema,
        columns: list[int],
        wait_committed: Callable[[int], Awaitable[int]],
        *,
        scan_type: str,
        progress: StateTable,
        log: StateTable | None = None,
        rebuilt: bool = False,
    ) -> None:
        super().__init__(ctx, schema)
        assert scan_type in ("arrangement", "no_shuffle", "snapshot")
        assert scan_type != "snapshot" or log is not None, "a snapshot scan needs its log"
        self.input = input
        self.upstream = upstream
        self.columns = columns
        self.wait_committed = wait_committed
        self.scan_type = scan_type
        self.by_vnode = scan_type != "no_shuffle"
        self.progress_state = progress
        self.log_state = log
        self.rebuilt = rebuilt
        self.state_tables = [progress] + ([log] if log is not None else [])
        self._arrow = schema.arrow()
        self.owned = np.asarray(ctx.vnodes, dtype=bool)
        names = upstream.column_names
        self._pk_names = [names[i] for i in upstream.pk]
        # Upstream columns a read needs (output and pk), by name, in stored order.
        self._read_names = [names[i] for i in sorted(set(columns) | set(upstream.pk))]
        self._out_index = [self._read_names.index(names[i]) + 1 for i in columns]
        # Reads of committed state: the store's, here or through the storage service.
        self.reads = ctx.committed_reads()
        self._scan = PositionedScan.of(upstream, self._read_names, by_vnode=self.by_vnode)
        self._log_scan = None
        if log is not None:
            self._log_scan = PositionedScan.of(log.schema, log.schema.column_names, by_vnode=False)
        pk_types = [arrow_type_of(upstream.columns[i][1]) for i in upstream.pk]
        self.progress = VnodeProgress(pk_types)
        # Rows of each vnode still to read, estimated at start (sizes vnode-prefix reads).
        self._remaining = np.zeros(VNODE_COUNT, dtype=np.int64)
        self._total: int | None = None
        # "backfill" (reading the current state), "snapshot" (emitting the fixed one),
        # "replay" (its log), "forward" (done).
        self.mode = "backfill"
        # A snapshot scan's read transaction (its handle), open while it reads its
        # snapshot; the lock is held while a query thread uses it, so that the actor's
        # end (on the loop) closes it only when no read is in flight (else the read
        # closes it).
        self._snapshot: int | None = None
        self._snapshot_lock = threading.Lock()
        self._ended = False
        self._log_seq = 0
        self._replayed_seq = -1
        self._tokens = 0.0
        self._refilled = time.monotonic()

    # -------------------------------------------------------------- the loop
    async def execute(self) -> AsyncIterator[Message]:
        try:
            async for msg in self._run():
                yield msg
        finally:
            self._ended = True
            if self._snapshot_lock.acquire(blocking=False):
                try:
                    self._close_snapshot()
                finally:
                    self._snapshot_lock.release()

    async def _run(self) -> AsyncIterator[Message]:
        if self.rebuilt:
            for chunk in await self._resume():
                yield chunk
        first = True
        async for msg in self.input.execute():
            if isinstance(msg, Barrier):
                self._persist()
                self.seal(msg)
                self._report(msg.epoch)
                yield msg
                if self.mode != "forward" and not msg.stops(self.ctx.actor_id):
                    await self.wait_committed(msg.epoch)
                    async for chunk in self._read_epoch(first):
                        yield chunk
                first = False
                continue
            out = self._on_change(msg)
            if out is not None and out.num_rows:
                yield out

    def _on_change(self, chunk: StreamChunk) -> StreamChunk | None:
        """An upstream change: forwarded, filtered by progress, or logged."""
        if self.mode == "forward":
            return self._project(chunk.data, chunk.ops)
        vnodes = self._vnodes(chunk.data)
        if self.mode in ("snapshot", "replay"):
            self._append_log(chunk, vnodes)
            return None
        keep = self.progress.keep(vnodes, [chunk.data.column(i) for i in self.upstream.pk])
        if keep.all():
            return self._project(chunk.data, chunk.ops)
        if not keep.any():
            return None
        kept = chunk.take(keep)
        return self._project(kept.data, kept.ops)

    def _project(self, data: pa.Table, ops: np.ndarray) -> StreamChunk:
        out = data.select(self.columns).rename_columns(self.schema.names)
        return StreamChunk(out.cast(self._arrow), ops)

    def _vnodes(self, data: pa.Table) -> np.ndarray:
        """Each upstream row's vnode, as its state table stores it."""
        if not self.upstream.dist_key:
            return np.zeros(data.num_rows, dtype=np.int16)
        return compute_vnodes([data.column(i) for i in self.upstream.dist_key])

    # ------------------------------------------------------------- barriers
    def _persist(self) -> None:
        """Write the progress rows that changed in this epoch (committed with it)."""
        dirty = np.flatnonzero(self.progress.dirty & self.owned)
        if len(dirty) == 0:
            return
        rows = self.progress.rows(dirty, self.progress_state.arrow_schema())
        ops = np.full(rows.num_rows, Op.INSERT, dtype=np.int8)
        self.progress_state.write(StreamChunk(rows, ops), overwrites=True, unique=True)
        self.progress.dirty[:] = False

    def _report(self, epoch: int) -> None:
        consumed = int(self.progress.count[self.owned].sum())
        total = max(self._total or 0, consumed)
        self.ctx.services.backfill.report(
            self.ctx.job_id, self.ctx.actor_id, epoch, consumed, total, self.mode == "forward"
        )

    def _budget(self) -> tuple[int, float]:
        """Snapshot rows this epoch may read, and until when (the rate limit's tokens)."""
        rate = self.ctx.services.backfill.rate_limit(self.ctx.job_id)
        now = time.monotonic()
        elapsed, self._refilled = now - self._refilled, now
        if rate is None:
            self._tokens = 0.0
            return MAX_EPOCH_ROWS, now + EPOCH_READ_SECONDS
        if rate <= 0:
            self._tokens = 0.0
            return 0, now
        self._tokens = min(self._tokens + rate * elapsed, max(rate * BURST_SECONDS, 1.0))
        if self._tokens < min(rate * MIN_READ_SECONDS, ARRANGEMENT_QUERY_ROWS):
            return 0, now
        return int(self._tokens), now + EPOCH_READ_SECONDS

    def _spend(self, rows: int) -> None:
        self._tokens = max(self._tokens - rows, 0.0)

    # ---------------------------------------------------------------- reads
    async def _read_epoch(self, first: bool) -> AsyncIterator[StreamChunk]:
        """What this epoch emits of the history (state at the barrier just committed)."""
        if first and not self.rebuilt:
            if self.scan_type == "snapshot":
                await self._blocking(self._open_snapshot)
                self.mode = "snapshot"
            else:
                await self._blocking(self._count)
        budget, deadline = self._budget()
        if self.mode in ("backfill", "snapshot"):
            async for chunk in self._read_state(budget, deadline):
                yield chunk
        if self.mode == "replay":
            async for chunk in self._replay(deadline):
                yield chunk

    async def _read_state(self, budget: int, deadline: float) -> AsyncIterator[StreamChunk]:
        """Reads in slices until the budget or the epoch's deadline: the state now, or a
        snapshot scan's fixed snapshot (then its log is replayed)."""
        limit = ARRANGEMENT_QUERY_ROWS if self.by_vnode else NO_SHUFFLE_QUERY_ROWS
        while budget > 0:
            n = min(budget, limit)
            queried = self._query_set(n)
            table = await self._blocking(partial(self._read, n, queried))
            emitted = self._advance(table, n, queried)
            budget -= emitted.num_rows
            self._spend(emitted.num_rows)
            for chunk in self._chunks(emitted):
                yield chunk
            if not (self.owned & ~self.progress.done).any():
                if self.mode == "snapshot":
                    self._close_snapshot()
                    self.mode = "replay"
                else:
                    self.mode = "forward"
                return
            if time.monotonic() >= deadline:
                return

    def _query_set(self, n: int) -> np.ndarray:
        """The unfinished vnodes the next read covers: all of them in pk order; in vnode
        order only a prefix expected to hold more than ``n`` rows (a cheaper query)."""
        unfinished = self.owned & ~self.progress.done
        if not self.by_vnode:
            return unfinished
        vn = np.flatnonzero(unfinished)
        reach = np.cumsum(self._remaining[vn]) > n
        if not reach.any():
            return unfinished
        out = np.zeros(VNODE_COUNT, dtype=bool)
        out[vn[: int(np.argmax(reach)) + 1]] = True
        return out

    def _advance(self, table: pa.Table, n: int, queried: np.ndarray) -> pa.Table:
        """Progress after a read of up to ``n + 1`` rows over ``queried``; returns the
        rows to emit (the first ``n``)."""
        p = self.progress
        emitted = table.slice(0, n)
        vn = np.asarray(emitted.column(VNODE_COLUMN).to_numpy(), dtype=np.int64)
        read = np.bincount(vn, minlength=VNODE_COUNT)
        p.count += read
        self._remaining = np.maximum(self._remaining - read, 0)
        p.dirty |= queried
        if table.num_rows <= n:  # every queried vnode is read to its end
            p.done |= queried
            self._remaining[queried] = 0
            return emitted
        key = [emitted.column(name)[n - 1] for name in self._pk_names]
        if self.by_vnode:
            cursor = int(vn[-1])
            below = queried & (np.arange(VNODE_COUNT) < cursor)
            p.done |= below
            self._remaining[below] = 0
            if int(table.column(VNODE_COLUMN)[n].as_py()) != cursor:
                p.done[cursor] = True
                self._remaining[cursor] = 0
            else:
                at = np.zeros(VNODE_COUNT, dtype=bool)
                at[cursor] = True
                p.set_last(at, key)
        else:
            # One position for all: each unfinished vnode moves up to the last key read
            # (never back, should positions differ after a rebuild).
            open_ = queried & ~p.done
            idx = np.flatnonzero(open_)
            bounds = [pa.array([k.as_py()] * len(idx), col.type) for k, col in zip(key, p.last)]
            behind = ~p.started[idx] | lex_le([col.take(pa.array(idx)) for col in p.last], bounds)
            move = np.zeros(VNODE_COUNT, dtype=bool)
            move[idx[behind]] = True
            p.set_last(move, key)
        return emitted

    def _chunks(self, rows: pa.Table) -> list[StreamChunk]:
        """Read rows (``[_vnode, read columns...]``) as insert chunks of the output."""
        out = []
        for off in range(0, rows.num_rows, EMIT_CHUNK_ROWS):
            part = rows.slice(off, EMIT_CHUNK_ROWS).select(self._out_index)
            part = part.rename_columns(self.schema.names).cast(self._arrow)
            out.append(StreamChunk.inserts(part))
        return out

    # -- blocking (reads of the store), on a query thread
    async def _blocking(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a query thread: reads go through ``self.reads``, not a cursor."""
        return await self.ctx.run_blocking(lambda _cur: fn())

    def _positions(self, vnodes: np.ndarray) -> pa.Table:
        """The positions of ``vnodes`` (a mask) to read after."""
        idx = np.flatnonzero(vnodes)
        take = pa.array(idx)
        cols = {"vnode": pa.array(idx.astype(np.int16)), "started": pa.array(
            self.progress.started[idx]
        )}  # fmt: skip
        for i, col in enumerate(self.progress.last):
            cols[f"pk{i}"] = col.take(take)
        return pa.table(cols)

    def _count(self) -> None:
        """Rows left to read per vnode (one query); total = read + left."""
        unfinished = self.owned & ~self.progress.done
        counts = self.reads.scan(self._scan, self._positions(unfinished), None, self._snapshot)
        vn = np.asarray(counts.column("v").to_numpy(), dtype=np.int64)
        self._remaining[:] = 0
        self._remaining[vn] = np.asarray(counts.column("n").to_numpy(), dtype=np.int64)
        self._total = int(self.progress.count[self.owned].sum() + self._remaining.sum())

    def _read(self, n: int, vnodes: np.ndarray) -> pa.Table:
        """Up to ``n + 1`` rows after the positions of ``vnodes``, in read order: the
        state now, or a snapshot scan's snapshot while it is open."""
        with self._snapshot_lock:
            try:
                return self.reads.scan(self._scan, self._positions(vnodes), n + 1, self._snapshot)
            finally:
                if self._ended:
                    self._close_snapshot()

    # ------------------------------------------------------------- snapshot
    def _open_snapshot(self) -> None:
        """Begin the read transaction that holds the state at the barrier just
        committed. The store fixes a transaction's snapshot at its first statement: the
        count, run before this actor passes the next barrier, so before the next epoch
        can commit."""
        with self._snapshot_lock:
            self._snapshot = self.reads.open_snapshot()
            try:
                self._count()
            except BaseException:
                self._close_snapshot()
                raise
            if self._ended:
                self._close_snapshot()

    def _close_snapshot(self) -> None:
        handle, self._snapshot = self._snapshot, None
        if handle is not None:
            # The store (or the service) already gone: the transaction went with it.
            with contextlib.suppress(OSError, StateServiceError):
                self.reads.close_snapshot(handle)

    def _append_log(self, chunk: StreamChunk, vnodes: np.ndarray) -> None:
        assert self.log_state is not None
        n = chunk.num_rows
        seq = np.arange(self._log_seq, self._log_seq + n, dtype=np.int64)
        self._log_seq += n
        schema = self.log_state.arrow_schema()
        arrays = [pa.array(vnodes, pa.int16()), pa.array(seq), pa.array(chunk.ops, pa.int16())]
        arrays += [_flat(c) for c in chunk.data.columns]
        rows = pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema)], schema=schema)
        ops = np.full(n, Op.INSERT, dtype=np.int8)
        self.log_state.write(StreamChunk(rows, ops), overwrites=False, unique=True)

    async def _replay(self, deadline: float) -> AsyncIterator[StreamChunk]:
        """The logged changes, oldest first, removed from the log as they go out; once
        the log is empty the scan forwards."""
        while True:
            rows = await self._blocking(partial(self._read_log, ARRANGEMENT_QUERY_ROWS))
            part = rows.slice(0, ARRANGEMENT_QUERY_ROWS)
            if part.num_rows:
                self._replayed_seq = int(part.column(LOG_SEQ)[part.num_rows - 1].as_py())
                self._delete_log(part)
                for chunk in self._log_chunks(part, np.ones(part.num_rows, dtype=bool)):
                    yield chunk
            if rows.num_rows <= ARRANGEMENT_QUERY_ROWS:
                self.mode = "forward"
                return
            if time.monotonic() >= deadline:
                return

    def _read_log(self, n: int) -> pa.Table:
        """Up to ``n + 1`` logged changes after the last one replayed, oldest first."""
        assert self._log_scan is not None
        idx = np.flatnonzero(self.owned)
        after = pa.table(
            {
                "vnode": pa.array(idx.astype(np.int16)),
                "started": pa.array(np.ones(len(idx), dtype=bool)),
                "pk0": pa.array(np.full(len(idx), self._replayed_seq, dtype=np.int64)),
            }
        )
        return self.reads.scan(self._log_scan, after, n + 1)

    def _delete_log(self, rows: pa.Table) -> None:
        assert self.log_state is not None
        rows = rows.cast(self.log_state.arrow_schema())
        ops = np.full(rows.num_rows, Op.DELETE, dtype=np.int8)
        self.log_state.write(StreamChunk(rows, ops), overwrites=True, unique=True)

    def _log_chunks(self, rows: pa.Table, keep: np.ndarray) -> list[StreamChunk]:
        """Logged rows (``[_vnode, seq, op, c0..]``) as output changes (only ``keep``)."""
        logged = StreamChunk(
            rows.select(list(range(3, rows.num_columns))),
            np.asarray(rows.column(LOG_OP).to_numpy(), dtype=np.int8),
        ).take(keep)
        data, ops = logged.data, logged.ops
        out = []
        for off in range(0, data.num_rows, EMIT_CHUNK_ROWS):
            part = data.slice(off, EMIT_CHUNK_ROWS)
            out.append(self._project(part, ops[off : off + part.num_rows]))
        return out

    # ---------------------------------------------------------------- rebuilt
    async def _resume(self) -> list[StreamChunk]:
        """A rebuilt actor: load the progress of its vnodes (committed), count what is
        left; a snapshot scan also turns its log into output (see the module doc)."""
        log = await self._blocking(self._load)
        out: list[StreamChunk] = []
        if log is not None and log.num_rows:
            vnodes = np.asarray(log.column(VNODE_COLUMN).to_numpy(), dtype=np.int16)
            pk = [log.column(f"c{i}") for i in self.upstream.pk]
            keep = self.progress.keep(vnodes, pk)
            out = self._log_chunks(log, keep)
            self._delete_log(log)
        started = self.progress.started | self.progress.done
        if self.scan_type == "snapshot" and not started[self.owned].any() and not out:
            self.rebuilt = False  # nothing emitted yet: take the snapshot afresh
        elif not (self.owned & ~self.progress.done).any():
            self.mode = "forward"
        return out

    def _load(self) -> pa.Table | None:
        owned = pa.table({VNODE_COLUMN: pa.array(np.flatnonzero(self.owned).astype(np.int16))})
        on = [VNODE_COLUMN]
        self.progress.load(self.reads.matching(self.progress_state.schema, owned, on, True))
        log = None
        if self.log_state is not None:
            log = self.reads.matching(self.log_state.schema, owned, on, True)
            log = log.sort_by(LOG_SEQ)
        if (self.owned & ~self.progress.done).any():
            self._count()
        else:
            self._total = int(self.progress.count[self.owned].sum())
        return log
