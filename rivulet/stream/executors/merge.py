"""Merge: an actor's input from several upstream actors, with barrier alignment over
their channels (``rivulet.stream.barrier_align.align_channels``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.stream.barrier_align import align_channels
from rivulet.stream.exchange import Channel
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Message


class MergeExecutor(Executor):
    def __init__(self, ctx: ActorContext, schema: Schema, inputs: list[Channel]) -> None:
        super().__init__(ctx, schema)
        self.inputs = inputs

    async def execute(self) -> AsyncIterator[Message]:
        if len(self.inputs) == 1:
            channel = self.inputs[0]
            while True:
                yield await channel.recv()
        async for msg in align_channels(self.ctx.actor_id, self.inputs):
            yield msg
