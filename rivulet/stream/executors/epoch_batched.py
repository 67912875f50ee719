"""The base of stateful executors that apply an epoch's chunks together (Top-N, window
functions): at the barrier, or once ``BATCH_ROWS`` rows wait, the pending chunks become
one batch and one pass over state, which keeps the many small chunks a hash exchange
delivers from each costing a round trip to DuckDB."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.chunk import StreamChunk
from rivulet.storage.state_table import StateTable
from rivulet.stream.executor import Executor
from rivulet.stream.message import Barrier, Message

BATCH_ROWS = 65_536


class EpochBatchedExecutor(Executor):
    """Subclasses set ``input``, ``state`` and ``wait_committed`` and implement
    ``apply``; ``before_barrier`` runs as each barrier passes."""

    input: Executor
    state: StateTable
    wait_committed: Callable[[int], Awaitable[int]] | None
    _started = False
    # Whether committed state may hold rows (False: a new job, never read).
    may_have_state = True

    def apply(self, chunk: StreamChunk, cur: duckdb.DuckDBPyConnection) -> StreamChunk | None:
        raise NotImplementedError

    def before_barrier(self, barrier: Barrier) -> None:
        """Called after the epoch's state is sealed, before the barrier goes on."""

    def state_found(self, exists: bool) -> None:
        """Called once, before the first message, with whether committed state exists."""

    async def _start(self) -> bool:
        """Before the first message: is there committed state (a rebuilt actor)?"""
        self._started = True
        exists = await self.ctx.run_blocking(self.state.exists)
        self.may_have_state = exists
        self.state_found(exists)
        return exists

    async def execute(self) -> AsyncIterator[Message]:
        pending: list[StreamChunk] = []
        rows = 0
        async for msg in self.input.execute():
            if isinstance(msg, StreamChunk):
                if not self._started:
                    await self._start()
                if msg.num_rows == 0:
                    continue
                pending.append(msg)
                rows += msg.num_rows
                if rows < BATCH_ROWS:
                    continue
            if pending:
                batch = concat_chunks(pending)
                pending, rows = [], 0
                out = await self.ctx.run_blocking(lambda cur, m=batch: self.apply(m, cur))
                if out is not None and out.num_rows:
                    yield out
            if isinstance(msg, StreamChunk):
                continue
            resume = not self._started and await self._start()
            self.seal(msg)
            self.before_barrier(msg)
            yield msg
            if resume and self.wait_committed is not None:
                # A rebuilt actor reads state once the epoch its first barrier ends is
                # committed: the previous owner's last writes are in it.
                await self.wait_committed(msg.epoch)


def concat_chunks(chunks: list[StreamChunk]) -> StreamChunk:
    """Chunks of one input as one (their schemas may differ in field metadata only)."""
    if len(chunks) == 1:
        return chunks[0]
    schema = chunks[0].data.schema
    return StreamChunk(
        pa.concat_tables([c.data.cast(schema) for c in chunks]),
        np.concatenate([c.ops for c in chunks]),
    )
