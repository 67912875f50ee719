"""pg_stat_activity lists every session; pg_cancel_backend and pg_terminate_backend
signal them (PostgreSQL's semantics)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from conftest import ServerFactory, ServerProcess

HEAVY = (
    "SELECT count(*) FROM generate_series(1, 300000) AS a(x), generate_series(1, 300000)"
    " AS b(y) WHERE x + y = 7"
)


@pytest.fixture
def own_server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory()


def run_in_thread(conn: psycopg.Connection, sql: str) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(conn.execute(sql).fetchall())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_pg_stat_activity_lists_every_session(own_server: ServerProcess) -> None:
    with (
        own_server.connect() as me,
        own_server.connect(application_name="busy") as busy,
        own_server.connect() as idle,
        own_server.connect() as in_tx,
    ):
        in_tx.execute("BEGIN")
        in_tx.execute("SELECT 1")
        thread, outcome = run_in_thread(busy, HEAVY)
        try:
            wait_for(
                lambda: (
                    me.execute(
                        "SELECT state FROM pg_stat_activity WHERE pid = %s", [busy.info.backend_pid]
                    ).fetchone()
                    == ("active",)
                )
            )
            rows = me.execute(
                "SELECT pid, usename, datname, application_name, client_addr, client_port,"
                " backend_start <= now(), coalesce(query_start >= backend_start, true), state, query,"
                " backend_type, xact_start IS NOT NULL"
                " FROM pg_stat_activity ORDER BY pid"
            ).fetchall()
        finally:
            busy.cancel_safe()
            thread.join(30)
        by_pid = {r[0]: r for r in rows}
        assert set(by_pid) == {c.info.backend_pid for c in (me, busy, idle, in_tx)}
        for conn in (me, busy, idle, in_tx):
            row = by_pid[conn.info.backend_pid]
            assert row[1:3] == ("root", "dev")
            assert row[4] == "127.0.0.1"
            assert isinstance(row[5], int) and row[5] > 0
            assert row[6] is True and row[7] is True
            assert row[10] == "client backend"
        assert by_pid[busy.info.backend_pid][3] == "busy"
        assert by_pid[busy.info.backend_pid][8:10] == ("active", HEAVY)
        assert by_pid[me.info.backend_pid][8] == "active"
        assert by_pid[me.info.backend_pid][9].startswith("SELECT pid, usename")
        assert by_pid[idle.info.backend_pid][8] == "idle"
        assert by_pid[idle.info.backend_pid][11] is False
        assert by_pid[in_tx.info.backend_pid][8:10] == ("idle in transaction", "SELECT 1")
        assert by_pid[in_tx.info.backend_pid][11] is True
        assert isinstance(outcome[0], psycopg.errors.QueryCanceled)
        with pytest.raises(psycopg.errors.UndefinedTable):
            in_tx.execute("SELECT * FROM no_such_table")
        assert me.execute(
            "SELECT state FROM pg_stat_activity WHERE pid = %s", [in_tx.info.backend_pid]
        ).fetchone() == ("idle in transaction (aborted)",)
        in_tx.execute("ROLLBACK")
        # The client port is the one the client connected from.
        (port,) = idle.execute(  # type: ignore[misc]
            "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
        import socket

        sock = socket.socket(fileno=idle.pgconn.socket)
        try:
            assert sock.getsockname()[1] == port
        finally:
            sock.detach()


def test_pg_cancel_backend(own_server: ServerProcess) -> None:
    with own_server.connect() as me, own_server.connect() as busy:
        thread, outcome = run_in_thread(busy, HEAVY)
        pid = busy.info.backend_pid
        wait_for(
            lambda: (
                me.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid = %s",
                    [pid],
                ).fetchone()
                == (1,)
            )
        )
        started = time.monotonic()
        assert me.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
            " WHERE query LIKE 'SELECT count(*) FROM generate_series%' AND pid <> pg_backend_pid()"
        ).fetchall() == [(True,)]
        thread.join(10)
        assert time.monotonic() - started < 5
        error = outcome[0]
        assert isinstance(error, psycopg.errors.QueryCanceled)
        assert error.diag.message_primary == "canceling statement due to user request"
        # The cancelled session goes on.
        assert busy.execute("SELECT 2").fetchone() == (2,)
        # No such session: false (an idle one is signalled, and nothing happens to it).
        assert me.execute("SELECT pg_cancel_backend(987654)").fetchone() == (False,)
        assert me.execute("SELECT pg_cancel_backend(%s)", [pid]).fetchone() == (True,)
        assert busy.execute("SELECT 3").fetchone() == (3,)
        assert me.execute("SELECT pg_cancel_backend(NULL)").fetchone() == (None,)
        # Cancelling itself cancels the statement that asks, as in PostgreSQL.
        with pytest.raises(psycopg.errors.QueryCanceled):
            me.execute("SELECT pg_cancel_backend(pg_backend_pid())")
        assert me.execute("SELECT 4").fetchone() == (4,)


def test_pg_terminate_backend(own_server: ServerProcess) -> None:
    with own_server.connect() as me, own_server.connect() as busy, own_server.connect() as idle:
        thread, outcome = run_in_thread(busy, HEAVY)
        pid = busy.info.backend_pid
        wait_for(
            lambda: (
                me.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
                == ("active",)
            )
        )
        assert me.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        thread.join(10)
        error = outcome[0]
        assert isinstance(error, psycopg.errors.AdminShutdown)
        assert error.diag.sqlstate == "57P01"
        assert str(error) == "terminating connection due to administrator command"
        assert busy.closed
        # An idle session is ended too.
        assert me.execute(
            "SELECT pg_terminate_backend(%s)", [idle.info.backend_pid]
        ).fetchone() == (True,)
        with pytest.raises(psycopg.errors.AdminShutdown):
            idle.execute("SELECT 1")
        wait_for(lambda: me.execute("SELECT count(*) FROM pg_stat_activity").fetchone() == (1,))
        assert me.execute("SELECT pg_terminate_backend(987654)").fetchone() == (False,)
        with pytest.raises(psycopg.errors.UndefinedFunction):
            me.execute("SELECT pg_terminate_backend()")


def test_embedded_sessions_are_listed_and_signalled() -> None:
    import rivulet

    a = rivulet.connect()
    try:
        cur = a.execute("SELECT pid, client_addr, state, query FROM pg_stat_activity ORDER BY pid")
        rows = cur.fetchall()
        assert len(rows) == 1
        pid, addr, state, query = rows[0]
        assert (addr, state) == (None, "active") and query.startswith("SELECT pid")
        assert a.execute("SELECT pg_terminate_backend(%s)", [pid + 1000]).fetchone() == (False,)
        with pytest.raises(rivulet.OperationalError) as info:
            a.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        assert info.value.sqlstate in ("57014", "57P01")
        with pytest.raises(rivulet.OperationalError) as info:
            a.execute("SELECT 1")
        assert info.value.sqlstate == "57P01"
    finally:
        a.close()
