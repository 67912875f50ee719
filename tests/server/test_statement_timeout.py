"""statement_timeout for every kind of statement, and idle_in_transaction_session_timeout
(over pgwire, with psycopg)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from conftest import ServerProcess

HEAVY = (
    "SELECT count(*) FROM generate_series(1, 300000) AS a(x), generate_series(1, 300000)"
    " AS b(y) WHERE x + y = 7"
)
TIMEOUT_TEXT = "canceling statement due to statement timeout"


@pytest.fixture
def timed(server: ServerProcess) -> Iterator[psycopg.Connection]:
    """A connection whose statements may run 300 ms."""
    with server.connect() as con:
        con.execute("SET statement_timeout = 300")
        yield con


def assert_times_out(con: psycopg.Connection, sql: str, params: list[object] | None = None) -> None:
    started = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled) as info:
        con.execute(sql, params)
    assert info.value.diag.sqlstate == "57014"
    assert info.value.diag.message_primary == TIMEOUT_TEXT
    assert "statement_timeout is 300 ms" in (info.value.diag.message_hint or "")
    assert time.monotonic() - started < 10
    assert con.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_select(timed: psycopg.Connection) -> None:
    assert_times_out(timed, HEAVY)
    # Extended protocol (a parameter) too.
    assert_times_out(timed, HEAVY.replace("= 7", "= %s"), [7])


def test_a_streamed_result_is_timed_while_it_is_sent(timed: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.QueryCanceled) as info:
        timed.execute("SELECT x, repeat('x', 100) FROM generate_series(1, 100000000) AS t(x)")
    assert info.value.diag.message_primary == TIMEOUT_TEXT


def test_statements_within_the_timeout_succeed(timed: psycopg.Connection) -> None:
    assert timed.execute("SELECT count(*) FROM generate_series(1, 1000)").fetchone() == (1000,)
    timed.execute("SET statement_timeout = 0")
    assert timed.execute("SHOW statement_timeout").fetchone() == ("0",)


def test_set_in_the_startup_packet(server: ServerProcess) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, options="-c statement_timeout=300") as con:
        assert con.execute("SHOW statement_timeout").fetchone() == ("300",)
        assert_times_out(con, HEAVY)


def test_insert_select_changes_nothing(timed: psycopg.Connection, table_name: str) -> None:
    timed.execute(f"CREATE TABLE {table_name} (v BIGINT)")
    timed.execute(f"INSERT INTO {table_name} VALUES (1)")
    assert_times_out(
        timed,
        f"INSERT INTO {table_name} SELECT count(*) FROM generate_series(1, 300000) AS a(x),"
        " generate_series(1, 300000) AS b(y) WHERE x + y = 7",
    )
    assert_times_out(
        timed, f"DELETE FROM {table_name} WHERE v IN (SELECT x FROM ({HEAVY}) AS h(x))"
    )
    time.sleep(0.5)
    assert timed.execute(f"SELECT * FROM {table_name}").fetchall() == [(1,)]


@pytest.fixture
def slow_commits(server: ServerProcess, table_name: str) -> Iterator[str]:
    """A table whose every row joins a million rows in an MV: a write to it takes
    seconds to commit. Yields its name."""
    big, src = f"{table_name}_big", f"{table_name}_src"
    with server.connect() as con:
        con.execute(f"CREATE TABLE {big} (k INT, v INT)")
        con.execute(f"INSERT INTO {big} SELECT 1, x FROM generate_series(1, 1000000) AS t(x)")
        con.execute(f"CREATE TABLE {src} (k INT)")
        con.execute(
            f"CREATE MATERIALIZED VIEW {table_name}_mv AS SELECT count(*) AS n"
            f" FROM {src} JOIN {big} ON {src}.k = {big}.k"
        )
    yield src


def test_write_waiting_for_its_commit(timed: psycopg.Connection, slow_commits: str) -> None:
    """A write that reached the dataflow cannot be taken back: the statement fails and
    says so, and its rows are applied when their epoch commits."""
    with pytest.raises(psycopg.errors.QueryCanceled) as info:
        timed.execute(f"INSERT INTO {slow_commits} SELECT 1 FROM generate_series(1, 30)")
    diag = info.value.diag
    assert diag.message_primary == TIMEOUT_TEXT
    assert f'changes to table "{slow_commits}" had already been handed to the dataflow' in (
        diag.message_detail or ""
    )
    assert "they become visible when that epoch commits" in (diag.message_detail or "")
    timed.execute("SET statement_timeout = 0")
    timed.execute("FLUSH")
    assert timed.execute(f"SELECT count(*) FROM {slow_commits}").fetchone() == (30,)


def test_flush(server: ServerProcess, timed: psycopg.Connection, slow_commits: str) -> None:
    with server.connect() as writer:
        slow = threading.Thread(
            target=writer.execute,
            args=(f"INSERT INTO {slow_commits} SELECT 1 FROM generate_series(1, 30)",),
        )
        slow.start()
        time.sleep(0.3)
        try:
            assert_times_out(timed, "FLUSH")
        finally:
            slow.join(120)


def test_copy_from_stdin_changes_nothing(timed: psycopg.Connection, table_name: str) -> None:
    timed.execute(f"CREATE TABLE {table_name} (v INT)")
    with (
        pytest.raises(psycopg.errors.QueryCanceled) as info,
        timed.cursor().copy(f"COPY {table_name} FROM STDIN") as copy,
    ):
        for i in range(6):
            copy.write(f"{i}\n")
            time.sleep(0.1)
    assert info.value.diag.message_primary == TIMEOUT_TEXT
    assert timed.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (0,)


def test_copy_to_stdout(timed: psycopg.Connection) -> None:
    with (
        pytest.raises(psycopg.errors.QueryCanceled) as info,
        timed.cursor().copy(f"COPY ({HEAVY}) TO STDOUT") as copy,
    ):
        for _ in copy:
            pass
    assert info.value.diag.message_primary == TIMEOUT_TEXT
    assert timed.execute("SELECT 1").fetchone() == (1,)


def test_create_materialized_view_backfill(timed: psycopg.Connection, table_name: str) -> None:
    """A foreground CREATE waiting for its backfill: timed out, the view is gone."""
    timed.execute(f"CREATE TABLE {table_name} (v INT)")
    timed.execute(f"INSERT INTO {table_name} SELECT x FROM generate_series(1, 5000) AS t(x)")
    timed.execute("SET backfill_rate_limit = 100")
    assert_times_out(
        timed, f"CREATE MATERIALIZED VIEW {table_name}_mv AS SELECT v FROM {table_name}"
    )
    deadline = time.monotonic() + 10
    while timed.execute(
        "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = %s", [f"{table_name}_mv"]
    ).fetchone() != (0,):
        assert time.monotonic() < deadline, "the timed-out view stayed"
        time.sleep(0.1)


def test_wait(timed: psycopg.Connection, table_name: str) -> None:
    timed.execute(f"CREATE TABLE {table_name} (v INT)")
    timed.execute(f"INSERT INTO {table_name} SELECT x FROM generate_series(1, 5000) AS t(x)")
    timed.execute("SET backfill_rate_limit = 100")
    timed.execute("SET background_ddl = true")
    timed.execute(f"CREATE MATERIALIZED VIEW {table_name}_mv AS SELECT v FROM {table_name}")
    try:
        assert_times_out(timed, "WAIT")
    finally:
        (job,) = timed.execute(  # type: ignore[misc]
            "SELECT oid FROM pg_catalog.pg_class WHERE relname = %s", [f"{table_name}_mv"]
        ).fetchone()
        timed.execute(f"CANCEL JOBS {job}")


def test_idle_in_transaction_session_timeout(server: ServerProcess) -> None:
    with server.connect() as con:
        con.execute("SET idle_in_transaction_session_timeout = 300")
        time.sleep(0.6)  # idle outside a transaction block: nothing happens
        assert con.execute("SELECT 1").fetchone() == (1,)
        pid = con.info.backend_pid
        con.execute("BEGIN")
        time.sleep(1.0)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as info:
            con.execute("SELECT 1")
        assert info.value.diag.sqlstate == "25P03"
        assert info.value.diag.severity == "FATAL"
        assert str(info.value) == "terminating connection due to idle-in-transaction timeout"
        assert con.closed
    with server.connect() as other:
        assert other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]
        ).fetchone() == (0,)
