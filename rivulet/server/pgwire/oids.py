"""Type OIDs on the wire, and how they map to Rivulet's types."""

from __future__ import annotations

import datetime as dt
import decimal
import re

from rivulet.common.types import (
    _ARRAY_OIDS,
    BIGINT,
    BOOLEAN,
    BYTEA,
    CHAR,
    DATE,
    DOUBLE,
    INTEGER,
    INTERVAL,
    JSONB,
    NAME,
    NUMERIC,
    OID,
    REAL,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    VARCHAR,
    DataType,
    type_from_name,
)

# PostgreSQL's OIDs of the types that cross the wire.
BOOL_OID, BYTEA_OID, CHAR_OID, NAME_OID, INT8_OID, INT2_OID, INT4_OID = 16, 17, 18, 19, 20, 21, 23
TEXT_OID, OID_OID, JSON_OID, FLOAT4_OID, FLOAT8_OID, UNKNOWN_OID = 25, 26, 114, 700, 701, 705
BPCHAR_OID, VARCHAR_OID, DATE_OID, TIME_OID, TIMESTAMP_OID = 1042, 1043, 1082, 1083, 1114
TIMESTAMPTZ_OID, INTERVAL_OID, NUMERIC_OID, UUID_OID, JSONB_OID = 1184, 1186, 1700, 2950, 3802

ARRAY_ELEMENT_OID = {array: element for element, array in _ARRAY_OIDS.items()}

TYPE_BY_OID: dict[int, DataType] = {
    t.oid: t
    for t in (
        BOOLEAN, SMALLINT, INTEGER, BIGINT, REAL, DOUBLE, NUMERIC, VARCHAR, DATE, TIME,
        TIMESTAMP, TIMESTAMPTZ, INTERVAL, JSONB, BYTEA, TEXT, OID, NAME, CHAR, UUID,
    )
}  # fmt: skip
TYPE_BY_OID[JSON_OID] = JSONB
TYPE_BY_OID[BPCHAR_OID] = VARCHAR


def type_of_oid(oid: int) -> DataType | None:
    """The Rivulet type a client means by a parameter type OID (None: unknown/text)."""
    if oid in (0, UNKNOWN_OID, TEXT_OID):
        return None
    return TYPE_BY_OID.get(oid)


_EXTRA_NAMES = {"uuid": UUID, "json": JSONB, "name": NAME, "oid": OID, "bytea": BYTEA}


def oid_of_type_name(sql_type: str) -> int | None:
    """The OID of a type as SQL spells it (``uuid``, ``INT[]``, ``VARCHAR(10)``)."""
    name = re.sub(r"\(.*?\)", "", sql_type).strip().lower()
    is_array = name.endswith("[]")
    name = name.removesuffix("[]").strip()
    found = type_from_name(name) or _EXTRA_NAMES.get(name)
    if found is None:
        return None
    return _ARRAY_OIDS.get(found.oid) if is_array else found.oid


# DuckDB has one string type, so every string array is varchar[] to the engine. Clients are
# told text[] (same wire format): asyncpg decodes text[] without a catalog round trip, and
# PostgreSQL itself types string arrays built by expressions (ARRAY['a'], array_agg) text[].
_WIRE_OIDS = {1015: 1009}


def wire_oid(oid: int) -> int:
    """The type OID announced to clients for a result column or parameter."""
    return _WIRE_OIDS.get(oid, oid)


# 2000-01-01, PostgreSQL's epoch for binary dates and timestamps.
PG_EPOCH_DAYS = 10957
PG_EPOCH_US = PG_EPOCH_DAYS * 86_400_000_000
PG_EPOCH_DATE = dt.date(2000, 1, 1)
PG_EPOCH_TS = dt.datetime(2000, 1, 1)
PG_EPOCH_TSTZ = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)

# Decimal arithmetic without rounding, for numerics of any width PostgreSQL allows.
EXACT_DECIMAL = decimal.Context(prec=2000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
