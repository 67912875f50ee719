"""Reading two inputs at once (a join's sides), with barrier alignment across them.

Chunks pass as they come, tagged with the side they came from. When a barrier arrives on
one side, that side is not read again until the same barrier has arrived on the other;
then the barrier passes once. Each side is itself an executor (a merge of upstream actors
that aligns its own channels), so this only aligns the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import Executor
from rivulet.stream.message import Barrier

LEFT = 0
RIGHT = 1


async def aligned(
    actor_id: int, inputs: tuple[Executor, Executor]
) -> AsyncIterator[tuple[int, StreamChunk] | Barrier]:
    """``(side, chunk)`` for each chunk of either input, and each barrier once both
    inputs have delivered it. When both sides have something ready, the left goes first
    so that a deterministic run replays the same order."""
    iterators = [inputs[0].execute(), inputs[1].execute()]
    pending: dict[asyncio.Future[object], int] = {}
    blocked: dict[int, Barrier] = {}

    def read(side: int) -> None:
        pending[asyncio.ensure_future(anext(iterators[side]))] = side

    read(LEFT)
    read(RIGHT)
    try:
        while True:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: pending[t]):
                side = pending.pop(task)
                msg = task.result()
                if isinstance(msg, StreamChunk):
                    yield side, msg
                    read(side)
                else:
                    assert isinstance(msg, Barrier)
                    blocked[side] = msg
            if len(blocked) == 2:
                left, right = blocked[LEFT], blocked[RIGHT]
                if left.epoch != right.epoch:
                    raise RuntimeError(
                        f"barrier misalignment in actor {actor_id}: "
                        f"left {left.epoch}, right {right.epoch}"
                    )
                blocked.clear()
                read(LEFT)
                read(RIGHT)
                yield left
    finally:
        for task in pending:
            task.cancel()
