"""PostgreSQL clients introspecting a real server (``python -m rivulet playground``):
psql 15's describe commands, SQLAlchemy's inspector over psycopg, psycopg's TypeInfo
and asyncpg's type introspection. A server of this module's own, so that the listings
hold exactly the tables created here."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import textwrap

import pytest

PSQL = shutil.which("psql") or "/usr/bin/psql"


@pytest.fixture(scope="module")
def srv(session_server_factory):  # type: ignore[no-untyped-def]
    server = session_server_factory()
    with server.connect() as c:
        c.execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL,"
            " price NUMERIC(10,2), ts TIMESTAMP)"
        )
        c.execute("CREATE TABLE u (a INT, b DOUBLE PRECISION)")
    return server


def run_psql(server, command: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    env.pop("PGPASSWORD", None)
    cmd = [PSQL, "-X", "-h", server.host, "-p", str(server.port), "-U", "root", "-d", "dev"]
    return subprocess.run(
        [*cmd, "-v", "ON_ERROR_STOP=1", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def psql(server, command: str) -> str:  # type: ignore[no-untyped-def]
    """psql's output; psql must not have failed or printed an error."""
    out = run_psql(server, command)
    assert out.returncode == 0, out.stderr
    assert "ERROR" not in out.stderr, out.stderr
    return out.stdout


def expected(text: str) -> list[str]:
    """The lines of a psql listing (psql pads its cells: trailing blanks are ignored)."""
    return textwrap.dedent(text).strip("\n").split("\n")


def lines(output: str) -> list[str]:
    return [line.rstrip() for line in output.strip("\n").split("\n")]


# ---------------------------------------------------------------------- psql

needs_psql = pytest.mark.skipif(not os.path.exists(PSQL), reason="psql is not installed")


@needs_psql
def test_psql_list_relations(srv) -> None:  # type: ignore[no-untyped-def]
    listing = expected("""
               List of relations
         Schema | Name | Type  | Owner
        --------+------+-------+-------
         public | t    | table | root
         public | u    | table | root
        (2 rows)

    """)
    assert lines(psql(srv, r"\d")) == listing
    assert lines(psql(srv, r"\dt")) == listing


@needs_psql
def test_psql_describe_table(srv) -> None:  # type: ignore[no-untyped-def]
    assert lines(psql(srv, r"\d t")) == expected("""
                                   Table "public.t"
         Column |            Type             | Collation | Nullable | Default
        --------+-----------------------------+-----------+----------+---------
         id     | bigint                      |           | not null |
         name   | character varying           |           | not null |
         price  | numeric(10,2)               |           |          |
         ts     | timestamp without time zone |           |          |
        Indexes:
            "t_pkey" PRIMARY KEY, btree (id)

    """)
    assert lines(psql(srv, r"\d u")) == expected("""
                              Table "public.u"
         Column |       Type       | Collation | Nullable | Default
        --------+------------------+-----------+----------+---------
         a      | integer          |           |          |
         b      | double precision |           |          |

    """)


@needs_psql
def test_psql_databases_and_schemas(srv) -> None:  # type: ignore[no-untyped-def]
    databases = psql(srv, r"\l")
    assert "List of databases" in databases
    assert " dev  | root  | UTF8     |" in databases
    assert "(1 row)" in databases
    assert lines(psql(srv, r"\dn")) == expected("""
          List of schemas
            Name    | Owner
        ------------+-------
         public     | root
         rw_catalog | root
        (2 rows)

    """)


@needs_psql
def test_psql_other_listings(srv) -> None:  # type: ignore[no-untyped-def]
    for command in (r"\dv", r"\dm"):
        out = run_psql(srv, command)
        assert (out.returncode, out.stdout) == (0, "")
        assert out.stderr == "Did not find any relations.\n"
    assert "(0 rows)" in psql(srv, r"\df")
    indexes = psql(srv, r"\di")
    assert " public | t_pkey | index | root  | t" in indexes
    assert " root      | Superuser" in psql(srv, r"\du")
    assert run_psql(srv, r"\d nope").stderr == 'Did not find any relation named "nope".\n'


@needs_psql
@pytest.mark.parametrize(
    "command", [r"\d+ t", r"\dt+", r"\dS", r"\d pg_class", r"\dT", r"\dp", r"\l+", r"\dd", r"\dx"]
)
def test_psql_commands_do_not_fail(srv, command: str) -> None:  # type: ignore[no-untyped-def]
    psql(srv, command)


