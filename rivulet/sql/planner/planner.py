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
"""

from __future__ import annotations

import re

from sqlglot import exp

from rivulet.common.errors import (
    DATATYPE_MISMATCH,
    FEATURE_NOT_SUPPORTED,
    UNDEFINED_FUNCTION,
    UNDEFINED_TABLE,
    sql_error,
)
from rivulet.common.types import BIGINT, BOOLEAN, TEXT, DataType
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binder import Binder, pg_output_name
from rivulet.sql.parser import position_of
from rivulet.sql.planner.expr import ExprCompiler, conjuncts
from rivulet.sql.planner.over import check_placement, plan_over_windows, take_rank_filter
from rivulet.sql.planner.scope import Planned, Scope, ScopeColumn
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
    AggCall,
    ExchangeKind,
    ExchangeNode,
    Field,
    FilterNode,
    HashAggNode,
    HashJoinNode,
    HopWindowNode,
    JoinKind,
    PlanNode,
    ProjectNode,
    Schema,
    SimpleAggNode,
    SourceNode,
    StreamScanNode,
    TopNNode,
    UnionNode,
)
from rivulet.stream.state_layouts import (
    agg_state_schemas,
    join_state_schema,
    progress_state_schema,
    source_state_schema,
    topn_state_schema,
)

_SUPPORTED_SHAPES = (
    "Materialized views maintain projections, filters, equi-joins (inner, left, right, full),"
    " GROUP BY with count, sum, min, max, avg, bool_and, bool_or and string_agg, DISTINCT,"
    " UNION ALL, ORDER BY ... LIMIT, TUMBLE/HOP windows and window functions (OVER)."
)


def _not_supported(what: str, node: exp.Expression | None = None) -> Exception:
    return sql_error(
        FEATURE_NOT_SUPPORTED,
        f"{what}: not supported yet in materialized views",
        hint=_SUPPORTED_SHAPES,
        position=position_of(node) if node is not None else None,
    )


# Aggregates the hash aggregation maintains, by sqlglot node (plus count(*)).
_AGG_KINDS: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.GroupConcat: "string_agg",
}


class StreamPlanner:
    def __init__(self, binder: Binder, cursor_provider) -> None:
        self.binder = binder
        self.exprs = ExprCompiler(binder, cursor_provider)
        self.dependencies: list[int] = []

    # ------------------------------------------------------------------ queries
    def plan_query(self, q: exp.Expression) -> Planned:
        if isinstance(q, exp.Subquery):
            return self.plan_query(q.this)
        if isinstance(q, exp.Union):
            if q.args.get("distinct"):
                raise _not_supported("UNION (without ALL)", q)
            return self._union(q)
        if isinstance(q, exp.SetOperation):
            raise _not_supported(type(q).__name__.upper(), q)
        if isinstance(q, exp.Values):
            raise _not_supported("VALUES", q)
        if not isinstance(q, exp.Select):
            raise _not_supported(f"query of kind {type(q).__name__}", q)
        if q.args.get("with_"):
            raise _not_supported("WITH (common table expressions)", q)
        return self._select(q)

    def _select(self, q: exp.Select) -> Planned:
        from_ = q.args.get("from_")
        if from_ is None:
            raise _not_supported("a query without FROM", q)
        for clause in ("windows", "qualify", "prewhere", "connect", "sample"):
            if q.args.get(clause):
                raise _not_supported(clause.upper(), q)
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
            raise _not_supported("HAVING without GROUP BY or aggregates", having)
        if any(item.find(exp.Window) for item in select_items):
            rel, select_items = plan_over_windows(
                self.exprs, rel, select_items, getattr(q, "_rank_filter", None)
            )
        input_scope = rel.scope  # what ORDER BY may name besides the select list
        rel, names = self._project_select(rel, select_items)
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise _not_supported("DISTINCT ON", q)
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

    def _relation(self, item: exp.Expression) -> Planned:
        if isinstance(item, exp.Subquery):
            inner = self.plan_query(item.this)
            alias = item.alias_or_name or None
            return Planned(inner.node, inner.scope.requalified(alias), inner.dist)
        if isinstance(item, exp.Table):
            if isinstance(item.this, exp.Func | exp.Anonymous):
                return self._table_function(item)
            return self._scan(item)
        if isinstance(item, exp.Lateral | exp.Unnest):
            raise _not_supported(type(item).__name__.upper(), item)
        raise _not_supported(f"FROM item {item.sql(dialect='postgres')}", item)

    def _scan(self, item: exp.Table) -> Planned:
        table = self.binder.lookup_table(item.db or None, item.name)
        if table is None:
            if self.binder.ctx.system.relation(item.db or "pg_catalog", item.name):
                raise _not_supported("reading a system catalog", item)
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
            raise _not_supported(f"table function {name}()", item)
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

    def _interval_sql(self, e: exp.Expression) -> str:
        bound = self.binder.prepare(e.copy())
        return bound.sql(dialect="duckdb")

    # -------------------------------------------------------------------- joins
    def _join(self, left: Planned, join: exp.Join, where: exp.Where | None) -> Planned:
        side = (join.args.get("side") or "").upper()
        kind_word = (join.args.get("kind") or "").upper()
        if kind_word in ("SEMI", "ANTI", "ASOF") or join.args.get("using"):
            raise _not_supported(f"{kind_word or 'USING'} join", join)
        kind = {
            "": JoinKind.INNER, "LEFT": JoinKind.LEFT, "RIGHT": JoinKind.RIGHT,
            "FULL": JoinKind.FULL,
        }.get(side)  # fmt: skip
        if kind is None:
            raise _not_supported(f"{side} join", join)
        right = self._relation(join.this)
        on = join.args.get("on")
        on_terms = conjuncts(on) if on is not None else []
        if on is None:
            if kind is not JoinKind.INNER or kind_word not in ("", "CROSS", "INNER"):
                raise sql_error("42601", "a join needs an ON condition")
            # FROM a, b WHERE a.x = b.y: the equalities of WHERE join the two.
            if where is not None:
                on_terms = [c for c in conjuncts(where.this)]
        combined = left.scope.concat(right.scope)
        n_left = len(left.scope)
        if on is not None:  # an unknown or ambiguous column is that, not a missing equality
            for col in on.find_all(exp.Column):
                if not isinstance(col.this, exp.Star):
                    combined.resolve(col)
        left_keys: list[exp.Expression] = []
        right_keys: list[exp.Expression] = []
        rest: list[exp.Expression] = []
        for c in on_terms:
            pair = self._equi_pair(c, left.scope, right.scope)
            if pair is None:
                rest.append(c)
            else:
                left_keys.append(pair[0])
                right_keys.append(pair[1])
        if not left_keys:
            raise _not_supported("a join without an equality between its two sides", join)
        if on is None and where is not None:
            # The WHERE clause now holds only what the join did not take.
            remaining = [c for c in conjuncts(where.this) if c in rest]
            where.set("this", exp.and_(*remaining) if remaining else exp.true())
        left, lk = self._key_columns(left, left_keys)
        right, rk = self._key_columns(right, right_keys)
        self._unify_key_types(left, lk, right, rk)
        combined = left.scope.concat(right.scope)
        n_left = len(left.scope)
        condition = None
        if on is not None and rest:
            self._check_boolean(rest, combined, "JOIN/ON")
            condition, _ = self.exprs.compile([exp.and_(*rest)], combined)
        left_node = ExchangeNode(
            left.node.schema,
            left.node.stream_key,
            left.node.append_only,
            [left.node],
            kind=ExchangeKind.HASH,
            key=lk,
        )
        right_node = ExchangeNode(
            right.node.schema,
            right.node.stream_key,
            right.node.append_only,
            [right.node],
            kind=ExchangeKind.HASH,
            key=rk,
        )
        # The join key is part of the stream key: a row whose join key changes is
        # retracted by one actor and re-emitted by another, and downstream must not see
        # both under one key (their order across actors is not defined).
        key_cols = list(lk) if kind is not JoinKind.RIGHT else []
        if kind in (JoinKind.RIGHT, JoinKind.FULL):
            key_cols += [n_left + k for k in rk]
        key = list(
            dict.fromkeys(
                [*left.node.stream_key, *(n_left + k for k in right.node.stream_key), *key_cols]
            )
        )
        schema = Schema(list(left.node.schema) + list(right.node.schema))
        node = HashJoinNode(
            schema,
            key,
            left.node.append_only and right.node.append_only and kind is JoinKind.INNER,
            [left_node, right_node],
            kind=kind,
            left_key=lk,
            right_key=rk,
            condition=condition,
            state_tables=[
                join_state_schema(left.node, lk, kind in (JoinKind.LEFT, JoinKind.FULL)),
                join_state_schema(right.node, rk, kind in (JoinKind.RIGHT, JoinKind.FULL)),
            ],
        )
        scope = combined
        if kind in (JoinKind.RIGHT, JoinKind.FULL):
            dist: list[int] | None = None
        else:
            dist = lk
        return Planned(node, scope, dist)

    def _equi_pair(
        self, c: exp.Expression, left: Scope, right: Scope
    ) -> tuple[exp.Expression, exp.Expression] | None:
        if not isinstance(c, exp.EQ):
            return None
        a, b = c.this, c.expression
        sa, sb = _sides(a, left, right), _sides(b, left, right)
        if sa == "left" and sb == "right":
            return a, b
        if sa == "right" and sb == "left":
            return b, a
        return None

    def _key_columns(self, rel: Planned, keys: list[exp.Expression]) -> tuple[Planned, list[int]]:
        """Key expressions as columns of ``rel`` (computed ones appended by a project)."""
        indices: list[int] = []
        extra: list[exp.Expression] = []
        for k in keys:
            if isinstance(k, exp.Column):
                indices.append(rel.scope.resolve(k))
            else:
                indices.append(len(rel.scope) + len(extra))
                extra.append(k)
        if not extra:
            return rel, indices
        exprs, types = self.exprs.compile(extra, rel.scope)
        n = len(rel.scope)
        all_exprs = ExprSet.plain([f"c{i}" for i in range(n)]) + exprs
        schema = Schema(list(rel.node.schema) + [Field(f"_key{i}", t) for i, t in enumerate(types)])
        node = ProjectNode(
            schema, list(rel.node.stream_key), rel.node.append_only, [rel.node], exprs=all_exprs
        )
        scope = Scope(
            rel.scope.columns
            + [ScopeColumn(None, f"_key{i}", t, True) for i, t in enumerate(types)]
        )
        return Planned(node, scope, rel.dist), indices

    def _unify_key_types(self, left: Planned, lk: list[int], right: Planned, rk: list[int]) -> None:
        for a, b in zip(lk, rk):
            ta, tb = left.scope.columns[a].type, right.scope.columns[b].type
            if _type_category(ta) != _type_category(tb):
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"operator does not exist: {ta.name} = {tb.name}",
                    hint="No operator matches the given name and argument types."
                    " You might need to add explicit type casts.",
                )
            if _hash_family(ta) != _hash_family(tb):
                raise _not_supported(
                    f"a join key comparing {ta.name} with {tb.name} (cast one side)"
                )

    # ------------------------------------------------------------------- filter
    def _filter(self, rel: Planned, condition: exp.Expression, clause: str = "WHERE") -> Planned:
        if isinstance(condition, exp.Boolean) and condition.this is True:
            return rel
        self._check_boolean(conjuncts(condition), rel.scope, clause)
        exprs, _ = self.exprs.compile([condition], rel.scope)
        node = FilterNode(
            rel.node.schema, list(rel.node.stream_key), rel.node.append_only, [rel.node],
            condition=exprs,
        )  # fmt: skip
        return Planned(node, rel.scope, rel.dist)

    def _check_boolean(self, conditions: list[exp.Expression], scope: Scope, clause: str) -> None:
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

    # -------------------------------------------------------------- aggregation
    def _find_aggs(self, q: exp.Select) -> list[exp.Expression]:
        found: list[exp.Expression] = []
        targets = list(q.expressions)
        if q.args.get("having") is not None:
            targets.append(q.args["having"])
        if q.args.get("order") is not None:
            targets.append(q.args["order"])
        for t in targets:
            for node in t.find_all(exp.AggFunc):
                if node.find_ancestor(exp.Window):
                    continue
                # An aggregate of a subquery is the subquery's (refused when compiled).
                if node.find_ancestor(exp.Select) is not q:
                    continue
                # agg(...) FILTER (WHERE ...) is its own aggregate.
                if isinstance(node.parent, exp.Filter):
                    node = node.parent
                if not any(node == f for f in found):
                    found.append(node)
        return found

    def _aggregate(
        self,
        rel: Planned,
        select_items: list[exp.Expression],
        group: exp.Group | None,
        aggs: list[exp.Expression],
        having: exp.Expression | None,
    ) -> tuple[Planned, list[exp.Expression], exp.Expression | None]:
        group_exprs = list(group.expressions) if group is not None else []
        if group is not None and (
            group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets")
        ):
            raise _not_supported("ROLLUP / CUBE / GROUPING SETS", group)
        # GROUP BY 1 / GROUP BY alias mean select items.
        aliases = {item.alias: item.this for item in select_items if isinstance(item, exp.Alias)}
        resolved_groups = []
        for g in group_exprs:
            if isinstance(g, exp.Literal) and not g.is_string:
                index = int(g.this) - 1
                if not 0 <= index < len(select_items):
                    raise sql_error("42P10", f"GROUP BY position {g.this} is not in select list")
                item = select_items[index]
                resolved_groups.append(item.this if isinstance(item, exp.Alias) else item)
            elif (
                isinstance(g, exp.Column)
                and not g.table
                and g.name in aliases
                and not _names_column(g, rel.scope)
            ):
                resolved_groups.append(aliases[g.name])
            else:
                resolved_groups.append(g)
        # Pre-projection: group keys, then each aggregate's arguments and filters.
        pre: list[exp.Expression] = list(resolved_groups)
        calls: list[tuple[str, list[int], bool, int | None, exp.Expression]] = []
        for agg in aggs:
            kind, args, distinct, filt = self._agg_parts(agg)
            arg_idx = []
            for a in args:
                pre.append(a)
                arg_idx.append(len(pre) - 1)
            filt_idx = None
            if filt is not None:
                pre.append(filt)
                filt_idx = len(pre) - 1
            calls.append((kind, arg_idx, distinct, filt_idx, agg))
        pre_exprs, pre_types = self.exprs.compile(pre, rel.scope) if pre else (ExprSet([], []), [])
        g = len(resolved_groups)
        pre_schema = Schema(Field(f"c{i}", t) for i, t in enumerate(pre_types))
        pre_node = ProjectNode(pre_schema, [], rel.node.append_only, [rel.node], exprs=pre_exprs)
        # The pre-projection keeps no key: the aggregation's key is the group key.
        agg_calls: list[AggCall] = []
        for kind, arg_idx, distinct, filt_idx, agg in calls:
            if kind in ("min", "max") and pre_types[arg_idx[0]].name == "interval":
                raise _not_supported(f"{kind}() over an interval", agg)
            out_type = self._agg_type(kind, [pre_types[i] for i in arg_idx], agg)
            agg_calls.append(
                AggCall(kind, tuple(arg_idx), out_type, distinct, filt_idx,
                        delimiter=arg_idx[1] if kind.startswith("string_agg") and len(arg_idx) > 1 else None)
            )  # fmt: skip
        out_fields = [Field(f"g{i}", pre_types[i]) for i in range(g)]
        out_fields += [Field(f"a{i}", c.output_type) for i, c in enumerate(agg_calls)]
        if g:
            exchange = ExchangeNode(
                pre_schema,
                [],
                pre_node.append_only,
                [pre_node],
                kind=ExchangeKind.HASH,
                key=list(range(g)),
            )
            node: HashAggNode = HashAggNode(
                Schema(out_fields), list(range(g)), False, [exchange],
                group_key=list(range(g)), aggs=agg_calls,
                state_tables=agg_state_schemas(pre_schema, list(range(g)), agg_calls, rel.node.append_only),
            )  # fmt: skip
            dist: list[int] | None = list(range(g))
        else:
            exchange = ExchangeNode(
                pre_schema, [], pre_node.append_only, [pre_node], kind=ExchangeKind.SIMPLE, key=[]
            )
            node = SimpleAggNode(
                Schema(out_fields), [], False, [exchange],
                group_key=[], aggs=agg_calls,
                state_tables=agg_state_schemas(pre_schema, [], agg_calls, rel.node.append_only),
            )  # fmt: skip
            dist = None
        scope = Scope(
            [ScopeColumn(None, f"__g{i}", pre_types[i], True) for i in range(g)]
            + [ScopeColumn(None, f"__a{i}", c.output_type, True) for i, c in enumerate(agg_calls)]
        )

        # Rewrite select items and HAVING over the aggregation's output.
        def rewrite(e: exp.Expression) -> exp.Expression:
            e = e.copy()
            for i, (_, _, _, _, agg) in enumerate(calls):
                hits = [
                    n
                    for n in e.find_all(type(agg))
                    if n == agg
                    and (isinstance(agg, exp.Filter) or not isinstance(n.parent, exp.Filter))
                ]
                for hit in hits:
                    if hit is e:
                        e = exp.column(f"__a{i}")
                    else:
                        hit.replace(exp.column(f"__a{i}"))
            for i, gexpr in enumerate(resolved_groups):
                for hit in [n for n in e.find_all(type(gexpr)) if n == gexpr]:
                    if hit is e:
                        e = exp.column(f"__g{i}")
                    else:
                        hit.replace(exp.column(f"__g{i}"))
            for col in e.find_all(exp.Column):
                if not col.name.startswith(("__g", "__a")) and not isinstance(col.this, exp.Star):
                    raise sql_error(
                        "42803",
                        f'column "{col.sql(dialect="postgres")}" must appear in the GROUP BY'
                        " clause or be used in an aggregate function",
                        position=position_of(col),
                    )
            return e

        new_items = []
        for item in select_items:
            if isinstance(item, exp.Star) or (
                isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            ):
                raise sql_error("42803", "SELECT * is not allowed with GROUP BY or aggregates")
            name = item.alias if isinstance(item, exp.Alias) else pg_output_name(item)
            inner = item.this if isinstance(item, exp.Alias) else item
            new_items.append(exp.alias_(rewrite(inner), exp.to_identifier(name, quoted=True)))
        new_having = rewrite(having) if having is not None else None
        return Planned(node, scope, dist), new_items, new_having

    def _agg_parts(
        self, agg: exp.Expression
    ) -> tuple[str, list[exp.Expression], bool, exp.Expression | None]:
        filt = None
        if isinstance(agg, exp.Filter):
            filt = agg.expression.this if isinstance(agg.expression, exp.Where) else agg.expression
            agg = agg.this
        kind = _AGG_KINDS.get(type(agg))
        if kind is None:
            name = agg.sql_name().lower() if isinstance(agg, exp.Func) else type(agg).__name__
            raise _not_supported(f"aggregate {name}()", agg)
        distinct = False
        arg = agg.this
        if isinstance(arg, exp.Distinct):
            distinct = True
            if len(arg.expressions) != 1:
                raise _not_supported("an aggregate over several DISTINCT arguments", agg)
            arg = arg.expressions[0]
        if isinstance(agg, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            return "count_star", [], False, filt
        if arg is None:
            raise sql_error("42601", f"{kind}() needs an argument")
        args = [arg]
        if kind == "string_agg":
            sep = agg.args.get("separator")
            args.append(sep if sep is not None else exp.Literal.string(","))
            if isinstance(arg, exp.Order) or agg.find(exp.Order) is not None:
                raise _not_supported("string_agg(... ORDER BY ...)", agg)
        if distinct and kind not in ("count", "sum", "min", "max", "avg", "string_agg"):
            raise _not_supported(f"{kind}(DISTINCT ...)", agg)
        return (
            kind
            + ("_distinct" if distinct and kind in ("count", "sum", "avg", "string_agg") else ""),
            args,
            distinct,
            filt,
        )

    def _agg_type(self, kind: str, arg_types: list[DataType], agg: exp.Expression) -> DataType:
        if kind in ("count_star", "count", "count_distinct"):
            return BIGINT
        if kind in ("bool_and", "bool_or"):
            return BOOLEAN
        base = kind.removesuffix("_distinct")
        sql = {
            "sum": "sum(c0)", "min": "min(c0)", "max": "max(c0)", "avg": "avg(c0)",
            "string_agg": "string_agg(c0, ',')",
        }[base]  # fmt: skip
        return self.exprs.types_of([sql], arg_types)[0]

    # ----------------------------------------------------------- select list
    def _project_select(
        self, rel: Planned, items: list[exp.Expression]
    ) -> tuple[Planned, list[str]]:
        exprs: list[exp.Expression] = []
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
        exchange = ExchangeNode(
            schema, [], project.append_only, [project], kind=ExchangeKind.HASH, key=keys
        )
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
        limit: exp.Expression | None,
        offset: exp.Expression | None,
        names: list[str],
        input_scope: Scope | None = None,
    ) -> Planned:
        if order is None:
            raise _not_supported("LIMIT without ORDER BY", limit)
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
                raise _not_supported("ORDER BY an expression that is not in the select list", o)
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
        exchange = ExchangeNode(
            rel.node.schema,
            rel.node.stream_key,
            rel.node.append_only,
            [rel.node],
            kind=ExchangeKind.SIMPLE,
            key=[],
        )
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
        item: exp.Expression,
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
        raise _not_supported("ORDER BY a column that is not in the select list", item)

    # -------------------------------------------------------------------- union
    def _union(self, q: exp.Union) -> Planned:
        branches: list[exp.Expression] = []

        def collect(e: exp.Expression) -> None:
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
            inputs.append(
                ExchangeNode(
                    schema,
                    full_key,
                    project.append_only,
                    [project],
                    kind=ExchangeKind.HASH,
                    key=full_key,
                )
            )
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
            if _type_category(t) != _type_category(out):
                raise sql_error(
                    DATATYPE_MISMATCH, f"UNION types {out.name} and {t.name} cannot be matched"
                )
            out = self.exprs.types_of(["coalesce(c0, c1)"], [out, t])[0]
        return out


# ------------------------------------------------------------------ helpers
def _is_null_item(query: exp.Expression, index: int) -> bool:
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


def _type_category(t: DataType) -> str:
    if t.name in ("smallint", "integer", "bigint", "numeric", "real", "double precision"):
        return "number"
    if t.name in ("character varying", "text", "name"):
        return "string"
    if t.name in ("date", "timestamp without time zone", "timestamp with time zone"):
        return "datetime"
    return t.name


def _sides(e: exp.Expression, left: Scope, right: Scope) -> str | None:
    """Which side's columns an expression uses: left, right, both or none."""
    seen = set()
    for col in e.find_all(exp.Column):
        in_left = _names_column(col, left)
        in_right = _names_column(col, right)
        if in_left and not in_right:
            seen.add("left")
        elif in_right and not in_left:
            seen.add("right")
        else:
            return None
    if len(seen) != 1:
        return None
    return seen.pop()


