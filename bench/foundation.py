"""Foundation figures: COPY and INSERT throughput, SELECT 1 latency, server memory, and
the write path next to PostgreSQL 15 (``write_path.py``: single-row and concurrent
INSERTs, VALUES, asyncpg batches).

    python bench/foundation.py [--rows 1000000] [--inserts 100000] [--pings 5000]
                               [--write-seconds 10] [--no-write-path]

Starts a real `rivulet playground` server (on an on-disk data directory in a temporary
folder) and drives it with psycopg over loopback, as a user would; the INSERT figure uses
the embedded API. Prints each figure next to its target.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

import rivulet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: Path | None, port: int) -> subprocess.Popen[bytes]:
    """A `rivulet playground` on ``port``: on ``data_dir``, or in memory when None. Its
    log goes to a file (a pipe nobody reads would stall a server that logs a lot)."""
    where = ["--data-dir", str(data_dir)] if data_dir is not None else []
    log = tempfile.TemporaryFile()  # noqa: SIM115 - open for the life of the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivulet", "playground", *where, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with psycopg.connect(conninfo(port), connect_timeout=1):
                return proc
        except psycopg.OperationalError:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(log.read().decode() or "exited") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def conninfo(port: int) -> str:
    return f"host=127.0.0.1 port={port} user=root dbname=dev"


def rss_mib(pid: int) -> tuple[float, float]:
    """Current and peak resident set size of a process, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def copy_payload(rows: int) -> bytes:
    buf = io.StringIO()
    for i in range(rows):
        buf.write(f"{i}\t{i % 10_000}\t{(i * 7) % 100_000}\tbidder-{i % 5000}\n")
    return buf.getvalue().encode()


def bench_copy(port: int, rows: int) -> float:
    payload = copy_payload(rows)
    with psycopg.connect(conninfo(port), autocommit=True) as con:
        con.execute(
            "CREATE TABLE bids (id BIGINT PRIMARY KEY, auction INT, price INT, bidder VARCHAR)"
        )
        start = time.perf_counter()
        with con.cursor() as cur, cur.copy("COPY bids FROM STDIN") as copy:
            step = 1 << 20
            for off in range(0, len(payload), step):
                copy.write(payload[off : off + step])
        elapsed = time.perf_counter() - start
        (count,) = con.execute("SELECT count(*) FROM bids").fetchone()  # type: ignore[misc]
        assert count == rows, (count, rows)
    return rows / elapsed


def bench_latency(
    port: int, n: int, sql: str, params: Callable[[int], tuple[object, ...]] | None = None
) -> tuple[float, float]:
    """p50 and p99 round trip of one statement, in ms."""
    with psycopg.connect(conninfo(port), autocommit=True) as con:
        for i in range(min(200, n)):
            con.execute(sql, params(i) if params else None).fetchone()
        times = []
        for i in range(n):
            t = time.perf_counter()
            con.execute(sql, params(i) if params else None).fetchone()
            times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1000, times[int(len(times) * 0.99)] * 1000


def bench_executemany(n: int) -> float:
    con = rivulet.connect()
    con.execute("CREATE TABLE bids (id BIGINT PRIMARY KEY, auction INT, price INT, bidder VARCHAR)")
    rows = [(i, i % 10_000, (i * 7) % 100_000, f"bidder-{i % 5000}") for i in range(n)]
    start = time.perf_counter()
    con.executemany("INSERT INTO bids VALUES (%s, %s, %s, %s)", rows)
    elapsed = time.perf_counter() - start
    assert con.execute("SELECT count(*) FROM bids").fetchone() == (n,)
    con.close()
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--inserts", type=int, default=100_000)
    ap.add_argument("--pings", type=int, default=5_000)
    ap.add_argument("--write-seconds", type=float, default=10)
    ap.add_argument("--no-write-path", action="store_true")
    args = ap.parse_args()

    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_server(Path(tmp) / "data", port)
        try:
            copy_rate = bench_copy(port, args.rows)
            rss, peak = rss_mib(server.pid)
            p50, p99 = bench_latency(port, args.pings, "SELECT 1")
            pk50, pk99 = bench_latency(
                port,
                args.pings // 5,
                "SELECT * FROM bids WHERE id = %s",
                lambda i: ((i * 7919) % args.rows,),
            )
        finally:
            server.terminate()
            server.wait(30)
    insert_rate = bench_executemany(args.inserts)

    rows = [
        (f"COPY FROM STDIN, {args.rows:,} rows x 4 cols (pgwire)", f"{copy_rate:,.0f} rows/s",
         ">= 300,000 rows/s", copy_rate >= 300_000),
        (f"INSERT {args.inserts:,} rows via executemany (embedded)",
         f"{insert_rate:,.0f} rows/s", "-", None),
        ("SELECT 1 round trip, psycopg (p50)", f"{p50:.3f} ms", "< 1 ms", p50 < 1.0),
        ("SELECT 1 round trip, psycopg (p99)", f"{p99:.3f} ms", "-", None),
        (f"SELECT by primary key of {args.rows:,} rows (p50)", f"{pk50:.3f} ms", "-", None),
        (f"SELECT by primary key of {args.rows:,} rows (p99)", f"{pk99:.3f} ms", "-", None),
        (f"server RSS after loading {args.rows:,} rows (on disk)",
         f"{rss:.0f} MiB (peak {peak:.0f})", "< 500 MiB", rss < 500),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    for name, value, target, ok in rows:
        mark = "" if ok is None else ("  ok" if ok else "  MISSED")
        print(f"{name:<{width}}  {value:>24}   target {target}{mark}")
    if not args.no_write_path:
        print()
        import write_path  # (imports this module's server helpers)

        write_path.main(["--seconds", str(args.write_seconds)])


if __name__ == "__main__":
    main()
