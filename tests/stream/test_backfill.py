"""Backfill scan types: an MV created over a table that holds rows
reads that history over several epochs (rate limited) while writers keep changing the
table - inserts, updates, deletes, key-changing updates - and ends equal to its query as
a batch SELECT. Arrangement backfills also survive reschedules mid-way (progress never
goes backwards) and a restart (resuming from the persisted per-vnode progress)."""

from __future__ import annotations

import ctypes
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from stream_oracle import differences

import rivulet
from rivulet.stream.backfill_tracker import BackfillProgress

ROWS = 20_000
MV_QUERY = "SELECT id, k, v * 2 AS v2, s FROM t WHERE v % 3 <> 0"
AGG_QUERY = "SELECT k, count(*) AS n, sum(v) AS sv, max(id) AS mx FROM t GROUP BY k"


def multiset(con: rivulet.Connection, sql: str) -> list[tuple[object, ...]]:
    return sorted(con.execute(sql).fetchall(), key=repr)


def tracker(con: rivulet.Connection) -> BackfillProgress:
    return con._thread.engine.backfill  # type: ignore[attr-defined]


def job_id(con: rivulet.Connection, name: str) -> int:
    table = con._thread.engine.catalog.get_table("public", name)  # type: ignore[attr-defined]
    assert table is not None
    return table.id


def fill(con: rivulet.Connection) -> None:
    # CREATE returns while the backfill runs (the tests watch and alter it meanwhile).
    con.execute("SET background_ddl = true")
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT, s VARCHAR)")
    con.execute(
        f"INSERT INTO t SELECT i, i % 50, i * 7 % 1000, 's' || (i % 13)"
        f" FROM generate_series(0, {ROWS - 1}) AS g(i)"
    )


class Writer:
    """A thread with its own connection that keeps changing ``t`` until stopped: new
    rows, value updates, deletes, and updates that move rows to other keys (and so to
    other vnodes), all over the key range the backfill is reading."""

    def __init__(self, path: Path, seed: int, new_keys_only: bool = False) -> None:
        self.path = path
        self.rng = random.Random(seed)
        self.new_keys_only = new_keys_only
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.statements = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the writer hangs"
        if self.errors:
            raise self.errors[0]

    def _run(self) -> None:
        rng = self.rng
        w = rivulet.connect(self.path)
        next_id = 1_000_000
        try:
            while not self.stop.is_set():
                op = rng.random()
                if op < 0.35 or (self.new_keys_only and op < 0.6):
                    rows = [
                        (next_id + i, rng.randrange(50), rng.randrange(1000), "w")
                        for i in range(30)
                    ]
                    next_id += 30
                    w.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)", rows)
                elif self.new_keys_only:
                    m = rng.randrange(7)
                    if op < 0.8:
                        w.execute("UPDATE t SET v = v + 1 WHERE id >= 1000000 AND id % 7 = %s", [m])
                    else:
                        w.execute("DELETE FROM t WHERE id >= 1000000 AND id % 7 = %s", [m])
                elif op < 0.6:
                    w.execute("UPDATE t SET v = v + 1, k = (k + 1) % 50 WHERE id % 97 = %s",
                              [rng.randrange(97)])  # fmt: skip
                elif op < 0.8:
                    w.execute("DELETE FROM t WHERE id % 211 = %s", [rng.randrange(211)])
                else:  # key-changing: the row leaves its key (and vnode) for another
                    w.execute(
                        "UPDATE t SET id = id + 5000000 WHERE id % 389 = %s AND id < 5000000",
                        [rng.randrange(389)],
                    )
                self.statements += 1
        except BaseException as exc:  # reported by __exit__
            self.errors.append(exc)
        finally:
            w.close()


