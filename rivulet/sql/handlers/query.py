"""SELECT (and VALUES, set operations): bound, then run by DuckDB on the committed state."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from rivulet.common.errors import DATETIME_FIELD_OVERFLOW, PROTOCOL_VIOLATION, sql_error
from rivulet.common.types import DataType
from rivulet.sql.binder import Binder, BoundQuery
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, RowStream, StatementResult
from rivulet.storage.state_store import StateStore, read_next_batch, stream_query

# DuckDB warns that DB-API results read as Arrow are copied: the state reads that do so
# read small results on purpose.
warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")

if TYPE_CHECKING:
    from rivulet.sql.session import Session


def bind_select(session: Session, ast: exp.Expr) -> BoundQuery:
    return Binder(session.bind_context()).bind_query(ast)


def check_param_count(bound: BoundQuery, params: list[object]) -> None:
    if bound.param_count != len(params):
        raise sql_error(
            PROTOCOL_VIOLATION,
            f"the statement needs {bound.param_count} parameters, but {len(params)} were supplied",
        )


# Rows per Arrow batch read from DuckDB. A result that fits in its first batch is read
# whole at once, freeing the thread's cursor; a larger one becomes a ``RowStream``.
RESULT_BATCH_ROWS = 16_384


class PreparedCache(threading.local):
    """DuckDB prepared statements of this thread's cursor, by SQL text (LRU).

    Planning costs DuckDB a few hundred microseconds even for ``SELECT 1``; a query run
    again (health checks, dashboards, pollers) skips it. DuckDB computes the whole result
    of an EXECUTE before the first row is read, so only a text whose last run was small
    is prepared, and with a LIMIT of one batch and a row: a result that grew past it is
    run again as a stream. Only parameterless statements: DuckDB's EXECUTE takes no bound
    parameters.
    """

    size = 128

    def __init__(self) -> None:
        self.cursor: duckdb.DuckDBPyConnection | None = None
        # SQL text -> (prepared name, its result's column names).
        self.prepared: OrderedDict[str, tuple[str, list[str]]] = OrderedDict()
        self.counter = 0

    def lookup(self, cur: duckdb.DuckDBPyConnection, sql: str) -> tuple[str, list[str]] | None:
        """(``EXECUTE <name>``, column names) of ``sql`` prepared on ``cur``, if it is."""
        if cur is not self.cursor:
            self.cursor, self.prepared = cur, OrderedDict()
            return None
        found = self.prepared.get(sql)
        if found is None:
            return None
        self.prepared.move_to_end(sql)
        return f"EXECUTE {found[0]}", found[1]

    def prepare(self, cur: duckdb.DuckDBPyConnection, sql: str, names: list[str]) -> None:
        """Prepare ``sql``, whose last run returned a result of one batch."""
        if cur is not self.cursor:
            self.cursor, self.prepared = cur, OrderedDict()
        self.counter += 1
        name = f"rw_prepared_{self.counter}"
        cur.execute(f"PREPARE {name} AS SELECT * FROM ({sql}) AS q LIMIT {RESULT_BATCH_ROWS + 1}")
        self.prepared[sql] = (name, names)
        if len(self.prepared) > self.size:
            _, (old, _names) = self.prepared.popitem(last=False)
            cur.execute(f"DEALLOCATE {old}")

    def forget(self, cur: duckdb.DuckDBPyConnection, sql: str) -> None:
        found = self.prepared.pop(sql, None)
        if found is not None:
            cur.execute(f"DEALLOCATE {found[0]}")


_prepared = PreparedCache()


def start_query(
    store: StateStore,
    cur: duckdb.DuckDBPyConnection,
    sql: str,
    params: list[object],
    *,
    prepare: bool = False,
) -> tuple[pa.Table, RowStream | None, list[Column]]:
    """Execute bound SQL (blocking: on a query thread): the first rows, the rest as a
    stream when they did not fit in the first batch (the stream then takes ``cur`` over),
    and the columns as clients see them. ``prepare``: keep DuckDB's plan of a text whose
    result is small, for its next run."""
    prepare = prepare and not params
    if prepare and (found := _prepared.lookup(cur, sql)) is not None:
        execute, names = found
        described, reader = stream_query(cur, execute, [], RESULT_BATCH_ROWS)
        assert reader is not None
        try:
            table = reader.read_all()
        finally:
            reader.close()
        if table.num_rows <= RESULT_BATCH_ROWS:
            columns = [Column(n, DataType.from_duckdb(t)) for n, (_, t) in zip(names, described)]
            return _check_date_range(table.rename_columns(names)), None, columns
        _prepared.forget(cur, sql)  # it grew: streamed from now on (this run too)
    described, reader = stream_query(cur, sql, params, RESULT_BATCH_ROWS)
    if reader is None:
        return pa.table({}), None, []
    columns = [Column(n, DataType.from_duckdb(t)) for n, t in described]
    head: list[pa.RecordBatch] = []
    try:
        head.append(read_next_batch(reader))
        if head[0].num_rows < RESULT_BATCH_ROWS:
            head.append(read_next_batch(reader))  # StopIteration: the result is whole
    except StopIteration:
        reader.close()
        if prepare:
            try:
                _prepared.prepare(cur, sql, [c.name for c in columns])
            except duckdb.Error:
                pass  # a text DuckDB cannot prepare runs unprepared
        return _check_date_range(pa.Table.from_batches(head, schema=reader.schema)), None, columns
    except BaseException:
        reader.close()
        raise
    store.detach_cursor(cur)
    first = _check_date_range(pa.Table.from_batches(head, schema=reader.schema))
    stream = RowStream(
        reader,
        cur,
        release=lambda: store.release_cursor(cur),
        interrupt=lambda: store.interrupt(cur),
        check=lambda batch: _check_date_range(pa.Table.from_batches([batch])),
    )
    return first, stream, columns


def run_bound(
    cur: duckdb.DuckDBPyConnection, sql: str, params: list[object]
) -> tuple[pa.Table, list[Column]]:
    """Execute bound SQL and read every row (for results known to be small)."""
    described, reader = stream_query(cur, sql, params, RESULT_BATCH_ROWS)
    if reader is None:
        return pa.table({}), []
    try:
        table = reader.read_all()
    finally:
        reader.close()
    return _check_date_range(table), [Column(n, DataType.from_duckdb(t)) for n, t in described]


def query_result(
    verb: str, head: pa.Table, stream: RowStream | None, columns: list[Column]
) -> StatementResult:
    """The result of a query (``verb``: its tag's word), streamed or whole."""
    if stream is None:
        return StatementResult(
            tag=f"{verb} {head.num_rows}", columns=columns, rows=head, rowcount=head.num_rows
        )
    return StatementResult(tag=verb, columns=columns, rows=head, stream=stream)


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
    bound = await session.bind_query_async(stmt)
    check_param_count(bound, params)
    store = session.ctx.store
    head, stream, columns = await session.run_query(
        lambda cur: start_query(store, cur, bound.sql, params, prepare=not bound.volatile),
        light=not bound.reads_data,
    )
    return query_result("SELECT", head, stream, columns)


def describe_query(
    session: Session, ast: exp.Expr, param_types: list[DataType | None]
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
