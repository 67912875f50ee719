"""Creating jobs over pgwire, as operators drive them: background DDL, SHOW JOBS progress,
the refusal rules for backfills that cannot move, DEFERRED targets applied by themselves
when the backfill completes, CANCEL JOBS, and a foreground CREATE cancelled by the
client's cancel request."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

ROWS = 200_000
QUERY = "SELECT v, count(*) AS n, sum(id) AS s FROM t GROUP BY v"

NOT_MOVABLE = (
    "Cannot alter the job {id} because its creating backfill contains a scan type that"
    " does not support online rescheduling"
)
BLOCKED = (
    "Cannot alter the job {id} because it is blocked by creating unreschedulable backfill jobs"
)


def progress(c: psycopg.Connection, job: int) -> tuple[int, int]:
    rows = c.execute("SHOW JOBS").fetchall()
    row = next(r for r in rows if int(r[0]) == job)
    consumed, total = row[3].split("(")[1].rstrip(")").split("/")
    return int(consumed), int(total)


def job_state(c: psycopg.Connection, job: int) -> tuple[str, str, str, str]:
    row = c.execute(
        "SELECT status, parallelism, target_parallelism, reconcile_status FROM rw_streaming_jobs"
        " WHERE id = %s",
        [job],
    ).fetchone()
    assert row is not None
    return row


def wait_created(c: psycopg.Connection, job: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while job_state(c, job)[0] != "CREATED":
        assert time.monotonic() < deadline, "the backfill did not finish"
        time.sleep(0.1)


def assert_oracle(c: psycopg.Connection) -> None:
    c.execute("FLUSH")
    got = sorted(c.execute("SELECT * FROM m").fetchall())
    assert got == sorted(c.execute(QUERY).fetchall())


@pytest.fixture
def srv(server_factory):  # type: ignore[no-untyped-def]
    server = server_factory(args=("--workers", "1", "--slots", "2"))
    with server.connect() as c:
        c.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        c.execute(f"INSERT INTO t SELECT i, i % 97 FROM generate_series(1, {ROWS}) AS g(i)")
    return server


def test_the_seed_scenario_with_no_shuffle(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        c.execute("SET background_ddl = true")
        c.execute("SET streaming_parallelism = 1")
        c.execute(
            "CREATE MATERIALIZED VIEW m WITH (backfill_type = 'no_shuffle',"
            f" backfill_rate_limit = 20000) AS {QUERY}"
        )
        job = c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        table = c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 't'").fetchone()[0]
        assert job_state(c, job)[0] == "CREATING"
        assert c.execute("SELECT create_type, backfill_type FROM rw_ddl_progress").fetchall() == [
            ("BACKGROUND", "no_shuffle")
        ]
        c.execute("INSERT INTO t VALUES (-1, 5), (-2, 6)")  # writes go on meanwhile

        for stmt in (
            "ALTER MATERIALIZED VIEW m SET PARALLELISM = 2",
            "ALTER MATERIALIZED VIEW m SET BACKFILL_PARALLELISM = 2",
        ):
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
                c.execute(stmt)
            assert info.value.diag.message_primary == NOT_MOVABLE.format(id=job)
            assert info.value.diag.sqlstate == "55000"
            hint = info.value.diag.message_hint or ""
            assert "SHOW JOBS" in hint and "DEFERRED" in hint and "streaming_parallelism" in hint
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
            c.execute("ALTER TABLE t SET PARALLELISM = 2")
        assert info.value.diag.message_primary == BLOCKED.format(id=table)
        assert f"job {job}" in (info.value.diag.message_hint or "")

        c.execute("ALTER MATERIALIZED VIEW m SET PARALLELISM = 2 DEFERRED")
        c.execute("ALTER TABLE t SET PARALLELISM = 2 DEFERRED")
        assert job_state(c, job) == ("CREATING", "1", "2", "pending")
        assert job_state(c, table)[2:] == ("2", f"blocked by job {job}")
        assert c.execute(
            "SELECT online_reschedulable FROM rw_fragments WHERE table_id = %s"
            " AND scan_type = 'no_shuffle'",
            [job],
        ).fetchall() == [(False,)]

        # Progress only moves forward; nobody acts when the backfill ends.
        first = progress(c, job)
        time.sleep(1.0)
        later = progress(c, job)
        assert later[0] >= first[0] and later[1] >= ROWS
        c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
        wait_created(c, job)
        assert job_state(c, job) == ("CREATED", "2", "2", "in_sync")
        assert job_state(c, table)[1:] == ("2", "2", "in_sync")
        live = c.execute(
            "SELECT DISTINCT parallelism FROM rw_fragments WHERE table_id = %s", [job]
        ).fetchall()
        assert live == [(2,)]
        assert c.execute("SHOW JOBS").fetchall() == []
        c.execute("INSERT INTO t VALUES (-3, 7)")
        assert_oracle(c)


def test_arrangement_moves_online_mid_backfill(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        c.execute("SET background_ddl = true")
        c.execute("SET backfill_rate_limit = 30000")
        c.execute(f"CREATE MATERIALIZED VIEW m WITH (backfill_type = 'arrangement') AS {QUERY}")
        job = c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        seen = 0
        for i, p in enumerate(["2", "1", "3", "2"]):
            c.execute(f"ALTER MATERIALIZED VIEW m SET PARALLELISM = {p}")
            c.execute(f"INSERT INTO t VALUES ({-10 - i}, {i})")
            consumed, _ = progress(c, job)
            assert consumed >= seen, "backfill progress went backwards"
            seen = consumed
            assert job_state(c, job)[:2] == ("CREATING", p)
        c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
        c.execute("WAIT")
        assert job_state(c, job) == ("CREATED", "2", "2", "in_sync")
        assert_oracle(c)


def test_backfill_parallelism_switches_to_the_policy_when_done(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        c.execute("SET background_ddl = true")
        c.execute("SET streaming_parallelism = 1")
        c.execute("SET streaming_parallelism_for_backfill = 2")
        c.execute("SET backfill_rate_limit = 50000")
        c.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
        job = c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        row = c.execute(
            "SELECT backfill_parallelism, parallelism FROM rw_streaming_jobs WHERE id = %s", [job]
        ).fetchone()
        assert row == ("2", "1")
        assert c.execute(
            "SELECT max(parallelism) FROM rw_fragments WHERE table_id = %s", [job]
        ).fetchone() == (2,)
        c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = 0")  # paused
        paused = progress(c, job)[0]
        time.sleep(0.5)
        assert progress(c, job)[0] - paused <= 60_000  # at most what was in flight
        c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
        c.execute("WAIT")
        assert c.execute(
            "SELECT max(parallelism) FROM rw_fragments WHERE table_id = %s", [job]
        ).fetchone() == (1,)
        assert_oracle(c)


def test_cancel_jobs_leaves_no_trace(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        c.execute("SET background_ddl = true")
        c.execute("SET backfill_rate_limit = 1000")
        c.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
        job = c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0]
        with pytest.raises(psycopg.errors.UndefinedObject):
            c.execute("CANCEL JOBS 999999")
        c.execute(f"CANCEL JOBS {job}")
        assert c.execute("SELECT count(*) FROM rw_streaming_jobs WHERE name = 'm'").fetchone() == (
            0,
        )
        assert c.execute("SHOW JOBS").fetchall() == []
        c.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")  # the name is free again


def test_a_foreground_create_is_cancelled_by_the_client(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        c.execute("SET backfill_rate_limit = 1000")
        done: list[BaseException | None] = []

        def create() -> None:
            try:
                c.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
                done.append(None)
            except BaseException as exc:
                done.append(exc)

        thread = threading.Thread(target=create)
        thread.start()
        with srv.connect() as other:
            deadline = time.monotonic() + 30
            # rw_ddl_progress is written with each epoch; SHOW JOBS reads it live.
            while not other.execute("SELECT create_type FROM rw_ddl_progress").fetchall():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert other.execute("SHOW JOBS").fetchall()[0][2] == "FOREGROUND"
            c.cancel()
            thread.join(30)
            assert done and isinstance(done[0], psycopg.errors.QueryCanceled)
            deadline = time.monotonic() + 10
            while other.execute(
                "SELECT count(*) FROM rw_streaming_jobs WHERE name = 'm'"
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, "the cancelled job is still there"
                time.sleep(0.05)


def test_a_foreground_create_reports_its_progress_as_notices(srv) -> None:  # type: ignore[no-untyped-def]
    with srv.connect() as c:
        notices: list[tuple[float, str]] = []
        c.add_notice_handler(lambda d: notices.append((time.monotonic(), d.message_primary)))
        c.execute("SET backfill_rate_limit = 40000")
        c.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
        returned = time.monotonic()
        progress_notices = [(t, msg) for t, msg in notices if "backfill" in msg]
        # Each notice arrived while the statement ran, not all at its end.
        assert len(progress_notices) >= 2, notices
        assert progress_notices[0][0] < returned - 0.5
        percents = []
        for _, msg in progress_notices:
            assert msg.startswith('materialized view "m" backfill: '), msg
            percents.append(float(msg.split(": ")[1].split("%")[0]))
            assert msg.endswith(f"/{ROWS})"), msg
        assert percents == sorted(percents)
        assert (
            job_state(
                c, int(c.execute("SELECT id FROM rw_streaming_jobs WHERE name = 'm'").fetchone()[0])
            )[0]
            == "CREATED"
        )
        assert_oracle(c)
        # Quiet clients are not told.
        notices.clear()
        c.execute("SET client_min_messages = warning")
        c.execute(f"CREATE MATERIALIZED VIEW m2 AS {QUERY}")
        assert notices == []
