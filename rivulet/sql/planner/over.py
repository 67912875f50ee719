"""Planning window functions (``f(...) OVER (...)``) of a streaming query.

Two shapes, as RisingWave plans them:

* **Group top-N.** ``SELECT ... FROM (SELECT ..., row_number() OVER (PARTITION BY p ORDER BY
  o) AS rn FROM ...) WHERE rn <= n`` (also ``rn < n``, ``rn = 1``, ``BETWEEN``, ``>=`` with an
  upper bound) keeps only the first rows of each partition: it becomes a per-group
  ``TopNNode``, which outputs the row_number only when the outer query reads it.
  ``take_rank_filter`` recognizes the pattern on the outer query and hands the bounds to the
  inner one; ``plan_over_windows`` then plans the top-N.
* **OverWindow.** Everything else: one ``OverWindowNode`` per distinct PARTITION BY (rows
  hashed by it), whose calls are DuckDB SQL the executor runs over whole partitions.

Window calls whose result depends on the order among ORDER BY peers get the input's stream
key as a tie-breaker, so that a partition recomputed later gives the same rows the same
results (see ``rivulet.stream.executors.over_window``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, sql_error
from rivulet.common.types import BIGINT
from rivulet.sql.binder import pg_output_name
from rivulet.sql.parser import position_of
from rivulet.sql.planner.expr import ExprCompiler, conjuncts
from rivulet.sql.planner.scope import Planned, Scope, ScopeColumn
from rivulet.sql.planner.shared import computed_columns
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.plan import (
    ExchangeNode,
    Field,
    OverWindowNode,
    PlanNode,
    Schema,
    TopNNode,
)

# Window functions an OverWindow maintains (any frame DuckDB evaluates like PostgreSQL).
RANKING = ("row_number", "rank", "dense_rank")
NAVIGATION = ("lag", "lead", "first_value", "last_value")
AGGREGATES = ("sum", "count", "min", "max", "avg")
SUPPORTED = RANKING + NAVIGATION + AGGREGATES
_HINT = (
    "Materialized views maintain the window functions row_number, rank, dense_rank, lag,"
    " lead, first_value, last_value and the aggregates sum, count, min, max and avg, with"
    " PARTITION BY, ORDER BY and ROWS or RANGE frames."
)
# Results that depend on the order of rows among ORDER BY peers (with the default frame).
_ORDER_SENSITIVE = ("row_number", "lag", "lead")
_columns = itertools.count()


def _key_name(_index: int) -> str:
    """A hidden key column of a window's input, named uniquely."""
    return f"_over_key{next(_columns)}"


def _window_error(what: str, node: exp.Expr | None = None) -> Exception:
    return sql_error(
        FEATURE_NOT_SUPPORTED,
        f"{what}: not supported yet in materialized views",
        hint=_HINT,
        position=position_of(node) if node is not None else None,
    )


def function_name(w: exp.Window) -> str:
    fn = w.this
    if isinstance(fn, exp.Filter | exp.IgnoreNulls | exp.RespectNulls):
        fn = fn.this
    return pg_output_name(fn)


# ------------------------------------------------------------------ placement
def check_placement(q: exp.Select) -> None:
    """Window calls only where PostgreSQL allows them: the select list and ORDER BY."""
    clauses = [("WHERE", q.args.get("where")), ("GROUP BY", q.args.get("group"))]
    clauses.append(("HAVING", q.args.get("having")))
    for join in q.args.get("joins") or []:
        clauses.append(("JOIN conditions", join.args.get("on")))
    for clause, node in clauses:
        if node is None:
            continue
        for w in node.find_all(exp.Window):
            raise sql_error(
                "42P20",
                f"window functions are not allowed in {clause}",
                hint="Compute the window function in a subquery and filter its result.",
                position=position_of(w),
            )
    for item in q.expressions:
        for w in item.find_all(exp.Window):
            if w.find_ancestor(exp.Window) is not None:
                raise sql_error(
                    "42P20", "window function calls cannot be nested", position=position_of(w)
                )
            agg = w.find_ancestor(exp.AggFunc)
            if agg is not None and agg.find_ancestor(exp.Window) is None:
                raise sql_error(
                    "42803",
                    "aggregate function calls cannot contain window function calls",
                    position=position_of(w),
                )
    order = q.args.get("order")
    if order is not None:
        for w in order.find_all(exp.Window):
            raise _window_error("window functions in ORDER BY", w)


