"""Union (UNION ALL): the chunks of every input, with barriers aligned across inputs.

Each input is one upstream fragment (the planner puts an exchange under every branch, and
gives each branch a branch number and its own key columns, so rows of different branches
never share a stream key). Chunks pass as they come; a barrier passes once it has arrived
on every input. When every input is an exchange (a ``MergeExecutor``), the union is one
merge over all their channels: a single level of alignment, no extra tasks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.barrier_align import align
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
        """Barrier alignment over arbitrary input executors (``barrier_align.align``)."""
        async for item in align(self.ctx.actor_id, [i.execute() for i in self.inputs]):
            yield item if isinstance(item, Barrier) else item[1]
