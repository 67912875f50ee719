"""DML input of a table's actor: chunks written by statements, interleaved with barriers.

Statements and the barrier manager both append to the actor's inbox without awaiting in
between, so every part of a statement lands in the same epoch in every actor of the table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Message

# Chunks waiting together in an inbox are passed on as one up to this many rows.
_COALESCE_ROWS = 1 << 16


class DmlExecutor(Executor):
    def __init__(self, ctx: ActorContext, schema: Schema, inbox: Inbox) -> None:
        super().__init__(ctx, schema)
        self.inbox = inbox

    async def execute(self) -> AsyncIterator[Message]:
        # The statements of one epoch flow on as one chunk, passed on with the epoch's
        # barrier (or once that many rows wait): every executor downstream runs its
        # vectorized work once for all of them (group commit gathers many statements
        # into one epoch). Order is kept, so a key written twice ends as its last write.
        parts: list[StreamChunk] = []
        rows = 0
        while True:
            msg = await self.inbox.get()
            if isinstance(msg, StreamChunk):
                if parts and msg.data.schema != parts[0].data.schema:
                    yield StreamChunk.concat(parts)
                    parts, rows = [], 0
                parts.append(msg)
                rows += msg.num_rows
                if rows < _COALESCE_ROWS:
                    continue
                msg = StreamChunk.concat(parts)
                parts, rows = [], 0
            elif parts:
                yield StreamChunk.concat(parts)
                parts, rows = [], 0
            yield msg
