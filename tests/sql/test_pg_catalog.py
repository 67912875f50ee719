"""pg_catalog / information_schema / rw_catalog through the embedded API: the queries
psql 15 sends for its describe commands (against a server reporting PostgreSQL 13, as
Rivulet does), the answers it relies on, OID consistency across the catalogs, the
PostgreSQL syntax those queries use (::regclass, OPERATOR(pg_catalog.~), qualified
function names...) and that none of it opens a way around the binder."""

from __future__ import annotations

import time

import pytest

import rivulet
from rivulet.common.errors import Error

# --------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def con():
    c = rivulet.connect()
    c.execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL, price NUMERIC(10,2),"
        " ts TIMESTAMP)"
    )
    c.execute("CREATE TABLE u (a INT, b DOUBLE PRECISION)")
    c.execute("CREATE TABLE w (k1 INT, k2 VARCHAR, flag BOOLEAN, PRIMARY KEY (k2, k1))")
    c.execute('CREATE TABLE "Mixed Case" ("Col A" INT)')
    yield c
    c.close()


def rows(con, sql: str, params=None) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def one(con, sql: str, params=None):
    result = rows(con, sql, params)
    assert len(result) == 1, result
    return result[0]


def oid_of(con, name: str) -> int:
    return one(con, "SELECT oid FROM pg_class WHERE relname = %s", [name])[0]


# ----------------------------------------------------------- psql 15 describe
# The texts below are what psql 15 sends (with ECHO_HIDDEN) to a server whose
# server_version is 13.x; '{oid}' stands for the table's OID psql found first.

PSQL_LIST = """SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ({kinds})
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""

PSQL_LIST_INDEXES = """SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner",
  c2.relname as "Table"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
     LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
     LEFT JOIN pg_catalog.pg_class c2 ON i.indrelid = c2.oid
