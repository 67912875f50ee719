"""Stream plans: what the planner produces and the runtime builds actors from.

A streaming job is a graph of fragments. A fragment is a tree of plan nodes whose leaves
read from outside the fragment (a table's DML inbox, a connector, an exchange from an
upstream fragment, a scan of an upstream table or MV). Every fragment runs as ``len(actors)``
parallel actors; a hash fragment's actors each own the vnodes ``mapping`` gives them.

Expressions are DuckDB SQL over the node's input columns, which are named ``c0, c1, ...``
by position (``expression.py`` evaluates them a chunk at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from rivulet.common.types import DataType
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.executor import Field, Schema
from rivulet.stream.expression import ExprSet

__all__ = ["DataType", "ExprSet", "Field", "Schema"]


class Distribution(Enum):
    SINGLE = "SINGLE"
    HASH = "HASH"


class ExchangeKind(Enum):
    HASH = "hash"
    SIMPLE = "simple"
    BROADCAST = "broadcast"
    NO_SHUFFLE = "no_shuffle"


@dataclass(eq=False)
class PlanNode:
    """``schema``: output columns. ``stream_key``: output columns that identify a row
    among the node's changes. ``append_only``: the output never deletes or updates."""

    schema: Schema
    stream_key: list[int]
    append_only: bool = False
    inputs: list[PlanNode] = field(default_factory=list)

    def walk(self) -> list[PlanNode]:
        out: list[PlanNode] = [self]
        for child in self.inputs:
            out.extend(child.walk())
        return out

    def describe(self) -> str:
        """One line for EXPLAIN."""
        return type(self).__name__.removesuffix("Node")


# ----------------------------------------------------------------------- leaves
@dataclass(eq=False)
class DmlNode(PlanNode):
    """Statements' writes to a table (its DML inbox)."""

    table_id: int = 0


@dataclass(eq=False)
class MergeNode(PlanNode):
    """Input from an upstream fragment through an exchange."""

    upstream_fragment_id: int = 0

    def describe(self) -> str:
        return f"Merge {{ from: fragment {self.upstream_fragment_id} }}"


# How a scan merges its upstream's history with its changes (ARCHITECTURE.md, "The model"):
# ``arrangement``: per-vnode progress, the scan fragment hash-distributed by the upstream's
# distribution key at the job's own parallelism; ``no_shuffle``: one position per actor,
# chained 1:1 to the upstream's actors; ``snapshot``: a fixed snapshot at the creation
# epoch, later changes logged and replayed after it; ``upstream_only``: no history;
# ``none``: a created job rebuilt (its state holds the past): changes only.
SCAN_TYPES = ("arrangement", "snapshot", "no_shuffle", "upstream_only")
REBUILT_SCAN_TYPE = "none"


@dataclass(eq=False)
class StreamScanNode(PlanNode):
    """A table's or MV's changes, preceded by its history (how: ``scan_type``).
    ``columns`` are the stored columns read, in output order; ``state_schema`` is the
    upstream's state table."""

    table_id: int = 0
    table_name: str = ""
    upstream_fragment_id: int = 0
    columns: list[int] = field(default_factory=list)
    state_schema: StateTableSchema | None = None
    scan_type: str = "arrangement"
    # The scan's own state (internal tables of the job, ids from the fragmenter): per-vnode
    # progress, and for ``snapshot`` the log of changes that arrive during the snapshot.
    progress_table: StateTableSchema | None = None
    log_table: StateTableSchema | None = None

    @property
    def mirrors_upstream(self) -> bool:
        """Whether the scan fragment is chained 1:1 to the upstream's actors (no_shuffle,
        snapshot, upstream_only; any scan over an upstream without distribution key).
        Arrangement scans and those of created jobs (``none``) follow the job's own
        parallelism, hashed by the upstream's distribution key."""
        return self.scan_type in ("no_shuffle", "snapshot", "upstream_only") or not (
            self.state_schema is not None and self.state_schema.dist_key
        )

    def describe(self) -> str:
        # The default type goes unnamed (EXPLAIN output stays what RisingWave users know).
        kind = "" if self.scan_type == "arrangement" else f", scan_type: {self.scan_type}"
        return (
            f"StreamScan {{ table: {self.table_name},"
            f" columns: [{', '.join(self.schema.names)}]{kind} }}"
        )


@dataclass(eq=False)
class SourceNode(PlanNode):
    """A connector (datagen, nexmark) producing append-only rows."""

    source_id: int = 0
    source_name: str = ""
    connector: str = ""
    options: dict[str, str] = field(default_factory=dict)
    # Where the source's offsets are checkpointed.
    state_schema: StateTableSchema | None = None

    def describe(self) -> str:
        return f"Source {{ source: {self.source_name}, connector: {self.connector} }}"


