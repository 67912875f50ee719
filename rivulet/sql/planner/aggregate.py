"""Planning GROUP BY and the aggregates of a streaming query.

A pre-projection computes the group keys and each aggregate's arguments and FILTER
condition; its rows are hashed by the group key to a ``HashAggNode`` (without GROUP BY,
sent to the single actor of a ``SimpleAggNode``), whose output - the group key, then one
column per aggregate - is keyed by the group key. The select list and HAVING are then
rewritten over that output, so that a column neither grouped nor aggregated is refused
(42803) as PostgreSQL refuses it, and later clauses plan over the aggregation like any
relation.

``AggregatePlanning`` holds the methods and ``StreamPlanner`` (planner.py) mixes it in,
supplying the expression compiler, so this module never imports the planner.
"""

from __future__ import annotations

from sqlglot import exp

from rivulet.common.errors import sql_error
from rivulet.common.types import BIGINT, BOOLEAN, DataType
from rivulet.sql.binder import pg_output_name
from rivulet.sql.parser import position_of
from rivulet.sql.planner.expr import ExprCompiler
from rivulet.sql.planner.scope import Planned, Scope, ScopeColumn
from rivulet.sql.planner.shared import names_column, unsupported_in_mv
from rivulet.stream.expression import ExprSet
from rivulet.stream.plan import (
    AggCall,
    ExchangeNode,
    Field,
    HashAggNode,
    ProjectNode,
    Schema,
    SimpleAggNode,
)
from rivulet.stream.state_layouts import agg_state_schemas

# Aggregates the hash aggregation maintains, by sqlglot node (plus count(*)).
_AGG_KINDS: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.GroupConcat: "string_agg",
}


class AggregatePlanning:
    """The aggregation methods of ``StreamPlanner``, which supplies the expression compiler."""

    exprs: ExprCompiler

    def _find_aggs(self, q: exp.Select) -> list[exp.Expr]:
        found: list[exp.Expr] = []
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
        select_items: list[exp.Expr],
        group: exp.Group | None,
        aggs: list[exp.Expr],
        having: exp.Expr | None,
    ) -> tuple[Planned, list[exp.Expr], exp.Expr | None]:
        group_exprs = list(group.expressions) if group is not None else []
        if group is not None and (
            group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets")
        ):
            raise unsupported_in_mv("ROLLUP / CUBE / GROUPING SETS", group)
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
                and not names_column(g, rel.scope)
            ):
                resolved_groups.append(aliases[g.name])
            else:
                resolved_groups.append(g)
        # Pre-projection: group keys, then each aggregate's arguments and filters.
        pre: list[exp.Expr] = list(resolved_groups)
        calls: list[tuple[str, list[int], bool, int | None, exp.Expr]] = []
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
                raise unsupported_in_mv(f"{kind}() over an interval", agg)
            out_type = self._agg_type(kind, [pre_types[i] for i in arg_idx], agg)
            agg_calls.append(
                AggCall(kind, tuple(arg_idx), out_type, distinct, filt_idx,
                        delimiter=arg_idx[1] if kind.startswith("string_agg") and len(arg_idx) > 1 else None)
            )  # fmt: skip
        out_fields = [Field(f"g{i}", pre_types[i]) for i in range(g)]
        out_fields += [Field(f"a{i}", c.output_type) for i, c in enumerate(agg_calls)]
        if g:
            exchange = ExchangeNode.hash_of(pre_node, list(range(g)))
            node: HashAggNode = HashAggNode(
                Schema(out_fields), list(range(g)), False, [exchange],
                group_key=list(range(g)), aggs=agg_calls,
                state_tables=agg_state_schemas(pre_schema, list(range(g)), agg_calls, rel.node.append_only),
            )  # fmt: skip
            dist: list[int] | None = list(range(g))
        else:
            exchange = ExchangeNode.single_of(pre_node)
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
        def rewrite(e: exp.Expr) -> exp.Expr:
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

    def _agg_parts(self, agg: exp.Expr) -> tuple[str, list[exp.Expr], bool, exp.Expr | None]:
        filt = None
        if isinstance(agg, exp.Filter):
            filt = agg.expression.this if isinstance(agg.expression, exp.Where) else agg.expression
            agg = agg.this
        kind = _AGG_KINDS.get(type(agg))
        if kind is None:
            name = agg.sql_name().lower() if isinstance(agg, exp.Func) else type(agg).__name__
            raise unsupported_in_mv(f"aggregate {name}()", agg)
        distinct = False
        arg = agg.this
        if isinstance(arg, exp.Distinct):
            distinct = True
            if len(arg.expressions) != 1:
                raise unsupported_in_mv("an aggregate over several DISTINCT arguments", agg)
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
                raise unsupported_in_mv("string_agg(... ORDER BY ...)", agg)
        if distinct and kind not in ("count", "sum", "min", "max", "avg", "string_agg"):
            raise unsupported_in_mv(f"{kind}(DISTINCT ...)", agg)
        return (
            kind
            + ("_distinct" if distinct and kind in ("count", "sum", "avg", "string_agg") else ""),
            args,
            distinct,
            filt,
        )

    def _agg_type(self, kind: str, arg_types: list[DataType], agg: exp.Expr) -> DataType:
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
