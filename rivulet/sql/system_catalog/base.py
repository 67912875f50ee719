"""Building blocks of the system relations: how a view is declared, its columns' types,
and the OIDs Rivulet gives the objects PostgreSQL clients look up.

Every system relation is a DuckDB view in the ``rw_sys`` schema, declared with the
columns PostgreSQL (or RisingWave) gives it, each with its PostgreSQL type. The column
list serves twice: it shapes the view (every column cast to the DuckDB type standing for
its PostgreSQL type) and it describes the view in ``pg_attribute``, so that ``\\d
pg_class`` works like on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rivulet.storage.state_store import META_SCHEMA

if TYPE_CHECKING:
    from rivulet.meta.catalog import Catalog
    from rivulet.sql.activity import Activity


class SessionView(Protocol):
    """What the system relations show of the session that reads them (the binder's
    ``BindContext`` is one): its catalog, user, search path, settings and everyone's
    activity."""

    @property
    def catalog(self) -> Catalog: ...
    @property
    def user(self) -> str: ...
    @property
    def search_path(self) -> tuple[str, ...]: ...
    @property
    def setting(self) -> Callable[[str], str | None]: ...
    @property
    def activity(self) -> Callable[[], list[Activity]]: ...


SYS_SCHEMA = "rw_sys"
META = META_SCHEMA

# --------------------------------------------------------------------------- OIDs
# Object ids of user objects (tables, MVs, schemas...) are their catalog ids (INTEGER,
# from 1001). Objects Rivulet derives from them need OIDs that never collide with those:
# they live above 2^31, which no INTEGER id reaches.
PK_INDEX_OID_BASE = 2**31  # the index of table t's primary key: base + t.id
PK_CONSTRAINT_OID_BASE = 3 * 2**30  # the constraint of that primary key: base + t.id
# System relations (the views themselves) get small OIDs, below the first user id.
SYSTEM_REL_OID_BASE = 100
# The database, the one role every session acts as, the tablespace, the access method.
DATABASE_OID = 1
ROOT_ROLE_OID = 1
DEFAULT_TABLESPACE_OID = 1663
BTREE_AM_OID = 403
HEAP_AM_OID = 2
DEFAULT_COLLATION_OID = 100
C_COLLATION_OID = 950

# The namespace OIDs of the system schemas (as in ``meta.catalog.SCHEMA_OIDS``).
NAMESPACE_PREFIX = {"pg_catalog": "pg", "information_schema": "is", "rw_catalog": "rw"}

# --------------------------------------------------------------------------- types
# The PostgreSQL types system columns use, with the DuckDB type standing for each and
# the PostgreSQL type OID ``pg_attribute`` reports.
_COLUMN_TYPES: dict[str, tuple[str, int]] = {
    "oid": ("UINTEGER", 26),
    "xid": ("UINTEGER", 28),
    "regclass": ("UINTEGER", 2205),
    "regtype": ("UINTEGER", 2206),
    "regnamespace": ("UINTEGER", 4089),
    "regrole": ("UINTEGER", 4096),
    # regproc values are function names: Rivulet lists no functions by OID.
    "regproc": ("VARCHAR", 24),
    "name": ("VARCHAR", 19),
    "text": ("VARCHAR", 25),
    '"char"': ("VARCHAR", 18),
    "pg_node_tree": ("VARCHAR", 194),
    "inet": ("VARCHAR", 869),
    "pg_lsn": ("VARCHAR", 3220),
    "anyarray": ("VARCHAR[]", 2277),
    "boolean": ("BOOLEAN", 16),
    "smallint": ("SMALLINT", 21),
    "integer": ("INTEGER", 23),
    "bigint": ("BIGINT", 20),
    "real": ("FLOAT", 700),
    "double precision": ("DOUBLE", 701),
    "numeric": ("DECIMAL(38,10)", 1700),
    "interval": ("INTERVAL", 1186),
    "timestamp with time zone": ("TIMESTAMPTZ", 1184),
    "bytea": ("BLOB", 17),
    "int2vector": ("SMALLINT[]", 22),
    "oidvector": ("UINTEGER[]", 30),
    "smallint[]": ("SMALLINT[]", 1005),
    "oid[]": ("UINTEGER[]", 1028),
    "text[]": ("VARCHAR[]", 1009),
    "name[]": ("VARCHAR[]", 1003),
    '"char"[]': ("VARCHAR[]", 1002),
    "aclitem[]": ("VARCHAR[]", 1034),
    "real[]": ("FLOAT[]", 1021),
    "regtype[]": ("UINTEGER[]", 2211),
    # information_schema's domains, over name / varchar / int4 / timestamptz.
    "sql_identifier": ("VARCHAR", 19),
    "character_data": ("VARCHAR", 1043),
    "yes_or_no": ("VARCHAR", 1043),
    "cardinal_number": ("INTEGER", 23),
    "time_stamp": ("TIMESTAMPTZ", 1184),
    # RisingWave's rw_catalog columns.
    "varchar": ("VARCHAR", 1043),
    "varchar[]": ("VARCHAR[]", 1015),
    "integer[]": ("INTEGER[]", 1007),
    "jsonb": ("JSON", 3802),
}


def duckdb_type(pg_type: str) -> str:
    return _COLUMN_TYPES[pg_type][0]


def type_oid(pg_type: str) -> int:
    return _COLUMN_TYPES[pg_type][1]


def parse_columns(spec: str) -> tuple[tuple[str, str], ...]:
    """``"oid:oid, relname:name"`` -> ``(("oid", "oid"), ("relname", "name"))``."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, pg_type = part.partition(":")
        pg_type = " ".join(pg_type.split())
        if pg_type not in _COLUMN_TYPES:
            raise ValueError(f"system column {name}: unknown type {pg_type}")
        out.append((name.strip(), pg_type))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SystemView:
    schema: str  # the schema users name: pg_catalog, information_schema or rw_catalog
    name: str
    sql: str
    columns: tuple[tuple[str, str], ...] = ()  # (name, PostgreSQL type)
    # Always empty: the binder inlines ``sql`` instead of reading a DuckDB view (start-up
    # creates no view for it).
    empty: bool = False

    @property
    def duckdb_name(self) -> str:
        return f"{NAMESPACE_PREFIX[self.schema]}__{self.name}"


