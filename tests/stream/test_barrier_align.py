"""Barrier alignment, as every actor with several inputs applies it (a merge over
channels, a join's two sides, a union's branches): chunks pass as they come, a barrier
passes once all inputs delivered it, and a barrier lost or doubled on one input fails the
actor rather than mixing two epochs' rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa
import pytest

from rivulet.common.chunk import StreamChunk
from rivulet.common.types import BIGINT
from rivulet.stream.barrier_align import BarrierMisaligned
from rivulet.stream.exchange import Channel
from rivulet.stream.executor import ActorContext, Executor, Field, Schema
from rivulet.stream.executors.merge import MergeExecutor
from rivulet.stream.executors.two_input import aligned
from rivulet.stream.executors.union import UnionExecutor
from rivulet.stream.message import Barrier, Message

SCHEMA = Schema((Field("c0", BIGINT),))
CTX = ActorContext(7, 1, 1, np.ones(256, dtype=bool), services=None)  # type: ignore[arg-type]


def chunk(*values: int) -> StreamChunk:
    return StreamChunk.inserts(pa.table({"c0": pa.array(values, pa.int64())}))


class Scripted(Executor):
    """An input that delivers a fixed list of messages, then waits forever."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__(CTX, SCHEMA)
        self.messages = messages

    async def execute(self) -> AsyncIterator[Message]:
        for msg in self.messages:
            await asyncio.sleep(0)
            yield msg
        await asyncio.Event().wait()


def merge_of(inputs: list[list[Message]]) -> AsyncIterator[Message]:
    channels = []
    for messages in inputs:
        ch = Channel()
        for msg in messages:
            ch._items.append(msg)  # queued before the merge starts, as a fast upstream would
        channels.append(ch)
    return MergeExecutor(CTX, SCHEMA, channels).execute()


def union_of(inputs: list[list[Message]]) -> AsyncIterator[Message]:
    return UnionExecutor(CTX, SCHEMA, [Scripted(m) for m in inputs]).execute()


async def join_of(inputs: list[list[Message]]) -> AsyncIterator[Message]:
    left, right = (Scripted(m) for m in inputs)
    async for item in aligned(CTX.actor_id, (left, right)):
        yield item if isinstance(item, Barrier) else item[1]


ALIGNERS = {"merge": merge_of, "union": union_of, "join": join_of}


async def take(stream: AsyncIterator[Message], n: int) -> list[Message]:
    out = []
    async for msg in stream:
        out.append(msg)
        if len(out) == n:
            break
    return out


def summary(messages: list[Message]) -> list[object]:
    return [
        ("barrier", m.epoch) if isinstance(m, Barrier) else sorted(m.data.column("c0").to_pylist())
        for m in messages
    ]


@pytest.mark.parametrize("kind", sorted(ALIGNERS))
def test_a_barrier_passes_once_every_input_delivered_it(kind: str) -> None:
    """Rows an input sends after its barrier belong to the next epoch: they come out
    after that barrier, however early they arrived."""
    inputs = [
        [chunk(1), Barrier(1), chunk(10), Barrier(2)],
        [chunk(2), chunk(3), Barrier(1), Barrier(2)],
    ]
    got = summary(asyncio.run(take(ALIGNERS[kind](inputs), 6)))
    first_barrier = got.index(("barrier", 1))
    assert sorted(x for part in got[:first_barrier] for x in part) == [1, 2, 3]  # type: ignore[union-attr]
    assert got[first_barrier + 1 :] == [[10], ("barrier", 2)]


@pytest.mark.parametrize("kind", sorted(ALIGNERS))
def test_rows_after_a_barrier_wait_even_when_a_lower_input_completes_it(kind: str) -> None:
    """Input 1 delivers its barrier first and its next epoch's rows are already queued;
    input 0's barrier completes the alignment. Input 1's rows come out after the
    barrier: read in the same pass as the barrier that completed it, they were once
    counted in the epoch before (an aggregation committed rows one epoch early)."""
    inputs = [
        [chunk(1), Barrier(1), Barrier(2)],
        [Barrier(1), chunk(20), Barrier(2)],
    ]
    got = summary(asyncio.run(take(ALIGNERS[kind](inputs), 4)))
    assert got == [[1], ("barrier", 1), [20], ("barrier", 2)]


@pytest.mark.parametrize("kind", sorted(ALIGNERS))
@pytest.mark.parametrize(
    "inputs",
    [
        # Lost: input 1 never delivered barrier 1.
        [[Barrier(1), Barrier(2)], [Barrier(2)]],
        # Doubled: input 0 delivered barrier 1 twice.
        [[Barrier(1), Barrier(1), Barrier(2)], [Barrier(1), Barrier(2)]],
        # Doubled on every input: the epoch does not move forward.
        [[Barrier(1), Barrier(1)], [Barrier(1), Barrier(1)]],
    ],
    ids=["lost", "doubled", "doubled-everywhere"],
)
def test_a_barrier_lost_or_doubled_on_an_input_is_caught(
    kind: str, inputs: list[list[Message]]
) -> None:
    with pytest.raises(BarrierMisaligned, match="barrier misalignment in actor 7"):
        asyncio.run(asyncio.wait_for(take(ALIGNERS[kind](inputs), 10), 5))