# ----------------------------------------------------------- group top-N pattern
@dataclass(frozen=True)
class RankFilter:
    """Bounds on a subquery's row_number column that its outer query filters by."""

    alias: str
    offset: int
    limit: int
    rank_needed: bool  # the outer query reads the row_number itself


def take_rank_filter(q: exp.Select) -> None:
    """If ``q`` filters a subquery's ``row_number() OVER (...)`` column by an upper bound,
    move those conjuncts from ``q``'s WHERE to a ``RankFilter`` on the subquery (planned
    as a group top-N); otherwise leave ``q`` as it is."""
    from_ = q.args.get("from_")
    where = q.args.get("where")
    if from_ is None or where is None or q.args.get("joins"):
        return
    sub = from_.this
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        return
    inner = sub.this
    if any(inner.args.get(k) for k in ("distinct", "limit", "offset", "with_", "windows")):
        return
    windows = [w for item in inner.expressions for w in item.find_all(exp.Window)]
    if len(windows) != 1:
        return
    w = windows[0]
    item = w.parent
    if not isinstance(item, exp.Alias) or item.parent is not inner:
        return
    order = w.args.get("order")
    if (
        not isinstance(w.this, exp.RowNumber)
        or order is None
        or not order.expressions
        or w.args.get("spec") is not None
        or w.args.get("alias") is not None
    ):
        return
    alias = item.alias
    sub_alias = sub.alias_or_name

    def names_rank(e: exp.Expr) -> bool:
        return (
            isinstance(e, exp.Column) and e.name == alias and (not e.table or e.table == sub_alias)
        )

    lo, hi = 1, None
    consumed: list[exp.Expr] = []
    terms = conjuncts(where.this)
    for c in terms:
        bound = _rank_bound(c, names_rank)
        if bound is None:
            continue
        lo = max(lo, bound[0])
        if bound[1] is not None:
            hi = bound[1] if hi is None else min(hi, bound[1])
        consumed.append(c)
    if hi is None:
        return  # no upper bound: every row stays, an OverWindow computes the numbers
    remaining = [c for c in terms if not any(c is x for x in consumed)]
    where.set("this", exp.and_(*remaining) if remaining else exp.true())
    # Whether the outer query reads the row number itself (else the top-N omits it).
    needed = any(
        isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star)
        for item in q.expressions
    )
    for part in [*q.expressions, *(q.args.get(k) for k in ("group", "having", "order", "where"))]:
        if part is not None and any(names_rank(col) for col in part.find_all(exp.Column)):
            needed = True
    inner._rank_filter = RankFilter(alias, lo - 1, max(hi - lo + 1, 0), needed)  # type: ignore[attr-defined]


def _rank_bound(
    c: exp.Expr, names_rank: Callable[[exp.Expr], bool]
) -> tuple[int, int | None] | None:
    """``(lowest, highest)`` row numbers a conjunct allows, if it bounds the rank column
    by an integer constant."""

    def const(e: exp.Expr) -> int | None:
        if isinstance(e, exp.Paren):
            return const(e.this)
        if isinstance(e, exp.Literal) and not e.is_string and e.this.lstrip("-").isdigit():
            return int(e.this)
        if isinstance(e, exp.Neg):
            inner = const(e.this)
            return None if inner is None else -inner
        return None

    if isinstance(c, exp.Between) and names_rank(c.this):
        low, high = const(c.args["low"]), const(c.args["high"])
        if low is None or high is None:
            return None
        return low, high
    ops = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
    op = ops.get(type(c))
    if op is None:
        return None
    left, right = c.this, c.expression
    if names_rank(left) and const(right) is not None:
        n = const(right)
    elif names_rank(right) and const(left) is not None:
        n = const(left)
        op = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
    else:
        return None
    assert n is not None
    return {
        "=": (n, n), "<": (1, n - 1), "<=": (1, n), ">": (n + 1, None), ">=": (n, None),
    }[op]  # fmt: skip


