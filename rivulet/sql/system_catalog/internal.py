"""Internal views the system relations are built from: every relation, attribute,
namespace, role and type in one place, with the OIDs all system relations agree on.

These live in ``rw_sys`` under names the binder never hands out (``i_*``), so users
cannot name them; the user-facing views and the macros read them.
"""

from __future__ import annotations

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.types import COLUMN_TYPES
from rivulet.meta.catalog import DEFAULT_USER, SCHEMA_OIDS
from rivulet.sql.system_catalog.base import (
    BTREE_AM_OID,
    HEAP_AM_OID,
    META,
    PK_INDEX_OID_BASE,
    ROOT_ROLE_OID,
    SYS_SCHEMA,
    SystemView,
    constant_table,
    sql_str,
    type_oid,
    values,
)
from rivulet.sql.system_catalog.pg_types import PG_TYPES, type_names

S = SYS_SCHEMA


def _case(column: str, mapping: dict[str, object], default: object) -> str:
    whens = " ".join(f"WHEN {sql_str(k)} THEN {v}" for k, v in mapping.items())
    return f"CASE {column} {whens} ELSE {default} END"


# The type OID and typmod of a stored column, from its meta.columns row ``c``.
TYPE_OID_OF_COLUMN = _case("c.type_name", {t.name: t.oid for t in COLUMN_TYPES}, 25)
TYPMOD_OF_COLUMN = """CASE WHEN c.type_name = 'numeric' AND c.type_precision IS NOT NULL
    THEN c.type_precision * 65536 + coalesce(c.type_scale, 0) + 4 ELSE -1 END"""

# pg_class.relkind of each Rivulet object kind.
RELKIND_OF_KIND = _case(
    "o.kind",
    {"table": "'r'", "materialized view": "'m'", "view": "'v'", "source": "'r'", "index": "'i'"},
    "'r'",
)


