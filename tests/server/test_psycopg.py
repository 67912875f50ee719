"""psycopg 3 against the real server: simple and extended protocol, parameters in text
and binary, type round trips, prepared statements, errors, notices and transactions."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import DiagnosticField as DiagField
from psycopg.types.json import Jsonb

UTC = dt.UTC


def test_simple_query_several_statements(conn: psycopg.Connection, table_name: str) -> None:
    cur = conn.cursor()
    # No parameters: psycopg sends this as one simple Query message.
    cur.execute(
        f"create table {table_name} (id int, name varchar); "
        f"insert into {table_name} values (1, 'a'), (2, 'b'); "
        f"select name from {table_name} order by id"
    )
    assert cur.statusmessage == "CREATE_TABLE"
    assert cur.nextset()
    assert cur.statusmessage == "INSERT 0 2"
    assert cur.nextset()
    assert cur.fetchall() == [("a",), ("b",)]
    assert not cur.nextset()


def test_empty_query(conn: psycopg.Connection) -> None:
    cur = conn.execute("")
    assert cur.pgresult is not None
    assert cur.pgresult.status == psycopg.pq.ExecStatus.EMPTY_QUERY


def test_server_side_parameters(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id bigint, name varchar, score double)")
    with conn.cursor() as cur:
        cur.executemany(
            f"insert into {table_name} values (%s, %s, %s)",
            [(1, "ann", 1.5), (2, "bob", None), (3, None, -2.25)],
        )
        cur.execute(f"select id, name, score from {table_name} where id >= %s order by id", [2])
        assert cur.fetchall() == [(2, "bob", None), (3, None, -2.25)]
        assert cur.rowcount == 2
        cur.execute("select %s::int + %s::int, %s || 'x'", [2, 3, "a"])
        assert cur.fetchone() == (5, "ax")


def test_binary_parameters_and_results(conn: psycopg.Connection) -> None:
    cur = conn.cursor(binary=True)
    cur.execute(
        "select %s::bigint, %s::double precision, %s::varchar, %s::boolean, %s::bytea",
        [2**40, 0.1, "héllo", True, b"\x00\xff"],
        binary=True,
    )
    assert cur.fetchone() == (2**40, 0.1, "héllo", True, b"\x00\xff")
    assert cur.pgresult is not None
    assert cur.pgresult.fformat(0) == 1  # binary results were asked for and sent


_ROW = (
    True,
    -12,
    123456,
    -(2**62),
    1.25,
    -1.0e-300,
    decimal.Decimal("12345.678901"),
    "naïve ☃ text",
    dt.date(2024, 2, 29),
    dt.time(23, 59, 58, 999999),
    dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
    dt.datetime(2024, 1, 2, 3, 4, 5, 600, tzinfo=UTC),
    dt.timedelta(days=3, hours=4, minutes=5, seconds=6, microseconds=7),
    {"a": [1, 2, {"b": None}], "c": "d"},
    b"\x00\x01\xfe\xff",
)
_COLUMNS = (
    "bo boolean, sm smallint, i int, bi bigint, r real, d double precision, n numeric, "
    "v varchar, da date, ti time, ts timestamp, tz timestamptz, iv interval, j jsonb, by_ bytea"
)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_types_round_trip(conn: psycopg.Connection, table_name: str, binary: bool) -> None:
    conn.execute(f"create table {table_name} ({_COLUMNS})")
    params = [*_ROW[:13], Jsonb(_ROW[13]), _ROW[14]]
    placeholders = ", ".join(["%s"] * len(params))
    cur = conn.cursor(binary=binary)
    cur.execute(f"insert into {table_name} values ({placeholders})", params, binary=binary)
    cur.execute(f"insert into {table_name} (i) values (%s)", [None], binary=binary)
    cur.execute(f"select * from {table_name} order by i nulls last", binary=binary)
    rows = cur.fetchall()
    assert rows[0] == _ROW
    assert rows[1] == (None, None, None, None, None, None, None, None) + (None,) * 7
    types = [d.type_code for d in cur.description]
    assert types == [16, 21, 23, 20, 700, 701, 1700, 1043, 1082, 1083, 1114, 1184, 1186, 3802, 17]


def test_text_output_follows_postgres(conn: psycopg.Connection) -> None:
    """What psql shows: read the text format byte for byte."""
    cur = conn.cursor()
    cur.execute(
        "select true, false, 1.5::double precision, 1e20::double precision,"
        " 'infinity'::double precision, 'nan'::double precision, 0.00001::double precision,"
        " '\\xdeadbeef'::bytea, timestamp '2024-01-01 10:00:00',"
        " timestamp '2024-01-01 10:00:00.25', timestamptz '2024-01-01 10:00:00+00',"
        " interval '1 day 2 hours', interval '14 months', interval '-1 day 2 hours',"
        " '{\"b\":1,\"a\":[1,2]}'::jsonb, date '2024-03-01', time '10:00:00.5'"
    )
    values = [cur.pgresult.get_value(0, i).decode() for i in range(cur.pgresult.nfields)]
    assert values == [
        "t", "f", "1.5", "1e+20", "Infinity", "NaN", "1e-05", "\\xdeadbeef",
        "2024-01-01 10:00:00", "2024-01-01 10:00:00.25", "2024-01-01 10:00:00+00",
        "1 day 02:00:00", "1 year 2 mons", "-1 days +02:00:00", '{"a": [1, 2], "b": 1}',
        "2024-03-01", "10:00:00.5",
    ]  # fmt: skip


def test_timestamptz_shown_in_session_timezone(conn: psycopg.Connection) -> None:
    conn.execute("set timezone = 'Asia/Kolkata'")
    cur = conn.execute("select timestamptz '2024-01-01 10:00:00+00'")
    assert cur.pgresult.get_value(0, 0) == b"2024-01-01 15:30:00+05:30"
    assert cur.fetchone()[0] == dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
    assert conn.info.parameter_status("TimeZone") == "Asia/Kolkata"


def test_unconstrained_numeric_strips_zeros(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (n numeric, m numeric(10,3))")
    conn.execute(f"insert into {table_name} values (1.5, 1.5), (100, 2), (0.0001, 0)")
    cur = conn.execute(f"select n, m from {table_name} order by n")
    text = [(cur.pgresult.get_value(r, 0), cur.pgresult.get_value(r, 1)) for r in range(3)]
    assert text == [(b"0.0001", b"0.000"), (b"1.5", b"1.500"), (b"100", b"2.000")]


def test_uuid_and_arrays(conn: psycopg.Connection) -> None:
    u = uuid.uuid4()
    cur = conn.execute("select %s::uuid, [1, 2, null], ['a b', 'c']", [u])
    assert cur.fetchone() == (u, [1, 2, None], ["a b", "c"])
    cur = conn.execute("select %s::text[]", [["x", None, "y z"]])
    assert cur.fetchone() == (["x", None, "y z"],)


def test_prepared_statements(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int, v varchar)")
    for i in range(10):
        conn.execute(f"insert into {table_name} values (%s, %s)", [i, f"v{i}"], prepare=True)
    cur = conn.cursor()
    for i in range(10):
        cur.execute(f"select v from {table_name} where id = %s", [i], prepare=True)
        assert cur.fetchone() == (f"v{i}",)
    # psycopg forgets its prepared statements with DEALLOCATE ALL after DISCARD-like resets.
    conn.execute("deallocate all")
    cur.execute(f"select count(*) from {table_name} where id < %s", [5], prepare=True)
    assert cur.fetchone() == (5,)


def test_deallocate_names_one_statement(server) -> None:
    """DEALLOCATE forgets the named statement only; a name is folded to lower case unless
    quoted; an unknown one is 26000 and, in a transaction, aborts it like any error."""
    with server.connect(autocommit=True) as c:
        for name in ("p_one", "P_Two"):
            c.pgconn.prepare(name.encode(), b"select 1")
        c.execute("DEALLOCATE P_ONE")  # folded: p_one
        with pytest.raises(psycopg.errors.InvalidSqlStatementName, match='"p_one"'):
            c.execute("deallocate p_one")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName, match='"p_two"'):
            c.execute("DEALLOCATE P_Two")
        c.execute('DEALLOCATE PREPARE "P_Two" /* quoted: exact */')
        c.pgconn.prepare(b"p3", b"select 3")
        assert c.execute("DEALLOCATE ALL").statusmessage == "DEALLOCATE ALL"
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            c.execute("DEALLOCATE p3")
        with pytest.raises(psycopg.errors.SyntaxError):
            c.execute("DEALLOCATE")
        # Only the named one went: the other statement still runs.
        c.pgconn.prepare(b"p4", b"select 4")
        c.pgconn.prepare(b"p5", b"select 5")
        c.execute("DEALLOCATE p4")
        assert c.pgconn.exec_prepared(b"p5", []).get_value(0, 0) == b"5"
        assert c.pgconn.exec_prepared(b"p4", []).error_field(DiagField.SQLSTATE) == b"26000"
    with server.connect(autocommit=False) as c:
        c.execute("select 1")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName, match='"nope"'):
            c.execute("DEALLOCATE nope")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("select 1")
        c.rollback()
        assert c.execute("select 2").fetchone() == (2,)


def test_discard_all_drops_prepared_statements(server) -> None:
    with server.connect(prepare_threshold=0) as c:
        assert c.execute("select %s::int", [1]).fetchone() == (1,)
        c.execute("set application_name = 'before'")
        c.execute("discard all")
        assert c.execute("show application_name").fetchone() == ("",)
        # psycopg forgets its statements on DISCARD ALL; the server did too.
        assert c.execute("select %s::int", [2]).fetchone() == (2,)


def test_automatic_prepare_after_threshold(server) -> None:
    with server.connect(prepare_threshold=1) as c:
        for i in range(5):
            assert c.execute("select %s::int * 2", [i]).fetchone() == (i * 2,)
            assert c.execute("select 42").fetchone() == (42,)


def test_error_fields(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable) as info:
        conn.execute("select * from no_such_table_here")
    diag = info.value.diag
    assert diag.sqlstate == "42P01"
    assert diag.message_primary == 'relation "no_such_table_here" does not exist'
    assert diag.severity == "ERROR"
    assert diag.statement_position == "15"
    with pytest.raises(psycopg.errors.SyntaxError) as info:
        conn.execute("select from where")
    assert info.value.diag.sqlstate == "42601"
    assert info.value.diag.statement_position is not None
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
        conn.execute("pragma version")
    assert info.value.diag.message_hint == "Use SET and SHOW for session settings."
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute("set rw_implicit_flush = 'maybe'")
    assert info.value.diag.message_detail == "expects a boolean"
    # The session survives errors, in either protocol.
    assert conn.execute("select %s::int", [7]).fetchone() == (7,)
    assert conn.execute("select 8").fetchone() == (8,)


def test_error_in_extended_protocol_skips_to_sync(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("select * from missing_table where x = %s", [1])
    assert conn.execute("select %s::text", ["ok"]).fetchone() == ("ok",)


def test_error_stops_rest_of_simple_query(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (x int)")
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute(
            f"insert into {table_name} values (1); select * from nope; "
            f"insert into {table_name} values (2)"
        )
    assert conn.execute(f"select x from {table_name}").fetchall() == [(1,)]


def test_notices(conn: psycopg.Connection) -> None:
    notices: list[tuple[str | None, str | None, str | None]] = []
    conn.add_notice_handler(lambda d: notices.append((d.severity, d.sqlstate, d.message_primary)))
    conn.execute("commit")  # outside a transaction block: a warning
    assert notices == [("WARNING", "25P01", "there is no transaction in progress")]


def test_transactions_and_failed_state(server, table_name: str) -> None:
    with server.connect(autocommit=False) as c:
        c.execute(f"create table {table_name} (x int)")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        c.commit()
        c.execute(f"insert into {table_name} values (1)")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("select * from not_there")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("select 1")
        c.rollback()
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert c.execute("select 1").fetchone() == (1,)
        c.commit()


def test_parameter_status_at_startup(conn: psycopg.Connection) -> None:
    info = conn.info
    assert info.parameter_status(
        "server_version",
    ).startswith("13.14")
    assert info.parameter_status("client_encoding") == "UTF8"
    assert info.parameter_status("DateStyle") == "ISO, MDY"
    assert info.parameter_status("integer_datetimes") == "on"
    assert info.backend_pid > 0
    assert info.server_version >= 130000


def test_backend_pid_matches_cancel_key(conn: psycopg.Connection) -> None:
    assert conn.execute("select pg_backend_pid()").fetchone() == (conn.info.backend_pid,)


def test_pipeline_mode(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (x int)")
    with conn.pipeline():
        cursors = [conn.execute(f"insert into {table_name} values (%s)", [i]) for i in range(20)]
        count = conn.execute(f"select count(*) from {table_name}")
    assert all(c.rowcount == 1 for c in cursors)
    assert count.fetchone() == (20,)
    with pytest.raises(psycopg.errors.UndefinedTable), conn.pipeline():
        conn.execute(f"insert into {table_name} values (%s)", [100])
        conn.execute("select * from not_a_table where x = %s", [1])
        conn.execute(f"insert into {table_name} values (%s)", [101])
    # After the error, messages up to Sync are skipped: 101 is never inserted. (Each
    # statement commits on its own in Rivulet, so 100 stays, unlike PostgreSQL's implicit
    # transaction up to Sync.)
    rows = conn.execute(f"select x from {table_name} where x >= 100 order by x").fetchall()
    assert rows == [(100,)]


def test_startup_options_and_application_name(server) -> None:
    dsn = server.dsn(application_name="tester", options="-c timezone=Europe/Paris")
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("show timezone").fetchone() == ("Europe/Paris",)
        assert c.info.parameter_status("application_name") == "tester"


def test_unknown_database(server) -> None:
    with pytest.raises(psycopg.OperationalError, match='database "nope" does not exist'):
        psycopg.connect(server.dsn(dbname="nope"))


def test_show_and_set_through_extended_protocol(conn: psycopg.Connection) -> None:
    cur = conn.cursor()
    cur.execute(sql.SQL("set application_name = {}").format(sql.Literal("abc")))
    cur.execute("show application_name", prepare=True)
    assert cur.fetchone() == ("abc",)
    assert cur.description[0].name == "application_name"


def test_large_result(conn: psycopg.Connection) -> None:
    cur = conn.execute("select x, x::varchar from generate_series(1, 200000) as g(x)")
    rows = cur.fetchall()
    assert len(rows) == 200000
    assert rows[-1] == (200000, "200000")


def test_json_values(conn: psycopg.Connection) -> None:
    value = {"k": [1, 2.5, "s", None, True]}
    cur = conn.execute("select %s::jsonb", [Jsonb(value)])
    assert cur.fetchone() == (value,)
    assert json.loads(conn.execute("select '[1, 2]'::jsonb::varchar").fetchone()[0]) == [1, 2]


def test_client_encoding_in_the_startup_packet(server) -> None:  # type: ignore[no-untyped-def]
    """UTF8 under any spelling is accepted at start-up; an encoding Rivulet would have to
    convert is refused there, as a FATAL 22023 with a hint."""
    with psycopg.connect(server.dsn(client_encoding="utf-8"), autocommit=True) as conn:
        assert conn.info.parameter_status("client_encoding") == "UTF8"
        assert conn.execute("SELECT 'é'").fetchone() == ("é",)
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(server.dsn(client_encoding="LATIN1"))
    text = str(info.value)
    assert 'invalid value for parameter "client_encoding": "LATIN1"' in text
    assert "UTF8" in text
