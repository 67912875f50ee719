"""Recovery time after kill -9, and checkpoint commit latency under a streaming load.

    python bench/recovery.py [--rows 0 100000 1000000] [--mvs 10] [--kills 3]
                             [--seconds 30] [--parallelism 1] [--intervals 1000 10000]
                             [--workload group-by|join] [--only recovery|checkpoint]

Recovery: a real server (``rivulet playground --data-dir``) holds a table of ``--rows``
rows and ``--mvs`` materialized views over it (aggregations, filters, a join, top-N, a
pass-through copy: about twice ``--rows`` rows in the table and MVs, plus the operators'
internal state), and a writer inserts rows when the server is killed with SIGKILL. It is
restarted on the same directory, ``--kills`` times per size (0 rows: the
baseline, the MVs over an empty table). Timed from the process start
to (a) accepting connections and (b) the first round trip through every job: an INSERT
(returns once its epoch is committed) and a FLUSH (a barrier through every actor of every
MV, committed). State is read lazily by vnode, so these should not grow with the row
count. After each restart the global count MV is checked equal to the table's count.

Checkpoints: the streaming benchmark's load (``bench/streaming.py``: its unpaced
``datagen`` bid source into its group-by, or join, workload) in a fresh in-memory process
per barrier interval. The barrier manager and state store are wrapped here, behaviour
unchanged: ``BarrierManager.inject`` notes when each epoch's barrier went out,
``StateStore.commit_epoch`` how long each epoch's DuckDB transaction took and when it
ended. Printed: checkpoint latency (barrier injected -> epoch committed) and commit time
(the transaction alone), p50/p99 over a window of at least ``--seconds`` and five
intervals after a warm-up, and the throughput (bids the MV had taken per second, read
from committed state at commit boundaries) with barriers every 1 s and every 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

MVS = [
    "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
    "SELECT count(*) AS n, sum(v) AS s FROM t",
    "SELECT id, k, v * 2 AS v2 FROM t",
    "SELECT id, v FROM t WHERE id % 10 = 0",
    "SELECT k % 100 AS b, max(v) AS mx, min(v) AS mn FROM t GROUP BY k % 100",
    "SELECT id, v FROM t ORDER BY v DESC, id LIMIT 10",
    "SELECT DISTINCT k % 1000 AS r FROM t",
    "SELECT d.name, count(*) AS n, sum(t.v) AS s FROM t JOIN d ON t.k = d.k GROUP BY d.name",
    "SELECT v % 7 AS b, count(*) AS n, min(id) AS first FROM t GROUP BY v % 7",
    "SELECT k, sum(v) AS s FROM t WHERE v > 500 GROUP BY k",
]
KEYS = 10_000


# ------------------------------------------------------------------------ recovery
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = _free_port()
        cmd = [
            sys.executable, "-m", "rivulet", "playground", "--data-dir", str(data_dir),
            "--port", str(self.port), "--admin-port", "0", "--workers", "1", "--slots", "2",
        ]  # fmt: skip
        self.started = time.perf_counter()
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.log = log

    def wait_accepting(self, timeout: float = 120.0) -> float:
        """Seconds from the process start until the port accepts connections."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return time.perf_counter() - self.started
            time.sleep(0.005)
        raise RuntimeError("server did not start")

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="root", dbname="dev", autocommit=True
        )

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


def _fill(server: Server, rows: int, mvs: int) -> float:
    """The table, the MVs (created empty, so the rows stream through them) and the rows."""
    start = time.perf_counter()
    with server.connect() as c:
        c.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, k INT, v BIGINT)")
        c.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
        c.execute(
            f"INSERT INTO d SELECT i, 'n' || (i % 37) FROM generate_series(0, {KEYS - 1}) g(i)"
        )
        for i, sql in enumerate(MVS[:mvs]):
            c.execute(f"CREATE MATERIALIZED VIEW m{i} AS {sql}")
        step = 100_000
        for lo in range(1, rows + 1, step):
            hi = min(lo + step - 1, rows)
            c.execute(
                f"INSERT INTO t SELECT i, (i * 7919) % {KEYS}, (i * 31) % 1000"
                f" FROM generate_series({lo}, {hi}) g(i)"
            )
    return time.perf_counter() - start


