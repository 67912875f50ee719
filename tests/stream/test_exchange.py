"""Channels between actors: bounded by the rows they hold (backpressure), so that a
barrier is never more than that much work behind; barriers never wait; order is kept."""

from __future__ import annotations

import asyncio

import pyarrow as pa

from rivulet.common.chunk import StreamChunk
from rivulet.stream.exchange import Channel
from rivulet.stream.message import Barrier


def chunk(rows: int) -> StreamChunk:
    return StreamChunk.inserts(pa.table({"v": list(range(rows))}))


async def sent(task: asyncio.Task[None]) -> bool:
    """Whether a send completed once everything else ran."""
    for _ in range(5):
        await asyncio.sleep(0)
    return task.done()


def test_a_chunk_waits_while_the_rows_held_would_exceed_the_capacity() -> None:
    async def scenario() -> None:
        ch = Channel(capacity_rows=100)
        await ch.send(chunk(60))
        await ch.send(chunk(40))  # exactly full
        third = asyncio.ensure_future(ch.send(chunk(10)))
        assert not await sent(third)
        # A barrier carries no rows: it never waits, and stays behind the chunk waiting.
        await ch.send(Barrier(1))
        assert ch.qsize() == 3
        assert (await ch.recv()).num_rows == 60  # type: ignore[union-attr]
        assert await sent(third)
        got = [await ch.recv() for _ in range(3)]
        assert [getattr(m, "num_rows", "barrier") for m in got] == [40, "barrier", 10]

    asyncio.run(scenario())


def test_a_chunk_larger_than_the_capacity_goes_alone() -> None:
    async def scenario() -> None:
        ch = Channel(capacity_rows=100)
        await ch.send(chunk(500))  # an empty channel takes any chunk
        small = asyncio.ensure_future(ch.send(chunk(1)))
        assert not await sent(small)
        assert (await ch.recv()).num_rows == 500  # type: ignore[union-attr]
        assert await sent(small)

    asyncio.run(scenario())


def test_a_cancelled_receive_loses_nothing() -> None:
    async def scenario() -> None:
        ch = Channel(capacity_rows=100)
        waiting = asyncio.ensure_future(ch.recv())
        await asyncio.sleep(0)
        waiting.cancel()
        await ch.send(Barrier(7))
        msg = await asyncio.wait_for(ch.recv(), 1)
        assert isinstance(msg, Barrier) and msg.epoch == 7

    asyncio.run(scenario())