def wait_done(
    con: rivulet.Connection,
    name: str,
    timeout: float = 60,
    during: Callable[[], None] | None = None,
) -> list[tuple[int, int, bool]]:
    """Poll the tracker until the MV's backfill is done; the progress seen on the way."""
    seen: list[tuple[int, int, bool]] = []
    job = job_id(con, name)
    deadline = time.monotonic() + timeout
    while True:
        progress = tracker(con).progress(job)
        seen.append(progress)
        if progress[2]:
            return seen
        assert time.monotonic() < deadline, f"backfill of {name} not done: {progress}"
        if during is not None:
            during()
        time.sleep(0.05)


def assert_monotonic(seen: list[tuple[int, int, bool]]) -> None:
    consumed = [c for c, _, _ in seen]
    assert consumed == sorted(consumed), f"progress went backwards: {consumed}"


def assert_spread(seen: list[tuple[int, int, bool]]) -> None:
    """The backfill was seen part-way (it spanned several epochs)."""
    assert any(0 < c < t for c, t, done in seen if not done), seen[:5]


def check(con: rivulet.Connection, name: str, query: str) -> None:
    con.execute("FLUSH")
    assert multiset(con, f"SELECT * FROM {name}") == multiset(con, query)


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_arrangement_backfill_under_writes(tmp_path: Path, parallelism: int) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    try:
        fill(con)
        tracker(con).default_rate_limit = 18_000 // parallelism
        con.execute(f"SET streaming_parallelism = {parallelism}")
        with Writer(path, parallelism):
            con.execute(f"CREATE MATERIALIZED VIEW m AS {MV_QUERY}")
            seen = wait_done(con, "m")
        assert_spread(seen)
        assert_monotonic(seen)
        check(con, "m", MV_QUERY)
        # The scan fragment runs at the MV's parallelism, hashed from the table's actors.
        counts = con.execute(
            "SELECT count(*) FROM rw_actors a JOIN rw_fragments f ON a.fragment_id ="
            " f.fragment_id WHERE f.table_id = %s",
            [job_id(con, "m")],
        ).fetchall()
        assert counts == [(parallelism,)]
        consumed, total, done = tracker(con).progress(job_id(con, "m"))
        assert done and consumed >= ROWS * 0.9 and total >= consumed
    finally:
        con.close()


@pytest.mark.parametrize("scan_type", ["no_shuffle", "snapshot"])
def test_chained_backfills_under_writes(tmp_path: Path, scan_type: str) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    try:
        fill(con)
        tracker(con).default_rate_limit = 9_000
        with Writer(path, 11):
            con.execute(
                f"CREATE MATERIALIZED VIEW m WITH (backfill_type = '{scan_type}') AS {MV_QUERY}"
            )
            con.execute(f"CREATE MATERIALIZED VIEW g WITH (backfill_type = '{scan_type}')"
                        f" AS {AGG_QUERY}")  # fmt: skip
            seen = wait_done(con, "m")
            wait_done(con, "g")
        assert_spread(seen)
        assert_monotonic(seen)
        check(con, "m", MV_QUERY)
        check(con, "g", AGG_QUERY)
    finally:
        con.close()


def test_session_variables_choose_the_scan_type(tmp_path: Path) -> None:
    con = rivulet.connect(workers=1, slots=2)
    try:
        fill(con)
        con.execute("SET streaming_use_arrangement_backfill = false")
        con.execute(f"CREATE MATERIALIZED VIEW a AS {MV_QUERY}")
        con.execute("SET streaming_use_snapshot_backfill = true")
        con.execute(f"CREATE MATERIALIZED VIEW b AS {MV_QUERY}")
        catalog = con._thread.engine.catalog  # type: ignore[attr-defined]
        assert catalog.get_table("public", "a").backfill_type == "no_shuffle"
        assert catalog.get_table("public", "b").backfill_type == "snapshot"
        for name in ("a", "b"):
            wait_done(con, name)
            check(con, name, MV_QUERY)
        with pytest.raises(rivulet.Error) as err:
            con.execute(f"CREATE MATERIALIZED VIEW c WITH (backfill_type = 'fast') AS {MV_QUERY}")
        assert err.value.sqlstate == "22023"
        assert "arrangement" in (err.value.hint or "")
    finally:
        con.close()


