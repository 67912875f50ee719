"""DuckDB's powers stay out of users' reach: every query is bound against Rivulet's own
catalog and allow-list, so no SQL can read or write a file, load an extension, change an
engine setting or read the state store's internal schemas. And nothing a user writes as
an identifier or a value is ever spliced into SQL."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import rivulet


@pytest.fixture(scope="module")
def shared():  # type: ignore[no-untyped-def]
    c = rivulet.connect()
    yield c
    c.close()


@pytest.fixture
def con(shared: rivulet.Connection):  # type: ignore[no-untyped-def]
    shared.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR)")
    shared.execute("INSERT INTO t VALUES (1, 'one')")
    yield shared
    for (name,) in shared.execute("SHOW TABLES").fetchall():
        shared.execute('DROP TABLE "' + name.replace('"', '""') + '"')


def refused(con: rivulet.Connection, sql: str, sqlstate: str, message: str) -> rivulet.Error:
    with pytest.raises(rivulet.Error) as info:
        con.execute(sql)
    err = info.value
    assert err.sqlstate == sqlstate, (sql, err.sqlstate, err.message)
    assert message in err.message, (sql, err.message)
    return err


def internal_table(con: rivulet.Connection) -> str:
    """The DuckDB name of table t's state (``t<id>``)."""
    (oid,) = con.execute("SELECT oid FROM pg_class WHERE relname = 't'").fetchone()
    return f"t{oid}"


# ----------------------------------------------------------------- file readers


@pytest.mark.parametrize(
    "reader",
    [
        "read_csv('/etc/passwd')",
        "read_csv_auto('/etc/passwd')",
        "read_parquet('/tmp/x.parquet')",
        "parquet_scan('/tmp/x.parquet')",
        "read_json('/tmp/x.json')",
        "read_json_auto('/tmp/x.json')",
        "read_text('/etc/passwd')",
        "read_blob('/etc/passwd')",
        "sniff_csv('/etc/passwd')",
    ],
)
def test_table_functions_that_read_files(con: rivulet.Connection, reader: str) -> None:
    name = reader.split("(")[0]
    refused(con, f"SELECT * FROM {reader}", "42883", f"table function {name}() does not exist")
    # Nested anywhere: a join, a scalar subquery, a CTE, a lateral, a COPY TO STDOUT.
    refused(con, f"SELECT * FROM t, {reader}", "42883", name)
    refused(con, f"SELECT (SELECT count(*) FROM {reader})", "42883", name)
    refused(con, f"WITH x AS (SELECT * FROM {reader}) SELECT * FROM x", "42883", name)
    refused(con, f"SELECT * FROM t, LATERAL (SELECT * FROM {reader}) x", "42883", name)
    refused(con, f"COPY (SELECT * FROM {reader}) TO STDOUT", "42883", name)
    refused(con, f"INSERT INTO t SELECT 2, * FROM {reader}", "42883", name)


def test_read_functions_in_expressions(con: rivulet.Connection) -> None:
    refused(con, "SELECT read_blob('/etc/passwd')", "42883", "function read_blob() does not exist")
    refused(con, "SELECT read_text('/etc/passwd')", "42883", "read_text")


@pytest.mark.parametrize(
    "relation", ["'/etc/passwd'", "'data.csv'", "'https://example.com/x.parquet'", '"/etc/passwd"']
)
def test_file_names_as_relations(con: rivulet.Connection, relation: str) -> None:
    """DuckDB's replacement scans (FROM 'file.csv') find nothing: every relation is
    looked up in Rivulet's catalog."""
    refused(con, f"SELECT * FROM {relation}", "42P01", "does not exist")


def test_glob_is_refused(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.ProgrammingError):
        con.execute("SELECT * FROM glob('/etc/*')")


# ------------------------------------------------------------------------- COPY


