"""StreamScan without history: an upstream table's or MV's changes only.

Used for ``upstream_only`` scans (the job ignores the upstream's past) and for ``none``: a
created job rebuilt at restart, recovery or reschedule, whose state holds the past
already. The job is attached to the upstream's actors at a barrier with epoch ``e``; every
change after it is forwarded. Scans that read history are in ``backfill.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Barrier, Message


class StreamScanExecutor(Executor):
    def __init__(
        self, ctx: ActorContext, schema: Schema, input: Executor, columns: list[int]
    ) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.columns = columns
        self._arrow = schema.arrow()

    async def execute(self) -> AsyncIterator[Message]:
        backfill = self.ctx.services.backfill
        async for msg in self.input.execute():
            if isinstance(msg, Barrier):
                # Nothing to read: done from the start.
                backfill.report(self.ctx.job_id, self.ctx.actor_id, msg.epoch, 0, 0, True)
                yield msg
                continue
            data = msg.data.select(self.columns).rename_columns(self.schema.names)
            yield StreamChunk(data.cast(self._arrow), msg.ops)
