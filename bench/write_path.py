"""The write path, next to PostgreSQL 15 on the same machine.

    python bench/write_path.py [--seconds 10] [--clients 16] [--rw-implicit-flush false]

Runs the same statements against a real `rivulet playground` (in memory, and on a data
directory) and against a throw-away PostgreSQL cluster in a temporary directory (on
127.0.0.1, started and stopped here; skipped with a note if PostgreSQL is not installed),
and prints each figure with its ratio and the issue's target:

* single-row INSERT over pgwire, one client: p50 without an MV (in memory, data
  directory) and with one aggregation MV;
* single-row INSERTs from ``--clients`` concurrent clients into a table with one MV;
* one INSERT of 6,000 rows written as VALUES;
* asyncpg ``executemany`` of 100,000 rows and ``copy_records_to_table``;
* the batched writes of other clients (no target, reported): psycopg ``executemany``,
  SQLAlchemy's bulk ``insert()`` and pandas' ``to_sql`` (if pandas is installed), which
  send one INSERT per row with a cast on each parameter.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "server"))
from foundation import conninfo, free_port, start_server

TABLE = "CREATE TABLE ev (id BIGINT, k INT, v INT)"
MV = "CREATE MATERIALIZED VIEW ev_agg AS SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
PG_MV = "CREATE TABLE ev_agg (k INT)"  # PostgreSQL has no incremental MV: a plain table
INSERT = "INSERT INTO ev VALUES (%s, %s, %s)"


class Target:
    def __init__(self, name: str, dsn: str, mv: str, asyncpg_dsn: str) -> None:
        self.name = name
        self.dsn = dsn
        self.mv = mv
        self.asyncpg_dsn = asyncpg_dsn

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True)

    def reset(self, with_mv: bool) -> None:
        with self.connect() as con:
            for sql in ("DROP MATERIALIZED VIEW IF EXISTS ev_agg", "DROP TABLE IF EXISTS ev_agg"):
                try:
                    con.execute(sql)
                except psycopg.Error:
                    pass
            con.execute("DROP TABLE IF EXISTS ev")
            con.execute(TABLE)
            if with_mv:
                con.execute(self.mv)


def single_row_p50(target: Target, with_mv: bool, seconds: float) -> float:
    target.reset(with_mv)
    times = []
    with target.connect() as con:
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            con.execute(INSERT, [i, i % 100, i])
            times.append(time.perf_counter() - started)
            i += 1
    return statistics.median(times) * 1000


def concurrent_rows_per_s(target: Target, clients: int, seconds: float) -> float:
    target.reset(True)
    stop = threading.Event()
    counts = [0] * clients
    ready = threading.Barrier(clients + 1)

    def run(c: int) -> None:
        with target.connect() as con:
            ready.wait()
            i = 0
            while not stop.is_set():
                con.execute(INSERT, [c * 10**9 + i, i % 100, i])
                i += 1
            counts[c] = i

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - started)


def values_ms(target: Target, rows: int = 6000) -> float:
    """One INSERT of ``rows`` rows as VALUES; each run's values (so its text) differ, as
    an application's do: a repeated text would be served from the parse cache."""
    target.reset(False)
    times = []
    with target.connect() as con:
        for run in range(3):
            base = run * rows
            sql = "INSERT INTO ev VALUES " + ", ".join(
                f"({base + i}, {i % 100}, {i * 3})" for i in range(rows)
            )
            started = time.perf_counter()
            con.execute(sql)
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def asyncpg_rates(target: Target, rows: int = 100_000) -> tuple[float | None, float | None]:
    try:
        import asyncpg
    except ImportError:
        return None, None

    async def run() -> tuple[float | None, float | None]:
        con = await asyncpg.connect(target.asyncpg_dsn)
        try:
            data = [(i, i % 100, i) for i in range(rows)]
            started = time.perf_counter()
            await con.executemany("INSERT INTO ev VALUES ($1, $2, $3)", data)
            many = rows / (time.perf_counter() - started)
            copy: float | None
            try:
                started = time.perf_counter()
                await con.copy_records_to_table("ev", records=data)
                copy = rows / (time.perf_counter() - started)
            except Exception as exc:  # a figure reported as missing
                print(f"  ({target.name}: copy_records_to_table failed: {exc})")
                copy = None
            return many, copy
        finally:
            await con.close()

    target.reset(False)
    return asyncio.run(run())


def driver_rates(target: Target, rows: int = 50_000) -> dict[str, float | None]:
    """Rows per second of psycopg's executemany, SQLAlchemy's bulk insert and pandas'
    to_sql (None: the library is not installed)."""
    import sqlalchemy as sa

    out: dict[str, float | None] = {}
    data = [(i, i % 100, i) for i in range(rows)]
    target.reset(False)
    with target.connect() as con, con.cursor() as cur:
        started = time.perf_counter()
        cur.executemany(INSERT, data)
        out["psycopg"] = rows / (time.perf_counter() - started)
    engine = sa.create_engine(
        "postgresql+psycopg://", creator=target.connect, isolation_level="AUTOCOMMIT"
    )
    try:
        target.reset(False)
        ev = sa.Table("ev", sa.MetaData(), autoload_with=engine)
        dicts = [{"id": i, "k": k, "v": v} for i, k, v in data]
        started = time.perf_counter()
        with engine.begin() as c:
            c.execute(sa.insert(ev), dicts)
        out["sqlalchemy"] = rows / (time.perf_counter() - started)
        try:
            import pandas as pd
        except ImportError:
            out["pandas"] = None
        else:
            frame = pd.DataFrame(data, columns=["id", "k", "v"])
            with engine.begin() as c:
                c.execute(sa.text("DROP TABLE IF EXISTS ev_pd"))
            started = time.perf_counter()
            frame.to_sql("ev_pd", engine, index=False, chunksize=10_000)
            out["pandas"] = rows / (time.perf_counter() - started)
            with engine.begin() as c:
                c.execute(sa.text("DROP TABLE ev_pd"))
    finally:
        engine.dispose()
    return out