def test_copy_to_a_file(con: rivulet.Connection, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    err = refused(con, f"COPY t TO '{target}'", "42501", "COPY to or from a file is not allowed")
    assert err.hint and "STDOUT" in err.hint
    refused(con, f"COPY (SELECT * FROM t) TO '{target}'", "42501", "not allowed")
    refused(con, f"COPY t TO '{target}' (FORMAT parquet)", "42501", "not allowed")
    assert not target.exists()


def test_copy_from_a_file(con: rivulet.Connection, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("5,five\n")
    refused(con, f"COPY t FROM '{source}'", "42501", "COPY to or from a file is not allowed")
    refused(con, "COPY t FROM '/etc/passwd'", "42501", "not allowed")
    assert con.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_copy_to_stdout_in_other_formats(con: rivulet.Connection) -> None:
    refused(con, "COPY t TO STDOUT (FORMAT parquet)", "0A000", "COPY format parquet")


# ------------------------------------------------------- DuckDB statements


@pytest.mark.parametrize(
    "sql, sqlstate, message",
    [
        ("ATTACH '/tmp/other.duckdb' AS other", "42601", "syntax error"),
        ("ATTACH DATABASE ':memory:' AS m", "42601", "syntax error"),
        ("DETACH memory", "42601", "syntax error"),
        ("INSTALL httpfs", "42601", "syntax error"),
        ("LOAD httpfs", "0A000", "LOAD is not supported yet"),
        ("USE memory", "0A000", "not supported yet"),
        ("EXPORT DATABASE '/tmp/rivulet-export'", "42601", "syntax error"),
        ("IMPORT DATABASE '/tmp/rivulet-export'", "42601", "syntax error"),
        ("CHECKPOINT", "42601", "syntax error"),
        ("CALL duckdb_settings()", "0A000", "CALL is not supported yet"),
        ("CREATE MACRO m(x) AS x", "42601", "syntax error"),
        ("CREATE SECRET s (TYPE s3)", "0A000", "CREATE SECRET is not supported yet"),
        ("SUMMARIZE t", "42601", "syntax error"),
        ("PIVOT t ON v USING count(*)", "42601", "syntax error"),
    ],
)
def test_duckdb_statements(con: rivulet.Connection, sql: str, sqlstate: str, message: str) -> None:
    refused(con, sql, sqlstate, message)


@pytest.mark.parametrize(
    "pragma", ["PRAGMA database_list", "PRAGMA show_tables", "PRAGMA version", "PRAGMA threads=1"]
)
def test_pragmas(con: rivulet.Connection, pragma: str) -> None:
    err = refused(con, pragma, "42501", "PRAGMA is not a Rivulet statement")
    assert err.hint and "SET" in err.hint


@pytest.mark.parametrize(
    "function",
    [
        "pragma_table_info('t')",
        "pragma_database_list()",
        "pragma_version()",
        "pragma_storage_info('t')",
    ],
)
def test_pragma_table_functions(con: rivulet.Connection, function: str) -> None:
    refused(con, f"SELECT * FROM {function}", "42883", "does not exist")


# --------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "setting, value",
    [
        ("threads", "1"),
        ("memory_limit", "'1TB'"),
        ("enable_external_access", "true"),
        ("allow_community_extensions", "true"),
        ("autoload_known_extensions", "true"),
        ("lock_configuration", "false"),
        ("temp_directory", "'/tmp'"),
    ],
)
def test_duckdb_settings_cannot_be_set(con: rivulet.Connection, setting: str, value: str) -> None:
    refused(
        con,
        f"SET {setting} = {value}",
        "42704",
        f'unrecognized configuration parameter "{setting}"',
    )
    refused(con, f"SET {setting} TO {value}", "42704", "unrecognized configuration parameter")
    refused(con, f"RESET {setting}", "42704", "unrecognized configuration parameter")
    refused(con, f"SHOW {setting}", "42704", "unrecognized configuration parameter")
    refused(
        con, f"SELECT current_setting('{setting}')", "42704", "unrecognized configuration parameter"
    )


def test_set_global_is_refused(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.ProgrammingError):
        con.execute("SET GLOBAL threads = 1")


def test_set_config_is_refused(con: rivulet.Connection) -> None:
    refused(con, "SELECT set_config('threads', '1', false)", "42883", "set_config")


def test_the_external_access_stays_off(con: rivulet.Connection) -> None:
    """The engine's DuckDB runs with external access off and its configuration locked
    (nothing, not even SQL reaching DuckDB, can turn it back on); pg_settings shows
    Rivulet's variables, not DuckDB's."""
    names = {r[0] for r in con.execute("SELECT name FROM pg_settings").fetchall()}
    assert "timezone" in names
    assert not names & {"threads", "memory_limit", "enable_external_access"}
    cur = con._thread.engine.store.new_cursor()  # type: ignore[attr-defined]
    try:
        settings = (
            "SELECT current_setting('enable_external_access'),"
            " current_setting('lock_configuration')"
        )
        assert cur.execute(settings).fetchall() == [(False, True)]
        with pytest.raises(duckdb.Error, match="configuration has been locked"):
            cur.execute("SET enable_external_access = true")
        assert cur.execute(settings).fetchall() == [(False, True)]
    finally:
        cur.close()


# ----------------------------------------------------- DuckDB catalog functions


@pytest.mark.parametrize(
    "function",
    [
        "duckdb_settings()",
        "duckdb_tables()",
        "duckdb_columns()",
        "duckdb_views()",
        "duckdb_functions()",
        "duckdb_extensions()",
        "duckdb_databases()",
        "duckdb_secrets()",
    ],
)
def test_duckdb_catalog_functions(con: rivulet.Connection, function: str) -> None:
    name = function[:-2]
    refused(con, f"SELECT * FROM {function}", "42883", f"table function {name}() does not exist")
    refused(con, f"SELECT {function}", "42883", f"function {name}() does not exist")


@pytest.mark.parametrize("view", ["duckdb_tables", "duckdb_settings", "duckdb_columns"])
def test_duckdb_catalog_views(con: rivulet.Connection, view: str) -> None:
    refused(con, f"SELECT * FROM {view}", "42P01", f'relation "{view}" does not exist')
    refused(con, f"SELECT * FROM main.{view}", "42P01", "does not exist")


def test_a_cte_name_does_not_hide_a_relation_outside_its_scope(con: rivulet.Connection) -> None:
    """A CTE named like a DuckDB view, defined in a subquery, must not let a reference
    outside that subquery reach DuckDB's catalog unbound."""
    refused(
        con,
        "SELECT count(*) FROM (WITH duckdb_tables AS (SELECT 1) SELECT 1) a, duckdb_tables",
        "42P01",
        'relation "duckdb_tables" does not exist',
    )
    refused(
        con,
        "SELECT * FROM (WITH duckdb_columns AS (SELECT 1) SELECT 1) a"
        " WHERE EXISTS (SELECT 1 FROM duckdb_columns)",
        "42P01",
        "does not exist",
    )
    # A CTE still hides a table inside its own scope.
    assert con.execute(
        "WITH duckdb_tables AS (SELECT 7 AS x) SELECT x FROM duckdb_tables"
    ).fetchall() == [(7,)]


def test_rewritten_functions_bind_their_arguments(con: rivulet.Connection) -> None:
    """format(), to_hex() and pg_typeof() are rewritten for DuckDB; a relation inside
    their arguments is still bound (a Rivulet table named like a DuckDB view must read
    the Rivulet table)."""
    con.execute("CREATE TABLE duckdb_tables (x INT)")
    con.execute("INSERT INTO duckdb_tables VALUES (1), (2), (3)")
    row = con.execute(
        "SELECT format('%s', (SELECT count(*) FROM duckdb_tables)),"
        " to_hex((SELECT count(*) FROM duckdb_tables)),"
        " pg_typeof((SELECT count(*) FROM duckdb_tables))"
    ).fetchone()
    assert row == ("3", "3", "bigint")


@pytest.mark.parametrize(
    "sql, name",
    [
        ("SELECT * FROM query('SELECT 1')", "query"),
        ("SELECT * FROM query_table('t')", "query_table"),
        ("SELECT getenv('HOME')", "getenv"),
        ("SELECT 'HOME'.getenv()", "getenv"),
        ("SELECT current_setting('threads')", "threads"),
        ("SELECT list_transform([1], x -> x)", "list_transform"),
        ("SELECT * FROM json_tree('{}')", "json_tree"),
        ("SELECT pragma_version()", "pragma_version"),
    ],
)
def test_other_duckdb_functions(con: rivulet.Connection, sql: str, name: str) -> None:
    with pytest.raises(rivulet.ProgrammingError) as info:
        con.execute(sql)
    assert info.value.sqlstate in ("42883", "42704")
    assert name in info.value.message


# ------------------------------------------------------------ internal schemas


def test_state_tables_cannot_be_read(con: rivulet.Connection) -> None:
    name = internal_table(con)
    refused(con, f"SELECT * FROM state.{name}", "42P01", f'relation "state.{name}" does not exist')
    refused(con, f'SELECT * FROM "state"."{name}"', "42P01", "does not exist")
    refused(con, f"SELECT * FROM {name}", "42P01", f'relation "{name}" does not exist')
    refused(con, f"SELECT * FROM memory.state.{name}", "0A000", "cross-database references")
    refused(con, f"SELECT * FROM system.main.{name}", "0A000", "cross-database references")


def test_state_tables_cannot_be_written(con: rivulet.Connection) -> None:
    name = internal_table(con)
    refused(con, f"INSERT INTO state.{name} VALUES (0, 9, 'x')", "42P01", "does not exist")
    refused(con, f"DELETE FROM state.{name}", "42P01", "does not exist")
    refused(con, f"UPDATE state.{name} SET v = 'x'", "42P01", "does not exist")
    refused(con, f"DROP TABLE state.{name}", "42P01", "does not exist")
    refused(con, "CREATE TABLE state.x (a INT)", "3F000", 'schema "state" does not exist')
    assert con.execute("SELECT * FROM t").fetchall() == [(1, "one")]


@pytest.mark.parametrize(
    "relation",
    ["meta.objects", "meta.columns", "meta.schemas", "meta.counters", "meta.store_format"],
)
def test_meta_tables_cannot_be_read(con: rivulet.Connection, relation: str) -> None:
    refused(con, f"SELECT * FROM {relation}", "42P01", f'relation "{relation}" does not exist')


def test_the_system_schema_cannot_be_read_directly(con: rivulet.Connection) -> None:
    refused(con, "SELECT * FROM rw_sys.pg__pg_class", "42P01", "does not exist")
    refused(con, "SELECT * FROM rw_sys.rw__rw_tables", "42P01", "does not exist")
    with pytest.raises(rivulet.ProgrammingError):
        con.execute("SELECT rw_sys.nonexistent(1)")


def test_system_catalogs_show_no_internal_names(con: rivulet.Connection) -> None:
    name = internal_table(con)
    tables = con.execute(
        "SELECT table_schema, table_name FROM information_schema.tables"
    ).fetchall()
    assert ("public", "t") in tables
    assert not {s for s, _ in tables} & {"state", "meta", "rw_sys", "main"}
    assert not any(n == name for _, n in tables)
    schemas = {r[0] for r in con.execute("SELECT nspname FROM pg_namespace").fetchall()}
    assert not schemas & {"state", "meta", "rw_sys", "main"}


def test_errors_do_not_leak_internal_names(con: rivulet.Connection) -> None:
    name = internal_table(con)
    for sql in [
        "SELECT nope FROM t",
        "SELECT id FROM t JOIN t AS u ON true",
        "SELECT id + v FROM t",
        "SELECT v::int FROM t",
    ]:
        with pytest.raises(rivulet.Error) as info:
            con.execute(sql)
        text = str(info.value)
        assert name not in text and "state." not in text and "rw_sys" not in text, text


def test_explain_shows_table_names_not_state_tables(con: rivulet.Connection) -> None:
    name = internal_table(con)
    plan = "\n".join(r[0] for r in con.execute("EXPLAIN SELECT * FROM t").fetchall())
    assert "public.t" in plan
    assert name not in plan and "state." not in plan


# ------------------------------------------------------------ injection attempts


HOSTILE_NAMES = [
    'weird"name',
    "semi;colon",
    '"; DROP TABLE victim; --',
    "Robert'); DROP TABLE victim;--",
    "dots.in.name",
    "space and MixedCase",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_table_and_column_names_are_plain_names(con: rivulet.Connection, name: str) -> None:
    con.execute("CREATE TABLE victim (a INT)")
    con.execute("INSERT INTO victim VALUES (1)")
    q = '"' + name.replace('"', '""') + '"'
    con.execute(f"CREATE TABLE {q} ({q} INT PRIMARY KEY, other VARCHAR)")
    con.execute(f"INSERT INTO {q} VALUES (1, 'a'), (2, 'b')")
    con.execute(f"UPDATE {q} SET other = other || '!' WHERE {q} = 1")
    con.execute(f"DELETE FROM {q} WHERE {q} = 2")
    assert con.execute(f"SELECT {q}, other FROM {q}").fetchall() == [(1, "a!")]
    assert con.execute(f"SELECT * FROM public.{q}").fetchall() == [(1, "a!")]
    assert (name,) in con.execute("SHOW TABLES").fetchall()
    described = con.execute(f"DESCRIBE {q}").fetchall()
    assert described[0][:2] == (name, "integer")
    assert ("table description", name, None, None) in described
    assert con.execute(f"SHOW COLUMNS FROM {q}").fetchall()[0][0] == name
    assert con.execute(f"SHOW CREATE TABLE {q}").fetchone()[0] == f"public.{name}"
    assert con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY 1",
        (name,),
    ).fetchall() == sorted([(name,), ("other",)])
    con.execute(f"DROP TABLE {q}")
    assert con.execute("SELECT count(*) FROM victim").fetchone() == (1,)
    assert (name,) not in con.execute("SHOW TABLES").fetchall()


HOSTILE_VALUES = [
    "'); DROP TABLE victim; --",
    "1; DROP TABLE victim",
    "$1 %s %% ?",
    '" OR 1=1 --',
    "\\x00 back\\slash",
    "line\nbreak\ttab",
    "NULL",
    "",
]


def test_hostile_values_are_stored_as_data(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE victim (a INT)")
    con.execute("INSERT INTO victim VALUES (1)")
    con.execute("CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR)")
    for i, value in enumerate(HOSTILE_VALUES):
        con.execute("INSERT INTO notes VALUES (%s, %s)", (i, value))
    con.executemany(
        "INSERT INTO notes VALUES ($1, $2)", [(100 + i, v) for i, v in enumerate(HOSTILE_VALUES)]
    )
    rows = con.execute("SELECT id, body FROM notes ORDER BY id").fetchall()
    expected = [(i, v) for i, v in enumerate(HOSTILE_VALUES)]
    expected += [(100 + i, v) for i, v in enumerate(HOSTILE_VALUES)]
    assert rows == expected
    for value in HOSTILE_VALUES:
        found = con.execute("SELECT count(*) FROM notes WHERE body = %s", (value,)).fetchone()
        assert found == (2,), value
    con.execute("UPDATE notes SET body = %s WHERE id = %s", ("'; DELETE FROM notes; --", 0))
    con.execute("DELETE FROM notes WHERE body = %s", ("1; DROP TABLE victim",))
    assert con.execute("SELECT count(*) FROM notes").fetchone() == (2 * len(HOSTILE_VALUES) - 2,)
    assert con.execute("SELECT count(*) FROM victim").fetchone() == (1,)


def test_quotes_and_semicolons_in_literals_stay_inside_them(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE victim (a INT)")
    cur = con.execute("SELECT 'a''; DROP TABLE victim; --', $$b; DROP TABLE victim$$")
    assert cur.fetchall() == [("a'; DROP TABLE victim; --", "b; DROP TABLE victim")]
    con.execute("INSERT INTO t VALUES (2, 'x''); DROP TABLE victim; --')")
    assert con.execute("SELECT v FROM t WHERE id = 2").fetchone() == ("x'); DROP TABLE victim; --",)
    assert ("victim",) in con.execute("SHOW TABLES").fetchall()


def test_a_parameter_is_never_an_identifier(con: rivulet.Connection) -> None:
    # Not a relation: the FROM names the placeholder, never the table t.
    refused(con, "SELECT * FROM %s", "0A000", "unsupported relation: $1")
    # Not a column: the value itself comes back, not the column it spells.
    assert con.execute("SELECT %s, %s FROM t", ("id", "v")).fetchall() == [("id", "v")]
    assert con.execute("SELECT count(*) FROM t WHERE %s = 'one'", ("v",)).fetchone() == (0,)
    # As a value it is compared, not interpreted.
    assert con.execute("SELECT count(*) FROM t WHERE v = %s", ("one' OR '1'='1",)).fetchone() == (
        0,
    )
