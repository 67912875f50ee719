"""Casts and types as PostgreSQL reads them where DuckDB reads them otherwise: bytea
input, BC dates, a bare ``numeric``, ``pg_typeof``'s type names, and the Rivulet type a
cast names. Plain functions over nodes, for the other parts of the binder.
"""

from __future__ import annotations

import re

from sqlglot import exp

from rivulet.common.errors import sql_error
from rivulet.common.types import DataType

# DuckDB's type names (``typeof``) as PostgreSQL's ``pg_typeof`` spells them.
_PG_TYPEOF = {
    "TINYINT": "smallint", "HUGEINT": "numeric", "FLOAT": "real", "DOUBLE": "double precision",
    "VARCHAR": "character varying", "TIME": "time without time zone",
    "TIMESTAMP": "timestamp without time zone", "JSON": "jsonb", "BLOB": "bytea",
    '"NULL"': "unknown",
}  # fmt: skip


def _pg_typeof(arg: exp.Expr) -> exp.Expr:
    """``pg_typeof(x)``: the PostgreSQL name of ``x``'s type, from DuckDB's ``typeof``."""

    def typeof() -> exp.Expr:
        return exp.Anonymous(this="typeof", expressions=[arg.copy()])

    case = exp.case().when(
        exp.Like(this=typeof(), expression=exp.Literal.string("DECIMAL%")),
        exp.Literal.string("numeric"),
    )
    for duck, pg in _PG_TYPEOF.items():
        case = case.when(
            exp.EQ(this=typeof(), expression=exp.Literal.string(duck)), exp.Literal.string(pg)
        )
    return case.else_(exp.Lower(this=typeof()))


_DATE_TYPES = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
)
_BC = re.compile(r"\s+BC\s*$", re.IGNORECASE)


def _read_bc(node: exp.Cast) -> None:
    """'4713-11-24 BC'::date as PostgreSQL reads it (DuckDB writes the era '(BC)')."""
    to, literal = node.args.get("to"), node.this
    if (
        isinstance(to, exp.DataType)
        and to.this in _DATE_TYPES
        and isinstance(literal, exp.Literal)
        and literal.is_string
        and _BC.search(literal.this)
    ):
        node.set("this", exp.Literal.string(_BC.sub(" (BC)", literal.this)))


def _is_bare_numeric(to: object) -> bool:
    return (
        isinstance(to, exp.DataType)
        and to.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL)
        and not to.expressions
    )


def _bytea_literal(node: exp.Cast) -> exp.Expr | None:
    """A string literal cast to bytea, read with PostgreSQL's bytea input rules (DuckDB's
    BLOB cast would keep ``'\\xdeadbeef'`` as ten characters): the hex format ``\\x...``, or
    the escape format where ``\\\\`` is a backslash and ``\\nnn`` an octal byte."""
    to = node.args.get("to")
    literal = node.this
    if not (
        isinstance(to, exp.DataType)
        and to.this == exp.DataType.Type.VARBINARY
        and isinstance(literal, exp.Literal)
        and literal.is_string
    ):
        return None
    text = literal.this
    if text[:2] in ("\\x", "\\X"):
        try:
            data = bytes.fromhex(text[2:])
        except ValueError:
            raise sql_error("22P02", f'invalid hexadecimal data in bytea input: "{text}"') from None
    else:
        out = bytearray()
        i = 0
        raw = text.encode()
        while i < len(raw):
            if raw[i] != 0x5C:  # backslash
                out.append(raw[i])
                i += 1
            elif raw[i + 1 : i + 2] == b"\\":
                out.append(0x5C)
                i += 2
            elif len(raw) >= i + 4 and all(0x30 <= c <= 0x37 for c in raw[i + 1 : i + 4]):
                out.append(int(raw[i + 1 : i + 4], 8) & 0xFF)
                i += 4
            else:
                raise sql_error("22P02", "invalid input syntax for type bytea")
        data = bytes(out)
    return exp.Anonymous(this="unhex", expressions=[exp.Literal.string(data.hex())])


def _type_of_datatype(dt: exp.DataType) -> DataType | None:
    from rivulet.common.types import column_type_from_sql

    try:
        return column_type_from_sql(dt)
    except Exception:
        return None
