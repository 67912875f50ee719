"""TUMBLE and HOP, RisingWave's window table functions: their arguments, checks and window
arithmetic, shared by the stream planner (materialized views) and the binder (batch
SELECT) so that both give the same windows and the same errors.

``TUMBLE(relation, time_col, size [, offset])`` appends ``window_start`` and
``window_end``: windows start at multiples of ``size`` counted from the epoch plus
``offset`` (RisingWave's ``tumble_start``, in microseconds, a month counting 30 days), and
``window_end = window_start + size``. A NULL time gives NULL windows.

``HOP(relation, time_col, slide, size [, offset])`` repeats each row once per window that
contains its time: windows start at multiples of ``slide`` (plus ``offset``) and last
``size``, a whole multiple of ``slide``; the first is ``tumble_start(time - (size - slide),
slide, offset)``. A row whose time is NULL is in no window.

Windows over a ``date`` are ``timestamp``s; over a ``timestamptz`` they are
``timestamptz`` (counted in UTC).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from rivulet.common.errors import (
    DUPLICATE_COLUMN,
    INVALID_PARAMETER_VALUE,
    SYNTAX_ERROR,
    UNDEFINED_COLUMN,
    UNDEFINED_FUNCTION,
    sql_error,
)
from rivulet.common.intervals import interval_micros
from rivulet.common.types import TIMESTAMP, DataType
from rivulet.sql.parser import position_of

WINDOW_FUNCTIONS = ("tumble", "hop")
WINDOW_COLUMNS = ("window_start", "window_end")

_TIME_TYPES = ("timestamp without time zone", "timestamp with time zone", "date")
_USAGE = {
    "tumble": "TUMBLE(relation, time_column, INTERVAL 'size' [, INTERVAL 'offset'])",
    "hop": "HOP(relation, time_column, INTERVAL 'slide', INTERVAL 'size' [, INTERVAL 'offset'])",
}


def window_function_name(item: exp.Expr) -> str | None:
    """``"tumble"`` or ``"hop"`` when a FROM item calls one of them, else None."""
    fn = item.this if isinstance(item, exp.Table) else None
    if isinstance(fn, exp.Anonymous) and fn.name.lower() in WINDOW_FUNCTIONS:
        return fn.name.lower()
    return None


@dataclass(frozen=True)
class WindowCall:
    """A TUMBLE/HOP call whose form is checked; its relation and intervals are not yet."""

    kind: str  # "tumble" | "hop"
    relation: exp.Table  # the first argument, as a table reference
    time_column: exp.Column
    intervals: list[exp.Expr]  # TUMBLE: size [, offset]; HOP: slide, size [, offset]
    node: exp.Table  # the FROM item

    @property
    def label(self) -> str:
        return self.kind.upper()

    @property
    def alias(self) -> str:
        """The name its columns are qualified by: the alias, else the relation's name."""
        return self.node.alias or self.relation.name


@dataclass(frozen=True)
class WindowSpec:
    """A checked window: sizes as DuckDB interval SQL and in microseconds."""

    kind: str
    size: str
    size_us: int
    slide: str  # HOP's slide; TUMBLE's size
    slide_us: int
    offset: str | None
    offset_us: int

    @property
    def units(self) -> int:
        """Windows per row (HOP), 1 for TUMBLE."""
        return self.size_us // self.slide_us


def window_call(item: exp.Table) -> WindowCall:
    """Check a TUMBLE/HOP call's arguments by their form (42601 otherwise)."""
    kind = window_function_name(item)
    assert kind is not None
    fn = item.this
    args = list(fn.expressions)
    label = kind.upper()
    lo, hi = (3, 4) if kind == "tumble" else (4, 5)
    if not lo <= len(args) <= hi:
        raise sql_error(
            SYNTAX_ERROR,
            f"{label} takes {lo} or {hi} arguments, not {len(args)}",
            hint=f"Call it as {_USAGE[kind]}.",
            position=position_of(fn),
        )
    first = args[0]
    if isinstance(first, exp.Column) and not first.args.get("catalog"):
        # [database.][schema.]name parses as a column reference.
        relation = exp.Table(
            this=first.this.copy(), db=first.args.get("table"), catalog=first.args.get("db")
        )
    elif isinstance(first, exp.Table) and isinstance(first.this, exp.Identifier):
        relation = first.copy()
    else:
        raise sql_error(
            SYNTAX_ERROR,
            f"the first argument of {label} must name a table, materialized view or source,"
            f" not {first.sql(dialect='postgres')}",
            hint="Put a subquery, join or another table function in a materialized view and"
            f" apply {label} to it.",
            position=position_of(first),
        )
    time_column = args[1]
    if not isinstance(time_column, exp.Column) or isinstance(time_column.this, exp.Star):
        raise sql_error(
            SYNTAX_ERROR,
            f"the second argument of {label} must be a column of"
            f' "{relation.name}", not {time_column.sql(dialect="postgres")}',
            hint=f'Compute the time in a materialized view over "{relation.name}" and apply'
            f" {label} to that column.",
            position=position_of(time_column),
        )
    return WindowCall(kind, relation, time_column, args[2:], item)


