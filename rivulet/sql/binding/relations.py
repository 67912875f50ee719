"""Relations: table references resolved against the catalog (a user table becomes a
subquery over its state table; a source is refused) and the system relations, table
functions in FROM (the allow-list; ``jsonb_each`` and its kin over DuckDB's
``json_each``), and TUMBLE / HOP rewritten into subqueries. A mixin of the ``Binder``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from rivulet.common.chunk import VNODE_COLUMN
from rivulet.common.errors import (
    FEATURE_NOT_SUPPORTED,
    UNDEFINED_FUNCTION,
    UNDEFINED_TABLE,
    sql_error,
)
from rivulet.meta.catalog import SYSTEM_SCHEMAS, TableCatalog
from rivulet.sql.binding.base import DUCKDB, INTERNAL, BindContext, quote
from rivulet.sql.functions import (
    ALLOWED_TABLE_FUNCTIONS,
    JSON_TABLE_FUNCTIONS,
    function_name,
)
from rivulet.sql.parser import position_of
from rivulet.sql.scope import names_a_cte
from rivulet.sql.system_catalog import SYS_SCHEMA
from rivulet.sql.windows import (
    WindowCall,
    hop_first_start_sql,
    time_column_index,
    tumble_start_sql,
    window_spec,
)


class RelationBinding:
    """The ``Binder``'s relations: resolution of names, table references and TUMBLE / HOP."""

    ctx: BindContext
    tables: list[TableCatalog]

    if TYPE_CHECKING:
        # The Binder's: a window's interval arguments are bound as expressions.
        def prepare(self, ast: exp.Expr) -> exp.Expr: ...

    # ------------------------------------------------------------ resolution
    def resolve_schema_list(self, schema: str | None) -> list[str]:
        if schema:
            return [schema]
        # PostgreSQL searches pg_catalog first, then the search path; RisingWave also finds
        # rw_catalog relations unqualified.
        path = [s for s in self.ctx.search_path if s != "$user"]
        return ["pg_catalog", *path, "rw_catalog"]

    def lookup_table(self, schema: str | None, name: str) -> TableCatalog | None:
        for s in self.resolve_schema_list(schema):
            if s in SYSTEM_SCHEMAS:
                continue
            t = self.ctx.catalog.get_table(s, name)
            if t is not None:
                return t
        return None

    def _resolve(self, table: exp.Table) -> exp.Expr:
        """The DuckDB relation standing for a table reference."""
        db = table.catalog
        if db and db != self.ctx.database:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'cross-database references are not implemented: "{table.sql(dialect="postgres")}"',
                position=position_of(table),
            )
        schema = table.db or None
        name = table.name
        for s in self.resolve_schema_list(schema):
            if s in SYSTEM_SCHEMAS:
                rel = self.ctx.system.relation(s, name)
                if rel is not None:
                    inline = self.ctx.system.inline(s, name)  # an always-empty relation
                    if inline is not None:
                        return inline
                    return exp.Table(this=quote(rel), db=quote(SYS_SCHEMA))
                continue
            t = self.ctx.catalog.get_table(s, name)
            if t is not None:
                if t.kind == "source":
                    raise sql_error(
                        FEATURE_NOT_SUPPORTED,
                        f'cannot query source "{t.name}" directly: a source stores no rows',
                        hint="Create a materialized view over it, or a table with the connector"
                        " (CREATE TABLE ... WITH (connector = ...)).",
                        position=position_of(table),
                    )
                self.tables.append(t)
                return self.table_subquery(t)
        shown = f"{schema}.{name}" if schema else name
        raise sql_error(
            UNDEFINED_TABLE,
            f'relation "{shown}" does not exist',
            position=position_of(table),
        )

    @staticmethod
    def table_subquery(t: TableCatalog, *, with_hidden: bool = False) -> exp.Expr:
        """``(SELECT visible columns FROM state.tN)`` - hidden columns stay out of ``*``."""
        cols = t.columns if with_hidden else t.visible_columns
        names = [c.name for c in cols]
        if with_hidden:
            names = [VNODE_COLUMN, *names]
        physical = exp.Table(this=quote(f"t{t.id}"), db=exp.to_identifier("state"))
        physical.meta[INTERNAL] = True
        return exp.select(*[exp.column(quote(n)) for n in names]).from_(physical).subquery()

    def _bind_table(self, table: exp.Table, ctes: set[str]) -> None:
        if table.meta.get(INTERNAL):
            return
        inner = table.this
        if isinstance(inner, exp.Func):
            name = function_name(inner)
            if name in JSON_TABLE_FUNCTIONS:
                table.replace(self._json_table(inner, table.args.get("alias")))
                return
            if name not in ALLOWED_TABLE_FUNCTIONS and not isinstance(
                inner, exp.ExplodingGenerateSeries | exp.GenerateSeries | exp.Explode | exp.Unnest
            ):
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"table function {name}() does not exist",
                    position=position_of(inner),
                )
            return
        if not table.db and not table.catalog and table.name in ctes and names_a_cte(table):
            return
        if not isinstance(inner, exp.Identifier):
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f"unsupported relation: {table.sql(dialect='postgres')}",
                position=position_of(table),
            )
        relation = self._resolve(table)
        alias = table.args.get("alias")
        if alias is None:
            alias = exp.TableAlias(this=exp.to_identifier(table.name))
        relation.set("alias", alias)
        if isinstance(relation, exp.Table):
            relation.meta[INTERNAL] = True
        table.replace(relation)

    def _json_table(self, call: exp.Func, alias: exp.Expr | None) -> exp.Expr:
        """``jsonb_each(x)`` and its kin in FROM: a subquery over DuckDB's ``json_each`` with
        PostgreSQL's columns (correlated when ``x`` names a column of the FROM before it)."""
        name = function_name(call)
        args = call.expressions if isinstance(call, exp.Anonymous) else [call.this]
        if len(args) != 1:
            raise sql_error(
                UNDEFINED_FUNCTION,
                f"function {name}() takes one argument",
                position=position_of(call),
            )
        select = sqlglot.parse_one(JSON_TABLE_FUNCTIONS[name], read=DUCKDB)
        for node in select.walk():  # built here: the walk that goes on leaves them
            if isinstance(node, exp.Func | exp.Table):
                node.meta[INTERNAL] = True
        call.meta[INTERNAL] = True
        placeholder = next(n for n in select.find_all(exp.Column) if n.name == "_rw_arg")
        placeholder.replace(args[0])
        if alias is None:
            alias = exp.TableAlias(this=exp.to_identifier(name))
        return exp.Subquery(this=select, alias=alias)

    def _window_relation(self, item: exp.Table, call: WindowCall, ctes: set[str]) -> exp.Expr:
        """TUMBLE / HOP as a DuckDB subquery giving the windows a materialized view gets:
        the checks and window arithmetic are the stream planner's (``sql/windows.py``)."""
        rel = call.relation
        if not rel.db and rel.name in ctes:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'{call.label} over the common table expression "{rel.name}" is not supported',
                hint=f"Create a materialized view for the query and apply {call.label} to it.",
                position=position_of(item.this),
            )
        t = self.lookup_table(rel.db or None, rel.name)
        relation = self._resolve(rel)  # 42P01, sources refused; notes the dependency
        if t is None:  # a system relation
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'{call.label} over the system relation "{rel.name}" is not supported',
                hint=f"Apply {call.label} to a table or materialized view.",
                position=position_of(item.this),
            )
        idx = time_column_index(call, [c.name for c in t.columns], [c.type for c in t.columns])
        time_type = t.columns[idx].type
        spec = window_spec(call, self._interval_sql)
        col = f'"_rw_w".{_quoted_sql(t.columns[idx].name)}'
        if call.kind == "tumble":
            start = tumble_start_sql(col, time_type, spec.size_us, spec.offset_us)
            sql = (
                f'SELECT "_rw_w".*, {start} AS "window_start",'
                f' ({start}) + {spec.size} AS "window_end" FROM "_rw_rel" AS "_rw_w"'
            )
        else:
            # Each row joined with its window numbers 0 .. units-1, one slide apart.
            first = hop_first_start_sql(col, time_type, spec)
            k = f'"_rw_k"."k" * {spec.slide_us}'
            sql = (
                f'SELECT "_rw_w".*, {first} + to_microseconds({k}) AS "window_start",'
                f' {first} + to_microseconds({k} + {spec.size_us}) AS "window_end"'
                f' FROM "_rw_rel" AS "_rw_w" CROSS JOIN range({spec.units}) AS "_rw_k"("k")'
                f" WHERE {col} IS NOT NULL"
            )
        select = sqlglot.parse_one(sql, read=DUCKDB)
        for node in select.walk():  # built here, bound already: a later pass leaves them
            if isinstance(node, exp.Func | exp.Table):
                node.meta[INTERNAL] = True
        placeholder = next(n for n in select.find_all(exp.Table) if n.name == "_rw_rel")
        relation.set("alias", placeholder.args.get("alias"))
        placeholder.replace(relation)
        alias = item.args.get("alias") or exp.TableAlias(this=exp.to_identifier(call.alias))
        return exp.Subquery(this=select, alias=alias)

    def _interval_sql(self, e: exp.Expr) -> str:
        return self.prepare(e.copy()).sql(dialect=DUCKDB)


def _quoted_sql(name: str) -> str:
    return quote(name).sql(dialect=DUCKDB)