def _writer(server: Server, first_id: int, stop: threading.Event) -> None:
    """Small inserts until the server goes away (so that the kill lands mid-epoch)."""
    with contextlib.suppress(psycopg.Error), server.connect() as c:
        i = first_id
        while not stop.is_set():
            c.execute(f"INSERT INTO t VALUES ({i}, {i % KEYS}, {i % 1000})")
            i += 1


def _state_rows(c: psycopg.Connection, mvs: int) -> int:
    tables = ["t", "d", *(f"m{i}" for i in range(mvs))]
    return sum(int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables)  # type: ignore[index]


def recovery(rows: int, mvs: int, kills: int, workdir: Path) -> dict[str, object]:
    data_dir = workdir / f"data-{rows}"
    log = workdir / f"server-{rows}.log"
    server = Server(data_dir, log)
    server.wait_accepting()
    fill_s = _fill(server, rows, mvs)
    with server.connect() as c:
        state_rows = _state_rows(c, mvs)
    accept, ready = [], []
    next_id = rows + 1
    for _ in range(kills):
        stop = threading.Event()
        writer = threading.Thread(target=_writer, args=(server, next_id, stop))
        writer.start()
        time.sleep(1.0)
        server.kill()
        stop.set()
        writer.join(30)
        next_id += 1_000_000
        wal = data_dir / "rivulet.duckdb.wal"
        wal_mib = wal.stat().st_size / 2**20 if wal.exists() else 0.0
        server = Server(data_dir, log)
        accept.append(server.wait_accepting())
        with server.connect() as c:
            c.execute(f"INSERT INTO t VALUES ({next_id}, 1, 1)")
            c.execute("FLUSH")
            ready.append(time.perf_counter() - server.started)
            next_id += 1
            n_mv = c.execute("SELECT n FROM m1").fetchone()
            n_t = c.execute("SELECT count(*) FROM t").fetchone()
            assert n_mv == n_t, f"after restart: count MV {n_mv} != table {n_t}"
    db_mib = (data_dir / "rivulet.duckdb").stat().st_size / 2**20
    server.stop()
    shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "rows": rows,
        "state_rows": state_rows,
        "db_mib": db_mib,
        "wal_mib": wal_mib,
        "fill_s": fill_s,
        "accept": accept,
        "ready": ready,
    }


