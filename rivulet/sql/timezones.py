"""The session's time zone in batch queries, as PostgreSQL applies it.

DuckDB keeps ``timestamptz`` as an instant and reads and splits it in UTC, its TimeZone
here (the engine's settings are locked). PostgreSQL reads a text or ``timestamp`` as a
``timestamptz`` in the session's zone, and takes a ``timestamptz`` apart (``extract``,
``date_trunc``, ``to_char``, casts to ``timestamp``/``date``/``time``) at its wall-clock
time there. For a session outside UTC the binder rewrites those calls (``localize``) into
``rw_sys`` macros that do so (``rw_wall_clock``, ``rw_to_tstz``, ``rw_date_trunc`` in
``system_catalog/macros.py``). Which branch applies depends on the argument's type, known
to DuckDB only: each rewrite tests ``typeof`` (a constant once DuckDB has bound it).
"""

from __future__ import annotations

import re

from sqlglot import exp

from rivulet.sql.system_catalog.base import SYS_SCHEMA

S = SYS_SCHEMA


# Extract fields that name the zone's offset (epoch is the same in every zone).
_ZONE_FIELDS = {"timezone", "timezone_hour", "timezone_minute"}
_LOCAL_CASTS = {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATE, exp.DataType.Type.TIME}
_TSTZ_TYPES = {exp.DataType.Type.TIMESTAMPTZ}


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Dot(
        this=exp.to_identifier(S), expression=exp.Anonymous(this=name, expressions=list(args))
    )


def _is_tstz(x: exp.Expr) -> exp.Expr:
    typeof = exp.Anonymous(this="typeof", expressions=[x.copy()])
    return exp.EQ(this=typeof, expression=exp.Literal.string("TIMESTAMP WITH TIME ZONE"))


def _either(x: exp.Expr, local: exp.Expr, other: exp.Expr) -> exp.Expr:
    """``local`` when ``x`` is a timestamptz, else ``other`` (both of one type)."""
    return exp.Case(ifs=[exp.If(this=_is_tstz(x), true=local)], default=other)


def _localized(node: exp.Expr, zone: exp.Expr) -> exp.Expr | None:
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        to = node.args.get("to")
        x = node.this
        if not isinstance(to, exp.DataType) or isinstance(x, exp.Literal | exp.Null):
            if (
                isinstance(to, exp.DataType)
                and to.this in _TSTZ_TYPES
                and isinstance(x, exp.Literal)
            ):
                return _call("rw_to_tstz", x, zone.copy())
            return None
        if to.this in _TSTZ_TYPES:
            return _call("rw_to_tstz", x, zone.copy())
        if to.this in _LOCAL_CASTS:
            wall = _call("rw_wall_clock", x.copy(), zone.copy())
            return _either(x, exp.Cast(this=wall, to=to.copy()), exp.Cast(this=x, to=to))
        return None
    if isinstance(node, exp.Extract):
        field = node.this.name.lower() if isinstance(node.this, exp.Expr) else ""
        x = node.expression
        if field == "epoch" or x is None:
            return None
        if field in _ZONE_FIELDS:
            offset = _call("rw_zone_offset", x.copy(), zone.copy())
            if field == "timezone_hour":
                offset = exp.IntDiv(this=offset, expression=exp.Literal.number(3600))
            elif field == "timezone_minute":
                offset = exp.IntDiv(
                    this=exp.Mod(this=offset, expression=exp.Literal.number(3600)),
                    expression=exp.Literal.number(60),
                )
            return _either(x, offset, exp.Extract(this=node.this, expression=x))
        wall = _call("rw_wall_clock", x.copy(), zone.copy())
        local = exp.Extract(this=node.this.copy(), expression=wall)
        return _either(x, local, exp.Extract(this=node.this, expression=x))
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        unit = node.args.get("unit")
        if unit is None:
            return None
        unit_sql = unit.name.lower() if not isinstance(unit, exp.Literal) else unit.this.lower()
        return _call("rw_date_trunc", exp.Literal.string(unit_sql), node.this, zone.copy())
    if isinstance(node, exp.CurrentDate | exp.Localtimestamp | exp.Localtime):
        # Today and the time of day are the session's.
        wall = _call("rw_wall_clock", exp.CurrentTimestamp(), zone.copy())
        kind = {exp.CurrentDate: "DATE", exp.Localtimestamp: "TIMESTAMP"}.get(type(node), "TIME")
        return exp.Cast(this=wall, to=exp.DataType.build(kind))
    if isinstance(node, exp.TimeToStr):
        x = node.this
        wall = _call("rw_wall_clock", x.copy(), zone.copy())
        node.set(
            "this", _either(x, wall, exp.Cast(this=x.copy(), to=exp.DataType.build("TIMESTAMP")))
        )
        return None
    return None


def localize(ast: exp.Expr, zone: str) -> exp.Expr:
    """``ast`` with its timestamptz readings done in ``zone`` (a DuckDB zone name).
    Innermost calls first: an outer rewrite copies arguments already rewritten."""
    zone_literal = exp.Literal.string(zone)
    kinds = (
        exp.Cast,
        exp.Extract,
        exp.TimestampTrunc,
        exp.DateTrunc,
        exp.TimeToStr,
        exp.CurrentDate,
        exp.Localtimestamp,
        exp.Localtime,
    )
    for node in reversed(list(ast.find_all(*kinds, bfs=False))):
        replacement = _localized(node, zone_literal)
        if replacement is None:
            continue
        if node is ast:
            ast = replacement
        else:
            node.replace(replacement)
    return ast


def is_utc(zone: str) -> bool:
    return re.fullmatch(r"(?i)(utc|gmt|z|etc/utc|gmt[+-]00:00|[+-]?0{1,2}(:00)?)", zone) is not None
