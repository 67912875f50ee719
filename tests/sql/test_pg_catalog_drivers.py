"""Driver introspection through the embedded API: SQLAlchemy 2's PostgreSQL dialect
(its reflection queries, run over Rivulet's DB-API), psycopg 3's ``TypeInfo`` queries
and asyncpg's type-introspection queries - the SQL texts those libraries send."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine.interfaces import BindTyping

import rivulet


class RivuletEmbeddedDialect(PGDialect):
    """SQLAlchemy's PostgreSQL dialect over ``rivulet.connect()``, rendering bound
    parameters with casts (``%s::VARCHAR``) as the psycopg dialect does."""

    driver = "rivulet_embedded"
    supports_statement_cache = True
    default_paramstyle = "format"
    bind_typing = BindTyping.RENDER_CASTS
    colspecs = PGDialect_psycopg.colspecs

    @classmethod
    def import_dbapi(cls):
        return rivulet

    def do_rollback(self, dbapi_connection):
        pass  # every statement commits on its own

    def do_commit(self, dbapi_connection):
        pass

    def set_isolation_level(self, dbapi_connection, level):
        pass


registry.register("postgresql.rivulet_embedded", __name__, "RivuletEmbeddedDialect")


@pytest.fixture(scope="module")
def con():
    c = rivulet.connect()
    c.execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL, price NUMERIC(10,2),"
        " ts TIMESTAMP)"
    )
    c.execute("CREATE TABLE u (a INT, b DOUBLE PRECISION, j JSONB, d DATE, flag BOOLEAN)")
    c.execute("CREATE TABLE w (k1 INT, k2 VARCHAR, v REAL, PRIMARY KEY (k2, k1))")
    yield c
    c.close()


@pytest.fixture(scope="module")
def engine(con):
    eng = sa.create_engine(
        "postgresql+rivulet_embedded://", creator=lambda: con, poolclass=sa.pool.StaticPool
    )
    statements: list[str] = []

    @sa.event.listens_for(eng, "before_cursor_execute")
    def _record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    eng.statements = statements  # type: ignore[attr-defined]
    yield eng
    eng.dispose()


def test_sqlalchemy_connects(engine):
    with engine.connect() as c:
        assert c.dialect.server_version_info[:2] == (13, 14)
        assert c.dialect.default_schema_name == "public"
        assert c.execute(sa.text("SELECT 1")).scalar() == 1


def test_sqlalchemy_table_names(engine):
    insp = sa.inspect(engine)
    assert insp.get_table_names() == ["t", "u", "w"]
    assert insp.has_table("t") and not insp.has_table("nope")
    assert "public" in insp.get_schema_names()
    assert insp.get_view_names() == []
    assert insp.get_materialized_view_names() == []


def test_sqlalchemy_columns(engine):
    insp = sa.inspect(engine)
    cols = insp.get_columns("t")
    assert [(c["name"], type(c["type"]).__name__, c["nullable"], c["default"]) for c in cols] == [
        ("id", "BIGINT", False, None),
        ("name", "VARCHAR", False, None),
        ("price", "NUMERIC", True, None),
        ("ts", "TIMESTAMP", True, None),
    ]
    assert (cols[2]["type"].precision, cols[2]["type"].scale) == (10, 2)
    assert [type(c["type"]).__name__ for c in insp.get_columns("u")] == [
        "INTEGER",
        "DOUBLE_PRECISION",
        "JSONB",
        "DATE",
        "BOOLEAN",
    ]


def test_sqlalchemy_constraints(engine):
    insp = sa.inspect(engine)
    assert insp.get_pk_constraint("t") == {
        "constrained_columns": ["id"],
        "name": "t_pkey",
        "comment": None,
        "dialect_options": {"postgresql_include": []},
    }
    assert insp.get_pk_constraint("w")["constrained_columns"] == ["k2", "k1"]
    assert insp.get_pk_constraint("u")["constrained_columns"] == []
    for table in ("t", "u"):
        assert insp.get_indexes(table) == []
        assert insp.get_foreign_keys(table) == []
        assert insp.get_unique_constraints(table) == []
        assert insp.get_check_constraints(table) == []
        assert insp.get_table_comment(table) == {"text": None}


def test_sqlalchemy_reflection(engine):
    table = sa.Table("t", sa.MetaData(), autoload_with=engine)
    assert [c.name for c in table.primary_key] == ["id"]
    assert not table.c.name.nullable
    assert isinstance(table.c.price.type, sa.Numeric)
    md = sa.MetaData()
    md.reflect(engine)
    assert sorted(md.tables) == ["t", "u", "w"]
    with engine.connect() as c:
        assert c.execute(sa.select(table)).fetchall() == []
    # the catalog queries did run (not answered from a cache)
    assert any("pg_catalog.pg_attribute" in s for s in engine.statements)


# ---------------------------------------------------------------- psycopg 3

PSYCOPG_TYPE_INFO = """SELECT
    typname AS name, oid, typarray AS array_oid,
    oid::regtype::text AS regtype, typdelim AS delimiter
