"""Barrier alignment: the one rule by which an actor with several inputs (a merge of
upstream actors, a join's two sides, a union's branches) passes barriers.

Chunks pass as they come. When a barrier arrives on one input, that input is not read
again until a barrier has arrived on every input; the barriers must all be of the same
epoch, later than the last one passed, and then the barrier passes once. A barrier lost
or doubled on one input shows up as inputs that disagree, and fails the actor (its
failure domain is recovered) instead of mixing two epochs' rows.

Two forms apply it: ``align_channels`` over in-memory channels (a merge: no task per
message) and ``align`` over any message streams (a join's sides, a union of branches).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from rivulet.common.chunk import StreamChunk
from rivulet.stream.exchange import Channel
from rivulet.stream.message import Barrier, Message


class BarrierMisaligned(RuntimeError):
    """Inputs delivered barriers that do not line up."""


class BarrierAligner:
    """Which inputs wait at a barrier, and the barrier to pass once all do."""

    def __init__(self, actor_id: int, inputs: int) -> None:
        self.actor_id = actor_id
        self.inputs = inputs
        self.blocked: dict[int, Barrier] = {}
        self.last_epoch: int | None = None

    def is_blocked(self, i: int) -> bool:
        """Whether input ``i`` delivered this round's barrier (read it no more until then)."""
        return i in self.blocked

    def arrive(self, i: int, barrier: Barrier) -> Barrier | None:
        """Input ``i`` delivered ``barrier``: the barrier to pass if it was the last input
        to, else None."""
        if i in self.blocked:
            raise self._error(f"input {i} delivered a second barrier before the others")
        self.blocked[i] = barrier
        if len(self.blocked) < self.inputs:
            return None
        epochs = sorted({b.epoch for b in self.blocked.values()})
        if len(epochs) > 1:
            raise self._error(str(sorted(b.epoch for b in self.blocked.values())))
        if self.last_epoch is not None and epochs[0] <= self.last_epoch:
            raise self._error(f"epoch {epochs[0]} after {self.last_epoch}")
        self.last_epoch = epochs[0]
        passed = self.blocked[i]
        self.blocked.clear()
        return passed

    def _error(self, detail: str) -> BarrierMisaligned:
        return BarrierMisaligned(f"barrier misalignment in actor {self.actor_id}: {detail}")


async def align_channels(actor_id: int, channels: Sequence[Channel]) -> AsyncIterator[Message]:
    """Every message of ``channels``, barriers aligned: one message per channel in turn,
    in channel order (a reproducible output order), and one event for all channels, set
    by whichever receives a message: no task per message, and nothing left pending when
    the actor is dropped."""
    arrived = asyncio.Event()
    for channel in channels:
        channel.listener = arrived
    aligner = BarrierAligner(actor_id, len(channels))
    while True:
        took = False
        passed = None
        for i, channel in enumerate(channels):
            if aligner.is_blocked(i):
                continue
            msg = channel.try_recv()
            if msg is None:
                continue
            took = True
            if isinstance(msg, StreamChunk):
                yield msg
                continue
            assert isinstance(msg, Barrier)
            passed = aligner.arrive(i, msg)
            if passed is not None:
                # The alignment is complete and every channel readable again: the rest of
                # this pass would read the next epoch's rows before the barrier.
                break
        if passed is not None:
            yield passed
            continue
        if not took:
            # Nothing was yielded since the channels were looked at, so nothing can have
            # arrived unseen: clearing here loses no wakeup.
            arrived.clear()
            await arrived.wait()


async def align(
    actor_id: int, streams: Sequence[AsyncIterator[Message]]
) -> AsyncIterator[tuple[int, StreamChunk] | Barrier]:
    """``(input, chunk)`` for each chunk of any input, and each barrier once every input
    delivered it. When several inputs have something ready, the lower input goes first,
    so that a deterministic run replays the same order."""
    aligner = BarrierAligner(actor_id, len(streams))
    pending: dict[asyncio.Future[Message], int] = {}

    def read(i: int) -> None:
        pending[asyncio.ensure_future(anext(streams[i]))] = i

    for i in range(len(streams)):
        read(i)
    try:
        while True:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            passed = None
            for task in sorted(done, key=lambda t: pending[t]):
                i = pending.pop(task)
                msg = task.result()
                if isinstance(msg, StreamChunk):
                    yield i, msg
                    read(i)
                else:
                    assert isinstance(msg, Barrier)
                    passed = aligner.arrive(i, msg) or passed
            if passed is not None:
                for i in range(len(streams)):
                    read(i)
                yield passed
    finally:
        for task in pending:
            task.cancel()
