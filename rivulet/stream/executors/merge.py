"""Merge: an actor's input from several upstream actors, with barrier alignment.

Chunks pass as they come. When a barrier arrives on one input, that input is not read
again until the same barrier has arrived on every input; then the barrier passes once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.exchange import Channel
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Barrier, Message


class MergeExecutor(Executor):
    def __init__(self, ctx: ActorContext, schema: Schema, inputs: list[Channel]) -> None:
        super().__init__(ctx, schema)
        self.inputs = inputs

    async def execute(self) -> AsyncIterator[Message]:
        if len(self.inputs) == 1:
            channel = self.inputs[0]
            while True:
                yield await channel.recv()
        # One event for all inputs, set by whichever receives a message: no task per
        # message, and nothing left pending when the actor is dropped.
        arrived = asyncio.Event()
        for channel in self.inputs:
            channel.listener = arrived
        blocked: dict[int, Barrier] = {}
        while True:
            took = False
            # One message per input in turn, in input order (reproducible output order).
            for i, channel in enumerate(self.inputs):
                if i in blocked:
                    continue
                msg = channel.try_recv()
                if msg is None:
                    continue
                took = True
                if isinstance(msg, StreamChunk):
                    yield msg
                else:
                    blocked[i] = msg
            if len(blocked) == len(self.inputs):
                barriers = list(blocked.values())
                epoch = barriers[0].epoch
                if any(b.epoch != epoch for b in barriers):
                    raise RuntimeError(
                        f"barrier misalignment in actor {self.ctx.actor_id}: "
                        f"{sorted(b.epoch for b in barriers)}"
                    )
                blocked.clear()
                yield barriers[0]
                continue
            if not took:
                # Nothing was yielded since the inputs were looked at, so nothing can have
                # arrived unseen: clearing here loses no wakeup.
                arrived.clear()
                await arrived.wait()
