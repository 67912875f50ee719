"""In-process recovery: an exception in an actor (injected here into the filter executor)
rebuilds its failure domain from the last checkpoint (here: every job, all reading one
table), RECOVER every job. Afterwards every MV equals its
query (the oracle); each recovery is logged with the actor, fragment and job it hit and
listed in rw_recovery_events; failures that repeat back off instead of spinning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import POISON, Fault

import rivulet
from rivulet.common.errors import ADMIN_SHUTDOWN, sql_error
from rivulet.meta.recovery import Backoff, FailureCause
from rivulet.stream.message import StopActors

MVS = {
    "m_filter": "SELECT id, k, v FROM t WHERE v >= 0",
    "m_agg": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
}
EVENT_COLUMNS = (
    "id, reason, actor_id, fragment_id, job_id, job_name, recovered_epoch, attempt,"
    " backoff_ms, duration_ms"
)


def assert_oracle(con: rivulet.Connection) -> None:
    for name, query in MVS.items():
        got = sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
        want = sorted(con.execute(query).fetchall(), key=repr)
        assert got == want, f"{name} differs from its query"


def events(con: rivulet.Connection) -> list[tuple[object, ...]]:
    return con.execute(f"SELECT {EVENT_COLUMNS} FROM rw_recovery_events ORDER BY id").fetchall()


def job_id(con: rivulet.Connection, name: str) -> int:
    row = con.execute("SELECT id FROM rw_streaming_jobs WHERE name = %s", [name]).fetchone()
    assert row is not None
    return int(row[0])


def setup(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    con.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, i % 7, i) for i in range(100)])
    for name, query in MVS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")


@pytest.fixture
def con() -> Iterator[rivulet.Connection]:
    c = rivulet.connect(workers=1, slots=2)
    yield c
    c.close()


def engine(con: rivulet.Connection):  # type: ignore[no-untyped-def]
    return con._thread.engine


def test_an_actor_failure_is_recorded_with_its_actor_fragment_and_job(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fault = Fault(times=1)
    fault.install(monkeypatch)
    setup(con)
    committed = engine(con).barrier.committed_epoch
    with (
        caplog.at_level(logging.ERROR, logger="rivulet.meta.barrier_manager"),
        pytest.raises(rivulet.Error) as info,
    ):
        con.execute("INSERT INTO t VALUES (1000, 1, %s)", [POISON])
    (actor, fragment, job) = fault.hits[0]
    assert job == job_id(con, "m_filter")
    # The statement's error names the job and what to do, but neither the internals nor
    # the values that made it fail (other clients may be told it).
    assert info.value.sqlstate == "XX000"
    assert 'streaming job "m_filter" failed' in info.value.message
    assert "injected fault" not in info.value.message
    assert f"actor {actor}" not in info.value.message
    assert info.value.hint and "rw_recovery_events" in info.value.hint
    # The log names the actor, its fragment and job, and the whole exception.
    logged = [r.getMessage() for r in caplog.records if "recovery" in r.getMessage()]
    assert any(
        f'actor {actor} (fragment {fragment}) of job {job} "m_filter" failed: RuntimeError:'
        " injected fault" in m
        for m in logged
    ), logged
    # The failed statement left nothing; the rebuilt dataflow works and agrees.
    con.execute("INSERT INTO t VALUES (1001, 2, 5)")
    assert con.execute("SELECT count(*) FROM t WHERE id = 1000").fetchone() == (0,)
    assert_oracle(con)
    rows = events(con)
    assert len(rows) == 1
    (_, reason, e_actor, e_fragment, e_job, name, epoch, attempt, backoff, duration) = rows[0]
    assert (e_actor, e_fragment, e_job, name) == (actor, fragment, job, "m_filter")
    assert reason == "RuntimeError"
    assert epoch >= committed
    assert (attempt, backoff) == (1, 0)
    assert duration is not None and duration >= 0


def test_recover_is_recorded(con: rivulet.Connection) -> None:
    setup(con)
    con.execute("RECOVER")
    ((_, reason, actor, fragment, job, name, epoch, attempt, backoff, duration),) = events(con)
    assert reason == "RECOVER"
    assert (actor, fragment, job, name) == (None, None, None, None)
    assert epoch < engine(con).barrier.committed_epoch  # RECOVER's flush came after
    assert (attempt, backoff) == (1, 0)
    assert duration is not None  # RECOVER returns once the rebuilt dataflow committed
    con.execute("INSERT INTO t VALUES (1000, 3, 3)")
    assert_oracle(con)
    # Typed as a PostgreSQL client sees them.
    types = dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = 'rw_recovery_events'"
        ).fetchall()
    )
    assert types["started_at"] == "timestamp with time zone"
    assert types["reason"] == "character varying"
    assert types["duration_ms"] == "bigint"


def test_repeated_failures_back_off(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(times=None)
    fault.install(monkeypatch)
    setup(con)
    engine(con).barrier.backoff = Backoff(initial_s=0.1, max_s=0.4, reset_after_s=60)
    for i in range(6):
        with pytest.raises(rivulet.Error, match='streaming job "m_filter" failed'):
            con.execute("INSERT INTO t VALUES (%s, 1, %s)", [2000 + i, POISON])
    rows = events(con)
    assert [r[7] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r[8] for r in rows] == [0, 100, 200, 400, 400, 400]
    # Each failure came only after the rebuild of the one before had waited its backoff.
    gaps = [b - a for a, b in zip(fault.hit_times, fault.hit_times[1:])]
    for gap, row in zip(gaps, rows):
        assert gap >= row[8] / 1000 * 0.9, (gaps, rows)
    fault.active = False
    con.execute("INSERT INTO t VALUES (3000, 1, 1)")
    assert_oracle(con)
    assert con.execute("SELECT count(*) FROM t WHERE v = %s", [POISON]).fetchone() == (0,)


def test_the_backoff_resets_after_a_healthy_period(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(times=None)
    fault.install(monkeypatch)
    setup(con)
    engine(con).barrier.backoff = Backoff(initial_s=0.1, max_s=1, reset_after_s=0.5)
    for i in range(2):
        with pytest.raises(rivulet.Error):
            con.execute("INSERT INTO t VALUES (%s, 1, %s)", [2000 + i, POISON])
    time.sleep(0.6)
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (2002, 1, %s)", [POISON])
    assert [(r[7], r[8]) for r in events(con)] == [(1, 0), (2, 100), (1, 0)]


def test_a_failure_on_every_barrier_does_not_spin_or_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs that fail as soon as they run (here: at every barrier, which the timer injects
    every 50 ms) are rebuilt less and less often; statements meanwhile fail or wait, never
    hang, and what does not touch those jobs goes on; once the cause is gone they run again
    and agree with the oracle."""
    con = rivulet.connect(workers=1, slots=2, barrier_interval_ms=50)
    try:
        setup(con)
        con.execute("CREATE TABLE other (id INT PRIMARY KEY)")
        fault = Fault(times=None, on_barriers=True)
        fault.install(monkeypatch)
        engine(con).barrier.backoff = Backoff(initial_s=0.05, max_s=0.4, reset_after_s=60)
        with contextlib.suppress(rivulet.Error):  # its own flush may fail already
            con.execute("RECOVER")  # rebuild the actors with the fault in place
        time.sleep(2.0)
        # Without backoff, about 40 rebuilds (one per barrier); with it, about eight.
        assert 4 <= len(fault.hits) <= 12, len(fault.hits)
        started = time.monotonic()
        # FLUSH waits for nothing of the failing jobs (no write to them is pending), and
        # writes outside their failure domain go on.
        con.execute("FLUSH")
        for i in range(5):
            con.execute("INSERT INTO other VALUES (%s)", [i])
        assert time.monotonic() - started < 5
        assert con.execute("SELECT count(*) FROM other").fetchone() == (5,)
        fault.active = False
        deadline = time.monotonic() + 10
        while True:  # the next rebuild runs healthy
            try:
                con.execute("INSERT INTO t VALUES (5000, 1, 1)")
                break
            except rivulet.Error:
                assert time.monotonic() < deadline
        assert_oracle(con)
        rows = events(con)
        failures = [r for r in rows if r[1] != "RECOVER"]
        assert all(r[5] == "m_filter" for r in failures)
        assert max(r[8] for r in failures) == 400
    finally:
        con.close()