FROM pg_type t
WHERE t.oid = to_regtype(%s)
ORDER BY t.oid
"""

PSYCOPG_RANGE_INFO = """SELECT t.typname AS name, t.oid AS oid, t.typarray AS array_oid,
    t.oid::regtype::text AS regtype,
    r.rngsubtype AS subtype_oid
FROM pg_type t
JOIN pg_range r ON t.oid = r.rngtypid
WHERE t.oid = to_regtype(%s)
"""

PSYCOPG_ENUM_INFO = """SELECT name, oid, array_oid, regtype, array_agg(label) AS labels
FROM (
    SELECT
        t.typname AS name, t.oid AS oid, t.typarray AS array_oid,
        t.oid::regtype::text AS regtype, e.enumlabel AS label
    FROM pg_type t
    LEFT JOIN  pg_enum e
    ON e.enumtypid = t.oid
    WHERE t.oid = to_regtype(%s)
    ORDER BY e.enumsortorder
) x
GROUP BY name, oid, array_oid, regtype
"""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("int4", ("int4", 23, 1007, "integer", ",")),
        ("integer", ("int4", 23, 1007, "integer", ",")),
        ("numeric", ("numeric", 1700, 1231, "numeric", ",")),
        ("text", ("text", 25, 1009, "text", ",")),
        ("character varying", ("varchar", 1043, 1015, "character varying", ",")),
        ("jsonb", ("jsonb", 3802, 3807, "jsonb", ",")),
        ("timestamptz", ("timestamptz", 1184, 1185, "timestamp with time zone", ",")),
        ("int8[]", ("_int8", 1016, 0, "bigint[]", ",")),
        ("pg_catalog.bool", ("bool", 16, 1000, "boolean", ",")),
        ("hstore", None),
    ],
)
def test_psycopg_type_info(con, name, expected):
    found = con.execute(PSYCOPG_TYPE_INFO, [name]).fetchall()
    assert found == ([expected] if expected else [])


def test_psycopg_type_info_matches_common_types(con):
    """Every column type's OID (rivulet.common.types) is what pg_type says."""
    from rivulet.common.types import COLUMN_TYPES

    for t in COLUMN_TYPES:
        row = con.execute(PSYCOPG_TYPE_INFO, [t.name]).fetchone()
        assert row is not None and row[1] == t.oid, t.name


def test_psycopg_range_and_enum_info(con):
    assert con.execute(PSYCOPG_RANGE_INFO, ["int4range"]).fetchall() == []
    assert con.execute(PSYCOPG_ENUM_INFO, ["int4"]).fetchall() == [
        ("int4", 23, 1007, "integer", [None])
    ]


def test_psycopg_type_info_describes_oids_as_oid(con):
    cur = con.execute(PSYCOPG_TYPE_INFO, ["int4"])
    assert [d[1] for d in cur.description] == [1043, 26, 26, 1043, 1043]


# ------------------------------------------------------------------ asyncpg


def _asyncpg_queries() -> dict[str, str]:
    from asyncpg import introspection

    return {
        "13": introspection.INTRO_LOOKUP_TYPES_13,
        "14+": introspection.INTRO_LOOKUP_TYPES,
    }


@pytest.mark.parametrize("version", ["13", "14+"])
def test_asyncpg_type_introspection(con, version):
    query = _asyncpg_queries()[version].replace("$1", "%s")
    found = con.execute(query, [[23, 1007, 3802]]).fetchall()
    by_oid = {r[0]: r for r in found}
    assert set(by_oid) == {23, 1007, 3802}
    # oid, ns, name, kind, basetype, elemtype, elemdelim, range_subtype, attrtypoids,
    # attrnames, depth, basetype_name, elemtype_name, range_subtype_name
    assert by_oid[23][1:4] == ("pg_catalog", "int4", "b")
    assert by_oid[1007][5:7] == (23, ",")
    assert by_oid[1007][12] == "integer"
    assert by_oid[3802][2] == "jsonb"


def test_asyncpg_type_by_name(con):
    from asyncpg import introspection

    query = introspection.TYPE_BY_NAME.replace("$1", "%s").replace("$2", "%s")
    assert con.execute(query, ["numeric", "pg_catalog"]).fetchall() == [(1700, 0, "b")]
    assert con.execute(query, ["nope", "pg_catalog"]).fetchall() == []
