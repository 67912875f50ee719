"""Streaming throughput: a bid stream through materialized views.

    python bench/streaming.py [--events 2000000] [--auctions 10000] [--parallelism 1 2]
                              [--only NAME] [--input datagen|nexmark]
                              [--compute in-process|processes]

Input (``--input datagen``, the default): a ``datagen`` source shaped like Nexmark's
Bid stream (auction uniform over ``--auctions`` ids, bidder, price, channel, url,
date_time), unpaced and bounded at ``--events`` rows; ``--input nexmark``: the built-in
``nexmark`` Bid source itself (``nexmark.event.num`` chosen to yield ``--events`` bids;
its auction ids follow Nexmark's rules, so the group count differs). The join reads an
``auction`` table of ``--auctions`` rows.

Each (workload, parallelism) runs in a fresh process: an in-memory instance with one
worker of ``parallelism`` slots and barriers (checkpoints) every second, as by default;
with ``--compute processes``, ``parallelism`` workers of one slot, each a compute node
process of its own (the peak RSS is then meta's alone).
The clock starts at CREATE MATERIALIZED VIEW (the MV's source actors start generating
then) and stops once the MV has taken every event (polled with FLUSH); the figure is
events per second, generation included. Every MV is checked equal to Polars computing
the same result in one batch over the same rows, whose speed is printed next to it (the
machine's limit for the answer), with the peak RSS of the run's process.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

import rivulet
from rivulet.common.types import BIGINT, TIMESTAMP, VARCHAR
from rivulet.stream.connectors import ColumnSpec, open_connector, prepare_source


@dataclass
class Workload:
    name: str
    mv: str
    signature: str  # a cheap query over the MV: equals ``expected`` once every event is in
    polars: object  # (bids, auctions) -> DataFrame with the MV's rows
    target: float  # rows/s


WORKLOADS = [
    Workload(
        "pass-through (q0)",
        "SELECT auction, bidder, price, date_time FROM bid",
        "SELECT count(*) FROM mv",
        lambda b, a: b.select("auction", "bidder", "price", "date_time"),
        6_000_000,
    ),
    Workload(
        "filter + project",
        "SELECT auction, bidder, price * 908 / 1000 AS euro, date_time FROM bid"
        " WHERE auction % 123 = 0",
        "SELECT count(*) FROM mv",
        lambda b, a: b.filter(pl.col("auction") % 123 == 0).select(
            "auction", "bidder", (pl.col("price") * 908 // 1000).alias("euro"), "date_time"
        ),
        6_000_000,
    ),
    Workload(
        "group-by count/sum/max per auction",
        "SELECT auction, count(*) AS n, sum(price) AS total, max(price) AS top FROM bid"
        " GROUP BY auction",
        "SELECT sum(n) FROM mv",
        lambda b, a: b.group_by("auction").agg(
            pl.len().alias("n"),
            pl.col("price").sum().alias("total"),
            pl.col("price").max().alias("top"),
        ),
        3_000_000,
    ),
    Workload(
        "join bid-auction, per category",
        "SELECT a.category, count(*) AS n, max(b.price) AS top FROM bid b JOIN auction a"
        " ON b.auction = a.id GROUP BY a.category",
        "SELECT sum(n) FROM mv",
        lambda b, a: (
            b.join(a, left_on="auction", right_on="id")
            .group_by("category")
            .agg(pl.len().alias("n"), pl.col("price").max().alias("top"))
        ),
        700_000,
    ),
]

BID_COLUMNS = [
    ("id", BIGINT), ("auction", BIGINT), ("bidder", BIGINT), ("price", BIGINT),
    ("channel", VARCHAR), ("url", VARCHAR), ("date_time", TIMESTAMP),
]  # fmt: skip


def source_sql(kind: str, events: int, auctions: int, splits: int) -> tuple[str, dict[str, str]]:
    """CREATE SOURCE bid and its options."""
    if kind == "nexmark":
        options = {
            "connector": "nexmark",
            "nexmark.table.type": "Bid",
            # 46 of every 50 events are bids.
            "nexmark.event.num": str(-(-events * 50 // 46)),
            "nexmark.min.event.gap.in.ns": "0",
            "nexmark.split.num": str(splits),
        }
        columns = ""
    else:
        options = {
            "connector": "datagen",
            "datagen.rows.per.second": "1000000000",
            "datagen.split.num": str(splits),
            "fields.id.kind": "sequence",
            "fields.id.start": "1",
            "fields.id.end": str(events),
            "fields.auction.min": "1000",
            "fields.auction.max": str(1000 + auctions - 1),
            "fields.bidder.min": "1",
            "fields.bidder.max": "100000",
            "fields.price.min": "100",
            "fields.price.max": "10000000",
            "fields.channel.length": "7",
            "fields.url.length": "40",
            "fields.date_time.basetime": "2026-01-01T00:00:00Z",
        }
        columns = "(" + ", ".join(f"{n} {t.display()}" for n, t in BID_COLUMNS) + ")"
    with_ = ", ".join(f"{k} = '{v}'" for k, v in options.items())
    return f"CREATE SOURCE bid {columns} WITH ({with_})", options


def generated_bids(kind: str, options: dict[str, str], splits: int) -> pa.Table:
    """Every row the source produces, read from the connector directly."""
    declared = None if kind == "nexmark" else BID_COLUMNS
    cols, stored = prepare_source(options["connector"], options, declared)
    opts = {k: v for k, v in stored.items() if k != "connector"}
    conn = open_connector(options["connector"], opts, [ColumnSpec(n, t) for n, t in cols])
    names = [n for n, _ in cols]
    parts = []
    for split in range(splits):
        offset = 0
        while True:
            batch = conn.read(split, offset, 1 << 20, names)
            if batch.data.num_rows == 0:
                break
            parts.append(batch.data)
            offset = batch.next_offset
    return pa.concat_tables(parts)


def auction_rows(auctions: int) -> list[tuple[int, int, int]]:
    return [(1000 + i, 1 + (i * 7919) % 10_000, 10 + (i * 31) % 10) for i in range(auctions)]


def _normalize(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return sorted(tuple(float(v) if hasattr(v, "as_integer_ratio") else v for v in r) for r in rows)


def _expected_rows(args: argparse.Namespace, workload: Workload) -> int:
    """Rows of a pass-through or filter MV once every event is in (from a separate
    process, so that this one's peak RSS is the engine's)."""
    if "sum(n)" in workload.signature:
        return args.events
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import streaming as s, polars as pl;"
        "o = s.source_sql(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))[1];"
        "b = pl.from_arrow(s.generated_bids(sys.argv[2], o, int(sys.argv[5])));"
        "w = next(w for w in s.WORKLOADS if w.name == sys.argv[6]);"
        "print(w.polars(b, None).height)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), args.input, str(args.events),
         str(args.auctions), str(args.parallelism), workload.name],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(out.stdout.strip())


def run_one(args: argparse.Namespace) -> dict[str, float]:
    """One workload at one parallelism, in this process."""
    workload = next(w for w in WORKLOADS if w.name == args.workload)
    p = args.parallelism
    if args.compute == "processes":
        con = rivulet.connect(workers=p, slots=1, compute="processes")
    else:
        con = rivulet.connect(workers=1, slots=p)
    create_source, options = source_sql(args.input, args.events, args.auctions, p)
    con.execute(create_source)
    con.execute("CREATE TABLE auction (id BIGINT PRIMARY KEY, seller BIGINT, category BIGINT)")
    con.executemany("INSERT INTO auction VALUES (%s, %s, %s)", auction_rows(args.auctions))

    # The MV's own rows tell when every event is in: every bid counted once (the
    # aggregates) or the expected row count (computed below, once the clock stopped).
    want_rows = {"count(*)": _expected_rows(args, workload)}
    start = time.perf_counter()
    con.execute(f"CREATE MATERIALIZED VIEW mv AS {workload.mv}")
    target = args.events if "sum(n)" in workload.signature else want_rows["count(*)"]
    while True:
        con.execute("FLUSH")
        got = con.execute(workload.signature).fetchone()
        if got is not None and got[0] is not None and int(got[0]) >= target:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    bids = pl.from_arrow(generated_bids(args.input, options, p))
    auctions = pl.DataFrame(
        auction_rows(args.auctions), schema=["id", "seller", "category"], orient="row"
    )
    assert isinstance(bids, pl.DataFrame)
    events = bids.height
    start = time.perf_counter()
    want = workload.polars(bids, auctions)  # type: ignore[operator]
    polars_s = time.perf_counter() - start
    rows = con.execute("SELECT * FROM mv").fetchall()
    assert _normalize(rows) == _normalize(want.rows()), f"{workload.name}: MV differs"
    con.close()
    return {
        "rate": events / elapsed,
        "polars_rate": events / polars_s,
        "rss_mib": rss,
        "events": events,
        "groups": want.height,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--auctions", type=int, default=10_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--only", help="run the workloads whose name contains this")
    ap.add_argument("--input", choices=["datagen", "nexmark"], default="datagen")
    ap.add_argument("--compute", choices=["in-process", "processes"], default="in-process")
    ap.add_argument("--workload", help=argparse.SUPPRESS)  # the child's job
    args = ap.parse_args()
    if args.workload:
        args.parallelism = args.parallelism[0]
        print(json.dumps(run_one(args)))
        return
    print(
        f"{args.events:,} bid events ({args.input}), {args.auctions:,} auctions,"
        " barriers every 1 s; one process per run"
    )
    for w in WORKLOADS:
        if args.only and args.only not in w.name:
            continue
        for p in args.parallelism:
            cmd = [
                sys.executable, __file__, "--workload", w.name, "--parallelism", str(p),
                "--events", str(args.events), "--auctions", str(args.auctions),
                "--input", args.input, "--compute", args.compute,
            ]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{w.name:<36} parallelism {p}: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            mark = "ok" if r["rate"] >= w.target else "below target"
            print(
                f"{w.name:<36} parallelism {p}: {r['rate']:>11,.0f} rows/s   polars one batch"
                f" {r['polars_rate']:>12,.0f} rows/s (x{r['polars_rate'] / r['rate']:5.1f})"
                f"   peak RSS {r['rss_mib']:5.0f} MiB   target {w.target:,.0f}: {mark}",
                flush=True,
            )


if __name__ == "__main__":
    main()
