"""Merge: an actor's input from several upstream actors, with barrier alignment
(``rivulet.stream.barrier_align``) over their channels.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.barrier_align import BarrierAligner
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
        # One event for all inputs, set by whichever receives a message: no task per
        # message, and nothing left pending when the actor is dropped.
        arrived = asyncio.Event()
        for channel in self.inputs:
            channel.listener = arrived
        aligner = BarrierAligner(self.ctx.actor_id, len(self.inputs))
        while True:
            took = False
            passed = None
            # One message per input in turn, in input order (reproducible output order).
            for i, channel in enumerate(self.inputs):
                if aligner.is_blocked(i):
                    continue
                msg = channel.try_recv()
                if msg is None:
                    continue
                took = True
                if isinstance(msg, StreamChunk):
                    yield msg
                    continue
                passed = aligner.arrive(i, msg)
                if passed is not None:
                    # The alignment is complete and every input readable again: the rest
                    # of this pass would read the next epoch's rows before the barrier.
                    break
            if passed is not None:
                yield passed
                continue
            if not took:
                # Nothing was yielded since the inputs were looked at, so nothing can have
                # arrived unseen: clearing here loses no wakeup.
                arrived.clear()
                await arrived.wait()