def test_upstream_only_reads_no_history(tmp_path: Path) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    try:
        fill(con)
        query = "SELECT id, k, v FROM t WHERE id >= 1000000"
        con.execute(
            "CREATE MATERIALIZED VIEW m WITH (backfill_type = 'upstream_only')"
            " AS SELECT id, k, v FROM t"
        )
        # Only what the writer does from now on (to keys it creates) reaches the MV.
        with Writer(path, 5, new_keys_only=True) as writer:
            while writer.statements < 20:
                time.sleep(0.05)
        assert tracker(con).progress(job_id(con, "m"))[2]
        check(con, "m", query)
        assert con.execute("SELECT count(*) FROM m").fetchone()[0] > 0
    finally:
        con.close()


def test_arrangement_backfill_through_reschedules(tmp_path: Path) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    try:
        fill(con)
        tracker(con).default_rate_limit = 2_500
        # The MV up and down; twice its upstream table (the hash exchange feeding the scan
        # is rebuilt from the table's new actors).
        steps = iter([("m", 1), ("t", 1), ("m", 3), ("m", 2), ("t", 2), ("m", 1), ("m", 3)])
        altered: list[tuple[str, int]] = []

        def alter() -> None:
            step = next(steps, None)
            if step is not None:
                kind = "TABLE" if step[0] == "t" else "MATERIALIZED VIEW"
                con.execute(f"ALTER {kind} {step[0]} SET PARALLELISM = {step[1]}")
                altered.append(step)

        chained = "SELECT k, count(*) AS n, sum(v2) AS s2 FROM m GROUP BY k"
        with Writer(path, 3):
            con.execute(f"CREATE MATERIALIZED VIEW m AS {MV_QUERY}")
            con.execute(f"CREATE MATERIALIZED VIEW g AS {AGG_QUERY}")
            # Over an MV that is still backfilling: its history arrives as changes.
            con.execute(f"CREATE MATERIALIZED VIEW m2 AS {chained}")
            seen = wait_done(con, "m", during=alter)
            wait_done(con, "g")
            wait_done(con, "m2")
        assert len(altered) >= 4, "the backfill ended before the reschedules"
        assert_monotonic(seen)
        check(con, "m", MV_QUERY)
        check(con, "g", AGG_QUERY)
        check(con, "m2", f"SELECT k, count(*), sum(v2) FROM ({MV_QUERY}) GROUP BY k")
    finally:
        con.close()


@pytest.mark.slow
def test_arrangement_backfill_over_an_mv_with_nullable_keys(tmp_path: Path) -> None:
    """The upstream is an MV over a left join: its key holds NULLs (the NULL-padded side)
    and a row's vnode follows the join key, which the writer's updates change."""
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    try:
        fill(con)
        con.execute("CREATE TABLE u (k INT PRIMARY KEY, w INT)")
        con.executemany("INSERT INTO u VALUES (%s, %s)", [(k, k * 10) for k in range(0, 50, 2)])
        con.execute(
            "CREATE MATERIALIZED VIEW j AS"
            " SELECT t.id, t.v, u.k AS uk, u.w FROM t LEFT JOIN u ON t.k = u.k"
        )
        wait_done(con, "j")
        tracker(con).default_rate_limit = 9_000
        query = "SELECT id, uk, w, v + 1 AS v1 FROM j WHERE v % 4 <> 1"
        oracle = "SELECT t.id, u.k, u.w, t.v + 1 FROM t LEFT JOIN u ON t.k = u.k WHERE t.v % 4 <> 1"
        with Writer(path, 21):
            con.execute(f"CREATE MATERIALIZED VIEW a AS {query}")
            seen = wait_done(con, "a")
        assert_spread(seen)
        check(con, "a", oracle)
    finally:
        con.close()


