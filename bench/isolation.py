"""Failure domains under load: one user's bad rows and heavy queries stay theirs.

    python bench/isolation.py [--seconds 60] [--writers 50] [--heavy 4]

Starts a real `rivulet playground` (data directory in a temporary folder) and, over
loopback with psycopg, for ``--seconds``:

* ``--writers`` clients insert single rows into three tables, each read by MVs (an
  aggregate, a filter+projection, a join);
* one client inserts rows into a fourth table whose MV multiplies them into an integer
  overflow (every such value is a NULL and a counted stream error, never a failure);
* ``--heavy`` clients run heavy SELECTs (a large cross join count) one after the other;
* one client runs ``SELECT 1`` every 20 ms and records its latency.

Then it prints the failed writes outside the poisoned job (target 0), the SELECT 1
latencies (target p99 < 100 ms), whether every MV equals its query run as a batch SELECT
(the oracle), the stream errors counted, and the server's memory (current and peak RSS).
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, os.path.dirname(__file__))
from foundation import conninfo, free_port, rss_mib, start_server

TABLES = ("t1", "t2", "t3")
MVS = {
    f"{t}_{kind}": query.format(t=t)
    for t in TABLES
    for kind, query in {
        "agg": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS top FROM {t} GROUP BY k",
        "filter": "SELECT id, k, v * 2 AS v2 FROM {t} WHERE v % 3 = 0",
        "join": "SELECT a.id, a.v + b.v AS vv FROM {t} a JOIN {t} b ON a.id = b.k",
    }.items()
}
POISONED = "p_mv"
HEAVY = (
    "SELECT count(*) FROM generate_series(1, 20000) a(x), generate_series(1, 20000) b(y)"
    " WHERE (x * 7 + y) % 1000 = 3"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Client(threading.Thread):
    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.con = psycopg.connect(conninfo(port), autocommit=True)
        self.stop = stop
        self.ok = 0
        self.failures: list[str] = []
        self.latencies: list[float] = []

    def statement(self, i: int) -> tuple[str, list[object]]:
        raise NotImplementedError

    def pause(self) -> None:
        pass

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            sql, params = self.statement(i)
            started = time.monotonic()
            try:
                self.con.execute(sql, params or None)
                self.ok += 1
            except psycopg.Error as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}".splitlines()[0])
            self.latencies.append(time.monotonic() - started)
            i += 1
            self.pause()
        self.con.close()


class Writer(Client):
    def __init__(self, port: int, stop: threading.Event, index: int) -> None:
        super().__init__(port, stop)
        self.table = TABLES[index % len(TABLES)]
        self.base = index * 10_000_000

    def statement(self, i: int) -> tuple[str, list[object]]:
        key = self.base + i
        return f"INSERT INTO {self.table} VALUES (%s, %s, %s)", [key, key % 97, i]


class Poisoner(Client):
    def statement(self, i: int) -> tuple[str, list[object]]:
        return "INSERT INTO p VALUES (%s, %s)", [i, 2_000_000_000 - i]


class Heavy(Client):
    def statement(self, i: int) -> tuple[str, list[object]]:
        return HEAVY, []


class Pinger(Client):
    def statement(self, i: int) -> tuple[str, list[object]]:
        return "SELECT 1", []

    def pause(self) -> None:
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--heavy", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_server(Path(tmp) / "data", port)
        try:
            return run(args, port, proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)


def run(args: argparse.Namespace, port: int, pid: int) -> int:
    with psycopg.connect(conninfo(port), autocommit=True) as con:
        for t in TABLES:
            con.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, k INT, v INT)")
        for name, query in MVS.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        con.execute("CREATE TABLE p (id INT PRIMARY KEY, v INT)")
        con.execute(f"CREATE MATERIALIZED VIEW {POISONED} AS SELECT id, v * 4 AS w FROM p")
    stop = threading.Event()
    writers = [Writer(port, stop, i) for i in range(args.writers)]
    poisoner = Poisoner(port, stop)
    heavy = [Heavy(port, stop) for _ in range(args.heavy)]
    pinger = Pinger(port, stop)
    clients: list[Client] = [*writers, poisoner, *heavy, pinger]
    peak_rss = 0.0
    started = time.monotonic()
    for c in clients:
        c.start()
    while time.monotonic() - started < args.seconds:
        time.sleep(1)
        peak_rss = max(peak_rss, rss_mib(pid)[0])
    stop.set()
    for c in clients:
        c.join(120)
    elapsed = time.monotonic() - started
    writes = sum(w.ok for w in writers)
    failed = [f for w in writers for f in w.failures]
    pings = pinger.latencies
    with psycopg.connect(conninfo(port), autocommit=True) as con:
        con.execute("FLUSH")
        mismatched = []
        for name, query in MVS.items():
            got = sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
            want = sorted(con.execute(query).fetchall(), key=repr)
            if got != want:
                mismatched.append(name)
        poisoned_rows = con.execute(f"SELECT count(*) FROM {POISONED}").fetchone()[0]
        nulls = con.execute(f"SELECT count(*) FROM {POISONED} WHERE w IS NULL").fetchone()[0]
        errors = con.execute(
            "SELECT coalesce(sum(count), 0) FROM rw_stream_errors WHERE job_name = %s",
            [POISONED],
        ).fetchone()[0]
        recoveries = con.execute("SELECT count(*) FROM rw_recovery_events").fetchone()[0]
    rss, hwm = rss_mib(pid)
    p50, p99 = percentile(pings, 0.5) * 1000, percentile(pings, 0.99) * 1000
    print(f"{elapsed:.0f} s, {args.writers} writers, 1 poisoner, {args.heavy} heavy readers")
    print(f"writes outside the poisoned job: {writes} ok ({writes / elapsed:.0f}/s),"
          f" {len(failed)} failed (target 0)")  # fmt: skip
    for f in sorted(set(failed))[:5]:
        print(f"  e.g. {f}")
    print(f"poisoned job: {poisoner.ok} rows written, {len(poisoner.failures)} refused;"
          f" its MV holds {poisoned_rows} rows, {nulls} NULL; {errors} stream errors counted")  # fmt: skip
    print(f"heavy SELECTs: {sum(h.ok for h in heavy)} done, {sum(len(h.failures) for h in heavy)}"
          " failed")  # fmt: skip
    print(f"SELECT 1: {len(pings)} runs, p50 {p50:.1f} ms, p99 {p99:.1f} ms (target < 100),"
          f" max {max(pings) * 1000:.1f} ms")  # fmt: skip
    write_lat = [x for w in writers for x in w.latencies]
    print(f"INSERT latency: p50 {statistics.median(write_lat) * 1000:.0f} ms,"
          f" p99 {percentile(write_lat, 0.99) * 1000:.0f} ms")  # fmt: skip
    print(f"MVs equal to their oracle: {len(MVS) - len(mismatched)}/{len(MVS)}"
          + (f" (differ: {', '.join(mismatched)})" if mismatched else ""))  # fmt: skip
    print(f"recoveries: {recoveries}")
    print(f"server RSS: {rss:.0f} MiB now, {max(peak_rss, rss):.0f} MiB sampled peak,"
          f" {hwm:.0f} MiB high-water mark")  # fmt: skip
    ok = not failed and not mismatched and p99 < 100 and recoveries == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