def internal_statements(
    system_views: list[SystemView], rel_oids: dict[tuple[str, str], int]
) -> list[str]:
    """The statements creating the ``i_*`` tables (constant facts: types, the system
    relations and their columns) and views (over the meta tables). ``system_views`` are
    described in i_rel and i_att with the OIDs of ``rel_oids``."""
    ns = SCHEMA_OIDS
    out: list[str] = []

    def add(name: str, sql: str) -> None:
        out.append(f"CREATE VIEW {S}.{name} AS {sql}")

    out.append(
        constant_table(
            f"{S}.i_types",
            [
                ("oid", "UINTEGER"), ("typname", "VARCHAR"), ("typlen", "SMALLINT"),
                ("typbyval", "BOOLEAN"), ("typtype", "VARCHAR"), ("typcategory", "VARCHAR"),
                ("typispreferred", "BOOLEAN"), ("typelem", "UINTEGER"),
                ("typarray", "UINTEGER"), ("typinput", "VARCHAR"), ("typoutput", "VARCHAR"),
                ("typreceive", "VARCHAR"), ("typsend", "VARCHAR"), ("typalign", "VARCHAR"),
                ("typstorage", "VARCHAR"), ("typcollation", "UINTEGER"), ("display", "VARCHAR"),
            ],
            [
                (
                    t.oid, t.typname, t.typlen, t.typbyval, t.typtype, t.typcategory,
                    t.typispreferred, t.typelem, t.typarray, t.typinput,
                    t.io_function("out"), t.io_function("recv"), t.io_function("send"),
                    t.typalign, t.typstorage, t.typcollation, t.display,
                )
                for t in PG_TYPES
            ],
        )
    )  # fmt: skip
    out.append(
        constant_table(
            f"{S}.i_type_names", [("name", "VARCHAR"), ("oid", "UINTEGER")], type_names()
        )
    )
    out.append(
        constant_table(
            f"{S}.i_sys_rel",
            [
                ("oid", "UINTEGER"), ("relname", "VARCHAR"), ("relnamespace", "UINTEGER"),
                ("nspname", "VARCHAR"), ("natts", "SMALLINT"),
            ],
            [
                (rel_oids[(v.schema, v.name)], v.name, ns[v.schema], v.schema, len(v.columns))
                for v in system_views
            ],
        )
    )  # fmt: skip
    out.append(
        constant_table(
            f"{S}.i_sys_att",
            [
                ("attrelid", "UINTEGER"), ("attname", "VARCHAR"), ("atttypid", "UINTEGER"),
                ("attnum", "SMALLINT"),
            ],
            [
                (rel_oids[(v.schema, v.name)], col, type_oid(pg_type), i)
                for v in system_views
                for i, (col, pg_type) in enumerate(v.columns, start=1)
            ],
        )
    )  # fmt: skip
    sys_schemas = values(
        [
            (ns["pg_catalog"], "pg_catalog", DEFAULT_USER),
            (ns["information_schema"], "information_schema", DEFAULT_USER),
            (ns["rw_catalog"], "rw_catalog", DEFAULT_USER),
        ],
        ["oid", "nspname", "owner"],
    )
    add(
        "i_nsp",
        f"""SELECT id::UINTEGER AS oid, name AS nspname, owner, true AS is_user
            FROM {META}.schemas
            UNION ALL SELECT oid::UINTEGER, nspname, owner, false FROM {sys_schemas}""",
    )
    add(
        "i_roles",
        f"""SELECT {S}.role_oid(r) AS oid, r AS rolname FROM (
                SELECT {sql_str(DEFAULT_USER)} AS r
                UNION SELECT owner FROM {META}.objects UNION SELECT owner FROM {META}.schemas)""",
    )
    add(
        "i_obj",
        f"""SELECT o.id AS id, o.id::UINTEGER AS oid, o.name AS relname,
                   s.id::UINTEGER AS relnamespace, o.schema_name AS nspname, o.kind,
                   {RELKIND_OF_KIND} AS relkind, o.owner, {S}.role_oid(o.owner) AS relowner,
                   o.definition, o.created_at, o.pk, o.dist_key,
                   coalesce(c.natts, 0) AS natts,
                   CASE WHEN o.kind = 'table' AND len(o.pk) > 0 AND NOT coalesce(c.row_id, false)
                     THEN list_transform(o.pk, lambda p: (p + 1)::SMALLINT) END AS pkey
            FROM {META}.objects o JOIN {META}.schemas s ON s.name = o.schema_name
            LEFT JOIN (SELECT object_id, count(*) FILTER (WHERE NOT hidden) AS natts,
                              bool_or(hidden AND name = {sql_str(ROW_ID_COLUMN)}) AS row_id
                       FROM {META}.columns GROUP BY object_id) c ON c.object_id = o.id""",
    )
    add(
        "i_rel",
        # One scan of i_obj gives each object and, for a table with a primary key, its index.
        f"""SELECT CASE WHEN k.ix THEN ({PK_INDEX_OID_BASE} + o.id)::UINTEGER ELSE o.oid END
                     AS oid,
                   CASE WHEN k.ix THEN o.relname || '_pkey' ELSE o.relname END AS relname,
                   o.relnamespace, o.nspname,
                   CASE WHEN k.ix THEN 'i' ELSE o.relkind END AS relkind, o.relowner,
                   (CASE WHEN k.ix THEN {BTREE_AM_OID} WHEN o.relkind IN ('r', 'm')
                    THEN {HEAP_AM_OID} ELSE 0 END)::UINTEGER AS relam,
                   (CASE WHEN k.ix THEN len(o.pkey) ELSE o.natts END)::SMALLINT AS relnatts,
                   NOT k.ix AND o.pkey IS NOT NULL AS relhasindex,
                   CASE WHEN k.ix THEN o.oid END AS indrelid,
                   CASE WHEN k.ix THEN 'index' ELSE o.kind END AS kind,
                   CASE WHEN k.ix THEN NULL ELSE o.definition END AS definition, o.owner
            FROM {S}.i_obj o, (VALUES (false), (true)) k(ix)
            WHERE NOT k.ix OR o.pkey IS NOT NULL
            UNION ALL
            SELECT oid, relname, relnamespace, nspname, 'v', {ROOT_ROLE_OID}::UINTEGER,
                   0::UINTEGER, natts, false, NULL, 'system view', NULL, {sql_str(DEFAULT_USER)}
            FROM {S}.i_sys_rel""",
    )
    add(
        "i_att",
        f"""SELECT c.object_id::UINTEGER AS attrelid, c.name AS attname,
                   ({TYPE_OID_OF_COLUMN})::UINTEGER AS atttypid,
                   ({TYPMOD_OF_COLUMN})::INTEGER AS atttypmod,
                   (c.position + 1)::SMALLINT AS attnum, c.not_null AS attnotnull
            FROM {META}.columns c WHERE NOT c.hidden
            UNION ALL
            SELECT ({PK_INDEX_OID_BASE} + k.id)::UINTEGER, c.name,
                   ({TYPE_OID_OF_COLUMN})::UINTEGER, ({TYPMOD_OF_COLUMN})::INTEGER,
                   k.i::SMALLINT, c.not_null
            FROM (SELECT id, unnest(pkey) AS attnum, generate_subscripts(pkey, 1) AS i
                  FROM {S}.i_obj WHERE pkey IS NOT NULL) k
            JOIN {META}.columns c ON c.object_id = k.id AND c.position + 1 = k.attnum
            UNION ALL
            SELECT attrelid, attname, atttypid, -1, attnum, false FROM {S}.i_sys_att""",
    )
    return out
