"""Planning streaming jobs: a materialized view's query into a stream plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.meta.catalog import ColumnCatalog, TableCatalog, check_column_names
from rivulet.meta.job_manager import PlannedMaterializedView
from rivulet.sql.binder import Binder
from rivulet.sql.planner.join import prune_join_columns
from rivulet.sql.planner.planner import StreamPlanner
from rivulet.sql.planner.scope import Planned
from rivulet.stream.plan import (
    ExchangeKind,
    ExchangeNode,
    MaterializeNode,
    PlanNode,
    StreamScanNode,
)

if TYPE_CHECKING:
    import duckdb

__all__ = ["plan_materialized_view"]


def plan_materialized_view(
    binder: Binder,
    cursor: Callable[[], duckdb.DuckDBPyConnection],
    schema: str,
    name: str,
    query: exp.Query,
    definition: str,
    *,
    policy: str,
) -> PlannedMaterializedView:
    """The catalog entry (id 0) and stream plan of ``CREATE MATERIALIZED VIEW name AS
    query``; ``binder`` resolves names, ``cursor`` opens the store (to type expressions and check casts),
    ``policy`` is the session's ``streaming_parallelism``."""
    planner = StreamPlanner(binder, cursor)
    planned = planner.plan_query(query.copy())
    prune_join_columns(planned.node)
    columns = [ColumnCatalog(c.name, c.type, hidden=c.hidden) for c in planned.scope.columns]
    check_column_names(
        [c.name for c in columns if not c.hidden],
        f'materialized view "{name}"',
        hidden=tuple(c.name for c in columns if c.hidden),
    )
    pk = list(planned.node.stream_key)
    root, dist = _distributed(planned, pk)
    table = TableCatalog(
        id=0,
        schema=schema,
        name=name,
        columns=tuple(columns),
        pk=tuple(pk),
        dist_key=tuple(dist),
        definition=definition,
        kind="materialized view",
        dependencies=tuple(dict.fromkeys(planner.dependencies)),
        append_only=planned.node.append_only,
        parallelism="adaptive" if policy in ("default", "adaptive") else policy,
    )
    node = MaterializeNode(
        root.schema, pk, root.append_only, [root], table_name=name, conflict="none"
    )
    return PlannedMaterializedView(table, node)


def _distributed(planned: Planned, pk: list[int]) -> tuple[PlanNode, list[int]]:
    """The node to materialize and the MV's distribution key: the input's when known,
    any key in a single-actor fragment, else rows are re-hashed by the MV's key."""
    if planned.dist is not None:
        return planned.node, planned.dist
    if _fragment_is_single(planned.node):
        return planned.node, pk
    node = planned.node
    return ExchangeNode.hash_of(node, pk), pk


def _fragment_is_single(node: PlanNode) -> bool:
    """Whether ``node`` runs in a fragment fed only by simple (single-actor) exchanges."""
    if isinstance(node, ExchangeNode):
        return node.kind is ExchangeKind.SIMPLE
    if isinstance(node, StreamScanNode):
        return False
    if not node.inputs:
        return False
    return all(_fragment_is_single(c) for c in node.inputs)
