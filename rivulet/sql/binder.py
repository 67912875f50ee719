"""The binder: checks a query against Rivulet's catalog and rewrites it into DuckDB SQL.

Nothing a user writes reaches DuckDB unbound. Every relation must name a Rivulet table or a
system relation (pg_catalog, information_schema, rw_catalog), every function must be on
the allow-list (``functions``); the rewritten query reads tables through their state
tables, so DuckDB sees only what Rivulet put there. Along the way the query gets
PostgreSQL's meanings where DuckDB's differ (division by zero raises, output columns are
named as PostgreSQL names them, session functions answer from the session).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.chunk import VNODE_COLUMN
from rivulet.common.errors import (
    FEATURE_NOT_SUPPORTED,
    PROGRAM_LIMIT_EXCEEDED,
    SYNTAX_ERROR,
    UNDEFINED_FUNCTION,
    UNDEFINED_TABLE,
    sql_error,
)
from rivulet.common.types import NUMERIC, DataType, type_from_name
from rivulet.meta.catalog import (
    DEFAULT_DATABASE,
    DEFAULT_SCHEMA,
    SYSTEM_SCHEMAS,
    Catalog,
    TableCatalog,
)
from rivulet.meta.system_params import DEFAULT_MAX_VALUE_BYTES
from rivulet.sql.activity import Activity
from rivulet.sql.functions import (
    ALLOWED_ANONYMOUS,
    ALLOWED_NODE_TYPES,
    ALLOWED_TABLE_FUNCTIONS,
    JSON_TABLE_FUNCTIONS,
    SESSION_FUNCTIONS,
    SESSION_NODE_NAMES,
    SIGNAL_BACKEND_FUNCTION,
    function_name,
)
from rivulet.sql.parser import position_of
from rivulet.sql.scope import names_a_cte
from rivulet.sql.session_config import duckdb_zone
from rivulet.sql.system_catalog import (
    MACRO_NAMES,
    SYS_SCHEMA,
    SystemCatalog,
)
from rivulet.sql.system_catalog.macros import VALUE_LIMIT_HINT
from rivulet.sql.system_catalog.rewrite import rewrite_pg_syntax
from rivulet.sql.timezones import is_utc, localize
from rivulet.sql.windows import (
    WindowCall,
    hop_first_start_sql,
    time_column_index,
    tumble_start_sql,
    window_call,
    window_function_name,
    window_spec,
)

DUCKDB = "duckdb"
# Marks relation nodes the engine built (never set by the parser): the binder leaves them.
INTERNAL = "rw_internal"


@dataclass
class BindContext:
    """What binding needs from the session."""

    catalog: Catalog
    system: SystemCatalog
    user: str = "root"
    database: str = DEFAULT_DATABASE
    search_path: tuple[str, ...] = (DEFAULT_SCHEMA,)
    session_id: int = 0
    server_version: str = ""
    setting: Callable[[str], str | None] = field(default=lambda _name: None)
    # The system parameter max_value_bytes: the largest value a function may build.
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    # Every client session's activity, for pg_stat_activity.
    activity: Callable[[], list[Activity]] = field(default=lambda: [])


@dataclass
class BoundQuery:
    """A query ready for DuckDB: its SQL, parameter count and inferred parameter types."""

    sql: str
    param_count: int
    param_types: list[DataType | None]
    tables: list[TableCatalog]
    # Whether it reads stored or generated rows (tables, MVs, table functions, CTEs):
    # such work waits its turn for a query thread; work over constants and the system
    # catalog never waits (``sql.query_pool``).
    reads_data: bool = True
    # Whether its SQL holds state outside the catalog and the session's settings (other
    # sessions' activity): never cached, never prepared.
    volatile: bool = False


def quote(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


class Binder:
    def __init__(self, ctx: BindContext) -> None:
        self.ctx = ctx
        self.tables: list[TableCatalog] = []
        self._param_types: dict[int, DataType | None] = {}
        self._placeholders = 0
        self._dollar_params = 0
        # Tables in scope that are not plain table references (a DML target), by alias.
        self.scope: dict[str, TableCatalog] = {}

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

    def _resolve(self, table: exp.Table) -> exp.Expression:
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
    def table_subquery(t: TableCatalog, *, with_hidden: bool = False) -> exp.Expression:
        """``(SELECT visible columns FROM state.tN)`` - hidden columns stay out of ``*``."""
        cols = t.columns if with_hidden else t.visible_columns
        names = [c.name for c in cols]
        if with_hidden:
            names = [VNODE_COLUMN, *names]
        physical = exp.Table(this=quote(f"t{t.id}"), db=exp.to_identifier("state"))
        physical.meta[INTERNAL] = True
        return exp.select(*[exp.column(quote(n)) for n in names]).from_(physical).subquery()

    # -------------------------------------------------------------- binding
    def bind_query(self, ast: exp.Expression, *, name_outputs: bool = True) -> BoundQuery:
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

    def prepare(self, ast: exp.Expression) -> exp.Expression:
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

    def _json_table(self, call: exp.Func, alias: exp.Expression | None) -> exp.Expression:
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

    def _window_relation(self, item: exp.Table, call: WindowCall, ctes: set[str]) -> exp.Expression:
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

    def _interval_sql(self, e: exp.Expression) -> str:
        return self.prepare(e.copy()).sql(dialect=DUCKDB)

    def sys_call(self, name: str, *args: exp.Expression) -> exp.Expression:
        return exp.Dot(
            this=exp.to_identifier(SYS_SCHEMA),
            expression=exp.Anonymous(this=name, expressions=list(args)),
        )

    def _bind_function(self, node: exp.Func) -> exp.Expression:
        if node.meta.get(INTERNAL):  # built by the engine (system_catalog.rewrite)
            return node
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in SESSION_FUNCTIONS:
                return self._session_function(name, node.expressions)
            if name in MACRO_NAMES:
                return self.sys_call(name, *node.expressions)
            if name == "octet_length" and len(node.expressions) == 1:
                return self.sys_call("rw_octet_length", *node.expressions)
            if name in ALLOWED_ANONYMOUS:
                return node
            raise sql_error(
                UNDEFINED_FUNCTION,
                f"function {name}() does not exist",
                hint="No function matches the given name. Rivulet supports PostgreSQL's and"
                " RisingWave's common functions.",
                position=position_of(node),
            )
        if type(node) in SESSION_NODE_NAMES:
            args = node.expressions or (
                [node.this] if isinstance(node.this, exp.Expression) else []
            )  # current_schemas(true) keeps its argument in "this"
            return self._session_function(SESSION_NODE_NAMES[type(node)], args)
        if isinstance(node, exp.Cast) and (literal := _bytea_literal(node)) is not None:
            return literal
        if isinstance(node, exp.Cast):
            _read_bc(node)
        if isinstance(node, exp.Cast) and _is_bare_numeric(node.args.get("to")):
            # DuckDB's bare DECIMAL is DECIMAL(18,3): x::numeric would keep 3 decimals.
            node.set("to", exp.DataType.build(NUMERIC.duckdb, dialect="duckdb"))
        # Rewrites keep the original argument nodes (never copies): they are bound later
        # in the same walk.
        if isinstance(node, exp.Format):
            # PostgreSQL's format('%s', ...) is DuckDB's printf over text arguments.
            args = [
                exp.Coalesce(
                    this=exp.Cast(this=a, to=exp.DataType.build("VARCHAR")),
                    expressions=[exp.Literal.string("")],
                )
                for a in list(node.expressions)
            ]
            _check_format_widths(node.this, self.ctx.max_value_bytes)
            printf = exp.Anonymous(this="printf", expressions=[node.this, *args])
            return self.sys_call("rw_bounded", printf, self._cap(), exp.Literal.string("format()"))
        if isinstance(node, exp.Hex):
            return exp.Lower(this=exp.Hex(this=node.this))  # to_hex(255) is 'ff'
        checked = self._checked_function(node)
        if checked is not None:
            return checked
        if type(node) in ALLOWED_NODE_TYPES:
            return node
        raise sql_error(
            UNDEFINED_FUNCTION,
            f"function {function_name(node)}() is not supported",
            position=position_of(node),
        )

    def _cap(self) -> exp.Expression:
        return exp.Literal.number(self.ctx.max_value_bytes)

    def _checked_function(self, node: exp.Func) -> exp.Expression | None:
        """PostgreSQL's errors where DuckDB returns NaN or an infinity (2201E, 2201F,
        22003), and values bounded by max_value_bytes (54000): the call as a ``rw_sys``
        macro that checks, or None when ``node`` needs no check."""
        if isinstance(node, exp.Sqrt):
            return self.sys_call("rw_sqrt", node.this)
        if isinstance(node, exp.Ln):
            return self.sys_call("rw_ln", node.this)
        if isinstance(node, exp.Log):
            if node.expression is None:
                return self.sys_call("rw_log10", node.this)
            return self.sys_call("rw_log", node.this, node.expression)
        if isinstance(node, exp.Exp):
            return self.sys_call("rw_exp", node.this)
        if isinstance(node, exp.Pow):
            return self.sys_call("rw_pow", node.this, node.expression)
        cap = self._cap()
        if isinstance(node, exp.Repeat):
            return self.sys_call("rw_repeat", node.this, node.args["times"], cap)
        if isinstance(node, exp.Pad):
            fill = node.args.get("fill_pattern") or exp.Literal.string(" ")
            fn = "rw_lpad" if node.args.get("is_left") else "rw_rpad"
            return self.sys_call(fn, node.this, node.expression, fill, cap)
        if isinstance(node, exp.Replace) and node.args.get("replacement") is not None:
            return self.sys_call(
                "rw_replace", node.this, node.expression, node.args["replacement"], cap
            )
        if isinstance(node, exp.Concat | exp.GroupConcat) and not node.meta.get(_BOUNDED):
            # Their size follows their inputs': the result is checked once it is built.
            name = "string_agg()" if isinstance(node, exp.GroupConcat) else "concat()"
            target: exp.Expression = node
            while isinstance(target.parent, exp.Window | exp.Filter | exp.WithinGroup):
                target = target.parent
            parent, key, index = target.parent, target.arg_key, target.index
            wrapper = self.sys_call("rw_bounded", target, cap, exp.Literal.string(name))
            if parent is None:
                return wrapper
            parent.set(key, wrapper, index)
            node.meta[_BOUNDED] = True
        return None

    def _session_function(self, name: str, args: list[exp.Expression]) -> exp.Expression:
        ctx = self.ctx
        aliases = {
            "current_catalog": "current_database",
            "current_role": "current_user",
            "user": "current_user",
        }
        name = aliases.get(name, name)
        if name == "version":
            return exp.Literal.string(ctx.server_version)
        if name == "current_database":
            return exp.Literal.string(ctx.database)
        if name in ("current_user", "session_user"):
            return exp.Literal.string(ctx.user)
        if name == "current_schema":
            path = [s for s in ctx.search_path if s != "$user"]
            return exp.Literal.string(path[0]) if path else exp.null()
        if name == "current_schemas":
            implicit = bool(args and args[0].sql().lower() == "true")
            schemas = [s for s in ctx.search_path if s != "$user"]
            if implicit:
                schemas = ["pg_catalog", *schemas]
            return exp.Array(expressions=[exp.Literal.string(s) for s in schemas])
        if name == "pg_backend_pid":
            return exp.Literal.number(ctx.session_id)
        if name in ("pg_cancel_backend", "pg_terminate_backend"):
            if len(args) != 1:
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"function {name}() takes one argument, the pid of a session",
                    hint="pg_stat_activity lists the sessions and their pids.",
                )
            # A DuckDB function with side effects (the engine's), evaluated row by row
            # at run time: ``SELECT pg_cancel_backend(pid) FROM pg_stat_activity ...``.
            call = exp.Anonymous(
                this=SIGNAL_BACKEND_FUNCTION,
                expressions=[
                    exp.Cast(this=args[0], to=exp.DataType.build("INTEGER")),
                    exp.Boolean(this=name == "pg_terminate_backend"),
                ],
            )
            call.meta[INTERNAL] = True
            return call
        if name == "current_setting":
            if not args or not isinstance(args[0], exp.Literal):
                raise sql_error(
                    FEATURE_NOT_SUPPORTED, "current_setting() needs a constant setting name"
                )
            value = ctx.setting(args[0].name.lower())
            if value is None:
                missing_ok = len(args) > 1 and args[1].sql().lower() == "true"
                if missing_ok:
                    return exp.cast(exp.null(), "text")
                raise sql_error("42704", f'unrecognized configuration parameter "{args[0].name}"')
            return exp.Literal.string(value)
        if name in ("inet_server_addr",):
            return exp.Literal.string("127.0.0.1")
        if name in ("inet_server_port",):
            return exp.Literal.number(0)
        if name == "pg_postmaster_start_time":
            return exp.CurrentTimestamp()
        raise sql_error(UNDEFINED_FUNCTION, f"function {name}() does not exist")

    def _bind_operator(self, node: exp.Operator) -> exp.Expression:
        op = str(node.args.get("operator") or "").split(".")[-1].strip()
        left, right = node.this, node.expression
        mapping: dict[str, Callable[[], exp.Expression]] = {
            "~": lambda: exp.RegexpLike(this=left, expression=right),
            "~*": lambda: exp.RegexpILike(this=left, expression=right),
            "!~": lambda: exp.not_(exp.RegexpLike(this=left, expression=right)),
            "!~*": lambda: exp.not_(exp.RegexpILike(this=left, expression=right)),
            "=": lambda: exp.EQ(this=left, expression=right),
            "<>": lambda: exp.NEQ(this=left, expression=right),
            "<": lambda: exp.LT(this=left, expression=right),
            ">": lambda: exp.GT(this=left, expression=right),
            "<=": lambda: exp.LTE(this=left, expression=right),
            ">=": lambda: exp.GTE(this=left, expression=right),
        }
        if op not in mapping:
            raise sql_error(UNDEFINED_FUNCTION, f"operator does not exist: {op}")
        return exp.paren(mapping[op](), copy=False)

    # ------------------------------------------------------------ parameters
    def number_parameters(self, ast: exp.Expression) -> None:
        """``%s`` / ``?`` placeholders become ``$1, $2, ...``; the two styles don't mix.
        Idempotent: call it early when parameter types are noted before ``prepare``."""
        for node in ast.find_all(exp.Parameter):
            try:
                n = int(node.name)
            except ValueError:
                raise sql_error(
                    SYNTAX_ERROR, f"bad parameter ${node.name}", position=position_of(node)
                ) from None
            self._dollar_params = max(self._dollar_params, n)
        # Depth-first is text order (sqlglot keeps no position for placeholder tokens).
        placeholders = list(ast.find_all(exp.Placeholder, bfs=False))
        if placeholders and self._dollar_params:
            raise sql_error(SYNTAX_ERROR, "a statement cannot mix %s and $n parameters")
        placeholders.sort(key=lambda p: _first_start(p))
        for i, node in enumerate(placeholders, start=1):
            node.replace(exp.Parameter(this=exp.Literal.number(i)))
        self._placeholders = max(self._placeholders, len(placeholders))
        self._dollar_params = max(self._dollar_params, self._placeholders)

    @property
    def param_count(self) -> int:
        return max(self._placeholders, self._dollar_params)

    def param_type_list(self) -> list[DataType | None]:
        return [self._param_types.get(i) for i in range(1, self.param_count + 1)]

    def note_param_type(self, node: exp.Expression, dtype: DataType | None) -> None:
        if isinstance(node, exp.Parameter) and dtype is not None:
            self._param_types.setdefault(int(node.name), dtype)

    def _infer_parameter_types(self, ast: exp.Expression) -> None:
        """Give each ``$n`` the type PostgreSQL would infer from its surroundings."""
        for param in ast.find_all(exp.Parameter):
            parent = param.parent
            if isinstance(parent, exp.Cast):
                to = parent.args.get("to")
                if isinstance(to, exp.DataType):
                    self.note_param_type(param, _type_of_datatype(to))
            elif isinstance(parent, exp.Limit | exp.Offset | exp.Fetch):
                self.note_param_type(param, type_from_name("bigint"))
            elif isinstance(parent, exp.Binary | exp.In | exp.Between):
                other = [
                    c
                    for c in parent.iter_expressions()
                    if c is not param and isinstance(c, exp.Column)
                ]
                if other:
                    self.note_param_type(param, self.column_type(ast, other[0]))

    def column_type(self, ast: exp.Expression, column: exp.Column) -> DataType | None:
        """The type of a column reference, when it names a column of a user table in
        ``ast``'s FROM clauses (before they are rewritten)."""
        qualifier = column.table
        for alias, t in self.scope.items():
            if (not qualifier or qualifier == alias) and t.column(column.name) is not None:
                return t.column(column.name).type  # type: ignore[union-attr]
        for table in ast.find_all(exp.Table):
            if not isinstance(table.this, exp.Identifier):
                continue
            if qualifier and qualifier not in (table.alias_or_name, table.name):
                continue
            t = self.lookup_table(table.db or None, table.name)
            if t is None:
                continue
            col = t.column(column.name)
            if col is not None:
                return col.type
        return None

    # --------------------------------------------------------- output names
    @staticmethod
    def name_output_columns(ast: exp.Expression) -> None:
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


