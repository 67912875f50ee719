"""SELECT (and VALUES, set operations): bound, then run by DuckDB on the committed state."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from rivulet.common.errors import DATETIME_FIELD_OVERFLOW, PROTOCOL_VIOLATION, sql_error
from rivulet.common.types import DataType, arrow_type_for_duckdb
from rivulet.sql.binder import Binder, BoundQuery
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, StatementResult

# The rest of a large result is fetched as Arrow after its first rows were read as values.
warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")

if TYPE_CHECKING:
    import duckdb

    from rivulet.sql.session import Session


def bind_select(session: Session, ast: exp.Expression) -> BoundQuery:
    return Binder(session.bind_context()).bind_query(ast)


def check_param_count(bound: BoundQuery, params: list[object]) -> None:
    if bound.param_count != len(params):
        raise sql_error(
            PROTOCOL_VIOLATION,
            f"the statement needs {bound.param_count} parameters, but {len(params)} were supplied",
        )


# Results up to this many rows are fetched as Python values and turned into Arrow here:
# DuckDB's Arrow export has a fixed cost that dominates tiny results (``SELECT 1``).
_SMALL_RESULT = 64

# Types whose Python values (from fetchmany) convert to DuckDB's Arrow types exactly.
_VALUE_CONVERTIBLE = (
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "VARCHAR", "BLOB", "DATE", "TIME", "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE",
)  # fmt: skip


def _arrow_type(duckdb_type: str) -> pa.DataType | None:
    """The Arrow type of a result column when Python values convert to it exactly."""
    if duckdb_type in _VALUE_CONVERTIBLE or duckdb_type.startswith("DECIMAL("):
        return arrow_type_for_duckdb(duckdb_type)
    return None


class PreparedCache(threading.local):
    """DuckDB prepared statements of this thread's cursor, by SQL text (LRU).

    Planning costs DuckDB a few hundred microseconds even for ``SELECT 1``; a query run
    again (health checks, dashboards, pollers) skips it. Only parameterless statements:
    DuckDB's EXECUTE takes no bound parameters.
    """

    size = 128

    def __init__(self) -> None:
        self.cursor: duckdb.DuckDBPyConnection | None = None
        self.names: OrderedDict[str, str] = OrderedDict()
        self.counter = 0

    def execute(self, cur: duckdb.DuckDBPyConnection, sql: str) -> None:
        if cur is not self.cursor:
            self.cursor, self.names = cur, OrderedDict()
        name = self.names.get(sql)
        if name is None:
            self.counter += 1
            name = f"rw_prepared_{self.counter}"
            cur.execute(f"PREPARE {name} AS {sql}")
            self.names[sql] = name
            if len(self.names) > self.size:
                _, old = self.names.popitem(last=False)
                cur.execute(f"DEALLOCATE {old}")
        else:
            self.names.move_to_end(sql)
        cur.execute(f"EXECUTE {name}")


_prepared = PreparedCache()


def run_bound(
    cur: duckdb.DuckDBPyConnection, sql: str, params: list[object], *, prepare: bool = False
) -> tuple[pa.Table, list[Column]]:
    """Execute bound SQL; the rows as Arrow and the columns as clients see them.
    ``prepare``: keep DuckDB's plan for the next run of the same text."""
    if prepare and not params:
        _prepared.execute(cur, sql)
    else:
        cur.execute(sql, params or None)
    description = cur.description
    if description is None:
        return pa.table({}), []
    names = [d[0] for d in description]
    type_names = [str(d[1]) for d in description]
    columns = [Column(n, DataType.from_duckdb(t)) for n, t in zip(names, type_names)]
    arrow_types = [_arrow_type(t) for t in type_names]
    if any(t is None for t in arrow_types):
        return _check_date_range(cur.to_arrow_table()), columns
    try:
        head = cur.fetchmany(_SMALL_RESULT)
    except OverflowError:  # a date Python cannot hold: read the result as Arrow instead
        cur.execute(sql, params or None)
        return _check_date_range(cur.to_arrow_table()), columns
    arrays = [_value_array([row[i] for row in head], t) for i, t in enumerate(arrow_types)]
    table = _check_date_range(pa.Table.from_arrays(arrays, names=names))
    if len(head) < _SMALL_RESULT:
        return table, columns
    rest = _check_date_range(cur.to_arrow_table())
    return pa.concat_tables([table, rest.cast(table.schema)]), columns