def time_column_index(call: WindowCall, names: list[str], types: list[DataType]) -> int:
    """The index of the call's time column among the relation's columns (whose names must
    not clash with the window columns); 42703 / 42883 otherwise."""
    relation = call.relation.name
    for name in names:
        if name in WINDOW_COLUMNS:
            raise sql_error(
                DUPLICATE_COLUMN,
                f'column "{name}" of "{relation}" clashes with the {name} column {call.label} adds',
                hint=f'Rename the column in a materialized view over "{relation}" and apply'
                f" {call.label} to that.",
                position=position_of(call.node.this),
            )
    name = call.time_column.name
    if name not in names:
        raise sql_error(
            UNDEFINED_COLUMN,
            f'column "{name}" does not exist in "{relation}"',
            hint=f"{call.label}'s second argument names the time column of its relation.",
            position=position_of(call.time_column),
        )
    idx = names.index(name)
    if types[idx].name not in _TIME_TYPES:
        raise sql_error(
            UNDEFINED_FUNCTION,
            f'{call.label} needs a timestamp, timestamptz or date time column: "{name}" of'
            f' "{relation}" is {types[idx].name}',
            hint="Cast the column to timestamp in a materialized view and apply"
            f" {call.label} to that.",
            position=position_of(call.time_column),
        )
    return idx


def window_spec(call: WindowCall, interval_sql: Callable[[exp.Expr], str]) -> WindowSpec:
    """The call's intervals, bound to DuckDB SQL by ``interval_sql`` and checked: constant,
    size (and slide) positive, HOP's size a whole multiple of its slide."""
    label = call.label
    names = ["size", "offset"] if call.kind == "tumble" else ["slide", "size", "offset"]
    sqls: dict[str, str] = {}
    micros: dict[str, int] = {}
    for what, arg in zip(names, call.intervals, strict=False):
        sql = interval_sql(arg)
        try:
            micros[what] = interval_micros(sql)
        except Exception as exc:
            raise sql_error(
                SYNTAX_ERROR,
                f"the window {what} of {label} must be a constant interval, not"
                f" {arg.sql(dialect='postgres')}",
                hint="Write an interval literal, as INTERVAL '10' SECOND or INTERVAL '1 hour'.",
                position=position_of(arg),
            ) from exc
        sqls[what] = sql
        if what != "offset" and micros[what] <= 0:
            raise sql_error(
                INVALID_PARAMETER_VALUE,
                f"the window {what} of {label} must be positive, not {arg.sql(dialect='postgres')}",
                hint="Give a positive interval, as INTERVAL '1' MINUTE.",
                position=position_of(arg),
            )
    if call.kind == "hop" and micros["size"] % micros["slide"]:
        slide, size = call.intervals[0], call.intervals[1]
        raise sql_error(
            INVALID_PARAMETER_VALUE,
            f"window_size {size.sql(dialect='postgres')} cannot be divided by window_slide"
            f" {slide.sql(dialect='postgres')}",
            hint="HOP's window size must be a whole multiple of its slide.",
            position=position_of(size),
        )
    size_key = "size"
    slide_key = "size" if call.kind == "tumble" else "slide"
    return WindowSpec(
        call.kind,
        sqls[size_key],
        micros[size_key],
        sqls[slide_key],
        micros[slide_key],
        sqls.get("offset"),
        micros.get("offset", 0),
    )


def window_type(time_type: DataType) -> DataType:
    """The type of window_start / window_end: a date's windows are timestamps."""
    return TIMESTAMP if time_type.name == "date" else time_type


def _as_window_time(col: str, time_type: DataType) -> str:
    return col if time_type.name == "timestamp with time zone" else f"CAST({col} AS TIMESTAMP)"


def tumble_start_sql(col: str, time_type: DataType, size_us: int, offset_us: int) -> str:
    """DuckDB SQL of RisingWave's ``tumble_start(col, size, offset)``: the time minus its
    (floor) remainder after the offset, modulo the size, in microseconds since the epoch."""
    ts = _as_window_time(col, time_type)
    return (
        f"({ts} - to_microseconds((((epoch_us({ts}) - ({offset_us})) % {size_us})"
        f" + {size_us}) % {size_us}))"
    )


def hop_first_start_sql(col: str, time_type: DataType, spec: WindowSpec) -> str:
    """DuckDB SQL of the earliest HOP window containing ``col``: ``tumble_start(col -
    (size - slide), slide, offset)``; the others follow one slide apart."""
    ts = _as_window_time(col, time_type)
    back = spec.size_us - spec.slide_us
    shifted = f"(epoch_us({ts}) - {back})"
    rem = f"((({shifted} - ({spec.offset_us})) % {spec.slide_us}) + {spec.slide_us}) % {spec.slide_us}"
    return f"({ts} - to_microseconds({back} + ({rem})))"