def _names_column(col: exp.Column, scope: Scope) -> bool:
    q = col.table or None
    return any(c.name == col.name and (q is None or c.qualifier == q) for c in scope.columns)


def _hash_family(t: DataType) -> str:
    """Types whose values hash alike (the vnode hash canonicalizes within a family)."""
    if t.name in ("smallint", "integer", "bigint", "boolean"):
        return "int"
    if t.name in ("real", "double precision", "numeric"):
        return "float"
    if t.name in ("character varying", "text", "jsonb", "bytea"):
        return "bytes"
    return t.name


def _int_literal(e: exp.Expression | None, what: str) -> int | None:
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
    raise _not_supported(f"{what} with an expression", e)


def _hidden_name(name: str, taken: list[str]) -> str:
    candidate = name if name.startswith("_") else f"_{name}"
    while candidate in taken:
        candidate = "_" + candidate
    taken.append(candidate)
    return candidate


_COLUMN_REF = re.compile(r"\bc(\d+)\b")


def _column_refs(sqls: list[str]) -> set[int]:
    """Input columns an expression may read (a superset: a literal 'c3' counts too)."""
    return {int(m) for sql in sqls for m in _COLUMN_REF.findall(sql)}


def _expr_sqls(exprs: ExprSet | None) -> list[str]:
    if exprs is None:
        return []
    return [*exprs.strict, *exprs.safe, *exprs.error_predicates]


