"""From plan nodes to executors: the one place that knows which executor runs which node.

Executors for new node kinds register here (``EXECUTOR_BUILDERS``); leaves that read from
outside the fragment (DML inbox, exchange, scan, connector) get their inputs from the
runtime through ``LeafInputs``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rivulet.common.intervals import interval_micros
from rivulet.stream.connectors import ColumnSpec, open_connector
from rivulet.stream.exchange import Channel
from rivulet.stream.executor import ActorContext, Executor
from rivulet.stream.executors.aggregate.hash_agg import HashAggExecutor
from rivulet.stream.executors.aggregate.simple_agg import SimpleAggExecutor
from rivulet.stream.executors.backfill import BackfillExecutor
from rivulet.stream.executors.dml import DmlExecutor
from rivulet.stream.executors.filter import FilterExecutor
from rivulet.stream.executors.hash_join import HashJoinExecutor
from rivulet.stream.executors.hop_window import HopWindowExecutor
from rivulet.stream.executors.materialize import MaterializeExecutor
from rivulet.stream.executors.merge import MergeExecutor
from rivulet.stream.executors.over_window import OverWindowExecutor
from rivulet.stream.executors.project import ProjectExecutor
from rivulet.stream.executors.source import SourceExecutor
from rivulet.stream.executors.stream_scan import StreamScanExecutor
from rivulet.stream.executors.top_n import TopNExecutor
from rivulet.stream.executors.union import UnionExecutor
from rivulet.stream.inbox import Inbox
from rivulet.stream.plan import (
    REBUILT_SCAN_TYPE,
    DmlNode,
    FilterNode,
    HashAggNode,
    HashJoinNode,
    HopWindowNode,
    MaterializeNode,
    MergeNode,
    OverWindowNode,
    PlanNode,
    ProjectNode,
    SimpleAggNode,
    SourceNode,
    StreamScanNode,
    TopNNode,
    UnionNode,
)


@dataclass
class LeafInputs:
    """Where an actor's leaves read from, prepared by the runtime."""

    inbox: Inbox | None = None
    # Channels from upstream actors, by upstream fragment id (exchange or scan input).
    channels: dict[int, list[Channel]] = field(default_factory=dict)
    wait_committed: Callable[[int], Awaitable[int]] | None = None
    # The job is rebuilt from committed state (restart, recovery, reschedule), not new:
    # backfilling scans resume from their persisted progress.
    rebuilt: bool = False


Builder = Callable[[PlanNode, ActorContext, list[Executor], LeafInputs], Executor]

EXECUTOR_BUILDERS: dict[type[PlanNode], Builder] = {}


def builds(node_type: type[PlanNode]) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        EXECUTOR_BUILDERS[node_type] = fn
        return fn

    return register


def build_executor(node: PlanNode, ctx: ActorContext, leaves: LeafInputs) -> Executor:
    inputs = [build_executor(child, ctx, leaves) for child in node.inputs]
    builder = EXECUTOR_BUILDERS.get(type(node))
    if builder is None:
        raise NotImplementedError(f"no executor for {type(node).__name__}")
    return builder(node, ctx, inputs, leaves)


@builds(DmlNode)
def _dml(node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs) -> Executor:
    assert leaves.inbox is not None
    return DmlExecutor(ctx, node.schema, leaves.inbox)


@builds(MergeNode)
def _merge(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, MergeNode)
    return MergeExecutor(ctx, node.schema, leaves.channels[node.upstream_fragment_id])


@builds(StreamScanNode)
def _scan(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, StreamScanNode) and node.state_schema is not None
    assert leaves.wait_committed is not None
    upstream = MergeExecutor(ctx, node.schema, leaves.channels[node.upstream_fragment_id])
    if node.scan_type in ("upstream_only", REBUILT_SCAN_TYPE) or node.progress_table is None:
        return StreamScanExecutor(ctx, node.schema, upstream, node.columns)
    log = ctx.state_table(node.log_table) if node.log_table is not None else None
    return BackfillExecutor(
        ctx, node.schema, upstream, node.state_schema, node.columns, leaves.wait_committed,
        scan_type=node.scan_type, progress=ctx.state_table(node.progress_table), log=log,
        rebuilt=leaves.rebuilt,
    )  # fmt: skip


@builds(ProjectNode)
def _project(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, ProjectNode)
    return ProjectExecutor(ctx, node.schema, inputs[0], node.exprs)


@builds(FilterNode)
def _filter(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, FilterNode)
    return FilterExecutor(ctx, node.schema, inputs[0], node.condition)


@builds(MaterializeNode)
def _materialize(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, MaterializeNode) and node.state_schema is not None
    return MaterializeExecutor(
        ctx, node.schema, inputs[0], ctx.state_table(node.state_schema), conflict=node.conflict,
        fresh_inserts=node.fresh_inserts,
    )  # fmt: skip


@builds(HashJoinNode)
def _hash_join(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, HashJoinNode) and len(node.state_tables) == 2
    left, right = node.inputs
    return HashJoinExecutor(
        ctx, node.schema, inputs[0], inputs[1], kind=node.kind,
        left_key=node.left_key, right_key=node.right_key,
        left_stream_key=left.stream_key, right_stream_key=right.stream_key,
        left_state=ctx.state_table(node.state_tables[0]), right_state=ctx.state_table(node.state_tables[1]),
        condition=node.condition,
    )  # fmt: skip


@builds(SourceNode)
def _source(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, SourceNode) and node.state_schema is not None
    assert leaves.inbox is not None and leaves.wait_committed is not None
    columns = [ColumnSpec(f.name, f.type) for f in node.schema]
    return SourceExecutor(
        ctx, node.schema, leaves.inbox, open_connector(node.connector, node.options, columns),
        ctx.state_table(node.state_schema), leaves.wait_committed,
    )  # fmt: skip


@builds(TopNNode)
def _top_n(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, TopNNode) and len(node.state_tables) == 1
    if node.with_ties:
        raise NotImplementedError("ORDER BY ... LIMIT ... WITH TIES")
    return TopNExecutor(
        ctx, node.schema, inputs[0], ctx.state_table(node.state_tables[0]),
        node.order, node.limit, node.offset, node.group_key,
        append_only=node.inputs[0].append_only, rank_output=node.rank_output,
        wait_committed=leaves.wait_committed,
    )  # fmt: skip


@builds(OverWindowNode)
def _over_window(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, OverWindowNode) and len(node.state_tables) == 1
    return OverWindowExecutor(
        ctx, node.schema, inputs[0], ctx.state_table(node.state_tables[0]),
        node.partition, node.calls, leaves.wait_committed,
    )  # fmt: skip


@builds(UnionNode)
def _union(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    return UnionExecutor(ctx, node.schema, inputs)


@builds(HopWindowNode)
def _hop_window(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, HopWindowNode)
    return HopWindowExecutor(
        ctx, node.schema, inputs[0], node.time_col,
        interval_micros(node.slide), interval_micros(node.size),
        interval_micros(node.offset) if node.offset else 0,
    )  # fmt: skip


@builds(HashAggNode)
def _hash_agg(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, HashAggNode)
    return HashAggExecutor(ctx, node, inputs[0], leaves.wait_committed)


@builds(SimpleAggNode)
def _simple_agg(
    node: PlanNode, ctx: ActorContext, inputs: list[Executor], leaves: LeafInputs
) -> Executor:
    assert isinstance(node, SimpleAggNode)
    return SimpleAggExecutor(ctx, node, inputs[0], leaves.wait_committed)