# --------------------------------------------------------------------- planning
def plan_over_windows(
    compiler: ExprCompiler,
    rel: Planned,
    items: list[exp.Expr],
    rank_filter: RankFilter | None,
) -> tuple[Planned, list[exp.Expr]]:
    """Plan the window calls of a select list over ``rel``; the select items with each
    call replaced by a reference to the column that holds its value."""
    items = [_named(item) for item in items]
    windows: list[exp.Window] = []
    for item in items:
        for w in item.find_all(exp.Window):
            _validate(w)
            if not any(w == seen for seen in windows):
                windows.append(w)
    names: list[str] = []
    if rank_filter is not None:
        rel, names = _group_top_n(compiler, rel, windows[0], rank_filter)
    else:
        groups: list[tuple[list[str], list[exp.Window]]] = []
        for w in windows:
            key = [p.sql() for p in w.args.get("partition_by") or []]
            for gkey, members in groups:
                if gkey == key:
                    members.append(w)
                    break
            else:
                groups.append((key, [w]))
        by_window: dict[int, str] = {}
        for _, members in groups:
            rel, out = _over_window(compiler, rel, members)
            for w, name in zip(members, out):
                by_window[id(w)] = name
        names = [by_window[id(w)] for w in windows]
    replaced = []
    for item in items:
        item = item.copy()
        for node in list(item.find_all(exp.Window)):
            index = next(i for i, w in enumerate(windows) if w == node)
            ref = exp.column(names[index]) if names[index] else exp.cast(exp.null(), "BIGINT")
            node.replace(ref)
        replaced.append(item)
    return rel, replaced


def _named(item: exp.Expr) -> exp.Expr:
    """A select item holding a window call, aliased by the name PostgreSQL gives it (the
    call is replaced by a column reference, whose name it must not take)."""
    if isinstance(item, exp.Alias) or item.find(exp.Window) is None:
        return item
    return exp.alias_(item.copy(), exp.to_identifier(pg_output_name(item), quoted=True))


def _validate(w: exp.Window) -> None:
    name = function_name(w)
    if w.args.get("alias") is not None:
        raise _window_error("named windows (OVER w)", w)
    if name not in SUPPORTED:
        raise _window_error(f"window function {name}()", w)
    if isinstance(w.this, exp.IgnoreNulls | exp.RespectNulls):
        raise _window_error(f"{name}() with IGNORE NULLS / RESPECT NULLS", w)
    fn = w.this.this if isinstance(w.this, exp.Filter) else w.this
    if isinstance(fn.args.get("this"), exp.Distinct):
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "DISTINCT is not implemented for window functions",
            position=position_of(w),
        )
    if isinstance(fn.args.get("this"), exp.Order):
        raise _window_error(f"{name}() with ORDER BY in its arguments", w)
    spec = w.args.get("spec")
    if spec is not None:
        kind = (spec.args.get("kind") or "").upper()
        if kind not in ("ROWS", "RANGE"):
            raise _window_error(f"{kind} frames", w)
        if spec.args.get("exclude") is not None:
            raise _window_error("frame EXCLUDE", w)


def _exchange(rel: Planned, partition: list[int]) -> ExchangeNode:
    """Rows of a partition meet on one actor: hashed by the partition key, or all on a
    single actor when there is none."""
    node = rel.node
    if partition:
        return ExchangeNode.hash_of(node, list(partition))
    return ExchangeNode.single_of(node)


def partitioned_state_schema(node: PlanNode, partition: list[int]) -> StateTableSchema:
    """Every input row, keyed by (partition key, stream key), distributed by the partition
    key (a top-N's groups, an OverWindow's partitions)."""
    cols = tuple((f"c{i}", f.type) for i, f in enumerate(node.schema))
    pk = tuple(dict.fromkeys([*partition, *node.stream_key]))
    return StateTableSchema(0, cols, pk, tuple(partition))


