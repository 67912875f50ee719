"""System relations: ``pg_catalog``, ``information_schema`` and ``rw_catalog``.

Each is a DuckDB view in the ``rw_sys`` schema over the meta tables, so it always shows
the last committed catalog, and PostgreSQL clients (psql, drivers, ORMs) can introspect
Rivulet as they would PostgreSQL. Functions PostgreSQL has and DuckDB lacks are macros in
the same schema; the binder renames calls to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rivulet.common.types import COLUMN_TYPES, DataType
from rivulet.storage.state_store import META_SCHEMA

SYS_SCHEMA = "rw_sys"


@dataclass(frozen=True, slots=True)
class SystemView:
    schema: str  # the schema users name: pg_catalog, information_schema or rw_catalog
    name: str
    sql: str

    @property
    def duckdb_name(self) -> str:
        prefix = {"pg_catalog": "pg", "information_schema": "is", "rw_catalog": "rw"}[self.schema]
        return f"{prefix}__{self.name}"


def _types_values() -> str:
    """VALUES rows (oid, typname, typlen, typcategory, typarray) of pg_type."""
    extra = [
        DataType("text", "VARCHAR", 25, -1),
        DataType("oid", "UINTEGER", 26, 4),
        DataType("name", "VARCHAR", 19, 64),
        DataType("char", "VARCHAR", 18, 1),
        DataType("regclass", "UINTEGER", 2205, 4),
        DataType("regtype", "UINTEGER", 2206, 4),
        DataType("regproc", "UINTEGER", 24, 4),
        DataType("int2vector", "SMALLINT[]", 22, -1),
        DataType("oidvector", "UINTEGER[]", 30, -1),
        DataType("uuid", "UUID", 2950, 16),
        DataType("bpchar", "VARCHAR", 1042, -1),
        DataType("json", "JSON", 114, -1),
        DataType("timetz", "TIMETZ", 1266, 12),
        DataType("unknown", "VARCHAR", 705, -2),
        DataType("record", "VARCHAR", 2249, -1),
        DataType("anyelement", "VARCHAR", 2283, 4),
        DataType("void", "VARCHAR", 2278, 4),
    ]
    short = {
        "boolean": ("bool", "B"),
        "smallint": ("int2", "N"),
        "integer": ("int4", "N"),
        "bigint": ("int8", "N"),
        "real": ("float4", "N"),
        "double precision": ("float8", "N"),
        "numeric": ("numeric", "N"),
        "character varying": ("varchar", "S"),
        "date": ("date", "D"),
        "time without time zone": ("time", "D"),
        "timestamp without time zone": ("timestamp", "D"),
        "timestamp with time zone": ("timestamptz", "D"),
        "interval": ("interval", "T"),
        "jsonb": ("jsonb", "U"),
        "bytea": ("bytea", "U"),
    }
    from rivulet.common.types import _ARRAY_OIDS

    rows = []
    for t in COLUMN_TYPES:
        name, cat = short[t.name]
        rows.append((t.oid, name, t.typlen, cat, _ARRAY_OIDS.get(t.oid, 0), 0))
    for t in extra:
        cat = {"text": "S", "name": "S", "char": "Z", "bpchar": "S", "json": "U"}.get(t.name, "U")
        rows.append((t.oid, t.name, t.typlen, cat, _ARRAY_OIDS.get(t.oid, 0), 0))
    for elem_oid, arr_oid in _ARRAY_OIDS.items():
        elem = next((r for r in rows if r[0] == elem_oid), None)
        if elem is not None:
            rows.append((arr_oid, "_" + elem[1], -1, "A", 0, elem_oid))
    return ", ".join(
        f"({oid}, '{name}', {length}, '{cat}', {arr}, {elem})"
        for oid, name, length, cat, arr, elem in rows
    )


# Views over the meta tables. ``o`` = meta.objects, ``c`` = meta.columns.
_USER_OBJECTS = f"""
    SELECT o.id AS oid, o.name AS relname, s.id AS relnamespace, o.schema_name, o.kind,
           o.owner, o.definition, o.created_at
    FROM {META_SCHEMA}.objects o JOIN {META_SCHEMA}.schemas s ON s.name = o.schema_name
