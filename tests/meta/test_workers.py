"""Workers joining and leaving while jobs run: adaptive jobs spread onto a new worker,
a removed worker's actors move to the others, the last worker stays; after every change
each MV equals its query (the oracle)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import rivulet
from rivulet.common.errors import Error

QUERY = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k"


def actors_per_worker(con: rivulet.Connection) -> dict[int, int]:
    rows = con.execute(
        "SELECT a.worker_id, count(*) FROM rw_actors a JOIN rw_fragments f"
        " ON a.fragment_id = f.fragment_id JOIN rw_streaming_jobs j ON f.table_id = j.id"
        " WHERE j.name = 'm' AND f.distribution_type = 'HASH' AND f.scan_type IS NULL"
        " GROUP BY a.worker_id"
    ).fetchall()
    return dict(rows)


def assert_oracle(con: rivulet.Connection) -> None:
    got = sorted(con.execute("SELECT * FROM m").fetchall())
    assert got == sorted(con.execute(QUERY).fetchall())


def test_workers_join_and_leave_under_writes(tmp_path: Path) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
    con.execute("CREATE MATERIALIZED VIEW fixed AS SELECT k, max(v) AS mx FROM t GROUP BY k")
    con.execute("ALTER MATERIALIZED VIEW fixed SET PARALLELISM = 2")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        w = rivulet.connect(path)
        i = 0
        try:
            while not stop.is_set():
                w.executemany(
                    "INSERT INTO t VALUES (%s, %s, %s)",
                    [(i + j, (i + j) % 7, j) for j in range(10)],
                )
                w.execute("DELETE FROM t WHERE id = %s", [i])
                i += 10
        except BaseException as exc:
            errors.append(exc)
        finally:
            w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert actors_per_worker(con) == {1: 2}
        second = con.add_worker(slots=2)
        assert con.workers() == [(1, 2), (second, 2)]
        # Adaptive: 4 slots now, spread evenly.
        assert actors_per_worker(con) == {1: 2, second: 2}
        third = con.add_worker(slots=1)
        assert sum(actors_per_worker(con).values()) == 5
        con.remove_worker(1)
        placed = actors_per_worker(con)
        assert 1 not in placed and sum(placed.values()) == 3
        con.remove_worker(third)
        assert actors_per_worker(con) == {second: 2}
        with pytest.raises(Error) as info:
            con.remove_worker(second)
        assert info.value.sqlstate == "55000"
        assert "last worker" in info.value.message
        with pytest.raises(Error) as info:
            con.remove_worker(99)
        assert info.value.sqlstate == "42704"
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    con.execute("FLUSH")
    assert_oracle(con)
    # A fixed job keeps its count.
    fixed = con.execute(
        "SELECT DISTINCT f.parallelism FROM rw_fragments f JOIN rw_streaming_jobs j"
        " ON f.table_id = j.id WHERE j.name = 'fixed' AND f.scan_type IS NULL"
        " AND f.distribution_type = 'HASH'"
    ).fetchall()
    assert fixed == [(2,)]
    got = sorted(con.execute("SELECT * FROM fixed").fetchall())
    assert got == sorted(con.execute("SELECT k, max(v) FROM t GROUP BY k").fetchall())
    con.close()
    # The worker set is kept with the data.
    con = rivulet.connect(path)
    assert con.workers() == [(second, 2)]
    assert_oracle(con)
    con.close()


def test_automatic_control_can_be_turned_off() -> None:
    con = rivulet.connect(workers=1, slots=2)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    con.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
    con.execute("ALTER SYSTEM SET disable_automatic_parallelism_control = true")
    con.add_worker(slots=2)
    assert actors_per_worker(con) == {1: 2}  # not moved
    con.execute("ALTER SYSTEM SET disable_automatic_parallelism_control = false")
    con.add_worker(slots=1)
    assert sum(actors_per_worker(con).values()) == 5
    con.execute("INSERT INTO t VALUES (1, 1, 1)")
    assert_oracle(con)
    con.close()


def test_jobs_pinned_by_a_no_shuffle_backfill_are_reconciled_when_it_completes() -> None:
    """A worker joins while a no_shuffle backfill (which cannot move) is creating: the
    backfilling MV and the table it reads keep their actors meanwhile (and say so), and are
    reconciled to their (adaptive) policy when the backfill completes."""
    con = rivulet.connect(workers=1, slots=1)
    try:
        con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
        con.execute("INSERT INTO t SELECT i, i % 7, i FROM generate_series(1, 20000) AS g(i)")
        con.execute("SET background_ddl = true")
        con.execute(
            "CREATE MATERIALIZED VIEW m WITH (backfill_type = 'no_shuffle',"
            f" backfill_rate_limit = 5000) AS {QUERY}"
        )
        con.add_worker(slots=1)

        def live() -> dict[str, int]:
            rows = con.execute(
                "SELECT j.name, max(f.parallelism) FROM rw_fragments f JOIN rw_streaming_jobs j"
                " ON f.table_id = j.id WHERE f.scan_type IS NULL GROUP BY j.name"
            ).fetchall()
            return dict(rows)

        job = con.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        assert con.execute(
            "SELECT name, status, parallelism, reconcile_status FROM rw_streaming_jobs ORDER BY id"
        ).fetchall() == [
            ("t", "CREATED", "adaptive", f"blocked by job {job}"),
            ("m", "CREATING", "adaptive", "pending"),
        ]
        assert live() == {"t": 1, "m": 1}  # pinned
        con.execute("WAIT")
        con.execute("FLUSH")
        assert con.execute(
            "SELECT name, parallelism, reconcile_status FROM rw_streaming_jobs ORDER BY id"
        ).fetchall() == [("t", "adaptive", "in_sync"), ("m", "adaptive", "in_sync")]
        assert live() == {"t": 2, "m": 2}
        con.execute("INSERT INTO t VALUES (0, 1, 1)")
        assert_oracle(con)
    finally:
        con.close()


@pytest.mark.parametrize("deferred", [False, True], ids=["pinned", "deferred"])
@pytest.mark.parametrize("end", ["drop", "cancel"])
def test_jobs_held_by_a_no_shuffle_backfill_are_released_when_it_is_dropped(
    end: str, deferred: bool
) -> None:
    """The no_shuffle backfill that held a table at its actor count (a worker joined),
    or blocked a deferred target on it, is dropped or cancelled instead of completing:
    at once, the table goes to its policy, or its deferred target applies."""
    con = rivulet.connect(workers=1, slots=1)
    try:
        con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
        con.execute("CREATE MATERIALIZED VIEW other AS SELECT k, count(*) AS n FROM t GROUP BY k")
        con.execute("INSERT INTO t SELECT i, i % 7, i FROM generate_series(1, 20000) AS g(i)")
        con.execute("SET background_ddl = true")
        con.execute(
            "CREATE MATERIALIZED VIEW m WITH (backfill_type = 'no_shuffle',"
            f" backfill_rate_limit = 100) AS {QUERY}"
        )
        con.add_worker(slots=1)
        job = con.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        if deferred:
            con.execute("ALTER TABLE t SET PARALLELISM = 1 DEFERRED")
        assert con.execute(
            "SELECT name, parallelism, reconcile_status FROM rw_streaming_jobs WHERE name = 't'"
        ).fetchall() == [("t", "adaptive", f"blocked by job {job}")]
        if end == "drop":
            con.execute("DROP MATERIALIZED VIEW m")
        else:
            con.execute(f"CANCEL JOBS {job}")

        def jobs() -> list[tuple[str, str, str, int]]:
            return con.execute(
                "SELECT j.name, j.parallelism, j.reconcile_status, max(f.parallelism)"
                " FROM rw_fragments f JOIN rw_streaming_jobs j ON f.table_id = j.id"
                " WHERE f.scan_type IS NULL GROUP BY ALL ORDER BY j.name"
            ).fetchall()

        # `other` was never held (its backfill is over); it spread when the worker came.
        t_now = ("t", "1", "in_sync", 1) if deferred else ("t", "adaptive", "in_sync", 2)
        assert jobs() == [("other", "adaptive", "in_sync", 2), t_now]
        con.execute("INSERT INTO t VALUES (0, 1, 1)")
        assert sorted(con.execute("SELECT * FROM other").fetchall()) == sorted(
            con.execute("SELECT k, count(*) FROM t GROUP BY k").fetchall()
        )
    finally:
        con.close()