# ------------------------------------------------------------------- operators
@dataclass(eq=False)
class ProjectNode(PlanNode):
    exprs: ExprSet = field(default_factory=lambda: ExprSet([], []))

    def describe(self) -> str:
        return f"Project {{ exprs: [{', '.join(self.exprs.strict)}] }}"


@dataclass(eq=False)
class FilterNode(PlanNode):
    condition: ExprSet = field(default_factory=lambda: ExprSet([], []))

    def describe(self) -> str:
        return f"Filter {{ predicate: {' AND '.join(self.condition.strict)} }}"


@dataclass(frozen=True, slots=True)
class AggCall:
    """An aggregate: ``kind`` (count, count_star, sum, min, max, avg, bool_and, bool_or,
    string_agg, count_distinct, ...) over input columns ``args``; ``distinct``;
    ``filter`` (a column index of a boolean, or None); ``order`` for string_agg."""

    kind: str
    args: tuple[int, ...]
    output_type: DataType
    distinct: bool = False
    filter: int | None = None
    order: tuple[tuple[int, bool], ...] = ()
    delimiter: int | None = None


@dataclass(eq=False)
class HashAggNode(PlanNode):
    """GROUP BY ``group_key``: output columns are the keys then one per aggregate."""

    group_key: list[int] = field(default_factory=list)
    aggs: list[AggCall] = field(default_factory=list)
    state_tables: list[StateTableSchema] = field(default_factory=list)

    def describe(self) -> str:
        aggs = ", ".join(f"{a.kind}({', '.join(f'c{i}' for i in a.args)})" for a in self.aggs)
        keys = ", ".join(f"c{i}" for i in self.group_key)
        return f"HashAgg {{ group_key: [{keys}], aggs: [{aggs}] }}"


@dataclass(eq=False)
class SimpleAggNode(HashAggNode):
    """An aggregate without GROUP BY: always exactly one output row."""

    def describe(self) -> str:
        aggs = ", ".join(f"{a.kind}({', '.join(f'c{i}' for i in a.args)})" for a in self.aggs)
        return f"SimpleAgg {{ aggs: [{aggs}] }}"


class JoinKind(Enum):
    INNER = "inner"
    LEFT = "left"
    RIGHT = "right"
    FULL = "full"


@dataclass(eq=False)
class HashJoinNode(PlanNode):
    """An equi-join of ``inputs[0]`` (left) and ``inputs[1]`` (right). Output: all left
    columns then all right columns; ``condition`` (over that output) filters matches."""

    kind: JoinKind = JoinKind.INNER
    left_key: list[int] = field(default_factory=list)
    right_key: list[int] = field(default_factory=list)
    condition: ExprSet | None = None
    state_tables: list[StateTableSchema] = field(default_factory=list)

    def describe(self) -> str:
        keys = ", ".join(f"c{a} = c{b}" for a, b in zip(self.left_key, self.right_key))
        extra = f", condition: {' AND '.join(self.condition.strict)}" if self.condition else ""
        return f"HashJoin {{ type: {self.kind.value}, on: [{keys}]{extra} }}"


@dataclass(eq=False)
class TopNNode(PlanNode):
    """ORDER BY ``order`` LIMIT ``limit`` OFFSET ``offset`` (per ``group_key`` if any)."""

    order: list[tuple[int, bool, bool]] = field(default_factory=list)  # col, asc, nulls first
    limit: int | None = None
    offset: int = 0
    group_key: list[int] = field(default_factory=list)
    with_ties: bool = False
    # Output each row's 1-based position in its group (row_number) as a last column.
    rank_output: bool = False
    state_tables: list[StateTableSchema] = field(default_factory=list)

    def describe(self) -> str:
        order = ", ".join(f"c{c} {'ASC' if a else 'DESC'}" for c, a, _ in self.order)
        group = ""
        if self.group_key:
            group = f", group_key: [{', '.join(f'c{k}' for k in self.group_key)}]"
        rank = ", output: row_number" if self.rank_output else ""
        return (
            f"TopN {{ order: [{order}], limit: {self.limit}, offset: {self.offset}{group}{rank} }}"
        )


@dataclass(eq=False)
class OverWindowNode(PlanNode):
    """Window functions over partitions of ``partition`` (input columns): output is the
    input's columns then one per call. ``calls`` are DuckDB SQL over the input columns
    (``c0, c1, ...``), each with its OVER clause."""

    partition: list[int] = field(default_factory=list)
    calls: ExprSet = field(default_factory=lambda: ExprSet([], []))
    state_tables: list[StateTableSchema] = field(default_factory=list)

    def describe(self) -> str:
        part = ", ".join(f"c{k}" for k in self.partition)
        return f"OverWindow {{ partition: [{part}], calls: [{', '.join(self.calls.strict)}] }}"


