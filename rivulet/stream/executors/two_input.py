"""Reading two inputs at once (a join's sides), with barrier alignment across them.

Chunks pass as they come, tagged with the side they came from; barriers are aligned as
``rivulet.stream.barrier_align`` says. Each side is itself an executor (a merge of
upstream actors that aligns its own channels), so this only aligns the two.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.barrier_align import align
from rivulet.stream.executor import Executor
from rivulet.stream.message import Barrier

LEFT = 0
RIGHT = 1


def aligned(
    actor_id: int, inputs: tuple[Executor, Executor]
) -> AsyncIterator[tuple[int, StreamChunk] | Barrier]:
    """``(side, chunk)`` for each chunk of either input, and each barrier once both
    inputs have delivered it (``barrier_align.align``); the left goes first when both
    have something ready."""
    return align(actor_id, [inputs[LEFT].execute(), inputs[RIGHT].execute()])