def test_writes_during_a_backoff_wait_and_are_kept(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(times=2)
    fault.install(monkeypatch)
    setup(con)
    engine(con).barrier.backoff = Backoff(initial_s=1.0, max_s=1.0, reset_after_s=60)
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (2000, 1, %s)", [POISON])
    # The second failure's rebuild waits 1 s; a write meanwhile waits for it, then lands.
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (2001, 1, %s)", [POISON])
    assert engine(con).barrier.recovering
    started = time.monotonic()
    con.execute("INSERT INTO t VALUES (2002, 1, 7)")
    assert time.monotonic() - started >= 0.5
    assert con.execute("SELECT v FROM t WHERE id = 2002").fetchone() == (7,)
    assert_oracle(con)
    # So does a reschedule: it moves the rebuilt actors once they run.
    fault.times = 3
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (2003, 1, %s)", [POISON])
    assert engine(con).barrier.recovering
    con.execute("ALTER MATERIALIZED VIEW m_agg SET PARALLELISM = 1")
    con.execute("INSERT INTO t VALUES (2004, 2, 8)")
    assert_oracle(con)


def test_recover_during_a_backoff_starts_at_once(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(times=2)
    fault.install(monkeypatch)
    setup(con)
    engine(con).barrier.backoff = Backoff(initial_s=3.0, max_s=3.0, reset_after_s=60)
    for i in range(2):
        with pytest.raises(rivulet.Error):
            con.execute("INSERT INTO t VALUES (%s, 1, %s)", [2000 + i, POISON])
    assert engine(con).barrier.recovering
    started = time.monotonic()
    con.execute("RECOVER")  # asked for: does not wait out the 3 s
    assert time.monotonic() - started < 2
    rows = events(con)
    assert [(r[1], r[7], r[8]) for r in rows] == [
        ("RuntimeError", 1, 0),
        ("RuntimeError", 2, 3000),
        ("RECOVER", 1, 0),
    ]
    # The superseded recovery is over when the one that took over is.
    assert all(r[9] is not None for r in rows), rows
    con.execute("INSERT INTO t VALUES (2002, 1, 7)")
    assert_oracle(con)


def test_recovery_events_survive_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "db"
    con = rivulet.connect(path)
    setup(con)
    con.execute("RECOVER")
    fault = Fault(times=1)
    fault.install(monkeypatch)
    con.execute("RECOVER")  # the filter actors now carry the fault
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (2000, 1, %s)", [POISON])
    con.execute("FLUSH")
    before = events(con)
    con.close()
    assert [r[1] for r in before] == ["RECOVER", "RECOVER", "RuntimeError"]
    con = rivulet.connect(path)
    try:
        con.execute("FLUSH")
        after = events(con)
        assert after[:3] == before
        assert [r[:2] for r in after[3:]] == [(4, "restart")]
        con.execute("RECOVER")
        assert [r[0] for r in events(con)] == [1, 2, 3, 4, 5]
        assert_oracle(con)
    finally:
        con.close()


def test_a_restart_is_recorded_as_a_recovery(tmp_path: Path) -> None:
    """Starting on a store that committed before rebuilds its jobs from the last
    checkpoint: listed with the recoveries, reason ``restart``, with its duration once the
    first checkpoint after it is committed. A new store records nothing."""
    path = tmp_path / "db"
    con = rivulet.connect(path)
    setup(con)
    assert events(con) == []
    con.close()
    con = rivulet.connect(path)
    try:
        con.execute("INSERT INTO t VALUES (3000, 1, 1)")
        rows = con.execute(
            "SELECT reason, actor_id, job_id, attempt, backoff_ms, recovered_epoch,"
            " duration_ms FROM rw_recovery_events"
        ).fetchall()
        assert len(rows) == 1, rows
        reason, actor, job, attempt, backoff, recovered, duration = rows[0]
        assert (reason, actor, job, attempt, backoff) == ("restart", None, None, 1, 0)
        assert duration is not None and 0 <= duration < 30_000
        assert recovered >= 1
        assert_oracle(con)
    finally:
        con.close()


def test_backoff_policy() -> None:
    b = Backoff(initial_s=0.1, max_s=5.0, reset_after_s=30)
    delays = [b.next(float(i))[1] for i in range(10)]
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert b.next(100.0) == (1, 0.0)  # a healthy period resets it
    assert b.next(101.0) == (2, 0.1)


@pytest.mark.parametrize("scope", ["everything", "domain"])
@pytest.mark.parametrize("deferred", [False, True], ids=["simple", "pipeline"])
def test_a_write_placed_just_before_a_recovery_is_applied_or_fails(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch, deferred: bool, scope: str
) -> None:
    """A recovery that runs between a statement placing its rows in the dataflow and the
    statement starting to wait for their epoch (another session's RECOVER, a failing
    actor of a job reading the table) drops the rows: the statement must then fail,
    never report them committed. With ``deferred`` the wait is the pipeline's Sync (the
    extended protocol)."""
    setup(con)
    eng = engine(con)
    place = eng.runtime.write_dml
    table = job_id(con, "t")

    def recover() -> None:
        if scope == "everything":
            eng.barrier.recover(
                sql_error(ADMIN_SHUTDOWN, "the stream jobs were rebuilt by RECOVER"),
                FailureCause("RECOVER", manual=True),
            )
        else:
            actor = next(iter(eng.runtime.jobs[table].actors))
            assert eng.barrier.recover_domain(
                eng.barrier.recovery.failure_domain(actor), FailureCause("test")
            )

    def place_then_recover(*args: object) -> int:
        epoch = place(*args)
        monkeypatch.setattr(eng.runtime, "write_dml", place)
        # Runs before the statement's next step, as a failure elsewhere can.
        asyncio.get_running_loop().call_soon(recover)
        return epoch

    monkeypatch.setattr(eng.runtime, "write_dml", place_then_recover)
    session = con._session
    session.defer_commits = deferred
    try:
        con.execute("INSERT INTO t VALUES (5000, 1, 1)")
        if deferred:
            con._run(session.settle_writes())
        acknowledged = True
    except rivulet.Error:
        acknowledged = False
    finally:
        session.defer_commits = False
    assert eng.runtime.write_dml is place, "the recovery did not run"
    stored = con.execute("SELECT count(*) FROM t WHERE id = 5000").fetchone() == (1,)
    assert stored == acknowledged, "acknowledged but lost" if acknowledged else "failed but in"
    assert_oracle(con)


@pytest.mark.parametrize("statement", ["ALTER", "backfill done"])
def test_a_recovery_right_after_a_reschedules_stop_barrier_does_not_hang_it(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch, statement: str
) -> None:
    """A reschedule stops every actor with one barrier, waits for its commit, then builds
    the jobs again. A recovery (another session's RECOVER, a failing actor) that runs
    between that commit and the rebuild has already rebuilt every job from the catalog:
    the reschedule must see that and return, not wait for the recovery's actors to stop
    (they never will) while it holds the DDL lock, which hung every later DDL."""
    setup(con)
    eng = engine(con)
    inject, wait_committed = eng.barrier.inject, eng.barrier.wait_committed
    stop_epochs: list[int] = []
    recovered: list[int] = []

    def recording_inject(**kwargs):  # type: ignore[no-untyped-def]
        epoch = inject(**kwargs)
        if isinstance(kwargs.get("mutation"), StopActors):
            stop_epochs.append(epoch)
        return epoch

    async def recover_after_the_stop(epoch: int, *args, **kwargs) -> int:  # type: ignore[no-untyped-def]
        done = await wait_committed(epoch, *args, **kwargs)
        if stop_epochs and epoch == stop_epochs[0] and not recovered:
            recovered.append(epoch)
            eng.barrier.recover(
                sql_error(ADMIN_SHUTDOWN, "the stream jobs were rebuilt by RECOVER"),
                FailureCause("RECOVER", manual=True),
            )
        return done

    monkeypatch.setattr(eng.barrier, "inject", recording_inject)
    monkeypatch.setattr(eng.barrier, "wait_committed", recover_after_the_stop)
    if statement == "ALTER":
        con.execute("ALTER MATERIALIZED VIEW m_agg SET PARALLELISM = 1")
    else:
        # A backfill that ends rebuilds its job at its normal policy (here 2 actors).
        con.execute("SET streaming_parallelism_for_backfill = 1")
        con.execute("CREATE MATERIALIZED VIEW m_late AS SELECT id, v FROM t")
        con.execute("WAIT")
    assert recovered, "the recovery did not run"
    monkeypatch.undo()
    con.execute("ALTER MATERIALIZED VIEW m_filter SET PARALLELISM = 1")  # DDL goes on
    con.execute("INSERT INTO t VALUES (9000, 1, 1)")
    assert_oracle(con)
    if statement == "ALTER":
        assert actor_count(con, "m_agg") == 1
    else:
        assert con.execute("SELECT count(*) FROM m_late").fetchone() == (101,)
        assert actor_count(con, "m_late") == 2


def actor_count(con: rivulet.Connection, name: str) -> int:
    """How many actors the job's widest fragment runs."""
    row = con.execute(
        "SELECT max(f.parallelism) FROM rw_fragments f JOIN rw_streaming_jobs j"
        " ON f.table_id = j.id WHERE j.name = %s",
        [name],
    ).fetchone()
    assert row is not None
    return int(row[0])