def _group_top_n(
    compiler: ExprCompiler, rel: Planned, w: exp.Window, f: RankFilter
) -> tuple[Planned, list[str]]:
    partition = list(w.args.get("partition_by") or [])
    ordered = list(w.args["order"].expressions)
    rel, cols = computed_columns(compiler, rel, partition + [o.this for o in ordered], _key_name)
    part, order_cols = cols[: len(partition)], cols[len(partition) :]
    keys: list[tuple[int, bool, bool]] = []
    for o, c in zip(ordered, order_cols):
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = desc  # PostgreSQL: NULLs sort as the largest value
        keys.append((c, not desc, bool(nulls_first)))
    fields = list(rel.node.schema)
    columns = list(rel.scope.columns)
    name = ""
    if f.rank_needed:
        name = f"__rank{next(_columns)}"
        fields.append(Field(name, BIGINT))
        columns.append(ScopeColumn(None, name, BIGINT, True))
    # The group key is part of the stream key: a row moving between groups leaves one
    # actor and enters another, and downstream must not see both under one key.
    key = list(dict.fromkeys([*rel.node.stream_key, *part]))
    node = TopNNode(
        Schema(fields), key, False, [_exchange(rel, part)],
        order=keys, limit=f.limit, offset=f.offset, group_key=part,
        rank_output=f.rank_needed,
        state_tables=[partitioned_state_schema(rel.node, part)],
    )  # fmt: skip
    return Planned(node, Scope(columns), part or None), [name]


def _over_window(
    compiler: ExprCompiler, rel: Planned, windows: list[exp.Window]
) -> tuple[Planned, list[str]]:
    """One OverWindow for calls sharing a PARTITION BY."""
    partition = list(windows[0].args.get("partition_by") or [])
    rel, part = computed_columns(compiler, rel, partition, _key_name)
    tie = [exp.Ordered(this=exp.column(f"c{k}"), desc=False, nulls_first=False)
           for k in rel.node.stream_key]  # fmt: skip
    trees = []
    for w in windows:
        tree = compiler.resolve_columns(w, rel.scope)
        assert isinstance(tree, exp.Window)
        tree.set("partition_by", [exp.column(f"c{k}") for k in part])
        _break_ties(tree, function_name(w), tie)
        trees.append(tree)
    calls, types = compiler.compile_resolved(trees, rel.scope.types)
    names = [f"__over{next(_columns)}" for _ in windows]
    schema = Schema(list(rel.node.schema) + [Field(n, t) for n, t in zip(names, types)])
    key = list(dict.fromkeys([*rel.node.stream_key, *part]))
    node = OverWindowNode(
        schema, key, False, [_exchange(rel, part)],
        partition=part, calls=calls,
        state_tables=[partitioned_state_schema(rel.node, part)],
    )  # fmt: skip
    scope = Scope(rel.scope.columns + [ScopeColumn(None, n, t, True) for n, t in zip(names, types)])
    return Planned(node, scope, part or None), names


def _break_ties(tree: exp.Window, name: str, tie: list[exp.Ordered]) -> None:
    """Make a call's result independent of the order DuckDB visits ORDER BY peers in:
    ``tie`` (the stream key) ends its ORDER BY when the result depends on the row order
    (row_number, lag, lead, ROWS frames); first_value/last_value over a RANGE frame get it
    as their argument order, which leaves the frame's peers as they are."""
    if not tie:
        return
    spec = tree.args.get("spec")
    rows_frame = spec is not None and (spec.args.get("kind") or "").upper() == "ROWS"
    order = tree.args.get("order")
    existing = list(order.expressions) if order is not None else []
    tie = [t for t in tie if not any(e.this == t.this for e in existing)]
    if not tie:
        return
    if name in _ORDER_SENSITIVE or rows_frame:
        tree.set("order", exp.Order(expressions=existing + [t.copy() for t in tie]))
    elif name in ("first_value", "last_value"):
        fn = tree.this
        arg = fn.this
        fn.set("this", exp.Order(this=arg, expressions=[e.copy() for e in existing + tie]))
