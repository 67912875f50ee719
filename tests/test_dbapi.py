"""The embedded face: PEP 249 (DB-API 2.0) as ``rivulet.connect()`` offers it."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest

import rivulet

# ------------------------------------------------------------------ module surface


def test_module_globals() -> None:
    assert rivulet.apilevel == "2.0"
    assert rivulet.threadsafety == 1
    assert rivulet.paramstyle == "format"
    assert isinstance(rivulet.__version__, str) and rivulet.__version__


def test_exception_hierarchy() -> None:
    assert issubclass(rivulet.Warning, Exception)
    assert issubclass(rivulet.Error, Exception)
    assert not issubclass(rivulet.Warning, rivulet.Error)
    assert issubclass(rivulet.InterfaceError, rivulet.Error)
    assert issubclass(rivulet.DatabaseError, rivulet.Error)
    for cls in (
        rivulet.DataError,
        rivulet.OperationalError,
        rivulet.IntegrityError,
        rivulet.InternalError,
        rivulet.ProgrammingError,
        rivulet.NotSupportedError,
    ):
        assert issubclass(cls, rivulet.DatabaseError), cls


@pytest.mark.parametrize(
    "cls, sqlstate",
    [
        (rivulet.Error, "XX000"),
        (rivulet.InterfaceError, "08000"),
        (rivulet.DatabaseError, "XX000"),
        (rivulet.DataError, "22000"),
        (rivulet.OperationalError, "55000"),
        (rivulet.IntegrityError, "23000"),
        (rivulet.InternalError, "XX000"),
        (rivulet.ProgrammingError, "42000"),
        (rivulet.NotSupportedError, "0A000"),
    ],
)
def test_every_exception_class_carries_sqlstate_and_hint(cls: type, sqlstate: str) -> None:
    plain = cls("message")
    assert plain.sqlstate == sqlstate
    assert plain.hint is None
    assert str(plain) == "message"
    rich = cls("message", sqlstate="12345", hint="do this")
    assert (rich.sqlstate, rich.hint, rich.message) == ("12345", "do this", "message")
    assert str(rich) == "message\nHINT: do this"


def test_type_objects_and_constructors() -> None:
    assert rivulet.Date(2024, 1, 2) == dt.date(2024, 1, 2)
    assert rivulet.Time(1, 2, 3) == dt.time(1, 2, 3)
    assert rivulet.Timestamp(2024, 1, 2, 3, 4, 5) == dt.datetime(2024, 1, 2, 3, 4, 5)
    assert rivulet.Binary(bytearray(b"\x00\x01")) == b"\x00\x01"
    ticks = time.mktime((2024, 5, 6, 7, 8, 9, 0, 0, -1))
    assert rivulet.DateFromTicks(ticks) == dt.date(2024, 5, 6)
    assert rivulet.TimeFromTicks(ticks) == dt.time(7, 8, 9)
    assert rivulet.TimestampFromTicks(ticks) == dt.datetime(2024, 5, 6, 7, 8, 9)


def test_type_objects_compare_with_description_type_codes() -> None:
    with rivulet.connect() as con:
        cur = con.execute(
            "SELECT 1, 'a'::varchar, 'b'::text, 1.5::float8, 2.5::numeric, DATE '2024-01-01',"
            " TIMESTAMP '2024-01-01', '\\x00'::bytea, 5::bigint"
        )
        codes = [d[1] for d in cur.description]
    assert codes[0] == rivulet.NUMBER
    assert codes[1] == rivulet.STRING and codes[2] == rivulet.STRING
    assert codes[3] == rivulet.NUMBER and codes[4] == rivulet.NUMBER
    assert codes[5] == rivulet.DATETIME and codes[6] == rivulet.DATETIME
    assert codes[7] == rivulet.BINARY
    assert codes[8] == rivulet.ROWID
    assert codes[1] != rivulet.NUMBER


# ------------------------------------------------------------------- connections


def test_in_memory_connections_are_separate_instances() -> None:
    a = rivulet.connect()
    b = rivulet.connect()
    try:
        a.execute("CREATE TABLE t (x INT)")
        with pytest.raises(rivulet.ProgrammingError):
            b.execute("SELECT * FROM t")
        b.execute("CREATE TABLE t (y TEXT)")  # no clash
    finally:
        a.close()
        b.close()


def test_a_data_directory_persists_across_reconnects(tmp_path: Path) -> None:
    with rivulet.connect(tmp_path) as con:
        con.execute("CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR)")
        con.execute("INSERT INTO kv VALUES (1, 'one'), (2, 'two')")
        con.execute("CREATE TABLE log (line VARCHAR)")
        con.execute("INSERT INTO log VALUES ('a'), ('a')")
    assert (tmp_path / "rivulet.duckdb").exists()
    with rivulet.connect(str(tmp_path)) as con:
        assert con.execute("SELECT * FROM kv ORDER BY k").fetchall() == [(1, "one"), (2, "two")]
        con.execute("UPDATE kv SET v = 'uno' WHERE k = 1")
        con.execute("DELETE FROM kv WHERE k = 2")
        # Hidden row ids continue after a restart: new rows never collide with old ones.
        con.execute("INSERT INTO log VALUES ('b')")
    with rivulet.connect(tmp_path) as con:
        assert con.execute("SELECT * FROM kv").fetchall() == [(1, "uno")]
        assert con.execute("SELECT line, count(*) FROM log GROUP BY 1 ORDER BY 1").fetchall() == [
            ("a", 2),
            ("b", 1),
        ]
        con.execute("DROP TABLE log")
    with rivulet.connect(tmp_path) as con:
        assert con.execute("SHOW TABLES").fetchall() == [("kv",)]


def test_connections_to_one_directory_share_the_instance(tmp_path: Path) -> None:
    a = rivulet.connect(tmp_path)
    b = rivulet.connect(tmp_path / ".")
    try:
        a.execute("CREATE TABLE t (x INT)")
        a.execute("INSERT INTO t VALUES (1)")
        assert b.execute("SELECT x FROM t").fetchall() == [(1,)]
        a.close()
        # The instance lives on while a connection is open.
        b.execute("INSERT INTO t VALUES (2)")
        assert b.execute("SELECT count(*) FROM t").fetchone() == (2,)
    finally:
        a.close()
        b.close()
    with rivulet.connect(tmp_path) as c:
        assert c.execute("SELECT count(*) FROM t").fetchone() == (2,)


def _open_in_subprocess(path: Path) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import sys, rivulet
        try:
            con = rivulet.connect({str(path)!r})
        except rivulet.Error as e:
            print(type(e).__name__, e.sqlstate, e.message, "|", e.hint)
            sys.exit(3)
        print("opened", con.execute("SELECT count(*) FROM t").fetchone()[0])
        con.close()
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(rivulet.__file__).parent.parent)},
    )


def test_a_second_process_gets_a_clear_error(tmp_path: Path) -> None:
    con = rivulet.connect(tmp_path)
    try:
        con.execute("CREATE TABLE t (x INT)")
        con.execute("INSERT INTO t VALUES (1)")
        result = _open_in_subprocess(tmp_path)
        assert result.returncode == 3, result.stderr
        out = result.stdout
        assert out.startswith("OperationalError 55P03 "), out
        assert "in use by another Rivulet process" in out
        assert f"(pid {os.getpid()})" in out
        assert "Stop the other process" in out
    finally:
        con.close()
    # Once this process lets go, the other one opens it and sees the data.
    result = _open_in_subprocess(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "opened 1"


def test_closed_connection_refuses_work() -> None:
    con = rivulet.connect()
    cur = con.cursor()
    con.close()
    con.close()  # closing twice is fine
    assert con.closed
    with pytest.raises(rivulet.InterfaceError):
        con.cursor()
    with pytest.raises(rivulet.InterfaceError):
        con.execute("SELECT 1")
    with pytest.raises(rivulet.InterfaceError):
        cur.execute("SELECT 1")


def test_connection_context_manager_closes() -> None:
    with rivulet.connect() as con:
        assert con.execute("SELECT 1").fetchone() == (1,)
    assert con.closed


def test_commit_is_a_no_op_and_rollback_is_refused() -> None:
    with rivulet.connect() as con:
        assert con.autocommit is True
        con.execute("CREATE TABLE t (x INT)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        with pytest.raises(rivulet.NotSupportedError) as info:
            con.rollback()
        assert info.value.sqlstate == "0A000"
        assert "autocommit" in info.value.message
        assert info.value.hint
        # Nothing was undone.
        assert con.execute("SELECT count(*) FROM t").fetchone() == (1,)
    with pytest.raises(rivulet.InterfaceError):
        con.commit()


# ----------------------------------------------------------------------- cursors


@pytest.fixture(scope="module")
def shared():  # type: ignore[no-untyped-def]
    c = rivulet.connect()
    yield c
    c.close()


@pytest.fixture
def con(shared: rivulet.Connection):  # type: ignore[no-untyped-def]
    """A connection with one empty table ``t``; the instance is shared by the tests of
    this module (opening one costs more than the tests) and emptied after each."""
    shared.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR)")
    yield shared
    if not shared.closed:
        for (name,) in shared.execute("SHOW TABLES").fetchall():
            shared.execute(f'DROP TABLE "{name}"')
        shared.execute("RESET ALL")


def test_execute_returns_the_cursor(con: rivulet.Connection) -> None:
    cur = con.cursor()
    assert cur.execute("SELECT 1") is cur
    assert cur.connection is con


def test_rowcount_and_description(con: rivulet.Connection) -> None:
    cur = con.cursor()
    cur.execute("CREATE TABLE u (a INT)")
    assert cur.description is None
    assert cur.rowcount == -1
    cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    assert cur.description is None
    assert cur.rowcount == 3
    cur.execute("UPDATE t SET v = 'x' WHERE id > 1")
    assert cur.rowcount == 2
    cur.execute("DELETE FROM t WHERE id = 3")
    assert cur.rowcount == 1
    cur.execute("SELECT id, v AS name FROM t ORDER BY id")
    assert cur.rowcount == 2
    desc = cur.description
    assert [d[0] for d in desc] == ["id", "name"]
    assert all(len(d) == 7 for d in desc)
    assert desc[0][1] == 23 and desc[1][1] == 1043  # int4, varchar
    assert desc[0][3] == 4  # internal size of an int4


def test_fetch_methods(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 6) AS s(g)")
    cur = con.execute("SELECT id FROM t ORDER BY id")
    assert cur.arraysize == 1
    assert cur.fetchone() == (1,)
    assert cur.fetchmany() == [(2,)]
    assert cur.fetchmany(2) == [(3,), (4,)]
    cur.arraysize = 5
    assert cur.fetchmany() == [(5,), (6,)]
    assert cur.fetchone() is None
    assert cur.fetchmany() == []
    assert cur.fetchall() == []
    cur.execute("SELECT id FROM t WHERE id > 4 ORDER BY id")
    assert cur.fetchall() == [(5,), (6,)]
    assert cur.fetchall() == []


def test_cursor_iteration(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    assert list(con.execute("SELECT * FROM t ORDER BY id")) == [(1, "a"), (2, "b")]
    assert [r for r in con.execute("SELECT * FROM t WHERE false")] == []


def test_fetch_without_rows_is_an_error(con: rivulet.Connection) -> None:
    cur = con.cursor()
    with pytest.raises(rivulet.ProgrammingError):
        cur.fetchone()
    cur.execute("INSERT INTO t VALUES (1, 'a')")
    with pytest.raises(rivulet.ProgrammingError):
        cur.fetchall()


def test_closed_cursor(con: rivulet.Connection) -> None:
    with con.cursor() as cur:
        cur.execute("SELECT 1")
    assert cur.closed
    with pytest.raises(rivulet.InterfaceError):
        cur.execute("SELECT 1")
    with pytest.raises(rivulet.InterfaceError):
        cur.fetchall()
    # The connection is still usable.
    assert con.execute("SELECT 2").fetchone() == (2,)


def test_setinputsizes_and_setoutputsize_are_accepted(con: rivulet.Connection) -> None:
    cur = con.cursor()
    assert cur.setinputsizes([None]) is None
    assert cur.setoutputsize(100) is None
    assert cur.setoutputsize(100, 0) is None
    # They change nothing: the cursor runs and fetches as before.
    assert cur.execute("SELECT 'a' || repeat('b', 200)").fetchone() == ("a" + "b" * 200,)


def test_several_statements_return_the_last_result(con: rivulet.Connection) -> None:
    cur = con.execute("INSERT INTO t VALUES (1, 'a'); SELECT v FROM t; SELECT id FROM t")
    assert cur.fetchall() == [(1,)]


def test_fetch_arrow_table(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    table = con.execute("SELECT * FROM t ORDER BY id").fetch_arrow_table()
    assert table.column_names == ["id", "v"]
    assert table.column("v").to_pylist() == ["a", "b"]


# -------------------------------------------------------------------- parameters


def test_format_parameters(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t VALUES (%s, %s)", (1, "one"))
    con.execute("INSERT INTO t VALUES (%s, %s)", [2, None])
    assert con.execute("SELECT * FROM t WHERE id = %s", (1,)).fetchall() == [(1, "one")]
    assert con.execute("SELECT v FROM t WHERE id = %s", (2,)).fetchone() == (None,)


def test_dollar_parameters_may_repeat(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t VALUES ($1, $2)", (3, "three"))
    cur = con.execute("SELECT $1::int + $1::int, $2 || v FROM t WHERE id = $1", (3, ">"))
    assert cur.fetchall() == [(6, ">three")]


def test_parameter_styles_do_not_mix(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.ProgrammingError) as info:
        con.execute("SELECT %s, $1", (1,))
    assert info.value.sqlstate == "42601"


def test_named_parameters_are_refused(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.ProgrammingError, match="named parameters"):
        con.execute("SELECT %(x)s", {"x": 1})


def test_the_wrong_number_of_parameters_is_an_error(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.Error, match="needs 2 parameters, but 1 were supplied"):
        con.execute("INSERT INTO t VALUES (%s, %s)", (1,))
    with pytest.raises(rivulet.Error, match="needs 1 parameters, but 2 were supplied"):
        con.execute("SELECT %s", (1, 2))
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_parameters_of_every_python_type(con: rivulet.Connection) -> None:
    values = (
        None,
        True,
        7,
        2**40,
        1.5,
        Decimal("1.25"),
        "it's; DROP TABLE t; --",
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 12, 30),
        b"\x00\xff",
    )
    row = con.execute("SELECT " + ", ".join(["%s"] * len(values)), values).fetchone()
    assert row == values


def test_parameters_bind_to_column_types(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE typed (n NUMERIC, d DATE, ts TIMESTAMPTZ, j JSONB, b BYTEA, r REAL)")
    when = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    con.execute(
        "INSERT INTO typed VALUES (%s, %s, %s, %s, %s, %s)",
        (Decimal("123.456"), "2024-03-01", when, '{"a": [1, 2]}', b"\x01\x02", 0.5),
    )
    n, d, ts, j, b, r = con.execute("SELECT * FROM typed").fetchone()
    assert n == Decimal("123.456")
    assert d == dt.date(2024, 3, 1)
    assert ts == when
    assert j == {"a": [1, 2]}
    assert b == b"\x01\x02"
    assert r == 0.5


def test_percent_signs_without_parameters(con: rivulet.Connection) -> None:
    assert con.execute("SELECT 'a%b', 'c%%d'").fetchone() == ("a%b", "c%%d")
    assert con.execute("SELECT v FROM t WHERE v LIKE 'x%'").fetchall() == []


def test_executemany_inserts_in_one_batch(con: rivulet.Connection) -> None:
    cur = con.cursor()
    cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(100)])
    assert cur.rowcount == 100
    assert con.execute("SELECT count(*), min(id), max(id) FROM t").fetchone() == (100, 0, 99)
    cur.executemany("INSERT INTO t (v, id) VALUES ($2, $1)", [(200, "x"), (201, "y")])
    assert con.execute("SELECT v FROM t WHERE id >= 200 ORDER BY id").fetchall() == [
        ("x",),
        ("y",),
    ]
    cur.executemany("INSERT INTO t VALUES (%s, %s)", [])
    assert cur.rowcount == 0


def test_executemany_other_statements(con: rivulet.Connection) -> None:
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    cur = con.cursor()
    cur.executemany("UPDATE t SET v = %s WHERE id = %s", [("A", 1), ("B", 2), ("none", 99)])
    assert cur.rowcount == 2
    assert con.execute("SELECT v FROM t ORDER BY id").fetchall() == [("A",), ("B",), ("c",)]
    cur.executemany("DELETE FROM t WHERE id = %s", [(1,), (3,)])
    assert cur.rowcount == 2


def test_executemany_with_mixed_python_types(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE mixed (a DOUBLE PRECISION, b VARCHAR)")
    cur = con.cursor()
    cur.executemany("INSERT INTO mixed VALUES (%s, %s)", [(1, "x"), (2.5, None), (None, "z")])
    assert cur.rowcount == 3
    assert con.execute("SELECT a, b FROM mixed ORDER BY a NULLS LAST").fetchall() == [
        (1.0, "x"),
        (2.5, None),
        (None, "z"),
    ]


def test_executemany_is_all_or_nothing_for_inserts(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.IntegrityError) as info:
        con.executemany("INSERT INTO t VALUES (%s, %s)", [(1, "a"), (None, "b"), (3, "c")])
    assert info.value.sqlstate == "23502"
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


# ------------------------------------------------------------------ result values


def test_result_values_have_python_types() -> None:
    with rivulet.connect() as con:
        con.execute(
            "CREATE TABLE v (b BOOLEAN, s SMALLINT, i INT, bi BIGINT, r REAL, d DOUBLE PRECISION,"
            " n NUMERIC(10, 2), t TEXT, dt DATE, tm TIME, ts TIMESTAMP, tz TIMESTAMPTZ,"
            " iv INTERVAL, j JSONB, by BYTEA)"
        )
        con.execute(
            "INSERT INTO v VALUES (true, 1, 2, 3, 1.5, 2.5, 3.25, 'x', '2024-01-02', '03:04:05',"
            " '2024-01-02 03:04:05', '2024-01-02 03:04:05+00', '1 day 2 hours',"
            " '{\"k\": [1, null]}', '\\x0102')"
        )
        row = con.execute("SELECT * FROM v").fetchone()
    assert row == (
        True,
        1,
        2,
        3,
        1.5,
        2.5,
        Decimal("3.25"),
        "x",
        dt.date(2024, 1, 2),
        dt.time(3, 4, 5),
        dt.datetime(2024, 1, 2, 3, 4, 5),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        dt.timedelta(days=1, hours=2),
        {"k": [1, None]},
        b"\x01\x02",
    )


def test_timestamptz_follows_the_session_time_zone() -> None:
    with rivulet.connect() as con:
        con.execute("SET TIME ZONE 'Asia/Tokyo'")
        (value,) = con.execute("SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00'").fetchone()
        assert value.utcoffset() == dt.timedelta(hours=9)
        assert value == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        con.execute("SET TIME ZONE '+05:30'")
        (value,) = con.execute("SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00'").fetchone()
        assert value.utcoffset() == dt.timedelta(hours=5, minutes=30)


def test_intervals_count_months_and_years_as_psycopg_does() -> None:
    with rivulet.connect() as con:
        row = con.execute(
            "SELECT INTERVAL '1 month', INTERVAL '1 year 2 months 3 days', INTERVAL '-1 year'"
        ).fetchone()
    assert row == (dt.timedelta(days=30), dt.timedelta(days=365 + 60 + 3), dt.timedelta(days=-365))


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "sql, cls, sqlstate",
    [
        ("SELEC 1", rivulet.ProgrammingError, "42601"),
        ("SELECT * FROM nope", rivulet.ProgrammingError, "42P01"),
        ("SELECT nope FROM t", rivulet.ProgrammingError, "42703"),
        ("SELECT 1 / 0", rivulet.DataError, "22012"),
        ("SELECT 'x'::int", rivulet.DataError, "22P02"),
        ("INSERT INTO t VALUES (NULL, 'x')", rivulet.IntegrityError, "23502"),
        (
            "CREATE MATERIALIZED VIEW mv AS SELECT id, ntile(2) OVER (ORDER BY id) FROM t",
            rivulet.NotSupportedError,
            "0A000",
        ),
        ("CREATE TABLE t (a INT)", rivulet.ProgrammingError, "42P07"),
    ],
)
def test_errors_have_the_right_class_and_sqlstate(
    con: rivulet.Connection, sql: str, cls: type, sqlstate: str
) -> None:
    with pytest.raises(cls) as info:
        con.execute(sql)
    assert info.value.sqlstate == sqlstate
    assert info.value.message


def test_errors_carry_hints_and_positions(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.NotSupportedError) as info:
        con.execute("CREATE MATERIALIZED VIEW mv AS SELECT id, ntile(2) OVER (ORDER BY id) FROM t")
    assert "not supported yet" in info.value.message
    assert info.value.hint
    with pytest.raises(rivulet.ProgrammingError) as info:
        con.execute("SELECT 1 FROM t WHERE id = 1 AND nope = 2")
    assert info.value.position is not None


def test_an_error_keeps_the_connection_usable(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.Error):
        con.execute("SELECT 1 / 0")
    assert con.execute("SELECT 1").fetchone() == (1,)


def test_copy_from_stdin_is_refused_with_a_hint(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.NotSupportedError) as info:
        con.execute("COPY t FROM STDIN")
    assert "executemany" in (info.value.hint or "")


# --------------------------------------------------------------------- threading


def test_interrupt_cancels_a_running_query() -> None:
    with rivulet.connect() as con:
        timer = threading.Timer(0.3, con.interrupt)
        timer.start()
        started = time.monotonic()
        try:
            with pytest.raises(rivulet.OperationalError) as info:
                con.execute("SELECT count(*) FROM range(1000000000000) a")
        finally:
            timer.cancel()
        assert info.value.sqlstate == "57014"
        assert time.monotonic() - started < 10
        # The connection still works afterwards.
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_connections_may_be_used_from_several_threads(tmp_path: Path) -> None:
    """threadsafety = 1: threads share the module, each uses its own connection."""
    with rivulet.connect(tmp_path) as setup:
        setup.execute("CREATE TABLE hits (worker INT, n INT)")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            with rivulet.connect(tmp_path) as c:
                for n in range(3):
                    c.execute("INSERT INTO hits VALUES (%s, %s)", (worker, n))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with rivulet.connect(tmp_path) as c:
        assert c.execute("SELECT count(*), count(DISTINCT worker) FROM hits").fetchone() == (
            9,
            3,
        )