"""

_TYPE_OID_OF = """CASE c.type_name
        WHEN 'boolean' THEN 16 WHEN 'smallint' THEN 21 WHEN 'integer' THEN 23
        WHEN 'bigint' THEN 20 WHEN 'real' THEN 700 WHEN 'double precision' THEN 701
        WHEN 'numeric' THEN 1700 WHEN 'character varying' THEN 1043 WHEN 'date' THEN 1082
        WHEN 'time without time zone' THEN 1083 WHEN 'timestamp without time zone' THEN 1114
        WHEN 'timestamp with time zone' THEN 1184 WHEN 'interval' THEN 1186
        WHEN 'jsonb' THEN 3802 WHEN 'bytea' THEN 17 ELSE 25 END"""

_TYPE_DISPLAY = """CASE WHEN c.type_name = 'numeric' AND c.type_precision IS NOT NULL
        THEN 'numeric(' || c.type_precision || ',' || c.type_scale || ')'
        ELSE c.type_name END"""

_RELKIND = "CASE o.kind WHEN 'table' THEN 'r' WHEN 'materialized view' THEN 'm' WHEN 'view' THEN 'v' WHEN 'source' THEN 'r' WHEN 'index' THEN 'i' ELSE 'r' END"

VIEWS: list[SystemView] = [
    SystemView(
        "pg_catalog",
        "pg_namespace",
        f"""SELECT id::UINTEGER AS oid, name AS nspname, 1::UINTEGER AS nspowner,
                   NULL::VARCHAR[] AS nspacl
            FROM {META_SCHEMA}.schemas
            UNION ALL SELECT * FROM (VALUES
                (11::UINTEGER, 'pg_catalog', 1::UINTEGER, NULL::VARCHAR[]),
                (12131, 'information_schema', 1, NULL),
                (12132, 'rw_catalog', 1, NULL)) v""",
    ),
    SystemView(
        "pg_catalog",
        "pg_class",
        f"""SELECT o.oid::UINTEGER AS oid, o.relname, o.relnamespace::UINTEGER AS relnamespace,
                   0::UINTEGER AS reltype, 0::UINTEGER AS reloftype, 1::UINTEGER AS relowner,
                   0::UINTEGER AS relam, o.oid::UINTEGER AS relfilenode,
                   0::UINTEGER AS reltablespace, 0 AS relpages, -1.0::FLOAT AS reltuples,
                   0 AS relallvisible, 0::UINTEGER AS reltoastrelid, false AS relhasindex,
                   false AS relisshared, 'p' AS relpersistence,
                   {_RELKIND.replace("o.kind", "o.kind")} AS relkind,
                   (SELECT count(*) FROM {META_SCHEMA}.columns c
                    WHERE c.object_id = o.oid AND NOT c.hidden)::SMALLINT AS relnatts,
                   0::SMALLINT AS relchecks, false AS relhasrules, false AS relhastriggers,
                   false AS relhassubclass, false AS relrowsecurity,
                   false AS relforcerowsecurity, true AS relispopulated,
                   'd' AS relreplident, false AS relispartition, 0::UINTEGER AS relrewrite,
                   0::UINTEGER AS relfrozenxid, 0::UINTEGER AS relminmxid,
                   NULL::VARCHAR[] AS relacl, NULL::VARCHAR[] AS reloptions,
                   NULL::VARCHAR AS relpartbound
            FROM ({_USER_OBJECTS}) o""",
    ),
    SystemView(
        "pg_catalog",
        "pg_attribute",
        f"""SELECT c.object_id::UINTEGER AS attrelid, c.name AS attname,
                   ({_TYPE_OID_OF})::UINTEGER AS atttypid, -1 AS attstattarget,
                   -1::SMALLINT AS attlen, (c.position + 1)::SMALLINT AS attnum,
                   0 AS attndims, -1 AS attcacheoff,
                   (CASE WHEN c.type_name = 'numeric' AND c.type_precision IS NOT NULL
                     THEN (c.type_precision * 65536 + c.type_scale + 4) ELSE -1 END)::INTEGER
                     AS atttypmod,
                   false AS attbyval, 'i' AS attalign, 'p' AS attstorage,
                   '' AS attcompression, c.not_null AS attnotnull, false AS atthasdef,
                   false AS atthasmissing, '' AS attidentity, '' AS attgenerated,
                   false AS attisdropped, true AS attislocal, 0 AS attinhcount,
                   0::UINTEGER AS attcollation, NULL::VARCHAR[] AS attacl,
                   NULL::VARCHAR[] AS attoptions, NULL::VARCHAR[] AS attfdwoptions,
                   NULL::VARCHAR AS attmissingval
            FROM {META_SCHEMA}.columns c WHERE NOT c.hidden""",
    ),
    SystemView(
        "pg_catalog",
        "pg_type",
        f"""SELECT oid::UINTEGER AS oid, typname, 11::UINTEGER AS typnamespace,
                   1::UINTEGER AS typowner, typlen::SMALLINT AS typlen,
                   typlen > 0 AND typlen <= 8 AS typbyval,
                   CASE WHEN typcategory = 'A' THEN 'b' ELSE 'b' END AS typtype,
                   typcategory, false AS typispreferred, true AS typisdefined,
                   ',' AS typdelim, 0::UINTEGER AS typrelid, elem::UINTEGER AS typelem,
                   arr::UINTEGER AS typarray, typname || 'in' AS typinput,
                   typname || 'out' AS typoutput, typname || 'recv' AS typreceive,
                   typname || 'send' AS typsend, '-' AS typmodin, '-' AS typmodout,
                   '-' AS typanalyze, 'i' AS typalign, 'p' AS typstorage,
                   false AS typnotnull, 0::UINTEGER AS typbasetype, -1 AS typtypmod,
                   0 AS typndims, 0::UINTEGER AS typcollation, NULL AS typdefaultbin,
                   NULL::VARCHAR AS typdefault, NULL::VARCHAR[] AS typacl
            FROM (VALUES {_types_values()}) v(oid, typname, typlen, typcategory, arr, elem)""",
    ),
    SystemView(
        "pg_catalog",
        "pg_database",
        """SELECT 1::UINTEGER AS oid, 'dev' AS datname, 1::UINTEGER AS datdba,
                  6 AS encoding, 'C' AS datlocprovider, false AS datistemplate,
                  true AS datallowconn, -1 AS datconnlimit, 0::UINTEGER AS datfrozenxid,
                  0::UINTEGER AS datminmxid, 1663::UINTEGER AS dattablespace,
                  'C' AS datcollate, 'C' AS datctype, NULL::VARCHAR AS daticulocale,
                  NULL::VARCHAR AS daticurules, NULL::VARCHAR AS datcollversion,
                  NULL::VARCHAR[] AS datacl""",
    ),
    SystemView(
        "pg_catalog",
        "pg_tables",
        f"""SELECT o.schema_name AS schemaname, o.relname AS tablename,
                   o.owner AS tableowner, NULL::VARCHAR AS tablespace, false AS hasindexes,
                   false AS hasrules, false AS hastriggers, false AS rowsecurity
            FROM ({_USER_OBJECTS}) o WHERE o.kind = 'table'""",
    ),
    SystemView(
        "information_schema",
        "tables",
        f"""SELECT 'dev' AS table_catalog, o.schema_name AS table_schema,
                   o.relname AS table_name,
                   CASE o.kind WHEN 'view' THEN 'VIEW' WHEN 'materialized view'
                        THEN 'MATERIALIZED VIEW' ELSE 'BASE TABLE' END AS table_type,
                   NULL::VARCHAR AS self_referencing_column_name,
                   NULL::VARCHAR AS reference_generation, NULL::VARCHAR AS user_defined_type_catalog,
                   NULL::VARCHAR AS user_defined_type_schema, NULL::VARCHAR AS user_defined_type_name,
                   'YES' AS is_insertable_into, 'NO' AS is_typed,
                   NULL::VARCHAR AS commit_action
            FROM ({_USER_OBJECTS}) o""",
    ),
    SystemView(
        "information_schema",
        "columns",
        f"""SELECT 'dev' AS table_catalog, o.schema_name AS table_schema,
                   o.name AS table_name, c.name AS column_name,
                   (c.position + 1)::INTEGER AS ordinal_position,
                   NULL::VARCHAR AS column_default,
                   CASE WHEN c.not_null THEN 'NO' ELSE 'YES' END AS is_nullable,
                   c.type_name AS data_type,
                   NULL::INTEGER AS character_maximum_length,
                   c.type_precision AS numeric_precision, c.type_scale AS numeric_scale,
                   ({_TYPE_DISPLAY}) AS udt_name
            FROM {META_SCHEMA}.columns c JOIN {META_SCHEMA}.objects o ON o.id = c.object_id
            WHERE NOT c.hidden""",
    ),
    SystemView(
        "information_schema",
        "schemata",
        f"""SELECT 'dev' AS catalog_name, name AS schema_name, owner AS schema_owner
            FROM {META_SCHEMA}.schemas
            UNION ALL SELECT * FROM (VALUES ('dev', 'pg_catalog', 'root'),
                ('dev', 'information_schema', 'root'), ('dev', 'rw_catalog', 'root')) v""",
    ),
    SystemView(
        "rw_catalog",
        "rw_tables",
        f"""SELECT o.oid::INTEGER AS id, o.relname AS name, o.relnamespace::INTEGER AS schema_id,
                   1 AS owner, o.definition, NULL::VARCHAR AS append_only,
                   o.created_at AS created_at
            FROM ({_USER_OBJECTS}) o WHERE o.kind = 'table'""",
    ),
    SystemView(
        "rw_catalog",
        "rw_schemas",
        f"""SELECT id::INTEGER AS id, name, 1 AS owner FROM {META_SCHEMA}.schemas""",
    ),
]

# PostgreSQL functions that DuckDB lacks or defines differently, as macros.
MACROS: dict[str, str] = {
    # PostgreSQL raises on division by zero where DuckDB yields NULL.
    "rw_div": "(a, b) AS CASE WHEN b = 0 THEN error('division by zero') ELSE a / b END",
    "rw_mod": "(a, b) AS CASE WHEN b = 0 THEN error('division by zero') ELSE a % b END",
    "format_type": f"""(type_oid, typemod) AS (
        SELECT CASE WHEN typname = 'numeric' AND typemod > 4
            THEN 'numeric(' || ((typemod - 4) // 65536) || ',' || ((typemod - 4) % 65536) || ')'
            ELSE CASE typname WHEN 'int4' THEN 'integer' WHEN 'int8' THEN 'bigint'
                 WHEN 'int2' THEN 'smallint' WHEN 'bool' THEN 'boolean'
                 WHEN 'float4' THEN 'real' WHEN 'float8' THEN 'double precision'
                 WHEN 'varchar' THEN 'character varying'
                 WHEN 'timestamp' THEN 'timestamp without time zone'
                 WHEN 'timestamptz' THEN 'timestamp with time zone'
                 WHEN 'time' THEN 'time without time zone' ELSE typname END END
        FROM {SYS_SCHEMA}.pg__pg_type WHERE oid = type_oid)""",
    "pg_table_is_visible": "(rel_oid) AS true",
    "pg_type_is_visible": "(type_oid) AS true",
    "pg_function_is_visible": "(fn_oid) AS true",
    "pg_get_userbyid": "(role_oid) AS 'root'",
    "obj_description": "(obj_oid, catalog_name := NULL) AS NULL::VARCHAR",
    "col_description": "(rel_oid, col_num) AS NULL::VARCHAR",
    "shobj_description": "(obj_oid, catalog_name) AS NULL::VARCHAR",
    "pg_get_expr": "(expr, rel_oid, pretty := false) AS NULL::VARCHAR",
    "pg_get_indexdef": "(index_oid, col := 0, pretty := false) AS NULL::VARCHAR",
    "pg_get_constraintdef": "(con_oid, pretty := false) AS NULL::VARCHAR",
    "pg_get_viewdef": "(view_oid, pretty := false) AS NULL::VARCHAR",
    "pg_encoding_to_char": "(enc) AS 'UTF8'",
    "pg_is_in_recovery": "() AS false",
    "has_table_privilege": "(a, b, c := NULL) AS true",
    "has_schema_privilege": "(a, b, c := NULL) AS true",
    "has_database_privilege": "(a, b, c := NULL) AS true",
    "pg_relation_size": "(rel_oid) AS 0::BIGINT",
    "pg_total_relation_size": "(rel_oid) AS 0::BIGINT",
    "pg_size_pretty": "(n) AS format_bytes(n::BIGINT)",
    "quote_ident": """(s) AS CASE WHEN regexp_matches(s, '^[a-z_][a-z0-9_]*$') THEN s
        ELSE '"' || replace(s, '"', '""') || '"' END""",
    "quote_literal": """(s) AS '''' || replace(s::VARCHAR, '''', '''''') || ''''""",
    "every": "(x) AS bool_and(x)",
    "jsonb_typeof": "(j) AS lower(json_type(j))",
    "jsonb_array_length": "(j) AS json_array_length(j)",
    "jsonb_extract_path": "(j, p) AS json_extract(j, p)",
    "jsonb_extract_path_text": "(j, p) AS json_extract_string(j, p)",
    "jsonb_pretty": "(j) AS j::VARCHAR",
    "to_jsonb": "(x) AS to_json(x)",
    "jsonb_agg": "(x) AS to_json(list(x))",
    "jsonb_build_object": "(k, v) AS json_object(k::VARCHAR, v)",
    "regexp_match": "(s, p) AS CASE WHEN regexp_matches(s, p) THEN regexp_extract(s, p, 0)::VARCHAR[] END",
}
# The session functions are answered by the binder; every other allowed name stays as is.
MACRO_NAMES = frozenset(m for m in MACROS if not m.startswith("rw_"))


class SystemCatalog:
    """Resolves system relation names and creates their views and macros."""

    def __init__(self) -> None:
        self._by_name = {(v.schema, v.name): v for v in VIEWS}

    def relation(self, schema: str, name: str) -> str | None:
        view = self._by_name.get((schema, name))
        return view.duckdb_name if view else None

    def names(self) -> list[tuple[str, str]]:
        return sorted(self._by_name)

    def setup_sql(self) -> list[str]:
        out = [f"CREATE SCHEMA IF NOT EXISTS {SYS_SCHEMA}"]
        for name, body in MACROS.items():
            # format_type reads pg_type: create the views first.
            if name == "format_type":
                continue
            out.append(f"CREATE OR REPLACE MACRO {SYS_SCHEMA}.{name}{body}")
        for v in VIEWS:
            out.append(f'CREATE OR REPLACE VIEW {SYS_SCHEMA}."{v.duckdb_name}" AS {v.sql}')
        out.append(f"CREATE OR REPLACE MACRO {SYS_SCHEMA}.format_type{MACROS['format_type']}")
        return out