@pytest.mark.slow
def test_arrangement_backfill_through_recovery(tmp_path: Path) -> None:
    """RECOVER mid-backfill: the epochs not committed are lost, the backfill goes on from
    the committed progress and ends exact."""
    con = rivulet.connect(workers=1, slots=2)
    try:
        fill(con)
        tracker(con).default_rate_limit = 4_000
        con.execute(f"CREATE MATERIALIZED VIEW m AS {MV_QUERY}")
        for i in range(3):
            time.sleep(0.4)
            con.execute("UPDATE t SET v = v + 1 WHERE id % 10 = %s", [i])
            con.execute("DELETE FROM t WHERE id % 31 = %s", [i])
            con.execute("RECOVER")
            con.execute("INSERT INTO t VALUES (%s, 1, 2, 'r')", [2_000_000 + i])
        assert not tracker(con).progress(job_id(con, "m"))[2], "done before the recoveries"
        # (Progress may step back here: rows read in epochs lost to RECOVER are read again.)
        wait_done(con, "m")
        check(con, "m", MV_QUERY)
    finally:
        con.close()


@pytest.mark.parametrize("scan_type", ["arrangement", "snapshot"])
def test_backfill_resumes_after_restart(tmp_path: Path, scan_type: str) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    fill(con)
    tracker(con).default_rate_limit = 3_000
    with Writer(path, 9):
        con.execute(
            f"CREATE MATERIALIZED VIEW m WITH (backfill_type = '{scan_type}') AS {MV_QUERY}"
        )
        job = job_id(con, "m")
        while tracker(con).progress(job)[0] < ROWS // 5:
            time.sleep(0.05)
    before = tracker(con).progress(job)
    assert not before[2]
    con.close()

    con = rivulet.connect(path, workers=1, slots=2)
    try:
        tracker(con).default_rate_limit = 20_000
        with Writer(path, 10):
            seen = wait_done(con, "m")
        # Resumed: the first progress after the restart (what SHOW JOBS shows before the
        # rebuilt scans report) is where it stood, never 0 again.
        assert seen[0][0] >= before[0] > 0
        assert_monotonic(seen)
        check(con, "m", MV_QUERY)
    finally:
        con.close()


