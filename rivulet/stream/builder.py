"""From plan nodes to executors: the one place that knows which executor runs which node.

Executors for new node kinds register here (``EXECUTOR_BUILDERS``); leaves that read from
outside the fragment (DML inbox, exchange, scan, connector) get their inputs from the
runtime through ``LeafInputs``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rivulet.storage.state_table import StateTable
from rivulet.stream.exchange import Channel
from rivulet.stream.executor import ActorContext, Executor
from rivulet.stream.executors.dml import DmlExecutor, Inbox
from rivulet.stream.executors.filter import FilterExecutor
from rivulet.stream.executors.materialize import MaterializeExecutor
from rivulet.stream.executors.merge import MergeExecutor
from rivulet.stream.executors.project import ProjectExecutor
from rivulet.stream.executors.stream_scan import StreamScanExecutor
from rivulet.stream.plan import (
    DmlNode,
    FilterNode,
    MaterializeNode,
    MergeNode,
    PlanNode,
    ProjectNode,
    StreamScanNode,
)


@dataclass
class LeafInputs:
    """Where an actor's leaves read from, prepared by the runtime."""

    inbox: Inbox | None = None
    # Channels from upstream actors, by upstream fragment id (exchange or scan input).
    channels: dict[int, list[Channel]] = field(default_factory=dict)
    wait_committed: Callable[[int], Awaitable[int]] | None = None


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
    return StreamScanExecutor(
        ctx, node.schema, upstream, node.state_schema, node.columns, leaves.wait_committed,
        snapshot=node.snapshot,
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
        ctx, node.schema, inputs[0], StateTable(node.state_schema), conflict=node.conflict,
        fresh_inserts=node.fresh_inserts,
    )  # fmt: skip