def _value_array(values: list[object], t: pa.DataType) -> pa.Array:
    """Python values as Arrow. DuckDB gives dates and timestamps Python cannot hold (past
    the year 9999, or BC) as text: those are read with numpy, whose range is wide enough."""
    try:
        return pa.array(values, type=t)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        if not (pa.types.is_date(t) or pa.types.is_timestamp(t)):
            raise
    unit = "D" if pa.types.is_date(t) else "us"
    numbers = np.array(
        [_datetime64(v, unit) if v is not None else np.datetime64("NaT") for v in values],
        dtype=f"datetime64[{unit}]",
    )
    storage = pa.int32() if unit == "D" else pa.int64()
    return pa.array(numbers.astype(np.int64), mask=np.isnat(numbers)).cast(storage).cast(t)


def _datetime64(value: object, unit: str) -> np.datetime64:
    if not isinstance(value, str):
        return np.datetime64(value, unit)  # type: ignore[call-overload]
    text = value.strip()
    bc = text.endswith("(BC)")
    text = text.removesuffix("(BC)").strip()
    if unit == "us" and len(text) > 3 and text[-3] in "+-" and text[-3:].lstrip("+-").isdigit():
        text = text[:-3]  # a timestamptz given in UTC
    date, _, time = text.partition(" ")
    year, _, rest = date.partition("-")
    if bc:  # 1 BC is year 0
        year = str(1 - int(year))
    return np.datetime64(f"{year}-{rest}" + (f"T{time}" if time else ""), unit)


# PostgreSQL's dates run from 4714-11-24 BC to 5874897-12-31, DuckDB's further.
_PG_DATE_MIN = int(np.datetime64("-4713-11-24").astype(np.int64))
_PG_DATE_MAX = int(np.datetime64("5874897-12-31").astype(np.int64))


def _check_date_range(table: pa.Table) -> pa.Table:
    """A date PostgreSQL could not hold (date arithmetic past its range) is an error."""
    for col in table.columns:
        if pa.types.is_date32(col.type) and col.null_count < len(col):
            days = col.cast(pa.int32())
            if pc.min(days).as_py() < _PG_DATE_MIN or pc.max(days).as_py() > _PG_DATE_MAX:
                raise sql_error(DATETIME_FIELD_OVERFLOW, "date out of range")
    return table


async def handle_query(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    bound = session.bind_query(stmt)
    check_param_count(bound, params)
    rows, columns = await session.run_query(
        lambda cur: run_bound(cur, bound.sql, params, prepare=True)
    )
    return StatementResult(
        tag=f"SELECT {rows.num_rows}", columns=columns, rows=rows, rowcount=rows.num_rows
    )


def describe_query(
    session: Session, ast: exp.Expression, param_types: list[DataType | None]
) -> tuple[list[DataType | None], list[Column]]:
    """Parameter types and result columns of a query, without running it (pgwire Describe).

    Parameters are replaced by typed NULLs so that DuckDB can plan the query.
    """
    binder = Binder(session.bind_context())
    binder.name_output_columns(ast)
    ast = binder.prepare(ast)
    inferred = binder.param_type_list()
    types = [
        (param_types[i] if i < len(param_types) and param_types[i] is not None else inferred[i])
        for i in range(binder.param_count)
    ]
    for node in list(ast.find_all(exp.Parameter)):
        i = int(node.name) - 1
        t = types[i] if i < len(types) else None
        node.replace(exp.cast(exp.null(), t.duckdb if t is not None else "VARCHAR"))
    sql = ast.sql(dialect="duckdb")
    cur = session.ctx.store.cursor()
    relation = cur.sql(sql)
    if relation is None:
        return types, []
    columns = [
        Column(name, DataType.from_duckdb(str(t)))
        for name, t in zip(relation.columns, relation.types)
    ]
    return types, columns