def prune_join_columns(root: PlanNode) -> None:
    """Joins keep in their state (and emit) only the columns that something above reads:
    the rest of a side is never stored and leaves the join as NULL. A bid-auction join
    aggregated per category then stores (auction, price, row id) of each bid, not the
    whole bid. Call on the root of a job's plan once it is complete."""

    def visit(node: PlanNode, required: set[int]) -> None:
        if isinstance(node, HashJoinNode):
            left, right = node.inputs
            n_left = len(left.schema)
            need = set(required) | set(node.stream_key) | set(node.left_key)
            need |= {n_left + k for k in node.right_key}
            need |= _column_refs(_expr_sqls(node.condition))
            left_need = sorted(i for i in need if i < n_left)
            right_need = sorted(i - n_left for i in need if i >= n_left)
            degrees = [any(c[0] == "_degree" for c in t.columns) for t in node.state_tables]
            node.state_tables = [
                join_state_schema(left, node.left_key, degrees[0], left_need),
                join_state_schema(right, node.right_key, degrees[1], right_need),
            ]
            visit(left, set(left_need))
            visit(right, set(right_need))
        elif isinstance(node, ProjectNode):
            visit(node.inputs[0], _column_refs(_expr_sqls(node.exprs)))
        elif isinstance(node, FilterNode):
            visit(node.inputs[0], required | _column_refs(_expr_sqls(node.condition)))
        elif isinstance(node, ExchangeNode):
            visit(node.inputs[0], required | set(node.key) | set(node.stream_key))
        else:
            for child in node.inputs:
                visit(child, set(range(len(child.schema))))

    visit(root, set(range(len(root.schema))))
