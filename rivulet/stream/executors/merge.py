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
        pending: dict[asyncio.Task[Message], int] = {}
        blocked: dict[int, Barrier] = {}

        def read(i: int) -> None:
            pending[asyncio.ensure_future(self.inputs[i].recv())] = i

        for i in range(len(self.inputs)):
            read(i)
        try:
            while True:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                # Chunks first, in input order, so that output order is reproducible.
                for task in sorted(done, key=lambda t: pending[t]):
                    i = pending.pop(task)
                    msg = task.result()
                    if isinstance(msg, StreamChunk):
                        yield msg
                        read(i)
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
                    for i in range(len(self.inputs)):
                        read(i)
                    yield barriers[0]
        finally:
            for task in pending:
                task.cancel()
