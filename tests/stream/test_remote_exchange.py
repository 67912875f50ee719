"""The exchange between processes (stream/remote_exchange.py): chunks and barriers cross a
real socket in order, with every column type intact, under the same row-bounded
back-pressure as an in-process channel; a slow channel holds up no other on the same
connection; a lost connection fails the reader instead of leaving it waiting."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
from collections.abc import AsyncIterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from rivulet.common.chunk import Op, StreamChunk
from rivulet.stream.barrier_align import align_channels
from rivulet.stream.message import AddOutputs, Barrier, ChannelSpec, DispatcherSpec, StopActors
from rivulet.stream.remote_exchange import (
    ExchangeConnection,
    decode_barrier,
    decode_chunk,
    encode_barrier,
    encode_chunk,
)

ALL_OPS = np.array([Op.INSERT, Op.DELETE, Op.UPDATE_DELETE, Op.UPDATE_INSERT], dtype=np.int8)


def typed_rows() -> pa.Table:
    """Columns of the types a stream carries, as DuckDB hands them to executors."""
    return duckdb.sql(
        """
        SELECT * FROM (VALUES
          (1::SMALLINT, 2::INT, 3::BIGINT, 1.5::REAL, 2.25::DOUBLE, 12.345::DECIMAL(28,10),
           'a'::VARCHAR, true, DATE '2024-02-29', TIME '12:34:56',
           TIMESTAMP '2024-01-01 00:00:01.5', TIMESTAMPTZ '2024-01-01 00:00:00+00',
           INTERVAL '1 day 2 hours', '{"k": [1, 2]}'::JSON, [1, 2, 3], '\\x00ff'::BLOB),
          (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL),
          (-1, -2, -3, 'nan'::REAL, '-inf'::DOUBLE, -0.0000000001, repeat('é', 1000), false,
           DATE '0001-01-01', TIME '00:00:00', TIMESTAMP '1970-01-01', TIMESTAMPTZ
           '2262-01-01 00:00:00+00', INTERVAL '-3 months', 'null'::JSON, [], ''::BLOB),
          (32767, 2147483647, 9223372036854775807, 0, 0, 0, '', NULL, NULL, NULL, NULL, NULL,
           INTERVAL '0 seconds', NULL, [NULL], NULL)
        ) t(i2, i4, i8, f4, f8, dec, s, b, d, tm, ts, tstz, iv, j, l, bl)
        """
    ).to_arrow_table()


def test_a_chunk_keeps_every_type_value_and_op() -> None:
    data = typed_rows()
    chunk = StreamChunk(data, ALL_OPS)
    back = decode_chunk(encode_chunk(chunk))
    assert back.data.schema == data.schema
    # Compared as IPC bytes: a NaN is never equal to itself, its bits are.
    assert encode_chunk(back) == encode_chunk(chunk)
    assert back.data.drop_columns(["f4"]).equals(data.drop_columns(["f4"]))
    np.testing.assert_array_equal(back.ops, chunk.ops)
    assert back.ops.dtype == np.int8


def test_an_empty_chunk_keeps_its_schema() -> None:
    data = typed_rows().slice(0, 0)
    back = decode_chunk(encode_chunk(StreamChunk(data, np.empty(0, np.int8))))
    assert back.num_rows == 0 and back.data.schema == data.schema


def test_barriers_keep_epoch_checkpoint_and_mutations() -> None:
    hashed = DispatcherSpec(
        4,
        "hash",
        (ChannelSpec(10, 1, 7, 2, 0, 1), ChannelSpec(11, 1, 8, 2, 0, 2)),
        (0, 2),
        tuple(i % 2 for i in range(256)),
    )
    simple = DispatcherSpec(5, "simple", (ChannelSpec(12, 3, 9, 2, 1, 1),))
    for barrier in [
        Barrier(7),
        Barrier(8, checkpoint=False),
        Barrier(9, mutation=StopActors(frozenset({3, 1, 2}))),
        # New outputs travel as specs: each node builds its actors' dispatchers.
        Barrier(10, mutation=AddOutputs({1: [hashed], 3: [simple]})),
    ]:
        assert decode_barrier(encode_barrier(barrier)) == barrier


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[ExchangeConnection, ExchangeConnection]]:
    """Two ends of one loopback connection, closed (with the listener) afterwards."""
    accepted: asyncio.Future[ExchangeConnection] = asyncio.get_running_loop().create_future()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(ExchangeConnection(reader, writer))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    a, b = ExchangeConnection(reader, writer), await accepted
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        server.close()


def _ints(start: int, n: int) -> StreamChunk:
    return StreamChunk.inserts(pa.table({"v": pa.array(range(start, start + n), pa.int64())}))


async def _drain(channel, count: int) -> list:
    out = []
    for _ in range(count):
        out.append(await channel.recv())
    return out


def test_interleaved_channels_each_arrive_in_order_over_one_socket() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            outs = [a.open_outbound(c) for c in (1, 2, 3)]
            # Channel 3 is opened on the receiving side only after its first frames arrived.
            ins = {c: b.open_inbound(c) for c in (1, 2)}
            sent: dict[int, list] = {1: [], 2: [], 3: []}
            for epoch in range(1, 6):
                for i, out in enumerate(outs):
                    chunk = _ints(epoch * 100 + i * 10, 3)
                    await out.send(chunk)
                    sent[i + 1].append(chunk)
                for i, out in enumerate(outs):
                    barrier = Barrier(epoch)
                    await out.send(barrier)
                    sent[i + 1].append(barrier)
            await asyncio.sleep(0.05)
            ins[3] = b.open_inbound(3)
            for c, channel in ins.items():
                got = await _drain(channel, len(sent[c]))
                for want, have in zip(sent[c], got):
                    if isinstance(want, Barrier):
                        assert have == want
                    else:
                        assert have.data.equals(want.data)
                assert channel.try_recv() is None

    asyncio.run(main())


def test_a_sender_waits_at_capacity_until_the_receiving_actor_takes_rows() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            out = a.open_outbound(1, capacity_rows=100)
            inbound = b.open_inbound(1)
            sent = 0

            async def produce() -> None:
                nonlocal sent
                for i in range(10):
                    await out.send(_ints(i * 40, 40))
                    sent += 1

            producer = asyncio.create_task(produce())
            await asyncio.sleep(0.1)
            # 40 + 40 rows fit in 100; the third chunk waits for credit.
            assert sent == 2 and out.outstanding == 80
            assert not producer.done()
            first = await inbound.recv()
            assert first.num_rows == 40
            await asyncio.sleep(0.05)
            assert sent == 3 and out.outstanding == 80
            got = [first] + await _drain(inbound, 9)
            await producer
            values = np.concatenate([c.data.column("v").to_numpy() for c in got])
            np.testing.assert_array_equal(values, np.arange(400))
            await asyncio.sleep(0.05)
            assert out.outstanding == 0

    asyncio.run(main())


def test_a_chunk_larger_than_the_capacity_goes_alone() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            out = a.open_outbound(1, capacity_rows=10)
            inbound = b.open_inbound(1)
            await asyncio.wait_for(out.send(_ints(0, 1000)), 1)
            second = asyncio.create_task(out.send(_ints(1000, 1)))
            await asyncio.sleep(0.05)
            assert not second.done()
            assert (await inbound.recv()).num_rows == 1000
            await asyncio.wait_for(second, 1)
            assert (await inbound.recv()).num_rows == 1

    asyncio.run(main())


def test_a_full_channel_does_not_hold_up_another_on_the_same_connection() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            slow = a.open_outbound(1, capacity_rows=50)
            fast = a.open_outbound(2, capacity_rows=50)
            b.open_inbound(1)  # never read
            fast_in = b.open_inbound(2)
            await slow.send(_ints(0, 50))
            blocked = asyncio.create_task(slow.send(_ints(50, 50)))
            for i in range(20):
                await asyncio.wait_for(fast.send(_ints(i * 50, 50)), 1)
                assert (await asyncio.wait_for(fast_in.recv(), 1)).num_rows == 50
            assert not blocked.done()
            blocked.cancel()

    asyncio.run(main())


def test_barriers_align_across_remote_and_local_inputs() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            outs = [a.open_outbound(c) for c in (1, 2)]
            ins = [b.open_inbound(c) for c in (1, 2)]
            for epoch in (1, 2):
                for i, out in enumerate(outs):
                    await out.send(_ints(epoch * 10 + i, 1))
                    await out.send(Barrier(epoch))
            stream = align_channels(99, ins)
            seen = []
            while len([m for m in seen if isinstance(m, Barrier)]) < 2:
                seen.append(await asyncio.wait_for(anext(stream), 1))
            kinds = ["B" if isinstance(m, Barrier) else m.data.column("v")[0].as_py() for m in seen]
            assert kinds == [10, 11, "B", 20, 21, "B"]
            await stream.aclose()

    asyncio.run(main())


def test_a_lost_connection_fails_the_reader_after_what_arrived_and_the_sender() -> None:
    async def main() -> None:
        async with connected() as (a, b):
            out = a.open_outbound(1, capacity_rows=10)
            inbound = b.open_inbound(1)
            await out.send(_ints(0, 10))
            await out.send(Barrier(1))
            waiting = asyncio.create_task(out.send(_ints(10, 10)))  # waits for credit
            await asyncio.sleep(0.05)
            b.writer.transport.abort()  # the receiving node dies
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(waiting, 2)
            # What had arrived is still read in order; then the reader fails.
            assert (await inbound.recv()).num_rows == 10
            assert await inbound.recv() == Barrier(1)
            with pytest.raises(ConnectionError, match="connection was lost"):
                await asyncio.wait_for(inbound.recv(), 2)

    asyncio.run(main())


SENDER = textwrap.dedent(
    """
    import asyncio, sys
    import duckdb, numpy as np
    from rivulet.common.chunk import StreamChunk
    from rivulet.stream.message import Barrier
    from rivulet.stream.remote_exchange import ExchangeConnection

    async def main(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = ExchangeConnection(reader, writer)
        out = conn.open_outbound(5, capacity_rows=5000)
        for epoch in range(1, 11):
            data = duckdb.sql(
                f"SELECT range AS k, range * {epoch} AS v, 'x' || range AS s "
                f"FROM range({epoch * 1000}, {epoch * 1000 + 1000})"
            ).to_arrow_table()
            await out.send(StreamChunk.inserts(data))
            await out.send(Barrier(epoch))
        while out.outstanding:
            await asyncio.sleep(0.01)
        await conn.close()

    asyncio.run(main(int(sys.argv[1])))
    """
)


def test_a_chunk_stream_from_another_process() -> None:
    async def main() -> None:
        accepted: asyncio.Future[ExchangeConnection] = asyncio.get_running_loop().create_future()

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(ExchangeConnection(reader, writer))

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, str(port))
        conn = await asyncio.wait_for(accepted, 30)
        inbound = conn.open_inbound(5)
        keys = []
        for epoch in range(1, 11):
            chunk = await asyncio.wait_for(inbound.recv(), 30)
            assert chunk.data.column("v").to_pylist() == [
                k * epoch for k in chunk.data.column("k").to_pylist()
            ]
            keys.extend(chunk.data.column("k").to_pylist())
            assert await asyncio.wait_for(inbound.recv(), 30) == Barrier(epoch)
        assert keys == list(range(1000, 11000))
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        await conn.close()
        server.close()

    asyncio.run(main())
