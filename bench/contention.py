"""Heavy queries next to cheap work: the latency of ``SELECT 1`` and of single-row
INSERTs while other clients run long SELECTs.

    python bench/contention.py [--heavy 4] [--seconds 15]

Starts a real ``rivulet playground`` server (in memory), has ``--heavy`` clients run a
cross-join count that takes minutes, and one more client alternate ``SELECT 1`` and an
INSERT (which returns once its epoch is committed) for ``--seconds``; then cancels the
heavy queries with ``pg_cancel_backend`` and prints p50/p99 of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
from conftest import start_server

HEAVY = (
    "SELECT count(*) FROM generate_series(1, 300000) AS a(x), generate_series(1, 300000)"
    " AS b(y) WHERE x + y = 7"
)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99)] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--heavy", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; {args.heavy} heavy queries")
    with TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as con:
                con.execute("CREATE TABLE pings (id BIGINT PRIMARY KEY, at TIMESTAMPTZ)")
            errors: list[BaseException] = []
            heavy_conns = [
                psycopg.connect(server.dsn(), autocommit=True) for _ in range(args.heavy)
            ]

            def heavy(c: psycopg.Connection) -> None:
                try:
                    c.execute(HEAVY)
                except psycopg.errors.QueryCanceled:
                    pass
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=heavy, args=(c,)) for c in heavy_conns]
            for t in threads:
                t.start()
            time.sleep(1.0)
            selects: list[float] = []
            inserts: list[float] = []

            def pinger() -> None:
                with psycopg.connect(server.dsn(), autocommit=True) as con:
                    i = 0
                    while time.monotonic() < deadline:
                        t0 = time.perf_counter()
                        con.execute("SELECT 1").fetchone()
                        selects.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        con.execute("INSERT INTO pings VALUES (%s, now())", [i])
                        inserts.append(time.perf_counter() - t0)
                        i += 1

            deadline = time.monotonic() + args.seconds
            ping = threading.Thread(target=pinger)
            ping.start()
            ping.join(args.seconds)
            # A ping stuck behind the heavy queries returns once they are cancelled.
            for c in heavy_conns:
                c.cancel_safe()
            ping.join(60)
            for t in threads:
                t.join(30)
            for c in heavy_conns:
                c.close()
            if errors:
                raise errors[0]
        finally:
            server.stop()
    s50, s99 = percentiles(selects)
    i50, i99 = percentiles(inserts)
    print(f"SELECT 1      n={len(selects):5d}  p50 {s50:8.2f} ms  p99 {s99:8.2f} ms")
    print(f"INSERT 1 row  n={len(inserts):5d}  p50 {i50:8.2f} ms  p99 {i99:8.2f} ms")


if __name__ == "__main__":
    main()
