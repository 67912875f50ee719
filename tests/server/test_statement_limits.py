"""Long and deep statements: the size cap (54000), too deep nesting (54001), and long
statements parsed and bound off the event loop."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from conftest import ServerProcess
from wire_client import WireClient, cstring, message


def in_list(n: int) -> str:
    return ", ".join(str(i) for i in range(n))


def test_statement_longer_than_the_cap_is_refused(conn: psycopg.Connection) -> None:
    sql = "SELECT '" + "x" * (17 << 20) + "'"
    with pytest.raises(psycopg.errors.ProgramLimitExceeded) as info:
        conn.execute(sql)
    assert info.value.diag.sqlstate == "54000"
    assert info.value.diag.message_primary == (
        f"statement is too long: {len(sql)} bytes, the limit is 16777216 bytes"
    )
    assert "max_statement_bytes" in (info.value.diag.message_hint or "")
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_prepared_statement_longer_than_the_cap_is_refused(conn: psycopg.Connection) -> None:
    """Over the extended protocol (a Parse message) the statement is refused the same
    way, and the connection goes on."""
    sql = "SELECT %s::text, '" + "x" * (17 << 20) + "'"
    with pytest.raises(psycopg.errors.ProgramLimitExceeded) as info:
        conn.execute(sql, ["a"])
    assert info.value.diag.message_primary.startswith("statement is too long: ")
    assert conn.execute("SELECT %s::int + 1", [1]).fetchone() == (2,)


def test_the_cap_is_a_system_parameter(server: ServerProcess) -> None:
    with server.connect() as con:
        con.execute("ALTER SYSTEM SET max_statement_bytes = 4096")
        try:
            assert ("max_statement_bytes", "4096", "true") in con.execute(
                "SHOW PARAMETERS"
            ).fetchall()
            with pytest.raises(psycopg.errors.ProgramLimitExceeded) as info:
                con.execute("SELECT 1 WHERE 1 IN (" + in_list(2000) + ")")
            assert "the limit is 4096 bytes" in str(info.value)
            # The simple protocol too; multibyte characters count as bytes.
            client = WireClient(server.host, server.port)
            client.send(message(b"Q", cstring("SELECT '" + "é" * 2100 + "'")))
            answer = client.read_until(b"Z")
            error = next(body for kind, body in answer if kind == b"E")
            assert b"C54000\0" in error and b"4209 bytes, the limit is 4096 bytes" in error
            client.close()
            assert con.execute("SELECT '" + "x" * 3000 + "'").fetchone() == ("x" * 3000,)
        finally:
            con.execute("ALTER SYSTEM SET max_statement_bytes = DEFAULT")
        # Back to the default, for every session: the statement refused above goes through.
        assert ("max_statement_bytes", "16777216", "true") in con.execute(
            "SHOW PARAMETERS"
        ).fetchall()
        assert con.execute("SELECT 1 WHERE 1 IN (" + in_list(2000) + ")").fetchone() == (1,)
    with server.connect() as other:
        assert other.execute("SELECT '" + "é" * 2100 + "'").fetchone() == ("é" * 2100,)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + "(" * 100_000 + "1" + ")" * 100_000,
        "SELECT " + "+".join("1" for _ in range(100_000)),
        "SELECT " + "(" * 1000 + "1" + ")" * 1000,  # short: parsed on the event loop
    ],
    ids=["parentheses-100k", "chain-100k", "parentheses-1000"],
)
def test_too_deep_statements_fail_with_54001(conn: psycopg.Connection, sql: str) -> None:
    with pytest.raises(psycopg.errors.StatementTooComplex) as info:
        conn.execute(sql)
    assert info.value.diag.sqlstate == "54001"
    assert info.value.diag.message_primary == "stack depth limit exceeded"
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_too_deep_statement_in_the_simple_protocol(server: ServerProcess) -> None:
    client = WireClient(server.host, server.port)
    try:
        client.send(message(b"Q", cstring("SELECT " + "(" * 100_000 + "1" + ")" * 100_000)))
        answer = client.read_until(b"Z")
        error = next(body for kind, body in answer if kind == b"E")
        assert b"C54001\0" in error and b"Mstack depth limit exceeded\0" in error
        client.send(message(b"Q", cstring("SELECT 1")))
        assert any(kind == b"D" for kind, _ in client.read_until(b"Z"))
    finally:
        client.close()


def test_moderate_nesting_and_chains_work(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT " + "(" * 30 + "1" + ")" * 30).fetchone() == (1,)
    assert conn.execute("SELECT " + "+".join("1" for _ in range(500))).fetchone() == (500,)


def test_a_2mb_statement_does_not_stall_other_clients(server: ServerProcess) -> None:
    """Parsing 2 MB takes sqlglot seconds: on a thread, while others are served."""
    sql = "SELECT count(*) FROM no_such_table WHERE v IN (" + in_list(300_000) + ")"
    assert len(sql) > 2_000_000
    outcome: list[BaseException] = []
    with server.connect() as big, server.connect() as other:

        def run_big() -> None:
            try:
                big.execute(sql)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run_big)
        started = time.monotonic()
        thread.start()
        pings = []
        while thread.is_alive() and time.monotonic() - started < 60:
            t0 = time.perf_counter()
            assert other.execute("SELECT 1").fetchone() == (1,)
            pings.append(time.perf_counter() - t0)
            time.sleep(0.01)
        thread.join(60)
        elapsed = time.monotonic() - started
    assert isinstance(outcome[0], psycopg.errors.UndefinedTable)
    assert elapsed > 2, "the statement was quick: it tested nothing"
    assert len(pings) > 20
    assert max(pings) < 2.0, f"SELECT 1 took {max(pings):.1f} s while the big statement parsed"


def test_a_long_statement_sees_its_session_consistently(server: ServerProcess) -> None:
    """Bound on a thread while other sessions change the catalog: it sees its own
    settings and the tables it names, as if bound on the event loop."""
    sql = (
        "SELECT current_setting('application_name'), count(*) FROM consistent_t"
        f" WHERE v IN ({in_list(40_000)})"
    )
    assert len(sql) > 200_000
    stop = threading.Event()

    def churn() -> None:
        with server.connect() as ddl:
            i = 0
            while not stop.is_set():
                ddl.execute(f"CREATE TABLE churn_{i} (v INT)")
                ddl.execute(f"DROP TABLE churn_{i}")
                i += 1

    with server.connect() as con:
        con.execute("CREATE TABLE consistent_t (v INT)")
        con.execute("INSERT INTO consistent_t SELECT x FROM generate_series(1, 100) AS t(x)")
        con.execute("SET application_name = 'mine'")
        churner = threading.Thread(target=churn)
        churner.start()
        try:
            for _ in range(3):
                assert con.execute(sql).fetchone() == ("mine", 100)
        finally:
            stop.set()
            churner.join(30)
