"""Compiling SQL expressions of a streaming query into DuckDB SQL over chunk columns.

A column reference becomes ``c<i>`` (its index in the input). The expression then goes
through the batch binder's checks and rewrites (allow-listed functions, PostgreSQL
semantics), and gets a safe form for streaming: any error (an overflow, a division by
zero, a failed cast, an invalid regular expression) yields NULL for that value, with a
predicate saying which rows failed (they are counted). Result types come from DuckDB
itself, so the MV holds exactly what a batch query would return.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, INVALID_TEXT_REPRESENTATION, sql_error
from rivulet.common.types import DataType
from rivulet.sql.binder import Binder
from rivulet.sql.parser import position_of
from rivulet.sql.planner.scope import Scope
from rivulet.stream.expression import ExprSet

DUCKDB = "duckdb"


def column_ref(index: int) -> exp.Column:
    return exp.column(f"c{index}")


class ExprCompiler:
    def __init__(self, binder: Binder, cursor_provider) -> None:
        self.binder = binder
        self._cursor = cursor_provider

    def resolve_columns(self, expr: exp.Expr, scope: Scope) -> exp.Expr:
        """A copy of ``expr`` whose column references are ``c<i>`` of ``scope``."""
        expr = expr.copy()
        for node in list(expr.find_all(exp.Subquery, exp.Select)):
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                "subqueries in expressions of materialized views are not supported yet",
                position=position_of(node),
            )
        columns = list(expr.find_all(exp.Column))
        for col in columns:
            if isinstance(col.this, exp.Star):
                raise sql_error(FEATURE_NOT_SUPPORTED, "* is not allowed here")
            replacement = column_ref(scope.resolve(col))
            if col is expr:
                expr = replacement
            else:
                col.replace(replacement)
        return expr

    def compile(self, exprs: list[exp.Expr], scope: Scope) -> tuple[ExprSet, list[DataType]]:
        """DuckDB SQL (strict and safe) and result types of expressions over ``scope``."""
        trees = []
        for e in exprs:
            resolved = self.resolve_columns(e, scope)
            self._check_literal_operands(resolved, scope.types)
            trees.append(resolved)
        labels = [e.sql(dialect="postgres") for e in exprs]
        return self.compile_resolved(trees, scope.types, labels)

    def compile_resolved(
        self,
        trees: Sequence[exp.Expr],
        input_types: list[DataType],
        labels: list[str] | None = None,
    ) -> tuple[ExprSet, list[DataType]]:
        """``compile`` for trees whose column references are ``c<i>`` already (the
        planner adds references of its own, e.g. tie-breaking keys of window calls)."""
        strict: list[str] = []
        safe: list[str] = []
        errors: list[str] = []
        for tree in trees:
            bound = self.binder.prepare(tree)
            strict_sql = bound.sql(dialect=DUCKDB)
            strict.append(strict_sql)
            safe_tree, preds = _safe_form(bound)
            tolerant, predicate = _tolerant_form(safe_tree, strict_sql)
            if self._binds([tolerant.sql(dialect=DUCKDB), predicate], input_types):
                safe.append(tolerant.sql(dialect=DUCKDB))
                errors.append(predicate)
            else:  # TRY refuses volatile functions: only the fine-grained safe forms
                safe.append(safe_tree.sql(dialect=DUCKDB))
                errors.append(" OR ".join(f"({p})" for p in preds))
        labels = labels if labels is not None else list(strict)
        return ExprSet(strict, safe, errors, labels), self.types_of(strict, input_types)

    def _binds(self, exprs: list[str], input_types: list[DataType]) -> bool:
        try:
            self.types_of([e for e in exprs if e], input_types)
        except duckdb.Error:
            return False
        return True

    def _check_literal_operands(self, tree: exp.Expr, input_types: list[DataType]) -> None:
        """A string literal compared with a value of another type is read as that type
        when the query is planned, as PostgreSQL does (``a > 'abc'`` with an integer
        ``a`` is 22P02): evaluated per row instead, it would fail every chunk."""
        for node in tree.find_all(*_COMPARISONS):
            if isinstance(node, exp.In):
                operands = [node.this, *node.expressions]
            else:
                operands = [node.args.get(k) for k in ("this", "expression", "low", "high")]
            operands = [o for o in operands if o is not None]
            literals = [o for o in operands if isinstance(o, exp.Literal) and o.is_string]
            others = [o for o in operands if not isinstance(o, exp.Literal | exp.Null)]
            if not literals or not others:
                continue
            sql = self.binder.prepare(others[0].copy()).sql(dialect=DUCKDB)
            target = self.types_of([sql], input_types)[0]
            if target.name not in _READ_FROM_TEXT:
                continue
            for lit in literals:
                try:
                    self._cursor().execute("SELECT CAST(? AS " + target.duckdb + ")", [lit.this])
                except duckdb.Error:
                    shown = _READ_FROM_TEXT[target.name]
                    raise sql_error(
                        INVALID_TEXT_REPRESENTATION,
                        f'invalid input syntax for type {shown}: "{lit.this}"',
                        position=position_of(lit),
                    ) from None

    def types_of(self, exprs: list[str], input_types: list[DataType]) -> list[DataType]:
        """DuckDB's result types of expressions over columns of the given types."""
        if not exprs:
            return []
        cols = ", ".join(f"CAST(NULL AS {t.duckdb}) AS c{i}" for i, t in enumerate(input_types))
        source = f"(SELECT {cols})" if cols else "(SELECT 1 AS c_unused)"
        select = ", ".join(f"{e} AS e{i}" for i, e in enumerate(exprs))
        relation = self._cursor().sql(f"SELECT {select} FROM {source} AS input LIMIT 0")
        return [DataType.from_duckdb(str(t)) for t in relation.types]


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between)
# Types a string literal is read as when compared with them, by their name in messages.
_READ_FROM_TEXT = {
    "smallint": "smallint",
    "integer": "integer",
    "bigint": "bigint",
    "numeric": "numeric",
    "real": "real",
    "double precision": "double precision",
    "boolean": "boolean",
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamp with time zone",
    "interval": "interval",
}


