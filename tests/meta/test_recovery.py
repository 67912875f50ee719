"""In-process recovery: an exception in an actor (injected here into the filter executor)
or RECOVER rebuilds every job from the last checkpoint. Afterwards every MV equals its
query (the oracle); each recovery is logged with the actor, fragment and job it hit and
listed in rw_recovery_events; failures that repeat back off instead of spinning."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rivulet
from rivulet.common.chunk import StreamChunk
from rivulet.meta.recovery import Backoff
from rivulet.stream.executors.filter import FilterExecutor
from rivulet.stream.message import Barrier

POISON = 666
MVS = {
    "m_filter": "SELECT id, k, v FROM t WHERE v >= 0",
    "m_agg": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
}
EVENT_COLUMNS = (
    "id, reason, actor_id, fragment_id, job_id, job_name, recovered_epoch, attempt,"
    " backoff_ms, duration_ms"
)


class Fault:
    """Makes the filter executor raise: on a chunk holding ``POISON`` in column v (at
    most ``times`` times; None: every time), or, with ``on_barriers``, on every barrier
    while ``active``. Records (actor, fragment, job) of each actor it made fail."""

    def __init__(self, times: int | None = 1, *, on_barriers: bool = False) -> None:
        self.times = times
        self.on_barriers = on_barriers
        self.active = True
        self.hits: list[tuple[int, int, int]] = []
        self.hit_times: list[float] = []

    def fires(self, msg: object) -> bool:
        if not self.active or (self.times is not None and len(self.hits) >= self.times):
            return False
        if self.on_barriers:
            return isinstance(msg, Barrier)
        return (
            isinstance(msg, StreamChunk)
            and "v" in msg.data.column_names
            and POISON in msg.data.column("v").to_pylist()
        )

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = FilterExecutor.execute
        fault = self

        async def execute(self):  # type: ignore[no-untyped-def]
            async for msg in original(self):
                if fault.fires(msg):
                    fault.hits.append((self.ctx.actor_id, self.ctx.fragment_id, self.ctx.job_id))
                    fault.hit_times.append(time.monotonic())
                    raise RuntimeError("injected fault")
                yield msg

        monkeypatch.setattr(FilterExecutor, "execute", execute)


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
    # The statement's error names the actor, its fragment and job, and what to do.
    assert info.value.sqlstate == "XX000"
    assert f'actor {actor} (fragment {fragment}) of job {job} "m_filter" failed' in str(
        info.value.message
    )
    assert "injected fault" in info.value.message
    assert info.value.hint and "rw_recovery_events" in info.value.hint
    # So does the log.
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
    assert reason == "RuntimeError: injected fault"
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
        with pytest.raises(rivulet.Error, match="injected fault"):
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
    """A dataflow that fails as soon as it runs (here: at every barrier, which the timer
    injects every 50 ms) is rebuilt less and less often; statements meanwhile fail or
    wait, never hang; once the cause is gone it runs again and agrees with the oracle."""
    con = rivulet.connect(workers=1, slots=2, barrier_interval_ms=50)
    try:
        setup(con)
        fault = Fault(times=None, on_barriers=True)
        fault.install(monkeypatch)
        engine(con).barrier.backoff = Backoff(initial_s=0.05, max_s=0.4, reset_after_s=60)
        with contextlib.suppress(rivulet.Error):  # its own flush may fail already
            con.execute("RECOVER")  # rebuild the actors with the fault in place
        time.sleep(2.0)
        # Without backoff, about 40 rebuilds (one per barrier); with it, about eight.
        assert 4 <= len(fault.hits) <= 12, len(fault.hits)
        started = time.monotonic()
        with pytest.raises(rivulet.Error):
            con.execute("FLUSH")
        assert time.monotonic() - started < 5
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
        ("RuntimeError: injected fault", 1, 0),
        ("RuntimeError: injected fault", 2, 3000),
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
    assert [r[1] for r in before] == ["RECOVER", "RECOVER", "RuntimeError: injected fault"]
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
