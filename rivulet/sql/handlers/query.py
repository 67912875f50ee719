"""SELECT (and VALUES, set operations): bound, then run by DuckDB on the committed state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from rivulet.common.errors import PROTOCOL_VIOLATION, sql_error
from rivulet.common.types import DataType
from rivulet.sql.binder import Binder, BoundQuery
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, StatementResult

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


def run_bound(
    cur: duckdb.DuckDBPyConnection, sql: str, params: list[object]
) -> tuple[pa.Table, list[Column]]:
    """Execute bound SQL; the rows as Arrow and the columns as clients see them."""
    relation = cur.sql(sql, params=params or None)
    if relation is None:
        return pa.table({}), []
    columns = [
        Column(name, DataType.from_duckdb(str(t)))
        for name, t in zip(relation.columns, relation.types)
    ]
    return relation.to_arrow_table(), columns


async def handle_query(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    bound = session.bind_query(stmt)
    check_param_count(bound, params)
    rows, columns = await session.run_query(lambda cur: run_bound(cur, bound.sql, params))
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