def _tolerant_form(tree: exp.Expr, strict_sql: str) -> tuple[exp.Expr, str]:
    """The safe tree wrapped so that any error yields NULL (DuckDB's TRY), and the
    predicate true on rows where the strict form fails. TRY cannot hold a window call:
    there the window function's arguments are wrapped, each of them checked."""
    windows = list(tree.find_all(exp.Window))
    if not windows:
        return exp.Try(this=tree.copy()), f"try(({strict_sql}) IS NULL) IS NULL"
    tree = tree.copy()
    checks: list[str] = []
    for window in tree.find_all(exp.Window):
        func = window.this
        for arg in list(func.iter_expressions()):
            if isinstance(arg, exp.Column | exp.Literal | exp.Null | exp.Star):
                continue
            checks.append(f"try(({arg.sql(dialect=DUCKDB)}) IS NULL) IS NULL")
            arg.replace(exp.Try(this=arg.copy()))
    return tree, " OR ".join(f"({c})" for c in checks)


def _safe_form(tree: exp.Expr) -> tuple[exp.Expr, list[str]]:
    """The tree with NULL-on-error forms, and predicates true on rows that had an error."""
    tree = tree.copy()
    predicates: list[str] = []
    for node in list(tree.find_all(exp.Anonymous)):
        name = node.name.lower()
        if name in ("rw_div", "rw_mod") and len(node.expressions) == 2:
            divisor = node.expressions[1]
            predicates.append(f"({divisor.sql(dialect=DUCKDB)}) = 0")
            node.set("this", f"{name}_safe")
    for node in list(tree.find_all(exp.Cast)):
        if isinstance(node, exp.TryCast):
            continue
        value = node.this.sql(dialect=DUCKDB)
        to = node.args["to"].sql(dialect=DUCKDB)
        predicates.append(f"({value}) IS NOT NULL AND TRY_CAST({value} AS {to}) IS NULL")
        safe = exp.TryCast(this=node.this, to=node.args["to"])
        if node is tree:
            tree = safe
        else:
            node.replace(safe)
    return tree, predicates


def conjuncts(e: exp.Expr) -> list[exp.Expr]:
    """The terms of a conjunction (``a AND (b AND c)``: a, b, c)."""
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    return [e]