# DuckDB's type names (``typeof``) as PostgreSQL's ``pg_typeof`` spells them.
_PG_TYPEOF = {
    "TINYINT": "smallint", "HUGEINT": "numeric", "FLOAT": "real", "DOUBLE": "double precision",
    "VARCHAR": "character varying", "TIME": "time without time zone",
    "TIMESTAMP": "timestamp without time zone", "JSON": "jsonb", "BLOB": "bytea",
    '"NULL"': "unknown",
}  # fmt: skip


def _pg_typeof(arg: exp.Expression) -> exp.Expression:
    """``pg_typeof(x)``: the PostgreSQL name of ``x``'s type, from DuckDB's ``typeof``."""

    def typeof() -> exp.Expression:
        return exp.Anonymous(this="typeof", expressions=[arg.copy()])

    case = exp.case().when(
        exp.Like(this=typeof(), expression=exp.Literal.string("DECIMAL%")),
        exp.Literal.string("numeric"),
    )
    for duck, pg in _PG_TYPEOF.items():
        case = case.when(
            exp.EQ(this=typeof(), expression=exp.Literal.string(duck)), exp.Literal.string(pg)
        )
    return case.else_(exp.Lower(this=typeof()))


# Marks a call whose result is checked already (the binder sees it again inside the check).
_BOUNDED = "rw_bounded"
_FORMAT_WIDTH = re.compile(r"%(?:\d+\$)?-?(\d+)")


