"""Streaming throughput: nexmark-like bids through materialized views.

    python bench/streaming.py [--events 2000000] [--auctions 10000] [--parallelism 1 2]

For each workload and parallelism: a fresh in-memory instance, an append-only ``bid`` table
(and ``auction`` for the join), one MV; all bids are handed to the table's actors at once
and the clock runs until the MV has taken every one of them, with barriers (and
checkpoints) every second as usual. Printed next to Polars computing the same result in
one batch (the machine's limit for the answer), with the peak RSS growth of the run.
Every MV is checked equal to the batch query before its figure is printed.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

import rivulet
from rivulet.common.chunk import StreamChunk

CHUNK_ROWS = 65_536


@dataclass
class Workload:
    name: str
    mv: str
    check: str  # a batch query over the base tables the MV must equal
    polars: object  # (bids, auctions) -> DataFrame, the one-batch reference
    target: float  # rows/s


def bids(n: int, auctions: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    channels = np.array(["Google", "Facebook", "Baidu", "Apple"])
    return pa.table(
        {
            "auction": rng.integers(1000, 1000 + auctions, n),
            "bidder": rng.integers(1, 100_000, n),
            "price": rng.integers(100, 10_000_000, n),
            "channel": pa.array(channels[rng.integers(0, 4, n)]),
            "url": pa.array(np.full(n, "https://www.nexmark.com/item.htm?query=1", dtype=object)),
            "date_time": pa.array(
                np.arange(n, dtype=np.int64) * 1_000 + 1_700_000_000_000_000, pa.timestamp("us")
            ),
        }
    )


def auction_table(auctions: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": np.arange(1000, 1000 + auctions, dtype=np.int64),
            "seller": rng.integers(1, 10_000, auctions),
            "category": rng.integers(10, 20, auctions),
            "initial_bid": rng.integers(1, 1000, auctions),
        }
    )


WORKLOADS = [
    Workload(
        "pass-through (q0)",
        "SELECT auction, bidder, price, date_time FROM bid",
        "SELECT auction, bidder, price, date_time FROM bid",
        lambda b, a: pl.from_arrow(b).select("auction", "bidder", "price", "date_time"),
        6_000_000,
    ),
    Workload(
        "filter + project",
        "SELECT auction, bidder, price * 908 / 1000 AS euro, date_time FROM bid WHERE auction % 123 = 0",
        "SELECT auction, bidder, price * 908 / 1000 AS euro, date_time FROM bid WHERE auction % 123 = 0",
        lambda b, a: (
            pl.from_arrow(b)
            .filter(pl.col("auction") % 123 == 0)
            .select("auction", "bidder", (pl.col("price") * 908 // 1000).alias("euro"), "date_time")
        ),
        6_000_000,
    ),
    Workload(
        "group-by count/sum/max per auction",
        "SELECT auction, count(*) AS n, sum(price) AS total, max(price) AS top FROM bid GROUP BY auction",
        "SELECT auction, count(*) AS n, sum(price) AS total, max(price) AS top FROM bid GROUP BY auction",
        lambda b, a: (
            pl.from_arrow(b)
            .group_by("auction")
            .agg(
                pl.len().alias("n"),
                pl.col("price").sum().alias("total"),
                pl.col("price").max().alias("top"),
            )
        ),
        3_000_000,
    ),
    Workload(
        "join bid-auction, per category",
        "SELECT a.category, count(*) AS n, max(b.price) AS top FROM bid b JOIN auction a"
        " ON b.auction = a.id GROUP BY a.category",
        "SELECT a.category, count(*) AS n, max(b.price) AS top FROM bid b JOIN auction a"
        " ON b.auction = a.id GROUP BY a.category",
        lambda b, a: (
            pl.from_arrow(b)
            .join(pl.from_arrow(a), left_on="auction", right_on="id")
            .group_by("category")
            .agg(pl.len().alias("n"), pl.col("price").max().alias("top"))
        ),
        700_000,
    ),
]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    workload: Workload, parallelism: int, data: pa.Table, auctions: pa.Table
) -> tuple[float, float]:
    con = rivulet.connect(workers=1, slots=parallelism)
    try:
        con.execute(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,"
            " url VARCHAR, date_time TIMESTAMP)"
        )
        con.execute(
            "CREATE TABLE auction (id BIGINT PRIMARY KEY, seller BIGINT, category BIGINT, initial_bid BIGINT)"
        )
        con.executemany(
            "INSERT INTO auction VALUES (%s, %s, %s, %s)",
            list(zip(*[auctions.column(i).to_pylist() for i in range(4)])),
        )
        con.execute(f"CREATE MATERIALIZED VIEW mv AS {workload.mv}")
        engine = con._thread.engine
        table = engine.catalog.get_table("public", "bid")
        assert table is not None
        n = data.num_rows
        ids = pa.array(np.arange(1, n + 1, dtype=np.int64))
        stored = data.append_column("_row_id", ids)

        async def feed() -> float:
            start = time.perf_counter()
            epoch = 0
            for off in range(0, n, CHUNK_ROWS):
                chunk = StreamChunk.inserts(stored.slice(off, CHUNK_ROWS))
                epoch = engine.runtime.write_dml(table.id, chunk, list(table.dist_key))
            await engine.barrier.commit_writes(epoch)
            return time.perf_counter() - start

        rss_before = peak_rss_mib()
        elapsed = con._thread.run(feed())
        rss = peak_rss_mib() - rss_before
        got = sorted(con.execute("SELECT * FROM mv").fetchall())
        want = sorted(con.execute(workload.check).fetchall())
        assert got == want, f"{workload.name}: MV differs from the batch query"
        return n / elapsed, rss
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--auctions", type=int, default=10_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--only", help="run the workloads whose name contains this")
    args = ap.parse_args()
    data = bids(args.events, args.auctions)
    auctions = auction_table(args.auctions)
    print(f"{args.events:,} bid events, {args.auctions:,} auctions, barriers every 1 s")
    for w in WORKLOADS:
        if args.only and args.only not in w.name:
            continue
        start = time.perf_counter()
        w.polars(data, auctions)  # type: ignore[operator]
        polars_rate = args.events / (time.perf_counter() - start)
        for p in args.parallelism:
            gc.collect()
            rate, rss = run(w, p, data, auctions)
            mark = "ok" if rate >= w.target else "below target"
            print(
                f"{w.name:<38} parallelism {p}: {rate:>12,.0f} rows/s   polars one batch"
                f" {polars_rate:>13,.0f} rows/s (x{polars_rate / rate:5.1f})   peak RSS +{rss:5.0f} MiB"
                f"   target {w.target:,.0f}: {mark}"
            )


if __name__ == "__main__":
    main()