@dataclass(eq=False)
class UnionNode(PlanNode):
    """UNION ALL of the inputs (same schema)."""


@dataclass(eq=False)
class HopWindowNode(PlanNode):
    """HOP(time_col, slide, size [, offset]): each row once per window containing it;
    appends window_start and window_end columns (intervals as DuckDB SQL literals; no
    offset: "")."""

    time_col: int = 0
    slide: str = ""
    size: str = ""
    offset: str = ""

    def describe(self) -> str:
        offset = f", offset: {self.offset}" if self.offset else ""
        return (
            f"HopWindow {{ time_col: c{self.time_col}, slide: {self.slide},"
            f" size: {self.size}{offset} }}"
        )


@dataclass(eq=False)
class MaterializeNode(PlanNode):
    """Writes its input into a table's or MV's state table. ``conflict``: ``overwrite``
    (a table: an insert replaces the row with its key) or ``none`` (an MV: the input is
    already a consistent change stream keyed by ``pk``)."""

    table_id: int = 0
    table_name: str = ""
    conflict: str = "none"
    state_schema: StateTableSchema | None = None
    # A table keyed by generated row ids: a batch of inserts cannot conflict.
    fresh_inserts: bool = False

    def describe(self) -> str:
        return f"Materialize {{ table: {self.table_name} }}"


@dataclass(eq=False)
class ExchangeNode(PlanNode):
    """Where the planner cuts fragments: rows are redistributed (``kind``) by ``key``
    (input columns, for HASH). Never built into an executor: the fragmenter turns it into
    a fragment boundary (a dispatcher upstream, a MergeNode downstream)."""

    kind: ExchangeKind = None  # type: ignore[assignment]
    key: list[int] = field(default_factory=list)

    @classmethod
    def hash_of(
        cls, node: PlanNode, key: list[int], *, stream_key: list[int] | None = None
    ) -> ExchangeNode:
        """``node``'s rows, hashed by ``key`` to the next fragment's actors; the rows keep
        ``node``'s schema and, unless told otherwise, its stream key."""
        keep = node.stream_key if stream_key is None else stream_key
        return cls(node.schema, keep, node.append_only, [node], kind=ExchangeKind.HASH, key=key)

    @classmethod
    def single_of(cls, node: PlanNode, *, stream_key: list[int] | None = None) -> ExchangeNode:
        """``node``'s rows, gathered by one actor (a singleton fragment)."""
        keep = node.stream_key if stream_key is None else stream_key
        return cls(node.schema, keep, node.append_only, [node], kind=ExchangeKind.SIMPLE, key=[])

    def describe(self) -> str:
        keys = ", ".join(f"c{k}" for k in self.key)
        return f"Exchange {{ kind: {self.kind.value}, key: [{keys}] }}"


# ------------------------------------------------------------------ fragments
@dataclass(eq=False)
class Fragment:
    """A piece of a job between exchanges, run by ``len(actor_ids)`` actors.
    ``dist_key``: the input columns rows are routed by (HASH fragments)."""

    fragment_id: int
    job_id: int
    root: PlanNode
    distribution: Distribution
    dist_key: list[int] = field(default_factory=list)
    actor_ids: list[int] = field(default_factory=list)
    mapping: np.ndarray | None = None  # vnode -> actor index
    # Upstream fragments feeding this one: (fragment id, exchange kind, key in the
    # upstream's output columns for HASH exchanges).
    upstreams: list[tuple[int, ExchangeKind, list[int]]] = field(default_factory=list)

    def leaves(self) -> list[PlanNode]:
        return [n for n in self.root.walk() if not n.inputs]

    def state_table_ids(self) -> list[int]:
        ids = []
        for node in self.root.walk():
            for attr in ("state_schema",):
                s = getattr(node, attr, None)
                if isinstance(s, StateTableSchema) and not isinstance(node, StreamScanNode):
                    ids.append(s.table_id)
            if isinstance(node, StreamScanNode):
                # Its own tables (the upstream's ``state_schema`` belongs to the upstream).
                ids += [t.table_id for t in (node.progress_table, node.log_table) if t]
            for s in getattr(node, "state_tables", []):
                ids.append(s.table_id)
        return ids


@dataclass(eq=False)
class JobGraph:
    """The fragments of one streaming job, upstream first."""

    job_id: int
    fragments: list[Fragment]

    def fragment(self, fragment_id: int) -> Fragment:
        for f in self.fragments:
            if f.fragment_id == fragment_id:
                return f
        raise KeyError(fragment_id)
