"""StreamScan: an upstream table's or MV's rows for a new job - its snapshot, then its
changes.

The job is attached to the upstream's actors at a barrier with epoch ``e`` (its first
message). Changes after that barrier belong to epoch ``e + 1`` and later; everything before
is in the upstream's state committed at ``e``. So the executor passes the barrier, waits
for epoch ``e`` to commit, reads the snapshot of its own vnodes (no later epoch can commit
meanwhile: that needs this actor to pass the next barrier), emits it as inserts in epoch
``e + 1``, and then forwards the upstream's changes. Nothing is lost or doubled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.chunk import VNODE_COLUMN, StreamChunk
from rivulet.storage.state_table import StateTableSchema, quote_ident
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Barrier, Message

SNAPSHOT_CHUNK_ROWS = 65536


class StreamScanExecutor(Executor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        upstream: StateTableSchema,
        columns: list[int],
        wait_committed: Callable[[int], Awaitable[int]],
        *,
        snapshot: bool = True,
    ) -> None:
        super().__init__(ctx, schema)
        self.snapshot = snapshot
        self.input = input
        self.upstream = upstream
        self.columns = columns
        self.wait_committed = wait_committed
        self._arrow = schema.arrow()

    async def execute(self) -> AsyncIterator[Message]:
        first = self.snapshot
        async for msg in self.input.execute():
            if isinstance(msg, Barrier):
                yield msg
                if first:
                    first = False
                    await self.wait_committed(msg.epoch)
                    snapshot = await self.ctx.run_blocking(self._read_snapshot)
                    for off in range(0, snapshot.num_rows, SNAPSHOT_CHUNK_ROWS):
                        part = snapshot.slice(off, SNAPSHOT_CHUNK_ROWS)
                        yield StreamChunk.inserts(part)
                continue
            data = msg.data.select(self.columns).rename_columns(self.schema.names)
            yield StreamChunk(data.cast(self._arrow), msg.ops)

    def _read_snapshot(self, cur: duckdb.DuckDBPyConnection) -> pa.Table:
        names = [self.upstream.columns[i][0] for i in self.columns]
        cols = ", ".join(quote_ident(n) for n in names)
        owned = np.flatnonzero(self.ctx.vnodes)
        where = ""
        if len(owned) < len(self.ctx.vnodes):
            where = f" WHERE {VNODE_COLUMN} IN ({', '.join(str(int(v)) for v in owned)})"
        table = cur.sql(f"SELECT {cols} FROM {self.upstream.physical_name}{where}").to_arrow_table()
        return table.rename_columns(self.schema.names).cast(self._arrow)
