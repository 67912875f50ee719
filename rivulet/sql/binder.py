"""The binder: checks a query against Rivulet's catalog and rewrites it into DuckDB SQL.

Nothing a user writes reaches DuckDB unbound. Every relation must name a Rivulet table or a
system relation (pg_catalog, information_schema, rw_catalog), every function must be on
the allow-list (``functions``); the rewritten query reads tables through their state
tables, so DuckDB sees only what Rivulet put there. Along the way the query gets
PostgreSQL's meanings where DuckDB's differ (division by zero raises, output columns are
named as PostgreSQL names them, session functions answer from the session).

The parts live in ``rivulet.sql.binding``, one module per concern (relations, function
calls, casts, parameters, output names, and what they share); ``Binder`` puts them
together and drives the rewrite (``prepare``).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import SYNTAX_ERROR, sql_error
from rivulet.common.types import DataType
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binding.base import DUCKDB, INTERNAL, BindContext, BoundQuery, quote
from rivulet.sql.binding.calls import CallBinding
from rivulet.sql.binding.casts import _pg_typeof
from rivulet.sql.binding.output_names import OutputNaming, pg_output_name
from rivulet.sql.binding.parameters import ParameterBinding
from rivulet.sql.binding.relations import RelationBinding
from rivulet.sql.functions import JSON_TABLE_FUNCTIONS
from rivulet.sql.session_config import duckdb_zone
from rivulet.sql.system_catalog import SYS_SCHEMA
from rivulet.sql.system_catalog.rewrite import rewrite_pg_syntax
from rivulet.sql.timezones import is_utc, localize
from rivulet.sql.windows import window_call, window_function_name

__all__ = [
    "DUCKDB",
    "INTERNAL",
    "BindContext",
    "Binder",
    "BoundQuery",
    "pg_output_name",
    "quote",
]


class Binder(RelationBinding, CallBinding, ParameterBinding, OutputNaming):
    """One statement's binder: the parts of ``rivulet.sql.binding`` over one state (the
    tables it read, the parameters it saw, a DML target in scope)."""

    def __init__(self, ctx: BindContext) -> None:
        self.ctx = ctx
        self.tables: list[TableCatalog] = []
        self._param_types: dict[int, DataType | None] = {}
        self._placeholders = 0
        self._dollar_params = 0
        # Tables in scope that are not plain table references (a DML target), by alias.
        self.scope: dict[str, TableCatalog] = {}

    # -------------------------------------------------------------- binding
    def bind_query(self, ast: exp.Expr, *, name_outputs: bool = True) -> BoundQuery:
        """Bind a SELECT (or VALUES / set operation) for DuckDB."""
        if name_outputs:
            self.name_output_columns(ast)
        volatile = any(t.name == "pg_stat_activity" for t in ast.find_all(exp.Table))
        ast = self.prepare(ast)
        return BoundQuery(
            sql=ast.sql(dialect=DUCKDB),
            param_count=self.param_count,
            param_types=self.param_type_list(),
            tables=self.tables,
            reads_data=any(t.db != SYS_SCHEMA for t in ast.find_all(exp.Table)),
            volatile=volatile,
        )

    def prepare(self, ast: exp.Expr) -> exp.Expr:
        """Normalize, check and rewrite an expression tree in place (returns the root)."""
        ast = normalize_identifiers(ast, dialect="postgres")
        ctes = {cte.alias_or_name for cte in ast.find_all(exp.CTE)}
        self.number_parameters(ast)
        self._infer_parameter_types(ast)
        # TUMBLE / HOP calls are read before the PostgreSQL rewrite (which drops the
        # database of a column reference, the form their first argument parses as).
        windows = [(t, window_call(t)) for t in ast.find_all(exp.Table) if window_function_name(t)]
        # PostgreSQL syntax of catalog queries (::regclass, pg_catalog.f()...).
        ast = rewrite_pg_syntax(ast, self.ctx)
        # TUMBLE / HOP first: their arguments are not expressions of the outer query.
        for table, call in windows:
            table.replace(self._window_relation(table, call, ctes))
        for node in list(ast.walk()):
            if isinstance(node, exp.Table):
                self._bind_table(node, ctes)
            elif isinstance(node, exp.Func):
                replacement = self._bind_function(node)
                if replacement is not node:
                    if node is ast:
                        ast = replacement
                    else:
                        node.replace(replacement)
            elif isinstance(node, exp.DPipe):
                call = self.sys_call("rw_concat_op", node.this, node.expression, self._cap())
                if node is ast:
                    ast = call
                else:
                    node.replace(call)
            elif isinstance(node, exp.Div | exp.Mod):
                fn = "rw_div" if isinstance(node, exp.Div) else "rw_mod"
                call = self.sys_call(fn, node.this, node.expression)
                if node is ast:
                    ast = call
                else:
                    node.replace(call)
            elif isinstance(node, exp.Operator):
                bound_op = self._bind_operator(node)
                if node is ast:
                    ast = bound_op
                else:
                    node.replace(bound_op)
            elif isinstance(node, exp.Collate):
                node.replace(node.this)
            elif (
                isinstance(node, exp.Lateral)
                and isinstance(node.this, exp.Anonymous)
                and node.this.name.lower() in JSON_TABLE_FUNCTIONS
            ):
                node.replace(self._json_table(node.this, node.args.get("alias")))
            elif isinstance(node, exp.Command | exp.Pragma | exp.Set):
                raise sql_error(SYNTAX_ERROR, "unexpected statement inside a query")
            elif isinstance(node, exp.Like | exp.ILike) and not isinstance(node.parent, exp.Escape):
                # PostgreSQL's LIKE escapes with a backslash by default; DuckDB's does not.
                escape = exp.Escape(expression=exp.Literal.string("\\"))
                node.replace(escape)
                escape.set("this", node)
        # Rewrites that repeat an argument run last, on arguments already bound: a copy
        # taken before binding would reach DuckDB with its relations unchecked.
        zone = duckdb_zone(self.ctx.setting("timezone") or "UTC")
        if not is_utc(zone):
            ast = localize(ast, zone)
        for node in list(ast.find_all(exp.Anonymous)):
            if node.name.lower() == "pg_typeof" and len(node.expressions) == 1:
                replacement = _pg_typeof(node.expressions[0])
                if node is ast:
                    ast = replacement
                else:
                    node.replace(replacement)
        return ast
