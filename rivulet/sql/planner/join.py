"""Planning the joins of a streaming query: ``a JOIN b ON ...`` (inner, left, right, full)
and ``FROM a, b WHERE a.x = b.y``.

A join needs at least one equality between its two sides: it becomes a ``HashJoinNode``
whose inputs are hashed by their join keys (a computed key is appended to its side by a
project), so that the rows of one key meet on one actor. The two sides' key types must
hash alike; the rest of ON stays as the join's condition. Once a job's plan is complete,
``prune_join_columns`` keeps in each join's state only the columns read above it.

``JoinPlanning`` holds the methods and ``StreamPlanner`` (planner.py) mixes it in,
supplying what the class declares (the expression compiler, the planning of each side's
FROM item, the boolean check of conditions), so this module never imports the planner.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.common.errors import UNDEFINED_FUNCTION, sql_error
from rivulet.common.types import DataType
from rivulet.sql.planner.expr import ExprCompiler, conjuncts
from rivulet.sql.planner.scope import Planned, Scope
from rivulet.sql.planner.shared import (
    computed_columns,
    names_column,
    type_category,
    unsupported_in_mv,
)
from rivulet.stream.expression import ExprSet
from rivulet.stream.plan import (
    ExchangeNode,
    FilterNode,
    HashJoinNode,
    JoinKind,
    PlanNode,
    ProjectNode,
    Schema,
)
from rivulet.stream.state_layouts import join_state_schema


class JoinPlanning:
    """The join methods of ``StreamPlanner``, which supplies what is declared here."""

    exprs: ExprCompiler

    if TYPE_CHECKING:

        def _relation(self, item: exp.Expr) -> Planned: ...

        def _check_boolean(self, conditions: list[exp.Expr], scope: Scope, clause: str) -> None: ...

    def _join(self, left: Planned, join: exp.Join, where: exp.Where | None) -> Planned:
        side = (join.args.get("side") or "").upper()
        kind_word = (join.args.get("kind") or "").upper()
        if kind_word in ("SEMI", "ANTI", "ASOF") or join.args.get("using"):
            raise unsupported_in_mv(f"{kind_word or 'USING'} join", join)
        kind = {
            "": JoinKind.INNER, "LEFT": JoinKind.LEFT, "RIGHT": JoinKind.RIGHT,
            "FULL": JoinKind.FULL,
        }.get(side)  # fmt: skip
        if kind is None:
            raise unsupported_in_mv(f"{side} join", join)
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
        left_keys: list[exp.Expr] = []
        right_keys: list[exp.Expr] = []
        rest: list[exp.Expr] = []
        for c in on_terms:
            pair = self._equi_pair(c, left.scope, right.scope)
            if pair is None:
                rest.append(c)
            else:
                left_keys.append(pair[0])
                right_keys.append(pair[1])
        if not left_keys:
            raise unsupported_in_mv("a join without an equality between its two sides", join)
        if on is None and where is not None:
            # The WHERE clause now holds only what the join did not take.
            remaining = [c for c in conjuncts(where.this) if c in rest]
            where.set("this", exp.and_(*remaining) if remaining else exp.true())
        left, lk = computed_columns(self.exprs, left, left_keys, "_key{}".format)
        right, rk = computed_columns(self.exprs, right, right_keys, "_key{}".format)
        self._unify_key_types(left, lk, right, rk)
        combined = left.scope.concat(right.scope)
        n_left = len(left.scope)
        condition = None
        if on is not None and rest:
            self._check_boolean(rest, combined, "JOIN/ON")
            condition, _ = self.exprs.compile([exp.and_(*rest)], combined)
        left_node = ExchangeNode.hash_of(left.node, lk)
        right_node = ExchangeNode.hash_of(right.node, rk)
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
        self, c: exp.Expr, left: Scope, right: Scope
    ) -> tuple[exp.Expr, exp.Expr] | None:
        if not isinstance(c, exp.EQ):
            return None
        a, b = c.this, c.expression
        sa, sb = _sides(a, left, right), _sides(b, left, right)
        if sa == "left" and sb == "right":
            return a, b
        if sa == "right" and sb == "left":
            return b, a
        return None

    def _unify_key_types(self, left: Planned, lk: list[int], right: Planned, rk: list[int]) -> None:
        for a, b in zip(lk, rk):
            ta, tb = left.scope.columns[a].type, right.scope.columns[b].type
            if type_category(ta) != type_category(tb):
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"operator does not exist: {ta.name} = {tb.name}",
                    hint="No operator matches the given name and argument types."
                    " You might need to add explicit type casts.",
                )
            if _hash_family(ta) != _hash_family(tb):
                raise unsupported_in_mv(
                    f"a join key comparing {ta.name} with {tb.name} (cast one side)"
                )


def _sides(e: exp.Expr, left: Scope, right: Scope) -> str | None:
    """Which side's columns an expression uses: left, right, both or none."""
    seen = set()
    for col in e.find_all(exp.Column):
        in_left = names_column(col, left)
        in_right = names_column(col, right)
        if in_left and not in_right:
            seen.add("left")
        elif in_right and not in_left:
            seen.add("right")
        else:
            return None
    if len(seen) != 1:
        return None
    return seen.pop()


def _hash_family(t: DataType) -> str:
    """Types whose values hash alike (the vnode hash canonicalizes within a family)."""
    if t.name in ("smallint", "integer", "bigint", "boolean"):
        return "int"
    if t.name in ("real", "double precision", "numeric"):
        return "float"
    if t.name in ("character varying", "text", "jsonb", "bytea"):
        return "bytes"
    return t.name


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
