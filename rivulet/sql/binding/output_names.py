"""Output names: unaliased output columns named as PostgreSQL names them (``pg_output_name``,
shared with the stream planner), so a batch query and a materialized view agree.
"""

from __future__ import annotations

from sqlglot import exp

from rivulet.sql.binding.base import quote
from rivulet.sql.binding.casts import _type_of_datatype
from rivulet.sql.functions import SESSION_NODE_NAMES


class OutputNaming:
    """The ``Binder``'s output naming."""

    # --------------------------------------------------------- output names
    @staticmethod
    def name_output_columns(ast: exp.Expr) -> None:
        """Alias unnamed output expressions the way PostgreSQL names them."""
        select = ast
        while isinstance(select, exp.SetOperation):
            select = select.this
        while isinstance(select, exp.Subquery):
            select = select.this
        if not isinstance(select, exp.Select):
            return
        new = []
        changed = False
        for e in select.expressions:
            if isinstance(e, exp.Alias | exp.Star) or (
                isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
            ):
                new.append(e)
                continue
            name = pg_output_name(e)
            if isinstance(e, exp.Column) and e.name == name:
                new.append(e)
                continue
            new.append(exp.alias_(e, quote(name), copy=False))
            changed = True
        if changed:
            select.set("expressions", new)


def pg_output_name(e: exp.Expr) -> str:
    """PostgreSQL's name for an unaliased output column."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Cast | exp.TryCast):
        inner = pg_output_name(e.this)
        # A name only as weak as a type's (a cast's, CASE's) gives way to the outer type:
        # '...'::timestamp::timestamptz is "timestamptz".
        arg = e.this
        while isinstance(arg, exp.Paren):
            arg = arg.this
        if inner != "?column?" and not isinstance(arg, exp.Cast | exp.TryCast | exp.Case):
            return inner
        to = e.args.get("to")
        if isinstance(to, exp.DataType):
            dtype = _type_of_datatype(to)
            return _TYPE_OUTPUT_NAMES.get(dtype.name, dtype.name) if dtype else "?column?"
        return "?column?"
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Window | exp.Filter | exp.WithinGroup):
        return pg_output_name(e.this)
    if isinstance(e, exp.Interval):
        return "interval"
    if isinstance(e, exp.AtTimeZone):
        return "timezone"
    if isinstance(e, exp.Pad):
        return "lpad" if e.args.get("is_left") else "rpad"
    if isinstance(e, exp.Dot) and isinstance(e.expression, exp.Anonymous):
        return e.expression.name.lower()
    if isinstance(e, exp.Anonymous):
        return e.name.lower()
    if type(e) in SESSION_NODE_NAMES:
        return SESSION_NODE_NAMES[type(e)]
    if isinstance(e, exp.Connector):  # AND / OR are operators, not functions
        return "?column?"
    if isinstance(e, exp.Func):
        names = {
            "GroupConcat": "string_agg",
            "LogicalAnd": "bool_and",
            "LogicalOr": "bool_or",
            "ApproxDistinct": "approx_count_distinct",
            "CurrentTimestamp": "now",
            "StrPosition": "position",
            "ExplodingGenerateSeries": "generate_series",
            "ArraySize": "array_length",
            "Rand": "random",
            "Pow": "pow",
            "Ceil": "ceil",
            "VariancePop": "var_pop",
            "Hex": "to_hex",
            "TimeToStr": "to_char",
            "UnixToTime": "to_timestamp",
            "StrToTime": "to_timestamp",
            "StrToDate": "to_date",
            "TimestampTrunc": "date_trunc",
            "DateTrunc": "date_trunc",
        }
        cls = type(e).__name__
        if cls in names:
            return names[cls]
        return e.sql_name().lower()
    if isinstance(e, exp.Array):
        return "array"
    return "?column?"


_TYPE_OUTPUT_NAMES = {
    "integer": "int4",
    "bigint": "int8",
    "smallint": "int2",
    "boolean": "bool",
    "real": "float4",
    "double precision": "float8",
    "character varying": "varchar",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "time without time zone": "time",
}