def view(
    schema: str,
    name: str,
    spec: str,
    select: dict[str, str] | None = None,
    from_: str = "",
) -> SystemView:
    """A system view with the columns of ``spec``, in that order and of those types.

    ``select`` gives the expression of each column (over ``from_``, which may also hold
    the WHERE clause); columns it leaves out are NULL. Without ``select`` the view is
    empty: PostgreSQL would have nothing of Rivulet's to show there.
    """
    cols = parse_columns(spec)
    if select is not None:
        unknown = set(select) - {c for c, _ in cols}
        if unknown:
            raise ValueError(f"{schema}.{name}: no columns {sorted(unknown)}")
    exprs = []
    for col, pg_type in cols:
        expr = (select or {}).get(col, "NULL")
        exprs.append(f'CAST({expr} AS {duckdb_type(pg_type)}) AS "{col}"')
    sql = "SELECT " + ", ".join(exprs)
    if select is None:
        sql += " WHERE false"
    elif from_:
        sql += f" FROM {from_}"
    return SystemView(schema, name, sql, cols, empty=select is None)


def sql_str(s: str) -> str:
    """A SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


def values(rows: Sequence[tuple[object, ...]], names: list[str]) -> str:
    """``(VALUES ...) v(names)`` for constant rows (ints, strings, bools, None)."""

    def lit(v: object) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        return sql_str(str(v))

    body = ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows)
    return f"(VALUES {body}) v({', '.join(names)})"


_FIELD_SEP = "\x1f"  # ASCII unit separator
_ROW_SEP = "\x1e"  # ASCII record separator


def constant_table(
    name: str, columns: list[tuple[str, str]], rows: Sequence[tuple[object, ...]]
) -> str:
    """``CREATE TABLE name AS ...`` holding constant rows (no NULLs).

    The rows travel as one string literal split by DuckDB: binding a VALUES list of
    thousands of tuples costs tens of milliseconds at every start, this costs one."""

    def text(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        out = str(v)
        assert _FIELD_SEP not in out and _ROW_SEP not in out and v is not None
        return out

    data = _ROW_SEP.join(_FIELD_SEP.join(text(v) for v in row) for row in rows)
    fields = ", ".join(
        f"CAST(split_part(r, '{_FIELD_SEP}', {i}) AS {duck}) AS {col}"
        for i, (col, duck) in enumerate(columns, start=1)
    )
    return (
        f"CREATE TABLE {name} AS SELECT {fields} "
        f"FROM (SELECT unnest(string_split({sql_str(data)}, '{_ROW_SEP}')) AS r)"
    )
