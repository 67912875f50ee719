"""INSERT ... VALUES of parameters and plain literals, as Arrow columns without DuckDB.

The general path evaluates a VALUES list as a DuckDB query, then casts it to the table's
types. An application's write mostly has a simpler shape - each item a parameter or a
literal, each value already of its column's kind (a Python int for an integer column, a
str for a text one) - and those rows are built here, one Arrow array per column. Whatever
this cannot convert exactly as PostgreSQL would (an expression, DEFAULT, a value needing
a cast with rules of its own, one out of range) takes the general path, which gives
PostgreSQL's result or error for it: this module only ever answers the easy cases.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from rivulet.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INTEGER,
    SMALLINT,
    TEXT,
    VARCHAR,
    DataType,
    arrow_type_of,
)

__all__ = ["LiteralRows", "literal_rows_of"]

_INT_RANGES = {
    SMALLINT: (-(1 << 15), (1 << 15) - 1),
    INTEGER: (-(1 << 31), (1 << 31) - 1),
    BIGINT: (-(1 << 63), (1 << 63) - 1),
}
_EXACT_FLOAT_INT = 1 << 53
_NO_VALUE = object()
# An item: the 1-based parameter it takes, or 0 and the literal's value; and, for a
# parameter with a cast written on it (``$1::BIGINT``, as ORMs send), the check that its
# value passes the cast unchanged.
Item = tuple[int, object, "Callable[[object], bool] | None"]


def _acceptor(dtype: DataType) -> Callable[[object], bool]:
    """Whether a value is stored as itself in a column of ``dtype`` (no cast rules), as a
    function made once per type (a long VALUES list asks per item)."""
    if dtype in _INT_RANGES:
        low, high = _INT_RANGES[dtype]
        return lambda v: v is None or (type(v) is int and low <= v <= high)
    if dtype == DOUBLE:
        return lambda v: (
            v is None
            or type(v) is float
            or (type(v) is int and -_EXACT_FLOAT_INT < v < _EXACT_FLOAT_INT)
        )
    if dtype in (VARCHAR, TEXT):
        return lambda v: v is None or type(v) is str
    if dtype == BOOLEAN:
        return lambda v: v is None or type(v) is bool
    return lambda v: v is None


# Casts that leave a value they accept as it is (a length or precision has rules), by
# sqlglot's type, as the check of what they accept.
_IDENTITY_CASTS = {
    exp.DataType.Type.SMALLINT: _acceptor(SMALLINT),
    exp.DataType.Type.INT: _acceptor(INTEGER),
    exp.DataType.Type.BIGINT: _acceptor(BIGINT),
    exp.DataType.Type.DOUBLE: _acceptor(DOUBLE),
    exp.DataType.Type.VARCHAR: _acceptor(VARCHAR),
    exp.DataType.Type.TEXT: _acceptor(TEXT),
    exp.DataType.Type.BOOLEAN: _acceptor(BOOLEAN),
}


def _literal(node: exp.Expr) -> object:
    """A plain literal's Python value, or ``_NO_VALUE``."""
    kind = type(node)
    if kind is exp.Literal:
        args = node.args
        text = args["this"]
        if args.get("is_string"):
            return text
        return int(text) if text.isdigit() else _NO_VALUE
    if kind is exp.Null:
        return None
    if kind is exp.Boolean:
        return bool(node.this)
    if kind is exp.Neg and type(node.this) is exp.Literal:
        value = _literal(node.this)
        return -value if type(value) is int else _NO_VALUE
    return _NO_VALUE


@dataclass(frozen=True)
class LiteralRows:
    """A VALUES list whose items are all parameters or plain literals."""

    targets: tuple[str, ...]
    types: tuple[DataType, ...]
    rows: tuple[tuple[Item, ...], ...]
    # Rows of literals only, built once: no item kept per value (a long VALUES list of
    # literals made ~25,000 tuples that garbage collections walked).
    literals: pa.Table | None = None

    @functools.cached_property
    def param_count(self) -> int:
        """The highest parameter number it takes (0: only literals, always built)."""
        return max((param for row in self.rows for param, _, _ in row), default=0)

    def build(self, params: Sequence[object]) -> pa.Table | None:
        """The rows as a table (one column per target, typed), or None when some value
        needs the general path."""
        return self.build_many([params])

    def build_many(self, param_sets: Sequence[Sequence[object]]) -> pa.Table | None:
        """The rows for each parameter set in turn, as one table (a statement run once per
        set: a driver's ``executemany``), or None when some value needs the general path."""
        if self.literals is not None:
            return self.literals
        columns = []
        for i, dtype in enumerate(self.types):
            accepts = _acceptor(dtype)
            if not self.param_count:  # literals, checked when read
                values = [row[i][1] for row in self.rows]
                columns.append(pa.array(values, type=arrow_type_of(dtype)))
                continue
            values = []
            for params in param_sets:
                for row in self.rows:
                    param, const, cast = row[i]
                    if not param:
                        values.append(const)
                        continue
                    value = params[param - 1]
                    if not accepts(value) or (cast is not None and not cast(value)):
                        return None
                    values.append(value)
            columns.append(pa.array(values, type=arrow_type_of(dtype)))
        return pa.Table.from_arrays(columns, names=list(self.targets))


def literal_rows_of(
    values: exp.Values, targets: Sequence[str], types: Sequence[DataType]
) -> LiteralRows | None:
    """The fast form of ``values`` (before its items are wrapped in casts), if it has one."""
    if not all(t in _INT_RANGES or t in (DOUBLE, VARCHAR, TEXT, BOOLEAN) for t in types):
        return None
    accepts = [_acceptor(t) for t in types]
    width = len(targets)
    literals = _literal_columns(values, width, accepts)
    if literals is not None:
        table = pa.Table.from_arrays(
            [pa.array(c, type=arrow_type_of(t)) for c, t in zip(literals, types)],
            names=list(targets),
        )
        return LiteralRows(tuple(targets), tuple(types), (), table)
    rows = []
    for row in values.expressions:
        if len(row.expressions) != width:
            return None  # the general path says what is wrong
        items: list[Item] = []
        for item in row.expressions:
            cast = None
            if type(item) is exp.Literal:  # the common case first
                value = _literal(item)
                if value is _NO_VALUE or not accepts[len(items)](value):
                    return None
                items.append((0, value, None))
                continue
            if isinstance(item, exp.Cast):
                to = item.args["to"]
                cast = _IDENTITY_CASTS.get(to.this)
                if cast is None or to.expressions:
                    return None
                item = item.this
            if isinstance(item, exp.Parameter):
                items.append((int(item.name), None, cast))
                continue
            value = _literal(item)
            if value is _NO_VALUE or not accepts[len(items)](value):
                return None
            if cast is not None and not cast(value):
                return None
            items.append((0, value, None))
        rows.append(tuple(items))
    return LiteralRows(tuple(targets), tuple(types), tuple(rows))


def _literal_columns(
    values: exp.Values, width: int, accepts: Sequence[Callable[[object], bool]]
) -> list[list[object]] | None:
    """The values of a VALUES list of plain literals only, column by column, each stored
    as it is; None if an item is anything else (a parameter, a cast, an expression)."""
    columns: list[list[object]] = [[] for _ in range(width)]
    for row in values.expressions:
        items = row.expressions
        if len(items) != width:
            return None
        for column, item, accept in zip(columns, items, accepts):
            value = _literal(item)
            if value is _NO_VALUE or not accept(value):
                return None
            column.append(value)
    return columns
