"""The stream planner: a materialized view's query as a tree of stream plan nodes.

It walks the query clause by clause - FROM (scans, joins, windows, subqueries), WHERE,
GROUP BY and aggregates, HAVING, the select list, DISTINCT, ORDER BY ... LIMIT, UNION ALL
- and builds plan nodes over ``Scope``s that say what each column is. It tracks each
node's stream key (columns that identify a row among its changes: the planner carries
hidden key columns where the query drops them) and inserts exchanges where rows must meet
on one actor: hash by group key before an aggregation, by join key before a join, to a
single actor before a global aggregate or top-N, by the MV's key before materializing when
the distribution is lost. A shape that cannot be maintained gets SQLSTATE 0A000 naming
the part of the query at fault.

Joins (``join.py``) and GROUP BY with aggregates (``aggregate.py``) are planned by mixins
in their own modules, window functions by ``over.py``; this module plans the rest and
ties the clauses together.
"""

from __future__ import annotations

from sqlglot import exp

from rivulet.common.errors import DATATYPE_MISMATCH, UNDEFINED_TABLE, sql_error
from rivulet.common.types import BIGINT, TEXT, DataType
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binder import Binder, pg_output_name
from rivulet.sql.parser import position_of
from rivulet.sql.planner.aggregate import AggregatePlanning
from rivulet.sql.planner.expr import ExprCompiler, conjuncts
from rivulet.sql.planner.join import JoinPlanning
from rivulet.sql.planner.over import check_placement, plan_over_windows, take_rank_filter
from rivulet.sql.planner.scope import Planned, Scope, ScopeColumn
from rivulet.sql.planner.shared import type_category, unsupported_in_mv
from rivulet.sql.windows import (
    time_column_index,
    tumble_start_sql,
    window_call,
    window_function_name,
    window_spec,
    window_type,
)
from rivulet.stream.expression import ExprSet
from rivulet.stream.plan import (
    ExchangeNode,
    Field,
    FilterNode,
    HashAggNode,
    HopWindowNode,
    PlanNode,
    ProjectNode,
    Schema,
    SourceNode,
    StreamScanNode,
    TopNNode,
    UnionNode,
)
from rivulet.stream.state_layouts import (
    agg_state_schemas,
    progress_state_schema,
    source_state_schema,
    topn_state_schema,
)