# ---------------------------------------------------------------- SQLAlchemy


def test_sqlalchemy_inspector(srv) -> None:  # type: ignore[no-untyped-def]
    sa = pytest.importorskip("sqlalchemy")
    # The default isolation (a transaction block), as applications create engines.
    engine = sa.create_engine(srv.url("postgresql+psycopg"))
    try:
        insp = sa.inspect(engine)
        assert insp.get_table_names() == ["t", "u"]
        assert insp.has_table("t") and not insp.has_table("nope")
        assert {"public", "information_schema"} <= set(insp.get_schema_names())
        cols = insp.get_columns("t")
        assert [(c["name"], type(c["type"]).__name__, c["nullable"]) for c in cols] == [
            ("id", "BIGINT", False),
            ("name", "VARCHAR", False),
            ("price", "NUMERIC", True),
            ("ts", "TIMESTAMP", True),
        ]
        assert (cols[2]["type"].precision, cols[2]["type"].scale) == (10, 2)
        assert insp.get_pk_constraint("t")["constrained_columns"] == ["id"]
        assert insp.get_pk_constraint("t")["name"] == "t_pkey"
        assert insp.get_pk_constraint("u")["constrained_columns"] == []
        assert insp.get_indexes("t") == []
        assert insp.get_foreign_keys("t") == []
        assert insp.get_unique_constraints("t") == []
        assert insp.get_check_constraints("t") == []
        assert insp.get_table_comment("t") == {"text": None}
        assert insp.get_view_names() == []
        assert insp.get_materialized_view_names() == []
        table = sa.Table("t", sa.MetaData(), autoload_with=engine)
        assert [c.name for c in table.primary_key] == ["id"]
        with engine.connect() as c:
            assert c.execute(sa.select(table)).fetchall() == []
    finally:
        engine.dispose()


# ------------------------------------------------------------------- psycopg


def test_psycopg_type_info(srv) -> None:  # type: ignore[no-untyped-def]
    from psycopg.types import TypeInfo

    with srv.connect() as c:
        int4 = TypeInfo.fetch(c, "int4")
        assert (int4.name, int4.oid, int4.array_oid) == ("int4", 23, 1007)
        numeric = TypeInfo.fetch(c, "numeric")
        assert (numeric.oid, numeric.array_oid) == (1700, 1231)
        assert TypeInfo.fetch(c, "int8[]").oid == 1016
        assert TypeInfo.fetch(c, "hstore") is None
    with srv.connect(autocommit=False) as c:  # inside a transaction block: a savepoint
        assert TypeInfo.fetch(c, "jsonb").oid == 3802
        # OID columns come back with the oid type
        cur = c.execute("SELECT oid, relname FROM pg_class WHERE relname = 't'")
        assert cur.description[0].type_code == 26
        assert isinstance(cur.fetchone()[0], int)


# ------------------------------------------------------------------- asyncpg


def test_asyncpg_introspection(srv) -> None:  # type: ignore[no-untyped-def]
    asyncpg = pytest.importorskip("asyncpg")

    async def run() -> None:
        conn = await asyncpg.connect(host=srv.host, port=srv.port, user="root", database="dev")
        try:
            found = await conn.fetch(
                "SELECT oid, typname FROM pg_type WHERE oid = any($1::oid[]) ORDER BY oid",
                [23, 1007],
            )
            assert [tuple(r) for r in found] == [(23, "int4"), (1007, "_int4")]
            stmt = await conn.prepare("SELECT oid, relname FROM pg_class WHERE relname = $1")
            assert [a.type.name for a in stmt.get_attributes()] == ["oid", "varchar"]
            assert (await stmt.fetchrow("t"))["relname"] == "t"
            # The query asyncpg sends for OIDs it does not know.
            if hasattr(conn, "_introspect_types"):
                types, _ = await conn._introspect_types([23, 1007, 3802], 10)
                assert {r["oid"] for r in types} == {23, 1007, 3802}
                by_oid = {r["oid"]: r for r in types}
                assert by_oid[1007]["elemtype"] == 23
                assert by_oid[1007]["elemtype_name"] == "integer"
            # set_type_codec looks the type up by name.
            await conn.set_type_codec(
                "numeric", schema="pg_catalog", encoder=str, decoder=str, format="text"
            )
            assert await conn.fetchval("SELECT price FROM t") is None
        finally:
            await conn.close()

    asyncio.run(run())
