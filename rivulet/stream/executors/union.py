"""Union (UNION ALL): the chunks of every input, with barriers aligned across inputs.

Each input is one upstream fragment (the planner puts an exchange under every branch, and
gives each branch a branch number and its own key columns, so rows of different branches
never share a stream key). Chunks pass as they come; a barrier passes once it has arrived
on every input. When every input is an exchange (a ``MergeExecutor``), the union is one
merge over all their channels: a single level of alignment, no extra tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.executors.merge import MergeExecutor
from rivulet.stream.message import Barrier, Message


class UnionExecutor(Executor):
    def __init__(self, ctx: ActorContext, schema: Schema, inputs: list[Executor]) -> None:
        super().__init__(ctx, schema)
        self.inputs = inputs

    async def execute(self) -> AsyncIterator[Message]:
        names = self.schema.names
        async for msg in self._aligned():
            if isinstance(msg, StreamChunk):
                if msg.num_rows:
                    # Branches name their columns c0, c1...: give them the union's names.
                    yield StreamChunk(msg.data.rename_columns(names), msg.ops)
            else:
                yield msg

    def _aligned(self) -> AsyncIterator[Message]:
        if all(isinstance(i, MergeExecutor) for i in self.inputs):
            channels = [ch for i in self.inputs for ch in i.inputs]  # type: ignore[attr-defined]
            return MergeExecutor(self.ctx, self.schema, channels).execute()
        return self._align_executors()

    async def _align_executors(self) -> AsyncIterator[Message]:
        """Barrier alignment over arbitrary input executors (as MergeExecutor does over
        channels): an input that delivered a barrier is not read again until all have."""
        streams = [i.execute().__aiter__() for i in self.inputs]
        pending: dict[asyncio.Future[Message], int] = {}
        blocked: dict[int, Barrier] = {}

        def read(i: int) -> None:
            pending[asyncio.ensure_future(streams[i].__anext__())] = i

        for i in range(len(streams)):
            read(i)
        try:
            while True:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: pending[t]):
                    i = pending.pop(task)
                    msg = task.result()
                    if isinstance(msg, StreamChunk):
                        yield msg
                        read(i)
                    else:
                        blocked[i] = msg
                if len(blocked) == len(streams):
                    barriers = list(blocked.values())
                    if any(b.epoch != barriers[0].epoch for b in barriers):
                        raise RuntimeError(
                            f"barrier misalignment in actor {self.ctx.actor_id}: "
                            f"{sorted(b.epoch for b in barriers)}"
                        )
                    blocked.clear()
                    for i in range(len(streams)):
                        read(i)
                    yield barriers[0]
        finally:
            for task in pending:
                task.cancel()