class StreamPlanner(JoinPlanning, AggregatePlanning):
    def __init__(self, binder: Binder, cursor_provider) -> None:
        self.binder = binder
        self.exprs = ExprCompiler(binder, cursor_provider)
        self.dependencies: list[int] = []

    # ------------------------------------------------------------------ queries
    def plan_query(self, q: exp.Expr) -> Planned:
        if isinstance(q, exp.Subquery):
            return self.plan_query(q.this)
        if isinstance(q, exp.Union):
            if q.args.get("distinct"):
                raise unsupported_in_mv("UNION (without ALL)", q)
            return self._union(q)
        if isinstance(q, exp.SetOperation):
            raise unsupported_in_mv(type(q).__name__.upper(), q)
        if isinstance(q, exp.Values):
            raise unsupported_in_mv("VALUES", q)
        if not isinstance(q, exp.Select):
            raise unsupported_in_mv(f"query of kind {type(q).__name__}", q)
        if q.args.get("with_"):
            raise unsupported_in_mv("WITH (common table expressions)", q)
        return self._select(q)

    def _select(self, q: exp.Select) -> Planned:
        from_ = q.args.get("from_")
        if from_ is None:
            raise unsupported_in_mv("a query without FROM", q)
        for clause in ("windows", "qualify", "prewhere", "connect", "sample"):
            if q.args.get(clause):
                raise unsupported_in_mv(clause.upper(), q)
        check_placement(q)
        # row_number() OVER (...) <= n over a subquery: a group top-N (planner/over.py).
        take_rank_filter(q)
        rel = self._from(from_, q.args.get("joins") or [], q.args.get("where"))
        where = q.args.get("where")
        if where is not None and not getattr(where, "_consumed", False):
            rel = self._filter(rel, where.this)
        select_items = list(q.expressions)
        aggs = self._find_aggs(q)
        group = q.args.get("group")
        having = q.args.get("having")
        if aggs or group is not None:
            rel, select_items, having_expr = self._aggregate(
                rel, select_items, group, aggs, having.this if having is not None else None
            )
            if having_expr is not None:
                rel = self._filter(rel, having_expr, "HAVING")
        elif having is not None:
            raise unsupported_in_mv("HAVING without GROUP BY or aggregates", having)
        if any(item.find(exp.Window) for item in select_items):
            rel, select_items = plan_over_windows(
                self.exprs, rel, select_items, getattr(q, "_rank_filter", None)
            )
        input_scope = rel.scope  # what ORDER BY may name besides the select list
        rel, names = self._project_select(rel, select_items)
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise unsupported_in_mv("DISTINCT ON", q)
            rel = self._distinct(rel)
        order = q.args.get("order")
        limit = q.args.get("limit")
        offset = q.args.get("offset")
        if limit is not None or offset is not None:
            rel = self._top_n(rel, order, limit, offset, names, input_scope)
        return rel

    # --------------------------------------------------------------------- FROM
    def _from(self, from_: exp.From, joins: list[exp.Join], where: exp.Where | None) -> Planned:
        rel = self._relation(from_.this)
        for join in joins:
            rel = self._join(rel, join, where)
        return rel

    def _relation(self, item: exp.Expr) -> Planned:
        if isinstance(item, exp.Subquery):
            inner = self.plan_query(item.this)
            alias = item.alias_or_name or None
            return Planned(inner.node, inner.scope.requalified(alias), inner.dist)
        if isinstance(item, exp.Table):
            if isinstance(item.this, exp.Func | exp.Anonymous):
                return self._table_function(item)
            return self._scan(item)
        if isinstance(item, exp.Lateral | exp.Unnest):
            raise unsupported_in_mv(type(item).__name__.upper(), item)
        raise unsupported_in_mv(f"FROM item {item.sql(dialect='postgres')}", item)

    def _scan(self, item: exp.Table) -> Planned:
        table = self.binder.lookup_table(item.db or None, item.name)
        if table is None:
            if self.binder.ctx.system.relation(item.db or "pg_catalog", item.name):
                raise unsupported_in_mv("reading a system catalog", item)
            shown = f"{item.db}.{item.name}" if item.db else item.name
            raise sql_error(
                UNDEFINED_TABLE, f'relation "{shown}" does not exist', position=position_of(item)
            )
        alias = item.alias_or_name
        self.dependencies.append(table.id)
        if table.kind == "source":
            return self._source(table, alias)
        columns = list(range(len(table.columns)))
        schema = Schema(Field(c.name, c.type) for c in table.columns)
        node = StreamScanNode(
            schema,
            list(table.pk),
            append_only=table.append_only,
            table_id=table.id,
            table_name=table.name,
            columns=columns,
            state_schema=table.state_schema(),
            # Per-vnode backfill progress (its id from the fragmenter, like other state).
            progress_table=progress_state_schema(table.state_schema()),
        )
        scope = Scope([ScopeColumn(alias, c.name, c.type, c.hidden) for c in table.columns])
        return Planned(node, scope, list(table.dist_key))

    def _source(self, table: TableCatalog, alias: str) -> Planned:
        schema = Schema(Field(c.name, c.type) for c in table.columns)
        node = SourceNode(
            schema,
            [i for i, c in enumerate(table.columns) if c.hidden] or [],
            append_only=True,
            source_id=table.id,
            source_name=table.name,
            connector=table.connector or "",
            options=dict(table.options),
            state_schema=source_state_schema(),
        )
        scope = Scope([ScopeColumn(alias, c.name, c.type, c.hidden) for c in table.columns])
        return Planned(node, scope, None)

    def _table_function(self, item: exp.Table) -> Planned:
        fn = item.this
        name = fn.name.lower() if isinstance(fn, exp.Anonymous) else type(fn).__name__.lower()
        if window_function_name(item) is None:
            raise unsupported_in_mv(f"table function {name}()", item)
        # Checks and window arithmetic shared with the batch binder (sql/windows.py), in
        # the same order: the call's form, its relation, its time column, its intervals.
        call = window_call(item)
        inner = self._scan(call.relation)
        alias = call.alias
        inner = Planned(inner.node, inner.scope.requalified(alias), inner.dist)
        time_col = time_column_index(call, [c.name for c in inner.scope.columns], inner.scope.types)
        ts_type = inner.scope.columns[time_col].type
        spec = window_spec(call, self._interval_sql)
        if call.kind == "tumble":
            start = tumble_start_sql(f"c{time_col}", ts_type, spec.size_us, spec.offset_us)
            end = f"({start}) + {spec.size}"
            exprs = [f"c{i}" for i in range(len(inner.scope))] + [start, end]
            types = inner.scope.types + self.exprs.types_of([start, end], inner.scope.types)
            names = [c.name for c in inner.scope.columns] + ["window_start", "window_end"]
            node: PlanNode = ProjectNode(
                Schema(Field(n, t) for n, t in zip(names, types)),
                list(inner.node.stream_key),
                inner.node.append_only,
                [inner.node],
                exprs=ExprSet.plain(exprs),
            )
            start_type, end_type = types[-2], types[-1]
        else:
            start_type = end_type = window_type(ts_type)
            n = len(inner.scope)
            node = HopWindowNode(
                Schema(
                    [Field(c.name, c.type) for c in inner.scope.columns]
                    + [Field("window_start", start_type), Field("window_end", end_type)]
                ),
                list(inner.node.stream_key) + [n],
                inner.node.append_only,
                [inner.node],
                time_col=time_col,
                slide=spec.slide,
                size=spec.size,
                offset=spec.offset or "",
            )
        scope = Scope(
            inner.scope.columns
            + [
                ScopeColumn(alias, "window_start", start_type),
                ScopeColumn(alias, "window_end", end_type),
            ]
        )
        return Planned(node, scope, inner.dist)

    def _interval_sql(self, e: exp.Expr) -> str:
        bound = self.binder.prepare(e.copy())
        return bound.sql(dialect="duckdb")

    # ------------------------------------------------------------------- filter
    def _filter(self, rel: Planned, condition: exp.Expr, clause: str = "WHERE") -> Planned:
        if isinstance(condition, exp.Boolean) and condition.this is True:
            return rel
        self._check_boolean(conjuncts(condition), rel.scope, clause)
        exprs, _ = self.exprs.compile([condition], rel.scope)
        node = FilterNode(
            rel.node.schema, list(rel.node.stream_key), rel.node.append_only, [rel.node],
            condition=exprs,
        )  # fmt: skip
        return Planned(node, rel.scope, rel.dist)

    def _check_boolean(self, conditions: list[exp.Expr], scope: Scope, clause: str) -> None:
        """42804 unless each condition is boolean (as PostgreSQL when it plans the query;
        evaluated per row, a text value would make every chunk fail)."""
        conditions = [
            c
            for c in conditions
            if not (isinstance(c, exp.Null) or (isinstance(c, exp.Literal) and c.is_string))
        ]
        _, types = self.exprs.compile(conditions, scope) if conditions else (None, [])
        for c, t in zip(conditions, types):
            if t.name != "boolean" and t.duckdb != "NULL":
                raise sql_error(
                    DATATYPE_MISMATCH,
                    f"argument of {clause} must be type boolean, not type {t.name}",
                    position=position_of(c),
                )

    # ----------------------------------------------------------- select list
    def _project_select(self, rel: Planned, items: list[exp.Expr]) -> tuple[Planned, list[str]]:
        exprs: list[exp.Expr] = []
        names: list[str] = []
        for item in items:
            if isinstance(item, exp.Star):
                for i in rel.scope.star():
                    exprs.append(
                        exp.column(rel.scope.columns[i].name, rel.scope.columns[i].qualifier)
                    )
                    names.append(rel.scope.columns[i].name)
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                for i in rel.scope.star(item.table):
                    exprs.append(
                        exp.column(rel.scope.columns[i].name, rel.scope.columns[i].qualifier)
                    )
                    names.append(rel.scope.columns[i].name)
                continue
            if isinstance(item, exp.Alias):
                names.append(item.alias)
                exprs.append(item.this)
            else:
                names.append(pg_output_name(item))
                exprs.append(item)
        compiled, types = self.exprs.compile(exprs, rel.scope)
        # Keep the input's stream key (and distribution) as hidden columns when dropped.
        passthrough = {e: i for i, e in enumerate(compiled.strict)}
        key_out: list[int] = []
        extra_strict: list[str] = []
        for k in rel.node.stream_key:
            ref = f"c{k}"
            if ref in passthrough:
                key_out.append(passthrough[ref])
            else:
                key_out.append(len(exprs) + len(extra_strict))
                extra_strict.append(ref)
                passthrough[ref] = key_out[-1]
        dist_out: list[int] | None = None
        if rel.dist is not None:
            dist_out = []
            for d in rel.dist:
                ref = f"c{d}"
                if ref not in passthrough:
                    dist_out = None
                    break
                dist_out.append(passthrough[ref])
        final = compiled + ExprSet.plain(extra_strict)
        hidden_names = [
            _hidden_name(rel.scope.columns[int(r[1:])].name, names) for r in extra_strict
        ]
        hidden_types = [rel.scope.columns[int(r[1:])].type for r in extra_strict]
        all_names = names + hidden_names
        schema = Schema(Field(n, t) for n, t in zip(all_names, types + hidden_types))
        node = ProjectNode(schema, key_out, rel.node.append_only, [rel.node], exprs=final)
        scope = Scope(
            [ScopeColumn(None, n, t) for n, t in zip(names, types)]
            + [ScopeColumn(None, n, t, True) for n, t in zip(hidden_names, hidden_types)]
        )
        return Planned(node, scope, dist_out), names

    def _distinct(self, rel: Planned) -> Planned:
        visible = [i for i, c in enumerate(rel.scope.columns) if not c.hidden]
        types = [rel.scope.columns[i].type for i in visible]
        exprs = ExprSet.plain([f"c{i}" for i in visible])
        schema = Schema(Field(rel.scope.columns[i].name, t) for i, t in zip(visible, types))
        project = ProjectNode(schema, [], rel.node.append_only, [rel.node], exprs=exprs)
        keys = list(range(len(visible)))
        exchange = ExchangeNode.hash_of(project, keys)
        node = HashAggNode(
            schema, keys, False, [exchange], group_key=keys, aggs=[],
            state_tables=agg_state_schemas(schema, keys, [], rel.node.append_only),
        )  # fmt: skip
        scope = Scope(
            [
                ScopeColumn(None, rel.scope.columns[i].name, rel.scope.columns[i].type)
                for i in visible
            ]
        )
        return Planned(node, scope, keys)

    def _top_n(
        self,
        rel: Planned,
        order: exp.Order | None,
        limit: exp.Expr | None,
        offset: exp.Expr | None,
        names: list[str],
        input_scope: Scope | None = None,
    ) -> Planned:
        if order is None:
            raise unsupported_in_mv("LIMIT without ORDER BY", limit)
        keys: list[tuple[int, bool, bool]] = []
        # The select list; the hidden key columns the plan carries follow it.
        names = [c.name for c in rel.scope.columns if not c.hidden]
        for o in order.expressions:
            target = o.this
            if isinstance(target, exp.Literal) and not target.is_string:
                index = int(target.this) - 1
                if not 0 <= index < len(names):
                    raise sql_error(
                        "42P10",
                        f"ORDER BY position {target.this} is not in select list",
                        position=position_of(target),
                    )
            elif isinstance(target, exp.Column) and not target.table and target.name in names:
                index = names.index(target.name)
            elif isinstance(target, exp.Column):
                index = self._order_column(rel, target, names, input_scope, o)
            else:
                index = -1
            if index < 0 or index >= len(rel.scope):
                raise unsupported_in_mv("ORDER BY an expression that is not in the select list", o)
            desc = bool(o.args.get("desc"))
            nulls_first = o.args.get("nulls_first")
            if nulls_first is None:
                nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
            keys.append((index, not desc, bool(nulls_first)))
        n_limit = _int_literal(limit.expression if isinstance(limit, exp.Limit) else limit, "LIMIT")
        n_offset = (
            _int_literal(offset.expression if isinstance(offset, exp.Offset) else offset, "OFFSET")
            or 0
        )
        exchange = ExchangeNode.single_of(rel.node)
        node = TopNNode(
            rel.node.schema, list(rel.node.stream_key), False, [exchange],
            order=keys, limit=n_limit, offset=n_offset,
            state_tables=[topn_state_schema(rel.node)],
        )  # fmt: skip
        return Planned(node, rel.scope, None)

    def _order_column(
        self,
        rel: Planned,
        target: exp.Column,
        names: list[str],
        input_scope: Scope | None,
        item: exp.Expr,
    ) -> int:
        """The output column an ORDER BY column names: ``t.a`` is the select item that
        passes the input column ``t.a`` through; a column of the FROM clause that the
        select list leaves out is refused (0A000), an unknown one is 42703."""
        if input_scope is None:
            return rel.scope.resolve(target)
        source = input_scope.resolve(target)  # 42703 / 42702 / 42P01 as PostgreSQL
        node = rel.node
        if isinstance(node, ProjectNode) and node.exprs is not None:
            for i, e in enumerate(node.exprs.strict[: len(names)]):
                if e == f"c{source}":
                    return i
        raise unsupported_in_mv("ORDER BY a column that is not in the select list", item)

    # -------------------------------------------------------------------- union
    def _union(self, q: exp.Union) -> Planned:
        branches: list[exp.Expr] = []

        def collect(e: exp.Expr) -> None:
            if e is q or (
                isinstance(e, exp.Union)
                and not e.args.get("distinct")
                and not any(e.args.get(a) for a in ("order", "limit", "offset"))
            ):
                collect(e.this)
                collect(e.expression)
            else:
                branches.append(e)

        collect(q)
        planned = [self.plan_query(b) for b in branches]
        width = len([c for c in planned[0].scope.columns if not c.hidden])
        for p in planned[1:]:
            if len([c for c in p.scope.columns if not c.hidden]) != width:
                raise sql_error("42601", "each UNION query must have the same number of columns")
        # A bare NULL in a branch takes the type of the other branches' values.
        branch_types = [
            [
                None if _is_null_item(b, i) else c.type
                for i, c in enumerate(c for c in p.scope.columns if not c.hidden)
            ]
            for b, p in zip(branches, planned)
        ]
        visible_types = [self._union_type(list(ts)) for ts in zip(*branch_types)]
        names = [c.name for c in planned[0].scope.columns if not c.hidden]
        # Each branch: its visible columns (cast to the common types), a branch
        # number, and a slot for every branch's key columns (NULL outside its branch).
        key_types: list[DataType] = []
        key_slots: list[list[int]] = []
        for p in planned:
            slots = []
            for k in p.node.stream_key:
                slots.append(len(key_types))
                key_types.append(p.scope.columns[k].type)
            key_slots.append(slots)
        out_types = visible_types + [BIGINT] + key_types
        inputs = []
        for b, p in enumerate(planned):
            visible = [i for i, c in enumerate(p.scope.columns) if not c.hidden]
            exprs = [f"CAST(c{i} AS {t.duckdb})" for i, t in zip(visible, visible_types)]
            exprs.append(f"CAST({b} AS BIGINT)")
            for other, slots in enumerate(key_slots):
                for slot_index, slot in enumerate(slots):
                    if other == b:
                        exprs.append(f"c{p.node.stream_key[slot_index]}")
                    else:
                        exprs.append(f"CAST(NULL AS {key_types[slot].duckdb})")
            schema = Schema(Field(f"c{i}", t) for i, t in enumerate(out_types))
            key = [width] + [width + 1 + s for s in key_slots[b]]
            project = ProjectNode(
                schema, key, p.node.append_only, [p.node], exprs=ExprSet.plain(exprs)
            )
            full_key = list(range(width, len(out_types)))
            inputs.append(ExchangeNode.hash_of(project, full_key, stream_key=full_key))
        full_key = list(range(width, len(out_types)))
        out_names = names + ["_branch"] + [f"_key{i}" for i in range(len(key_types))]
        node = UnionNode(
            Schema(Field(n, t) for n, t in zip(out_names, out_types)),
            full_key,
            all(p.node.append_only for p in planned),
            inputs,
        )
        scope = Scope(
            [ScopeColumn(None, n, t) for n, t in zip(names, visible_types)]
            + [ScopeColumn(None, n, t, True) for n, t in zip(out_names[width:], out_types[width:])]
        )
        rel = Planned(node, scope, full_key)
        # ... UNION ALL ... ORDER BY ... LIMIT: a top-N of the whole union.
        if q.args.get("limit") is not None or q.args.get("offset") is not None:
            rel = self._top_n(
                rel, q.args.get("order"), q.args.get("limit"), q.args.get("offset"), names
            )
        return rel

    def _union_type(self, types: list[DataType | None]) -> DataType:
        """The type of a UNION column: PostgreSQL's rules - values of one category (numbers,
        strings, dates and timestamps) meet in the widest type, others must be equal.
        ``None``: a bare NULL, which takes the others' type (text when all are NULL)."""
        known = [t for t in types if t is not None] or [TEXT]
        out = known[0]
        for t in known[1:]:
            if t == out:
                continue
            if type_category(t) != type_category(out):
                raise sql_error(
                    DATATYPE_MISMATCH, f"UNION types {out.name} and {t.name} cannot be matched"
                )
            out = self.exprs.types_of(["coalesce(c0, c1)"], [out, t])[0]
        return out


# ------------------------------------------------------------------ helpers
def _is_null_item(query: exp.Expr, index: int) -> bool:
    """Whether select item ``index`` of a UNION branch is a bare NULL."""
    if not isinstance(query, exp.Select):
        return False
    items = query.expressions
    if any(isinstance(i, exp.Star) or isinstance(i.this, exp.Star) for i in items):
        return False
    if index >= len(items):
        return False
    item = items[index]
    return isinstance(item.this if isinstance(item, exp.Alias) else item, exp.Null)


def _int_literal(e: exp.Expr | None, what: str) -> int | None:
    if e is None:
        return None
    negative = isinstance(e, exp.Neg)
    if negative:
        e = e.this
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        n = -int(e.this) if negative else int(e.this)
        if n < 0:
            # PostgreSQL: 2201W for LIMIT, 2201X for OFFSET.
            raise sql_error("2201W" if what == "LIMIT" else "2201X", f"{what} must not be negative")
        return n
    raise unsupported_in_mv(f"{what} with an expression", e)


def _hidden_name(name: str, taken: list[str]) -> str:
    candidate = name if name.startswith("_") else f"_{name}"
    while candidate in taken:
        candidate = "_" + candidate
    taken.append(candidate)
    return candidate