def _check_format_widths(fmt: exp.Expression, cap: int) -> None:
    """``format('%2000000000s', ...)`` is refused before it pads anything."""
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        return
    for m in _FORMAT_WIDTH.finditer(fmt.this):
        if int(m.group(1)) > cap:
            raise sql_error(
                PROGRAM_LIMIT_EXCEEDED,
                f"requested length too large: format() width {m.group(1)} is over"
                f" max_value_bytes ({cap})",
                hint=VALUE_LIMIT_HINT,
            )


_DATE_TYPES = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
)
_BC = re.compile(r"\s+BC\s*$", re.IGNORECASE)


def _read_bc(node: exp.Cast) -> None:
    """'4713-11-24 BC'::date as PostgreSQL reads it (DuckDB writes the era '(BC)')."""
    to, literal = node.args.get("to"), node.this
    if (
        isinstance(to, exp.DataType)
        and to.this in _DATE_TYPES
        and isinstance(literal, exp.Literal)
        and literal.is_string
        and _BC.search(literal.this)
    ):
        node.set("this", exp.Literal.string(_BC.sub(" (BC)", literal.this)))


def _is_bare_numeric(to: object) -> bool:
    return (
        isinstance(to, exp.DataType)
        and to.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL)
        and not to.expressions
    )