WHERE c.relkind IN ('i','I','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""

PSQL_DATABASES = """SELECT d.datname as "Name",
       pg_catalog.pg_get_userbyid(d.datdba) as "Owner",
       pg_catalog.pg_encoding_to_char(d.encoding) as "Encoding",
       d.datcollate as "Collate",
       d.datctype as "Ctype",
       NULL as "ICU Locale",
       'libc' AS "Locale Provider",
       pg_catalog.array_to_string(d.datacl, E'\\n') AS "Access privileges"
FROM pg_catalog.pg_database d
ORDER BY 1;"""

PSQL_SCHEMAS = """SELECT n.nspname AS "Name",
  pg_catalog.pg_get_userbyid(n.nspowner) AS "Owner"
FROM pg_catalog.pg_namespace n
WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY 1;"""

PSQL_FUNCTIONS = """SELECT n.nspname as "Schema",
  p.proname as "Name",
  pg_catalog.pg_get_function_result(p.oid) as "Result data type",
  pg_catalog.pg_get_function_arguments(p.oid) as "Argument data types",
 CASE p.prokind
  WHEN 'a' THEN 'agg'
  WHEN 'w' THEN 'window'
  WHEN 'p' THEN 'proc'
  ELSE 'func'
 END as "Type"
FROM pg_catalog.pg_proc p
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE pg_catalog.pg_function_is_visible(p.oid)
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
ORDER BY 1, 2, 4;"""

PSQL_ROLES = """SELECT r.rolname, r.rolsuper, r.rolinherit,
  r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,
  r.rolconnlimit, r.rolvaliduntil,
  ARRAY(SELECT b.rolname
        FROM pg_catalog.pg_auth_members m
        JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid)
        WHERE m.member = r.oid) as memberof
, r.rolreplication
, r.rolbypassrls
FROM pg_catalog.pg_roles r
WHERE r.rolname !~ '^pg_'
ORDER BY 1;"""

PSQL_TYPES = """SELECT n.nspname as "Schema",
  pg_catalog.format_type(t.oid, NULL) AS "Name",
  pg_catalog.obj_description(t.oid, 'pg_type') as "Description"
FROM pg_catalog.pg_type t
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))
  AND NOT EXISTS(SELECT 1 FROM pg_catalog.pg_type el WHERE el.oid = t.typelem AND el.typarray = t.oid)
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_type_is_visible(t.oid)
ORDER BY 1, 2;"""

# \d <name>: the lookup, then one query after another about the relation found.
PSQL_DESCRIBE_LOOKUP = """SELECT c.oid,
  n.nspname,
  c.relname
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.~) '^({name})$' COLLATE pg_catalog.default
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 2, 3;"""

PSQL_DESCRIBE_TABLE = """SELECT c.relchecks, c.relkind, c.relhasindex, c.relhasrules, c.relhastriggers, c.relrowsecurity, c.relforcerowsecurity, false AS relhasoids, c.relispartition, '', c.reltablespace, CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END, c.relpersistence, c.relreplident, am.amname
FROM pg_catalog.pg_class c
 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
LEFT JOIN pg_catalog.pg_am am ON (c.relam = am.oid)
WHERE c.oid = '{oid}';"""

PSQL_DESCRIBE_COLUMNS = """SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull,
  (SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
   WHERE c.oid = a.attcollation AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
  a.attidentity,
  a.attgenerated
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '{oid}' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;"""

PSQL_DESCRIBE_INDEXES = """SELECT c2.relname, i.indisprimary, i.indisunique, i.indisclustered, i.indisvalid, pg_catalog.pg_get_indexdef(i.indexrelid, 0, true),
  pg_catalog.pg_get_constraintdef(con.oid, true), contype, condeferrable, condeferred, i.indisreplident, c2.reltablespace
FROM pg_catalog.pg_class c, pg_catalog.pg_class c2, pg_catalog.pg_index i
  LEFT JOIN pg_catalog.pg_constraint con ON (conrelid = i.indrelid AND conindid = i.indexrelid AND contype IN ('p','u','x'))
WHERE c.oid = '{oid}' AND c.oid = i.indrelid AND i.indexrelid = c2.oid
ORDER BY i.indisprimary DESC, c2.relname;"""

PSQL_DESCRIBE_POLICIES = """SELECT pol.polname, pol.polpermissive,
  CASE WHEN pol.polroles = '{{0}}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,
  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),
  CASE pol.polcmd
    WHEN 'r' THEN 'SELECT'
    WHEN 'a' THEN 'INSERT'
    WHEN 'w' THEN 'UPDATE'
    WHEN 'd' THEN 'DELETE'
    END AS cmd
FROM pg_catalog.pg_policy pol
WHERE pol.polrelid = '{oid}' ORDER BY 1;"""

PSQL_DESCRIBE_STATISTICS = """SELECT oid, stxrelid::pg_catalog.regclass, stxnamespace::pg_catalog.regnamespace AS nsp, stxname,
  (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(attname),', ')
   FROM pg_catalog.unnest(stxkeys) s(attnum)
   JOIN pg_catalog.pg_attribute a ON (stxrelid = a.attrelid AND
        a.attnum = s.attnum AND NOT attisdropped)) AS columns,
  'd' = any(stxkind) AS ndist_enabled,
  'f' = any(stxkind) AS deps_enabled,
  'm' = any(stxkind) AS mcv_enabled,
  stxstattarget
FROM pg_catalog.pg_statistic_ext
WHERE stxrelid = '{oid}'
ORDER BY 1;"""

PSQL_DESCRIBE_PUBLICATIONS = """SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
JOIN pg_catalog.pg_publication_rel pr ON p.oid = pr.prpubid
WHERE pr.prrelid = '{oid}'
UNION ALL
SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
WHERE p.puballtables AND pg_catalog.pg_relation_is_publishable('{oid}')
ORDER BY 1;"""

PSQL_DESCRIBE_PARENTS = """SELECT c.oid::pg_catalog.regclass
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhparent AND i.inhrelid = '{oid}'
  AND c.relkind != 'p' AND c.relkind != 'I'
ORDER BY inhseqno;"""

PSQL_DESCRIBE_CHILDREN = """SELECT c.oid::pg_catalog.regclass, c.relkind, false AS inhdetachpending, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhrelid AND i.inhparent = '{oid}'
ORDER BY pg_catalog.pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.oid::pg_catalog.regclass::pg_catalog.text;"""

PSQL_DESCRIBE_FOLLOW_UPS = [
    PSQL_DESCRIBE_POLICIES,
    PSQL_DESCRIBE_STATISTICS,
    PSQL_DESCRIBE_PUBLICATIONS,
    PSQL_DESCRIBE_PARENTS,
    PSQL_DESCRIBE_CHILDREN,
]


def test_psql_list_relations(con):
    # \d
    listed = rows(con, PSQL_LIST.format(kinds="'r','p','v','m','S','f',''"))
    assert listed == [
        ("public", "Mixed Case", "table", "root"),
        ("public", "t", "table", "root"),
        ("public", "u", "table", "root"),
        ("public", "w", "table", "root"),
    ]
    # \dt
    assert rows(con, PSQL_LIST.format(kinds="'r','p',''")) == listed
    # \dv, \dm: nothing of those kinds yet
    assert rows(con, PSQL_LIST.format(kinds="'v',''")) == []
    assert rows(con, PSQL_LIST.format(kinds="'m',''")) == []


def test_psql_list_indexes(con):
    assert rows(con, PSQL_LIST_INDEXES) == [
        ("public", "t_pkey", "index", "root", "t"),
        ("public", "w_pkey", "index", "root", "w"),
    ]


def test_psql_list_databases_schemas_functions_roles_types(con):
    assert rows(con, PSQL_DATABASES) == [("dev", "root", "UTF8", "C", "C", None, "libc", None)]
    assert rows(con, PSQL_SCHEMAS) == [("public", "root"), ("rw_catalog", "root")]
    assert rows(con, PSQL_FUNCTIONS) == []
    roles = rows(con, PSQL_ROLES)
    assert [r[0] for r in roles] == ["root"]
    assert roles[0][1] is True and roles[0][8] == []
    assert rows(con, PSQL_TYPES) == []


def test_psql_describe_table(con):
    found = rows(con, PSQL_DESCRIBE_LOOKUP.format(name="t"))
    assert [(r[1], r[2]) for r in found] == [("public", "t")]
    oid = found[0][0]
    assert oid == oid_of(con, "t")

    table = one(con, PSQL_DESCRIBE_TABLE.format(oid=oid))
    # relchecks, relkind, relhasindex, ..., relpersistence, relreplident, amname
    assert table[:3] == (0, "r", True)
    assert table[11] == ""  # not a typed table
    assert table[12:] == ("p", "d", "heap")

    columns = rows(con, PSQL_DESCRIBE_COLUMNS.format(oid=oid))
    # psql's "Column | Type | Collation | Nullable | Default"
    assert [(c[0], c[1], c[4], c[3], c[2]) for c in columns] == [
        ("id", "bigint", None, True, None),
        ("name", "character varying", None, True, None),
        ("price", "numeric(10,2)", None, False, None),
        ("ts", "timestamp without time zone", None, False, None),
    ]
    assert {(c[5], c[6]) for c in columns} == {("", "")}  # no identity, not generated

    indexes = rows(con, PSQL_DESCRIBE_INDEXES.format(oid=oid))
    assert indexes == [
        (
            "t_pkey", True, True, False, True,
            "CREATE UNIQUE INDEX t_pkey ON public.t USING btree (id)",
            "PRIMARY KEY (id)", "p", False, False, False, 0,
        )
    ]  # fmt: skip
    for query in PSQL_DESCRIBE_FOLLOW_UPS:
        assert rows(con, query.format(oid=oid)) == []


def test_psql_describe_table_without_primary_key(con):
    oid = one(con, PSQL_DESCRIBE_LOOKUP.format(name="u"))[0]
    assert one(con, PSQL_DESCRIBE_TABLE.format(oid=oid))[:3] == (0, "r", False)
    columns = rows(con, PSQL_DESCRIBE_COLUMNS.format(oid=oid))
    assert [(c[0], c[1], c[3]) for c in columns] == [
        ("a", "integer", False),
        ("b", "double precision", False),
    ]
    assert rows(con, PSQL_DESCRIBE_INDEXES.format(oid=oid)) == []
    for query in PSQL_DESCRIBE_FOLLOW_UPS:
        assert rows(con, query.format(oid=oid)) == []


def test_psql_describe_composite_key_and_quoted_names(con):
    oid = one(con, PSQL_DESCRIBE_LOOKUP.format(name="w"))[0]
    index = one(con, PSQL_DESCRIBE_INDEXES.format(oid=oid))
    assert index[5] == "CREATE UNIQUE INDEX w_pkey ON public.w USING btree (k2, k1)"
    assert index[6] == "PRIMARY KEY (k2, k1)"
    found = one(con, PSQL_DESCRIBE_LOOKUP.format(name="Mixed Case"))
    columns = rows(con, PSQL_DESCRIBE_COLUMNS.format(oid=found[0]))
    assert [(c[0], c[1]) for c in columns] == [("Col A", "integer")]


def test_psql_describe_unknown_relation(con):
    assert rows(con, PSQL_DESCRIBE_LOOKUP.format(name="nope")) == []


def test_psql_describe_system_view(con):
    oid = one(con, PSQL_DESCRIBE_LOOKUP.format(name="pg_am"))[0]
    assert one(con, PSQL_DESCRIBE_TABLE.format(oid=oid))[1] == "v"
    columns = rows(con, PSQL_DESCRIBE_COLUMNS.format(oid=oid))
    assert [(c[0], c[1]) for c in columns] == [
        ("oid", "oid"),
        ("amname", "name"),
        ("amhandler", "regproc"),
        ("amtype", '"char"'),
    ]


# ------------------------------------------------------------ OID consistency


def test_oids_agree_across_catalogs(con):
    t = oid_of(con, "t")
    assert t >= 1001  # the table's catalog id
    assert one(con, "SELECT id FROM rw_catalog.rw_tables WHERE name = 't'")[0] == t
    assert {
        r[0] for r in rows(con, "SELECT attrelid FROM pg_attribute WHERE attname = 'price'")
    } == {t}
    assert one(con, "SELECT relnamespace FROM pg_class WHERE oid = %s", [t])[0] == 2200
    assert one(con, "SELECT oid FROM pg_namespace WHERE nspname = 'public'")[0] == 2200
    assert one(con, "SELECT oid FROM pg_namespace WHERE nspname = 'pg_catalog'")[0] == 11
    # Column type OIDs are those of rivulet.common.types, and pg_type has each of them.
    types = dict(rows(con, "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s", [t]))
    assert types == {"id": 20, "name": 1043, "price": 1700, "ts": 1114}
    names = dict(rows(con, "SELECT oid, typname FROM pg_type WHERE oid IN (20, 1043, 1700, 1114)"))
    assert names == {20: "int8", 1043: "varchar", 1700: "numeric", 1114: "timestamp"}
    # numeric(10,2)'s typmod
    assert (
        one(con, "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s AND attnum = 3", [t])[0]
        == (10 << 16) + 2 + 4
    )
    # the primary key: constraint -> index -> index relation -> its columns
    con_row = one(
        con,
        "SELECT oid, conname, contype, conkey, conindid FROM pg_constraint WHERE conrelid = %s",
        [t],
    )
    assert con_row[1:4] == ("t_pkey", "p", [1])
    index = one(
        con,
        "SELECT indrelid, indkey, indisprimary FROM pg_index WHERE indexrelid = %s",
        [con_row[4]],
    )
    assert index == (t, [1], True)
    assert one(con, "SELECT relname, relkind FROM pg_class WHERE oid = %s", [con_row[4]]) == (
        "t_pkey",
        "i",
    )
    assert rows(con, "SELECT attname FROM pg_attribute WHERE attrelid = %s", [con_row[4]]) == [
        ("id",)
    ]
    # no two relations share an OID
    assert one(con, "SELECT count(*) = count(DISTINCT oid) FROM pg_class")[0] is True


def test_oid_columns_have_the_oid_type(con):
    cur = con.execute("SELECT oid, relnamespace, relname FROM pg_class LIMIT 1")
    assert [d[1] for d in cur.description] == [26, 26, 1043]
    cur = con.execute("SELECT indkey, indclass FROM pg_index LIMIT 1")
    assert [d[1] for d in cur.description] == [1005, 1028]  # int2[], oid[]


def test_system_relations_are_listed(con):
    assert one(
        con,
        "SELECT n.nspname, c.relkind FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE c.relname = 'pg_attribute'",
    ) == ("pg_catalog", "v")
    assert (
        one(con, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'pg_class'::regclass")[0] == 33
    )
    tables = rows(
        con,
        "SELECT table_schema, table_name, table_type FROM information_schema.tables"
        " WHERE table_name IN ('t', 'pg_type', 'columns', 'rw_tables') ORDER BY 1, 2",
    )
    assert tables == [
        ("information_schema", "columns", "VIEW"),
        ("pg_catalog", "pg_type", "VIEW"),
        ("public", "t", "BASE TABLE"),
        ("rw_catalog", "rw_tables", "VIEW"),
    ]


# -------------------------------------------------------- information_schema


def test_information_schema_columns(con):
    cols = rows(
        con,
        "SELECT column_name, ordinal_position, is_nullable, data_type, udt_name,"
        " numeric_precision, numeric_scale FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = 't' ORDER BY ordinal_position",
    )
    assert cols == [
        ("id", 1, "NO", "bigint", "int8", 64, 0),
        ("name", 2, "NO", "character varying", "varchar", None, None),
        ("price", 3, "YES", "numeric", "numeric", 10, 2),
        ("ts", 4, "YES", "timestamp without time zone", "timestamp", None, None),
    ]


def test_information_schema_keys(con):
    assert rows(
        con,
        "SELECT constraint_name, table_name, constraint_type FROM"
        " information_schema.table_constraints WHERE table_schema = 'public' ORDER BY 1",
    ) == [("t_pkey", "t", "PRIMARY KEY"), ("w_pkey", "w", "PRIMARY KEY")]
    assert rows(
        con,
        "SELECT column_name, ordinal_position FROM information_schema.key_column_usage"
        " WHERE table_name = 'w' ORDER BY ordinal_position",
    ) == [("k2", 1), ("k1", 2)]
    assert rows(
        con,
        "SELECT schema_name FROM information_schema.schemata ORDER BY 1",
    ) == [("information_schema",), ("pg_catalog",), ("public",), ("rw_catalog",)]


def test_rw_catalog_basics(con):
    assert rows(con, "SELECT name FROM rw_tables ORDER BY name") == [
        ("Mixed Case",),
        ("t",),
        ("u",),
        ("w",),
    ]
    assert rows(
        con,
        "SELECT c.name, c.is_hidden, c.is_primary_key FROM rw_columns c JOIN rw_tables t"
        " ON t.id = c.relation_id WHERE t.name = 'u' ORDER BY c.position",
    ) == [("a", False, False), ("b", False, False), ("_row_id", True, True)]
    assert rows(con, "SELECT name FROM rw_catalog.rw_schemas ORDER BY 1") == [
        ("information_schema",),
        ("pg_catalog",),
        ("public",),
        ("rw_catalog",),
    ]
    assert rows(con, "SELECT name FROM rw_databases") == [("dev",)]


# ----------------------------------------------------- other kinds of objects


def test_views_and_materialized_views_are_listed(con):
    """Objects of other kinds show with their relkind (rows put in the meta tables
    directly: the statements creating them are not there yet)."""
    c = rivulet.connect()
    try:
        store = c._thread.engine.store
        cur = store.cursor()
        for oid, kind, name, definition in [
            (5001, "materialized view", "mv", "CREATE MATERIALIZED VIEW mv AS SELECT 1 AS x"),
            (5002, "view", "v", "CREATE VIEW v AS SELECT 2 AS x"),
        ]:
            cur.execute(
                "INSERT INTO meta.objects VALUES (?, ?, 'public', ?, ?, 'root', now(), [], [], '{}')",
                [oid, kind, name, definition],
            )
            cur.execute(
                "INSERT INTO meta.columns VALUES (?, 0, 'x', 'integer', NULL, NULL, false, false, 'INTEGER')",
                [oid],
            )
        assert rows(c, PSQL_LIST.format(kinds="'m',''")) == [
            ("public", "mv", "materialized view", "root")
        ]
        assert rows(c, PSQL_LIST.format(kinds="'v',''")) == [("public", "v", "view", "root")]
        assert rows(c, "SELECT matviewname, definition FROM pg_matviews") == [
            ("mv", "SELECT 1 AS x")
        ]
        assert rows(c, "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'") == [
            ("v", "SELECT 2 AS x")
        ]
        assert one(c, "SELECT definition FROM pg_views WHERE viewname = 'pg_class'") == (None,)
        assert one(c, "SELECT pg_get_viewdef('mv'::regclass)")[0] == "SELECT 1 AS x"
        assert rows(c, "SELECT name FROM rw_materialized_views") == [("mv",)]
        assert rows(
            c,
            "SELECT table_name, table_type FROM information_schema.tables"
            " WHERE table_schema = 'public' ORDER BY 1",
        ) == [("mv", "MATERIALIZED VIEW"), ("v", "VIEW")]
    finally:
        c.close()


# ------------------------------------------------------ PostgreSQL syntax


def test_regclass_casts(con):
    t = oid_of(con, "t")
    assert one(con, "SELECT 't'::regclass::oid, 'public.t'::regclass::oid")[0:2] == (t, t)
    assert one(con, "SELECT oid FROM pg_class WHERE oid = 't'::regclass")[0] == t
    # shown as a result column or cast to text, a regclass is its name
    assert one(con, "SELECT %s::oid::regclass, 't'::regclass::text", [t]) == ("t", "t")
    assert one(con, "SELECT 'pg_catalog.pg_class'::regclass::text")[0] == "pg_class"
    assert one(con, """SELECT '"Mixed Case"'::regclass::text""")[0] == '"Mixed Case"'
    assert one(con, "SELECT to_regclass('nope'), to_regclass('t')::oid") == (None, t)
    with pytest.raises(Error, match='relation "nope" does not exist'):
        con.execute("SELECT 'nope'::regclass")
    # a parameter is a name, as psycopg sends it
    assert one(con, "SELECT CAST(%s AS REGCLASS)::oid", ["t"])[0] == t


def test_regtype_regnamespace_regrole_casts(con):
    assert one(
        con, "SELECT 'int4'::regtype::oid, 'integer'::regtype::oid, 'int8[]'::regtype::oid"
    ) == (
        23,
        23,
        1016,
    )
    assert one(
        con, "SELECT 1043::regtype::text, 1016::regtype::text, 'numeric(10,2)'::regtype::text"
    ) == (
        "character varying",
        "bigint[]",
        "numeric",
    )
    assert one(con, "SELECT to_regtype('hstore'), to_regtype('pg_catalog.float8')::oid") == (
        None,
        701,
    )
    assert one(con, "SELECT 'public'::regnamespace::oid, 2200::regnamespace::text") == (
        2200,
        "public",
    )
    assert one(con, "SELECT 'root'::regrole::oid, 1::regrole::text") == (1, "root")
    assert one(con, "SELECT 'array_in'::regproc::text, 0::regproc::text") == ("array_in", "-")


def test_postgres_syntax(con):
    assert one(con, "SELECT relname FROM pg_class WHERE relname OPERATOR(pg_catalog.~) '^t$'") == (
        "t",
    )
    assert (
        one(con, "SELECT count(*) FROM pg_class WHERE relname !~ '^pg_' AND relname ~ '^(t|u)$'")[0]
        == 2
    )
    assert one(con, "SELECT 'a' COLLATE pg_catalog.default, E'x\\ny'") == ("a", "x\ny")
    assert one(con, "SELECT pg_catalog.format_type(1700, 655366), pg_catalog.lower('A')") == (
        "numeric(10,2)",
        "a",
    )
    assert one(
        con, "SELECT '{a,\"b c\",NULL}'::text[], '{}'::int[], '{1,2}'::pg_catalog.int4[]"
    ) == (
        ["a", "b c", None],
        [],
        [1, 2],
    )
    assert one(
        con, "SELECT relname FROM pg_class WHERE relkind = ANY (ARRAY['i']) AND relname = 't_pkey'"
    ) == ("t_pkey",)
    assert one(
        con, "SELECT (string_to_array('a,b', ','))[2], array_to_string(ARRAY[1, 2], '-')"
    ) == (
        "b",
        "1-2",
    )
    assert one(
        con,
        "SELECT array_agg(attname ORDER BY attnum DESC) FROM pg_attribute"
        " WHERE attrelid = 't'::regclass",
    ) == (["ts", "price", "name", "id"],)
    assert one(
        con,
        "SELECT x, i FROM (SELECT unnest(ARRAY[7, 8]) AS x, generate_subscripts(ARRAY[7, 8], 1) AS i) s WHERE i = 2",
    ) == (8, 2)
    assert one(con, "SELECT 'x'::name, 'y'::\"char\", 5::oid, 6::pg_catalog.oid") == (
        "x",
        "y",
        5,
        6,
    )
    assert one(con, "SELECT pg_catalog.pg_get_userbyid(1), pg_get_userbyid(99)") == (
        "root",
        "unknown (OID=99)",
    )
    assert one(con, "SELECT json_build_object('a', 1)::VARCHAR")[0] == '{"a":1}'
    assert one(con, "SELECT current_setting(%s)", ["search_path"])[0] == '"$user", public'


def test_catalog_functions(con):
    t = oid_of(con, "t")
    idx, cons = one(con, "SELECT conindid, oid FROM pg_constraint WHERE conrelid = %s", [t])
    assert one(con, "SELECT pg_get_indexdef(%s), pg_get_indexdef(%s, 1, true)", [idx, idx]) == (
        "CREATE UNIQUE INDEX t_pkey ON public.t USING btree (id)",
        "id",
    )
    assert one(con, "SELECT pg_get_constraintdef(%s)", [cons])[0] == "PRIMARY KEY (id)"
    assert one(
        con,
        "SELECT pg_table_is_visible(%s), pg_type_is_visible(23), obj_description(%s, 'pg_class'),"
        " col_description(%s, 1), pg_get_expr(NULL, %s), has_table_privilege('t', 'select')",
        [t, t, t, t],
    ) == (True, True, None, None, None, True)
    assert one(
        con, "SELECT format_type(1007, NULL), format_type(0, NULL), format_type(99999, NULL)"
    ) == (
        "integer[]",
        "-",
        "???",
    )
    assert one(con, "SELECT pg_encoding_to_char(6), pg_size_pretty(0), quote_ident('a b')") == (
        "UTF8",
        "0 bytes",
        '"a b"',
    )


def test_search_path_visibility(con):
    con.execute("SET search_path TO rw_catalog")
    try:
        assert one(con, "SELECT pg_table_is_visible('public.t'::regclass)")[0] is False
        assert rows(con, PSQL_DESCRIBE_LOOKUP.format(name="t")) == []
        assert one(con, "SELECT 'public.t'::regclass::text")[0] == "public.t"
    finally:
        con.execute("SET search_path TO DEFAULT")
    assert one(con, "SELECT pg_table_is_visible('t'::regclass)")[0] is True


def test_reg_lookup_errors_carry_postgres_sqlstates(con):
    for sql, sqlstate, message in [
        ("SELECT 'nope'::regclass", "42P01", 'relation "nope" does not exist'),
        ("SELECT 'nope'::regtype", "42704", 'type "nope" does not exist'),
        ("SELECT 'nope'::regnamespace", "3F000", 'schema "nope" does not exist'),
        ("SELECT 'nope'::regrole", "42704", 'role "nope" does not exist'),
        # psql: \sf nope
        (
            "SELECT 'nope'::pg_catalog.regproc::pg_catalog.oid",
            "42883",
            'function "nope" does not exist',
        ),
    ]:
        with pytest.raises(Error) as info:
            con.execute(sql)
        assert (info.value.sqlstate, str(info.value).split("\n")[0]) == (sqlstate, message)


def test_session_relations(con):
    con.execute("SET application_name = 'catalog-test'")
    try:
        assert one(
            con, "SELECT setting, source FROM pg_settings WHERE name = 'application_name'"
        ) == ("catalog-test", "session")
        activity = one(
            con, "SELECT datname, usename, application_name, state, usesysid FROM pg_stat_activity"
        )
        assert activity == ("dev", "root", "catalog-test", "active", 1)
    finally:
        con.execute("RESET application_name")
    assert one(
        con, "SELECT source FROM pg_catalog.pg_settings WHERE name = 'application_name'"
    ) == ("default",)
    # a CTE of that name is the CTE
    assert one(con, "WITH pg_settings AS (SELECT 7 AS x) SELECT x FROM pg_settings") == (7,)


def test_pg_settings_and_roles(con):
    assert (
        one(con, "SELECT setting FROM pg_settings WHERE name = 'server_version_num'")[0] == "130014"
    )
    assert rows(con, "SELECT rolname FROM pg_roles") == [("root",)]
    assert rows(con, "SELECT usename FROM pg_user") == [("root",)]
    assert rows(con, "SELECT amname FROM pg_am ORDER BY 1") == [("btree",), ("heap",)]


# ----------------------------------------------------------------- security


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM rw_sys.i_rel",
        "SELECT * FROM rw_sys.pg__pg_class",
        "SELECT * FROM pg_catalog.i_rel",
        "SELECT * FROM i_types",
        "SELECT * FROM meta.objects",
        "SELECT * FROM state.t1001",
        "SELECT * FROM pg_catalog.duckdb_tables",
        "SELECT * FROM information_schema.duckdb_columns",
        "SELECT rw_sys.format_type(23, NULL)",
        "SELECT main.format_type(23, NULL)",
        "SELECT state.lower('a')",
        "SELECT pg_catalog.duckdb_settings()",
        "SELECT * FROM pg_catalog.duckdb_settings()",
        "SELECT * FROM main.unnest([1])",
        "SELECT regclass_in('t', ['public'], true)",
        "SELECT role_oid('root')",
        "SELECT parse_ident('a.b')",
        "SELECT view_query(1001)",
        "SELECT pg_catalog.regtype_out(23)",
        "SELECT rw_div(1, 2)",
        "SELECT rw_sys.pg__pg_class.oid FROM pg_class",
    ],
)
def test_internal_names_are_out_of_reach(con, sql):
    with pytest.raises(Error):
        con.execute(sql).fetchall()


def test_a_cte_cannot_hide_a_system_view(con):
    with pytest.raises(Error):
        con.execute("WITH x AS (SELECT 1) SELECT * FROM duckdb_settings()").fetchall()


# ------------------------------------------------------------------ start-up


def test_engine_start_stays_fast():
    start = time.perf_counter()
    c = rivulet.connect()
    elapsed = time.perf_counter() - start
    c.close()
    assert elapsed < 1.0
