"""What the stream planner's modules share: the 0A000 error for a query shape that
materialized views do not maintain, whether a column reference names a column of a scope,
and PostgreSQL's type categories (the types that may meet in a join key or a UNION column).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, sql_error
from rivulet.common.types import DataType
from rivulet.sql.parser import position_of
from rivulet.sql.planner.expr import ExprCompiler
from rivulet.sql.planner.scope import Planned, Scope, ScopeColumn
from rivulet.stream.expression import ExprSet
from rivulet.stream.plan import Field, ProjectNode, Schema

_SUPPORTED_SHAPES = (
    "Materialized views maintain projections, filters, equi-joins (inner, left, right, full),"
    " GROUP BY with count, sum, min, max, avg, bool_and, bool_or and string_agg, DISTINCT,"
    " UNION ALL, ORDER BY ... LIMIT, TUMBLE/HOP windows and window functions (OVER)."
)


def unsupported_in_mv(what: str, node: exp.Expr | None = None) -> Exception:
    return sql_error(
        FEATURE_NOT_SUPPORTED,
        f"{what}: not supported yet in materialized views",
        hint=_SUPPORTED_SHAPES,
        position=position_of(node) if node is not None else None,
    )


def names_column(col: exp.Column, scope: Scope) -> bool:
    q = col.table or None
    return any(c.name == col.name and (q is None or c.qualifier == q) for c in scope.columns)


def type_category(t: DataType) -> str:
    if t.name in ("smallint", "integer", "bigint", "numeric", "real", "double precision"):
        return "number"
    if t.name in ("character varying", "text", "name"):
        return "string"
    if t.name in ("date", "timestamp without time zone", "timestamp with time zone"):
        return "datetime"
    return t.name


def computed_columns(
    compiler: ExprCompiler, rel: Planned, exprs: list[exp.Expr], name: Callable[[int], str]
) -> tuple[Planned, list[int]]:
    """Expressions as columns of ``rel``: input columns as they are, others appended by
    a projection as hidden columns (the i-th named ``name(i)``); with their indices."""
    indices: list[int] = []
    extra: list[exp.Expr] = []
    for e in exprs:
        if isinstance(e, exp.Column):
            indices.append(rel.scope.resolve(e))
        else:
            indices.append(len(rel.scope) + len(extra))
            extra.append(e)
    if not extra:
        return rel, indices
    compiled, types = compiler.compile(extra, rel.scope)
    names = [name(i) for i in range(len(extra))]
    same = [f"c{i}" for i in range(len(rel.scope))]
    node = ProjectNode(
        Schema(list(rel.node.schema) + [Field(nm, t) for nm, t in zip(names, types)]),
        list(rel.node.stream_key),
        rel.node.append_only,
        [rel.node],
        exprs=ExprSet.plain(same) + compiled,
    )
    scope = Scope(
        rel.scope.columns + [ScopeColumn(None, nm, t, True) for nm, t in zip(names, types)]
    )
    return Planned(node, scope, rel.dist), indices