def _bytea_literal(node: exp.Cast) -> exp.Expression | None:
    """A string literal cast to bytea, read with PostgreSQL's bytea input rules (DuckDB's
    BLOB cast would keep ``'\\xdeadbeef'`` as ten characters): the hex format ``\\x...``, or
    the escape format where ``\\\\`` is a backslash and ``\\nnn`` an octal byte."""
    to = node.args.get("to")
    literal = node.this
    if not (
        isinstance(to, exp.DataType)
        and to.this == exp.DataType.Type.VARBINARY
        and isinstance(literal, exp.Literal)
        and literal.is_string
    ):
        return None
    text = literal.this
    if text[:2] in ("\\x", "\\X"):
        try:
            data = bytes.fromhex(text[2:])
        except ValueError:
            raise sql_error("22P02", f'invalid hexadecimal data in bytea input: "{text}"') from None
    else:
        out = bytearray()
        i = 0
        raw = text.encode()
        while i < len(raw):
            if raw[i] != 0x5C:  # backslash
                out.append(raw[i])
                i += 1
            elif raw[i + 1 : i + 2] == b"\\":
                out.append(0x5C)
                i += 2
            elif len(raw) >= i + 4 and all(0x30 <= c <= 0x37 for c in raw[i + 1 : i + 4]):
                out.append(int(raw[i + 1 : i + 4], 8) & 0xFF)
                i += 4
            else:
                raise sql_error("22P02", "invalid input syntax for type bytea")
        data = bytes(out)
    return exp.Anonymous(this="unhex", expressions=[exp.Literal.string(data.hex())])


def _quoted_sql(name: str) -> str:
    return quote(name).sql(dialect=DUCKDB)


def _first_start(node: exp.Expression) -> int:
    meta = getattr(node, "_meta", None) or {}
    return int(meta.get("start", 0))


def pg_output_name(e: exp.Expression) -> str:
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


def _type_of_datatype(dt: exp.DataType) -> DataType | None:
    from rivulet.common.types import column_type_from_sql

    try:
        return column_type_from_sql(dt)
    except Exception:
        return None
