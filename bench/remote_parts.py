"""The cost of crossing a process: the exchange between processes and the storage service.

    python bench/remote_parts.py [--rows 4000000] [--chunk 65536] [--groups 1000000]

1. Exchange: a second process sends ``--rows`` bid-shaped rows (auction, bidder, price,
   channel, url, date_time) in chunks of ``--chunk`` rows, with a barrier after every
   16 chunks, over one loopback socket (``stream/remote_exchange.py``); this process
   receives them as a downstream actor would. Printed: rows/s, next to the same chunks
   through an in-process channel (the ceiling: no copy at all).
2. Storage service: a state table of ``--groups`` keyed rows; batches of 1,024 and
   65,536 random keys looked up (``StateTable.lookup``) from the store's DuckDB in this
   process and through the storage service over loopback. Printed: the p50 of each and
   the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import StreamChunk
from rivulet.common.types import BIGINT, VARCHAR
from rivulet.storage.state_service import StateServiceThread
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.storage.state_table import StateTable, StateTableSchema
from rivulet.stream.exchange import Channel
from rivulet.stream.message import Barrier
from rivulet.stream.remote_exchange import ExchangeConnection

SENDER = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np, pyarrow as pa
    sys.path.insert(0, sys.argv[4])
    from remote_parts import bids
    from rivulet.common.chunk import StreamChunk
    from rivulet.stream.message import Barrier
    from rivulet.stream.remote_exchange import ExchangeConnection

    async def main(port, rows, chunk_rows):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = ExchangeConnection(reader, writer)
        out = conn.open_outbound(1)
        chunk = StreamChunk.inserts(bids(chunk_rows))
        sent = 0
        n = 0
        while sent < rows:
            await out.send(chunk)
            sent += chunk_rows
            n += 1
            if n % 16 == 0:
                await out.send(Barrier(n // 16))
        await out.send(Barrier(10**9))
        await conn.wait_closed()

    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
    """
)


def bids(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "auction": pa.array(rng.integers(1000, 11000, n), pa.int64()),
            "bidder": pa.array(rng.integers(0, 1 << 20, n), pa.int64()),
            "price": pa.array(rng.integers(1, 100_000, n), pa.int64()),
            "channel": pa.array(
                np.array(["Google", "Facebook", "Baidu", "Apple"])[rng.integers(0, 4, n)]
            ),
            "url": pa.array(
                [f"https://www.nexmark.com/item.htm?query={i % 997}" for i in range(n)]
            ),
            "date_time": pa.array(np.arange(n, dtype=np.int64).astype("datetime64[us]")),
        }
    )


async def exchange_rows_per_second(rows: int, chunk_rows: int) -> float:
    accepted: asyncio.Future[ExchangeConnection] = asyncio.get_running_loop().create_future()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(ExchangeConnection(reader, writer))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SENDER, str(port), str(rows), str(chunk_rows), here
    )
    conn = await accepted
    inbound = conn.open_inbound(1)
    first = await inbound.recv()
    started = time.perf_counter()
    got = first.num_rows
    while True:
        msg = await inbound.recv()
        if isinstance(msg, Barrier):
            if msg.epoch == 10**9:
                break
            continue
        got += msg.num_rows
    elapsed = time.perf_counter() - started
    await conn.close()
    await proc.wait()
    server.close()
    return (got - first.num_rows) / elapsed


async def channel_rows_per_second(rows: int, chunk_rows: int) -> float:
    channel = Channel()
    chunk = StreamChunk.inserts(bids(chunk_rows))

    async def produce() -> None:
        sent = 0
        while sent < rows:
            await channel.send(chunk)
            sent += chunk_rows
        await channel.send(Barrier(1))

    task = asyncio.create_task(produce())
    started = time.perf_counter()
    got = 0
    while not isinstance(msg := await channel.recv(), Barrier):
        got += msg.num_rows
    await task
    return got / (time.perf_counter() - started)


def lookup_p50s(groups: int, batch: int) -> tuple[float, float]:
    schema = StateTableSchema(
        table_id=1, columns=(("k", BIGINT), ("v", VARCHAR)), pk=(0,), dist_key=(0,)
    )
    store = StateStore(None, StoreOptions())
    served = StateServiceThread(store)
    try:
        store.run_setup([schema.create_sql()])
        local = StateTable(schema)
        rows = local.with_vnodes(
            pa.table(
                {
                    "k": pa.array(np.arange(groups), pa.int64()),
                    "v": pa.array([f"v{i}" for i in range(groups)]),
                }
            )
        )
        cur = store.cursor()
        cur.from_arrow(rows).insert_into(schema.physical_name)
        remote = StateTable(schema, served.start())
        rng = np.random.default_rng(1)
        times: dict[str, list[float]] = {"local": [], "served": []}
        for _ in range(30):
            keys = local.with_vnodes(
                pa.table({"k": pa.array(rng.integers(0, groups, batch), pa.int64())})
            )
            for name, table in (("local", local), ("served", remote)):
                t = time.perf_counter()
                found = table.lookup(keys, [], cur)
                times[name].append(time.perf_counter() - t)
                assert found.num_rows == len(set(keys.column("k").to_pylist()))
        return statistics.median(times["local"]) * 1e3, statistics.median(times["served"]) * 1e3
    finally:
        served.close()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--chunk", type=int, default=65_536)
    ap.add_argument("--groups", type=int, default=1_000_000)
    args = ap.parse_args()
    remote = asyncio.run(exchange_rows_per_second(args.rows, args.chunk))
    local = asyncio.run(channel_rows_per_second(args.rows, args.chunk))
    print(f"exchange, {args.rows:,} bid rows in chunks of {args.chunk:,}:")
    print(f"  between processes (loopback socket) {remote:>14,.0f} rows/s")
    print(f"  in-process channel                  {local:>14,.0f} rows/s")
    for batch in (1024, 65_536):
        lp, sp = lookup_p50s(args.groups, batch)
        print(
            f"state lookup of {batch:,} keys in {args.groups:,} rows: local p50 {lp:.2f} ms,"
            f" served p50 {sp:.2f} ms (x {sp / lp:.2f})"
        )


if __name__ == "__main__":
    main()
