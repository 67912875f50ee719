"""SQL data types: one table that ties each Rivulet type to its DuckDB storage type,
its PostgreSQL type OID (for pgwire) and the name users see (RisingWave's spelling).

Query results may carry any DuckDB type; ``DataType.from_duckdb`` maps those onto the
closest PostgreSQL type so that clients can decode them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, sql_error

# Unconstrained NUMERIC is stored as DECIMAL with this width and scale; its text output is
# normalized (trailing zeros stripped), as RisingWave prints its arbitrary-scale decimals.
NUMERIC_WIDTH = 38
NUMERIC_SCALE = 10


@dataclass(frozen=True, slots=True)
class DataType:
    """A SQL type. ``name`` is the canonical (RisingWave) spelling, ``duckdb`` the storage
    type, ``oid``/``typlen`` the PostgreSQL wire identity."""

    name: str
    duckdb: str
    oid: int
    typlen: int
    precision: int | None = None
    scale: int | None = None

    @property
    def is_numeric_unconstrained(self) -> bool:
        return self.name == "numeric" and self.precision is None

    @property
    def typmod(self) -> int:
        """The PostgreSQL type modifier (atttypmod)."""
        if self.name == "numeric" and self.precision is not None:
            return ((self.precision << 16) | (self.scale or 0)) + 4
        return -1

    def display(self) -> str:
        """The name ``DESCRIBE`` and ``\\d`` show."""
        if self.name == "numeric" and self.precision is not None:
            return f"numeric({self.precision},{self.scale or 0})"
        return self.name

    @staticmethod
    def numeric(precision: int | None = None, scale: int | None = None) -> DataType:
        if precision is None:
            return NUMERIC
        if not 1 <= precision <= NUMERIC_WIDTH:
            raise sql_error(
                "22023", f"NUMERIC precision {precision} must be between 1 and {NUMERIC_WIDTH}"
            )
        scale = scale or 0
        if not 0 <= scale <= precision:
            raise sql_error(
                "22023", f"NUMERIC scale {scale} must be between 0 and precision {precision}"
            )
        return DataType("numeric", f"DECIMAL({precision},{scale})", 1700, -1, precision, scale)

    @staticmethod
    def from_duckdb(type_name: str) -> DataType:
        """Map a DuckDB result type (as DuckDB spells it) to the type a client sees."""
        t = str(type_name).upper()
        found = _BY_DUCKDB.get(t)
        if found is not None:
            return found
        m = _DECIMAL_RE.fullmatch(t)
        if m:
            width, scale = int(m.group(1)), int(m.group(2))
            if (width, scale) == (NUMERIC_WIDTH, NUMERIC_SCALE):
                return NUMERIC
            return DataType("numeric", t, 1700, -1, width, scale)
        if t.endswith("[]"):
            element = DataType.from_duckdb(t[:-2])
            return DataType(element.name + "[]", t, _ARRAY_OIDS.get(element.oid, 1009), -1)
        if t.startswith(("VARCHAR(", "CHAR(")):
            return VARCHAR
        # Structs, maps, unions, enums and the rest go out as text.
        return DataType("character varying", t, 1043, -1)


BOOLEAN = DataType("boolean", "BOOLEAN", 16, 1)
SMALLINT = DataType("smallint", "SMALLINT", 21, 2)
INTEGER = DataType("integer", "INTEGER", 23, 4)
BIGINT = DataType("bigint", "BIGINT", 20, 8)
REAL = DataType("real", "FLOAT", 700, 4)
DOUBLE = DataType("double precision", "DOUBLE", 701, 8)
NUMERIC = DataType("numeric", f"DECIMAL({NUMERIC_WIDTH},{NUMERIC_SCALE})", 1700, -1)
VARCHAR = DataType("character varying", "VARCHAR", 1043, -1)
DATE = DataType("date", "DATE", 1082, 4)
TIME = DataType("time without time zone", "TIME", 1083, 8)
TIMESTAMP = DataType("timestamp without time zone", "TIMESTAMP", 1114, 8)
TIMESTAMPTZ = DataType("timestamp with time zone", "TIMESTAMPTZ", 1184, 8)
INTERVAL = DataType("interval", "INTERVAL", 1186, 16)
JSONB = DataType("jsonb", "JSON", 3802, -1)
BYTEA = DataType("bytea", "BLOB", 17, -1)
# Types that only appear in results (catalog queries, DuckDB functions).
TEXT = DataType("text", "VARCHAR", 25, -1)
OID = DataType("oid", "UINTEGER", 26, 4)
NAME = DataType("name", "VARCHAR", 19, 64)
CHAR = DataType('"char"', "VARCHAR", 18, 1)
UUID = DataType("uuid", "UUID", 2950, 16)
INT2VECTOR = DataType("int2vector", "SMALLINT[]", 22, -1)

_BY_DUCKDB: dict[str, DataType] = {
    "BOOLEAN": BOOLEAN,
    "TINYINT": SMALLINT,
    "SMALLINT": SMALLINT,
    "UTINYINT": SMALLINT,
    "INTEGER": INTEGER,
    "USMALLINT": INTEGER,
    "BIGINT": BIGINT,
    "UINTEGER": OID,  # catalog OIDs (pg_class.oid...) are unsigned 32-bit, as PostgreSQL's oid
    "UBIGINT": DataType("numeric", "UBIGINT", 1700, -1, 20, 0),
    "HUGEINT": DataType("numeric", "HUGEINT", 1700, -1, 38, 0),
    "UHUGEINT": DataType("numeric", "UHUGEINT", 1700, -1, 39, 0),
    "BIGNUM": DataType("numeric", "BIGNUM", 1700, -1),
    "VARINT": DataType("numeric", "VARINT", 1700, -1),
    "FLOAT": REAL,
    "DOUBLE": DOUBLE,
    "VARCHAR": VARCHAR,
    "DATE": DATE,
    "TIME": TIME,
    "TIME WITH TIME ZONE": DataType("time with time zone", "TIMETZ", 1266, 12),
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP_S": TIMESTAMP,
    "TIMESTAMP_MS": TIMESTAMP,
    "TIMESTAMP_NS": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "INTERVAL": INTERVAL,
    "JSON": JSONB,
    "BLOB": BYTEA,
    "UUID": UUID,
    "BIT": DataType("bit varying", "BIT", 1562, -1),
    '"NULL"': TEXT,
    "NULL": TEXT,
}

_DECIMAL_RE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")

# PostgreSQL array type OIDs by element OID.
_ARRAY_OIDS = {
    16: 1000, 21: 1005, 23: 1007, 20: 1016, 700: 1021, 701: 1022, 1700: 1231, 1043: 1015,
    25: 1009, 1082: 1182, 1083: 1183, 1114: 1115, 1184: 1185, 1186: 1187, 3802: 3807,
    17: 1001, 26: 1028, 19: 1003, 18: 1002, 2950: 2951,
}  # fmt: skip

# Names a CREATE TABLE column may use, lower-cased, with sqlglot's spelling too.
_BY_SQL_NAME: dict[str, DataType] = {
    "boolean": BOOLEAN, "bool": BOOLEAN,
    "smallint": SMALLINT, "int2": SMALLINT,
    "int": INTEGER, "integer": INTEGER, "int4": INTEGER,
    "bigint": BIGINT, "int8": BIGINT,
    "real": REAL, "float4": REAL, "float": DOUBLE,
    "double": DOUBLE, "double precision": DOUBLE, "float8": DOUBLE,
    "numeric": NUMERIC, "decimal": NUMERIC,
    "varchar": VARCHAR, "text": VARCHAR, "character varying": VARCHAR, "string": VARCHAR,
    "date": DATE,
    "time": TIME, "time without time zone": TIME,
    "timestamp": TIMESTAMP, "timestamp without time zone": TIMESTAMP,
    "timestamptz": TIMESTAMPTZ, "timestamp with time zone": TIMESTAMPTZ,
    "interval": INTERVAL,
    "jsonb": JSONB,
    "bytea": BYTEA,
}  # fmt: skip

# Every type a table column may have, for \dT-like listings and pg_type.
COLUMN_TYPES: tuple[DataType, ...] = (
    BOOLEAN, SMALLINT, INTEGER, BIGINT, REAL, DOUBLE, NUMERIC, VARCHAR, DATE, TIME,
    TIMESTAMP, TIMESTAMPTZ, INTERVAL, JSONB, BYTEA,
)  # fmt: skip


def type_from_name(name: str) -> DataType | None:
    """Look up a column type by its SQL name (no modifiers)."""
    return _BY_SQL_NAME.get(" ".join(name.lower().split()))


def column_type_from_sql(kind: object) -> DataType:
    """The column type of a sqlglot ``DataType`` node in CREATE TABLE."""
    from sqlglot import exp

    assert isinstance(kind, exp.DataType)
    t = kind.this
    T = exp.DataType.Type
    simple = {
        T.BOOLEAN: BOOLEAN, T.SMALLINT: SMALLINT, T.TINYINT: SMALLINT, T.INT: INTEGER,
        T.BIGINT: BIGINT, T.FLOAT: REAL, T.DOUBLE: DOUBLE, T.VARCHAR: VARCHAR,
        T.TEXT: VARCHAR, T.CHAR: VARCHAR, T.NCHAR: VARCHAR, T.NVARCHAR: VARCHAR,
        T.DATE: DATE, T.TIME: TIME, T.TIMESTAMP: TIMESTAMP,
        T.TIMESTAMPTZ: TIMESTAMPTZ, T.TIMESTAMPLTZ: TIMESTAMPTZ, T.INTERVAL: INTERVAL,
        T.JSONB: JSONB, T.JSON: JSONB, T.VARBINARY: BYTEA, T.BINARY: BYTEA, T.BLOB: BYTEA,
    }  # fmt: skip
    if t in simple:
        if t in (T.JSON,):
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                "type json is not supported",
                hint="Use jsonb.",
            )
        return simple[t]
    if t in (T.DECIMAL, T.BIGDECIMAL):
        params = [int(p.this.this) for p in kind.expressions if p.this is not None]
        if not params:
            return NUMERIC
        return DataType.numeric(params[0], params[1] if len(params) > 1 else 0)
    raise sql_error(
        FEATURE_NOT_SUPPORTED,
        f"column type {kind.sql(dialect='postgres')} is not supported yet",
        hint="Supported types: " + ", ".join(ty.name for ty in COLUMN_TYPES) + ".",
    )


_ARROW_BY_DUCKDB: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "HUGEINT": pa.decimal128(38, 0),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "UHUGEINT": pa.decimal128(38, 0),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "UUID": pa.string(),
    "BLOB": pa.binary(),
    "BIT": pa.binary(),
    "DATE": pa.date32(),
    "TIME": pa.time64("us"),
    "TIMESTAMP": pa.timestamp("us"),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
    "INTERVAL": pa.month_day_nano_interval(),
}


def arrow_type_for_duckdb(type_name: str) -> pa.DataType | None:
    """The Arrow type DuckDB exports a column of this DuckDB type as (None: not known)."""
    t = str(type_name).upper()
    found = _ARROW_BY_DUCKDB.get(t)
    if found is not None:
        return found
    m = _DECIMAL_RE.fullmatch(t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    if t.endswith("[]"):
        inner = arrow_type_for_duckdb(t[:-2])
        return pa.list_(pa.field("l", inner)) if inner is not None else None
    if t.startswith(("VARCHAR(", "CHAR(")):
        return pa.string()
    return None


def arrow_type_of(dtype: DataType) -> pa.DataType:
    """The Arrow type of a column of this type, as DuckDB returns it."""
    found = arrow_type_for_duckdb(dtype.duckdb)
    if found is None:
        raise TypeError(f"no Arrow type for {dtype.duckdb}")
    return found