def test_a_snapshot_scan_holds_a_bounded_part_of_a_large_snapshot() -> None:
    """A snapshot backfill reads its fixed snapshot in slices through a read transaction,
    so what it buffers is bounded by what an epoch reads, not by the table: here a table
    of about 190 MB (as Arrow) is read at 100k rows/s per actor into an MV of one row
    while the process's memory grows by far less than the table's size (holding the whole
    snapshot, it grew by about 420 MB).

    The table is checkpointed first: DuckDB's first checkpoint of freshly written rows
    rewrites them compressed, and a reader open meanwhile (this scan, or any long query)
    keeps the uncompressed version alive until it ends - storage's cost, about the
    table's size once, not the scan's buffering, which is what this measures."""

    def rss() -> int:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    rows = 1_500_000
    with rivulet.connect(workers=1, slots=2, barrier_interval_ms=250) as con:
        con.execute("CREATE TABLE big (id INT PRIMARY KEY, s VARCHAR)")
        for start in range(0, rows, 250_000):
            con.execute(
                "INSERT INTO big SELECT i, repeat('x', 120) || i FROM generate_series(%s, %s)"
                " AS g(i)",
                [start, start + 249_999],
            )
        store = con._thread.engine.store  # type: ignore[attr-defined]
        store.checkpoint()
        # DuckDB lets go of the rewritten rows' old version as a scan passes them; then
        # what it freed goes back to the OS, so that the baseline is what is live
        # (memory reused from free lists would hide growth).
        expected = con.execute("SELECT count(*), sum(length(s)) FROM big").fetchone()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        probe = store.new_cursor()

        def duckdb_bytes() -> int:
            return probe.sql("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0]

        table_bytes = 128 * rows
        peak = [0, 0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss())
                peak[1] = max(peak[1], duckdb_bytes())
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        baseline = rss(), duckdb_bytes()
        sampler.start()
        try:
            con.execute(
                "CREATE MATERIALIZED VIEW bm WITH (backfill_type = 'snapshot',"
                " backfill_rate_limit = 100000) AS SELECT count(*) AS c, sum(length(s)) AS n FROM big"
            )
        finally:
            done.set()
            sampler.join()
        assert con.execute("SELECT c, n FROM bm").fetchone() == expected
        held = peak[0] - baseline[0], peak[1] - baseline[1]
        assert max(held) < table_bytes / 6, (held, table_bytes)


# ------------------------------------------------------ epochs across an exchange
@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("backfill_type", ["arrangement", "no_shuffle"])
def test_an_mv_with_an_exchange_is_never_ahead_of_its_table(backfill_type: str) -> None:
    """MVs created while a connector table fills, read in one snapshot after FLUSH: an
    aggregation (a scan fragment, then a hash exchange) holds exactly the table's rows.

    A regression test: the merge in front of the aggregation once passed a barrier only
    after rows of the next epoch from an input that had delivered it, when a lower input
    completed the alignment; about one run in ten under CPU load committed an epoch that
    counted some of the rows the table commits with the next one (and a crash between
    the two epochs doubled them). The unit form is in test_barrier_align.py."""
    pace = "nexmark.min.event.gap.in.ns = '1000000', nexmark.event.num = '10000'"
    queries = {
        "per_auction": "SELECT auction, count(*) AS n, max(price) AS top, sum(price) AS s"
        " FROM bid GROUP BY auction",
        "raw": "SELECT auction, bidder, price, date_time FROM bid",
    }
    for run in range(20):
        conn = rivulet.connect(workers=1, slots=2, barrier_interval_ms=250)
        try:
            conn.execute(
                "CREATE TABLE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid',"
                f" nexmark.split.num = '2', {pace})"
            )
            for name, sql in queries.items():
                conn.execute(
                    f"CREATE MATERIALIZED VIEW {name} WITH (backfill_type = '{backfill_type}')"
                    f" AS {sql}"
                )
            for _ in range(2):
                conn.execute("FLUSH")
                for name, sql in queries.items():
                    differ = differences(conn, name, sql)
                    assert differ == 0, f"run {run}: {name} differs from bid in {differ} rows"
                time.sleep(0.3)
        finally:
            conn.close()


@pytest.mark.parametrize("scan_type", ["arrangement", "no_shuffle", "snapshot"])
def test_backfills_read_their_upstream_through_the_storage_service(
    tmp_path: Path, scan_type: str
) -> None:
    """Served state (the path of actors in other processes): every read of a backfill -
    counts, slices of the upstream, a snapshot scan's held snapshot, its log and the
    progress a rebuilt scan resumes from - goes through the service, and the MV ends
    exact. Mid-backfill the MV is rebuilt (a reschedule; a no_shuffle scan, which keeps
    its upstream's actors while it backfills, by RECOVER)."""
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2, state_reads="served")
    try:
        service = con._thread.engine.state_service.service  # type: ignore[attr-defined]
        fill(con)
        tracker(con).default_rate_limit = 6_000
        with Writer(path, 31):
            con.execute(
                f"CREATE MATERIALIZED VIEW m WITH (backfill_type = '{scan_type}') AS {MV_QUERY}"
            )
            job = job_id(con, "m")
            while tracker(con).progress(job)[0] < ROWS // 5:
                time.sleep(0.05)
            if scan_type != "no_shuffle":
                con.execute("ALTER MATERIALIZED VIEW m SET PARALLELISM = 3")
        if scan_type == "no_shuffle":
            con.execute("RECOVER")  # (between writers: it fails the statements in flight)
        assert not tracker(con).progress(job)[2], "done before the rebuild"
        with Writer(path, 32):
            seen = wait_done(con, "m")
        assert_spread(seen)
        check(con, "m", MV_QUERY)
        assert service.requests_by_op["scan"] > 0
        assert service.requests_by_op["matching"] > 0  # the rebuilt scans' progress
        if scan_type == "snapshot":
            assert service.requests_by_op["open_snapshot"] > 0
        # No read transaction outlives its scan.
        assert service.reads.open_snapshots == 0
    finally:
        con.close()
