"""Backfill throughput: CREATE MATERIALIZED VIEW over a table that already holds rows,
while new rows keep arriving, per scan type, next to DuckDB computing the same query in
one batch.

    python bench/backfill.py [--rows 5000000] [--rate 10000] [--types arrangement no_shuffle
                              snapshot] [--parallelism 2]

For each scan type, in a fresh process: a table of ``--rows`` rows (loaded first), a
writer inserting ``--rate`` rows/s on its own connection, then a filter+aggregate MV
created with ``WITH (backfill_type = ...)``. The figure is the table's rows divided by the
time from CREATE to the end of the backfill (the statement returns when the MV is
created); the MV is then checked equal to the query. DuckDB's figure is the same query
over the same rows in one batch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time

import duckdb

import rivulet

QUERY = (
    "SELECT k % 1000 AS g, count(*) AS n, sum(v) AS s, max(v) AS mx FROM t"
    " WHERE v % 10 <> 3 GROUP BY k % 1000"
)


def run_one(scan_type: str, rows: int, rate: int, parallelism: int) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix="rivulet-backfill-") + "/db"
    con = rivulet.connect(path, workers=1, slots=parallelism)
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k BIGINT, v BIGINT)")
    con.execute(
        f"INSERT INTO t SELECT i, (i * 7919) % 1000003, i % 100000"
        f" FROM generate_series(1, {rows}) AS g(i)"
    )
    stop = threading.Event()

    def writer() -> None:
        w = rivulet.connect(path)
        next_id = rows + 1
        per_tick = max(1, rate // 10)
        while not stop.is_set():
            w.execute(
                f"INSERT INTO t SELECT i, i % 777, i % 1000 FROM generate_series({next_id},"
                f" {next_id + per_tick - 1}) AS g(i)"
            )
            next_id += per_tick
            time.sleep(0.1)
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    start = time.perf_counter()
    con.execute(f"CREATE MATERIALIZED VIEW m WITH (backfill_type = '{scan_type}') AS {QUERY}")
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join()
    con.execute("FLUSH")
    got = sorted(con.execute("SELECT * FROM m").fetchall())
    want = sorted(con.execute(QUERY).fetchall())
    assert got == want, f"{scan_type}: the MV differs from its query"
    con.close()

    db = duckdb.connect()
    db.execute(
        f"CREATE TABLE t AS SELECT i AS id, (i * 7919) % 1000003 AS k, i % 100000 AS v"
        f" FROM generate_series(1, {rows}) AS g(i)"
    )
    start = time.perf_counter()
    db.execute(QUERY).fetchall()
    duck = time.perf_counter() - start
    return {"rate": rows / elapsed, "seconds": elapsed, "duckdb_seconds": duck}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--types", nargs="+", default=["arrangement", "no_shuffle", "snapshot"])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.rows, args.rate, args.parallelism)))
        return
    print(
        f"{args.rows:,} rows, {args.rate:,} rows/s arriving, parallelism {args.parallelism}:"
        f" {QUERY}"
    )
    for scan_type in args.types:
        cmd = [
            sys.executable, __file__, "--one", scan_type, "--rows", str(args.rows),
            "--rate", str(args.rate), "--parallelism", str(args.parallelism),
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"{scan_type:<12} failed\n{out.stderr[-2000:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{scan_type:<12} {r['rate']:>12,.0f} rows/s ({r['seconds']:.1f} s)   DuckDB one"
            f" batch {r['duckdb_seconds']:.2f} s (x{r['seconds'] / r['duckdb_seconds']:.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