# --------------------------------------------------------------------- checkpoints
def checkpoint_child(
    interval_ms: int, seconds: float, parallelism: int, only: str
) -> dict[str, object]:
    """One barrier interval in this process: the streaming load, commits timed."""
    sys.path.insert(0, str(Path(__file__).parent))
    import streaming  # bench/streaming.py: the same source as the throughput benchmark

    import rivulet
    from rivulet.meta.barrier_manager import BarrierManager
    from rivulet.storage.state_store import StateStore

    injected: dict[int, float] = {}
    commits: list[tuple[int, float, float]] = []  # epoch, transaction start, end
    original_inject = BarrierManager.inject
    original_commit = StateStore.commit_epoch

    def timed_inject(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        epoch = original_inject(self, *args, **kwargs)
        injected[epoch] = time.perf_counter()
        return epoch

    def timed_commit(self, epoch, writes):  # type: ignore[no-untyped-def]
        begin = time.perf_counter()
        original_commit(self, epoch, writes)
        commits.append((epoch, begin, time.perf_counter()))

    BarrierManager.inject = timed_inject  # type: ignore[method-assign]
    StateStore.commit_epoch = timed_commit  # type: ignore[method-assign]

    # A workload whose MV counts every bid (sum(n)): its committed rows tell the rate.
    workload = next(w for w in streaming.WORKLOADS if only in w.name and "sum(n)" in w.signature)
    con = rivulet.connect(workers=1, slots=parallelism, barrier_interval_ms=interval_ms)
    create_source, _ = streaming.source_sql("datagen", 10**12, 10_000, parallelism)
    con.execute(create_source)
    con.execute("CREATE TABLE auction (id BIGINT PRIMARY KEY, seller BIGINT, category BIGINT)")
    con.executemany("INSERT INTO auction VALUES (%s, %s, %s)", streaming.auction_rows(10_000))
    con.execute(f"CREATE MATERIALIZED VIEW mv AS {workload.mv}")
    # At least five commits in the window, after a warm-up of a few.
    seconds = max(seconds, 5 * interval_ms / 1000 + 1)
    warmup = max(3.0, 1.5 * interval_ms / 1000)
    time.sleep(warmup)
    # Rows taken, sampled right after commits (the committed sum changes only then).
    samples: list[tuple[float, int]] = []
    begin = time.perf_counter()
    last = None
    while time.perf_counter() - begin < seconds or len(samples) < 3:
        row = con.execute("SELECT sum(n) FROM mv").fetchone()
        value = int(row[0]) if row and row[0] is not None else 0
        if value != last:
            samples.append((time.perf_counter(), value))
            last = value
        time.sleep(0.01)
    end = time.perf_counter()
    window = [(e, b, t) for e, b, t in commits if begin <= t <= end]
    latency = [t - injected[e] for e, _, t in window if e in injected]
    txn = [t - b for _, b, t in window]
    (t0, n0), (t1, n1) = samples[1], samples[-1]  # the first is mid-epoch
    con.close()
    return {
        "interval_ms": interval_ms,
        "commits": len(window),
        "latency": latency,
        "txn": txn,
        "workload": workload.name,
        "window_s": seconds,
        "rate": (n1 - n0) / (t1 - t0),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[0, 100_000, 1_000_000])
    ap.add_argument("--mvs", type=int, default=10)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--intervals", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--only", choices=["recovery", "checkpoint"])
    ap.add_argument(
        "--workload", default="group-by", help="bench/streaming.py's workload: group-by | join"
    )
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)  # a checkpoint run's interval
    args = ap.parse_args()
    if args.child is not None:
        print(
            json.dumps(checkpoint_child(args.child, args.seconds, args.parallelism, args.workload))
        )
        return

    if args.only != "checkpoint":
        print(
            f"Recovery after kill -9: {args.mvs} MVs over table t, 1 worker x 2 slots,"
            f" {args.kills} kills per size (median / max)"
        )
        print(
            f"{'table rows':>10} {'rows in t+MVs':>13} {'db MiB':>7} {'WAL MiB':>7} {'fill s':>7}"
            f"  {'accepting s':>13}  {'all jobs running s':>19}"
        )
        with tempfile.TemporaryDirectory(prefix="rivulet-recovery-") as tmp:
            for rows in args.rows:
                r = recovery(rows, args.mvs, args.kills, Path(tmp))
                acc, rdy = r["accept"], r["ready"]
                assert isinstance(acc, list) and isinstance(rdy, list)
                print(
                    f"{rows:>10,} {r['state_rows']:>13,} {r['db_mib']:>7.1f} {r['wal_mib']:>7.1f}"
                    f" {r['fill_s']:>7.1f}  {statistics.median(acc):>6.2f} / {max(acc):>4.2f}"
                    f"  {statistics.median(rdy):>10.2f} / {max(rdy):>5.2f}",
                    flush=True,
                )

    if args.only != "recovery":
        print(
            f"\nCheckpoints under bench/streaming.py's load (unpaced datagen bids,"
            f" '{args.workload}' workload, parallelism {args.parallelism}; window at least"
            f" {args.seconds:g} s and 5 barrier intervals)"
        )
        print(
            f"{'barrier interval':>16} {'commits':>7}  {'latency p50':>11} {'p99':>8}"
            f"  {'commit txn p50':>14} {'p99':>8}  {'rows/s':>11} {'peak RSS':>9}"
        )
        for interval in args.intervals:
            cmd = [
                sys.executable, __file__, "--child", str(interval), "--seconds",
                str(args.seconds), "--parallelism", str(args.parallelism),
                "--workload", args.workload,
            ]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{interval:>13} ms: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            lat, txn = r["latency"], r["txn"]
            print(
                f"{interval:>13} ms {r['commits']:>7}  {_pct(lat, 0.5) * 1000:>8.0f} ms"
                f" {_pct(lat, 0.99) * 1000:>5.0f} ms  {_pct(txn, 0.5) * 1000:>11.0f} ms"
                f" {_pct(txn, 0.99) * 1000:>5.0f} ms  {r['rate']:>11,.0f} {r['rss_mib']:>5.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