@contextmanager
def rivulet_target(data_dir: Path | None, name: str, implicit_flush: bool = True) -> Any:
    port = free_port()
    proc = start_server(data_dir, port)
    dsn, url = conninfo(port), f"postgresql://root@127.0.0.1:{port}/dev"
    if not implicit_flush:  # RisingWave's semantics: a write returns before its commit
        dsn += " options='-c rw_implicit_flush=false'"
        url += "?options=-c%20rw_implicit_flush%3Dfalse"
    try:
        yield Target(name, dsn, MV, url)
    finally:
        proc.terminate()
        proc.wait(30)


@contextmanager
def postgres_target() -> Any:
    from postgres_reference import start_postgres

    pg = start_postgres(free_port(), durable=True)
    try:
        dsn = pg.dsn()
        yield Target(
            "PostgreSQL", dsn, PG_MV, f"postgresql://{pg.user}@{pg.host}:{pg.port}/postgres"
        )
    finally:
        pg.stop()


def measure(
    make: Callable[[], AbstractContextManager[Target]], args: argparse.Namespace, full: bool
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    with make() as target:
        out["p50"] = single_row_p50(target, False, args.seconds / 2)
        if full:
            out["p50_mv"] = single_row_p50(target, True, args.seconds / 2)
            out["clients"] = concurrent_rows_per_s(target, args.clients, args.seconds)
            out["values"] = values_ms(target)
            out["many"], out["copy"] = asyncpg_rates(target)
            out.update(driver_rates(target))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument(
        "--rw-implicit-flush",
        choices=["true", "false"],
        default="true",
        help="false: Rivulet's writes return before their commit, as RisingWave's default",
    )
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        flush = args.rw_implicit_flush == "true"
        memory = measure(lambda: rivulet_target(None, "rivulet (memory)", flush), args, False)
        disk = measure(
            lambda: rivulet_target(Path(tmp) / "data", "rivulet (disk)", flush), args, True
        )
    try:
        pg = measure(postgres_target, args, True)
    except RuntimeError as exc:
        print(f"PostgreSQL not measured: {exc}")
        pg = {}

    def fmt(v: float | None, unit: str) -> str:
        return "-" if v is None else f"{v:,.2f} {unit}" if v < 100 else f"{v:,.0f} {unit}"

    rows = [
        ("single-row INSERT p50, no MV, in memory", memory.get("p50"), pg.get("p50"), "ms",
         "<= 2 ms", lambda v: v <= 2),
        ("single-row INSERT p50, no MV, data dir", disk.get("p50"), pg.get("p50"), "ms",
         "<= 3 ms", lambda v: v <= 3),
        ("single-row INSERT p50, one aggregation MV", disk.get("p50_mv"), pg.get("p50_mv"), "ms",
         "<= 4 ms", lambda v: v <= 4),
        (f"{args.clients} clients of single-row INSERTs, one MV", disk.get("clients"),
         pg.get("clients"), "rows/s", ">= 5,000 rows/s", lambda v: v >= 5000),
        ("one INSERT of 6,000 rows as VALUES", disk.get("values"), pg.get("values"), "ms",
         "<= 100 ms", lambda v: v <= 100),
        ("asyncpg executemany, 100,000 rows", disk.get("many"), pg.get("many"), "rows/s",
         ">= 100,000 rows/s", lambda v: v >= 100_000),
        ("asyncpg copy_records_to_table, 100,000 rows", disk.get("copy"), pg.get("copy"),
         "rows/s", ">= 300,000 rows/s", lambda v: v >= 300_000),
        ("psycopg executemany, 50,000 rows", disk.get("psycopg"), pg.get("psycopg"), "rows/s",
         "(reported)", None),
        ("SQLAlchemy bulk insert(), 50,000 rows", disk.get("sqlalchemy"), pg.get("sqlalchemy"),
         "rows/s", "(reported)", None),
        ("pandas to_sql, 50,000 rows", disk.get("pandas"), pg.get("pandas"), "rows/s",
         "(reported)", None),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    missed = 0
    # (PostgreSQL's "MV" is a second plain table: it keeps no view up to date.)
    print(f"{'':<{width}}  {'rivulet':>16}  {'PostgreSQL':>16}  {'ratio':>7}   target")
    for name, ours, theirs, unit, target, ok in rows:
        ratio = "-" if ours is None or not theirs else f"{ours / theirs:.2f}x"
        verdict = ""
        if ok is not None:
            good = ours is not None and ok(ours)
            missed += not good
            verdict = "  ok" if good else "  MISSED"
        print(
            f"{name:<{width}}  {fmt(ours, unit):>16}  {fmt(theirs, unit):>16}  {ratio:>7}"
            f"   {target}{verdict}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
