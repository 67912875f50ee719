"""From a planned stream (a tree with exchanges) to a job graph of fragments and actors.

The tree is cut at every ``ExchangeNode``: the exchange's input becomes an upstream
fragment, the exchange a ``MergeNode`` in the downstream one. Then each fragment gets its
distribution and actors:

* a fragment that scans an upstream table or MV mirrors the upstream's materialize
  fragment (same actors count, same vnode mapping: a no-shuffle edge);
* a fragment fed by hash exchanges (or holding a table's DML or a source) is HASH over
  the job's parallelism, with an even vnode mapping;
* a fragment fed by simple exchanges (global aggregation, top-N) is SINGLE.

Ids of fragments, actors and internal state tables come from the catalog's counters and
are persisted with the job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rivulet.meta.catalog import Catalog, CatalogChange
from rivulet.meta.cluster import Cluster
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.exchange import even_mapping
from rivulet.stream.plan import (
    Distribution,
    DmlNode,
    ExchangeKind,
    ExchangeNode,
    Fragment,
    JobGraph,
    MaterializeNode,
    MergeNode,
    PlanNode,
    SourceNode,
    StreamScanNode,
)
from rivulet.stream.runtime import StreamRuntime


@dataclass
class FragmentedJob:
    graph: JobGraph
    # Worker of every actor.
    workers: dict[int, int]
    # Internal state tables to create with the job (the job's own table comes separately).
    internal_tables: list[StateTableSchema]


def fragment_job(
    root: PlanNode,
    job_id: int,
    parallelism: int,
    catalog: Catalog,
    cluster: Cluster,
    runtime: StreamRuntime,
    change: CatalogChange,
    reuse_internal: tuple[int, ...] | None = None,
    fragment_ids: list[int] | None = None,
) -> FragmentedJob:
    """``reuse_internal``: ids of the internal state tables of a job being rebuilt (in
    plan order), instead of allocating new ones; ``fragment_ids``: its fragments' ids (a
    fragment keeps its id for the job's life: a rebuild changes only the actors)."""
    pieces: list[tuple[PlanNode, list[tuple[int, ExchangeKind, list[int]]]]] = []

    def cut(node: PlanNode) -> PlanNode:
        """``node`` with its exchanges replaced by merges; registers upstream pieces."""
        new_inputs = []
        for child in node.inputs:
            if isinstance(child, ExchangeNode):
                upstream_root = cut(child.inputs[0])
                pieces.append((upstream_root, []))
                upstream_index = len(pieces) - 1
                merge = MergeNode(child.schema, child.stream_key, child.append_only)
                merge.upstream_fragment_id = -(upstream_index + 1)  # fixed up below
                merge_edges.setdefault(id(merge), (upstream_index, child.kind, child.key))
                new_inputs.append(merge)
            else:
                new_inputs.append(cut(child))
        node.inputs = new_inputs
        return node

    merge_edges: dict[int, tuple[int, ExchangeKind, list[int]]] = {}
    top = cut(root)
    pieces.append((top, []))

    if fragment_ids is not None and len(fragment_ids) == len(pieces):
        ids = list(fragment_ids)
    else:
        first = catalog.allocate("next_fragment_id", change, 1, len(pieces))
        ids = list(range(first, first + len(pieces)))
    fragments: list[Fragment] = []
    for fragment_id, (piece_root, _) in zip(ids, pieces):
        fragments.append(Fragment(fragment_id, job_id, piece_root, Distribution.HASH))
    # Resolve merges to fragment ids and record each fragment's upstreams.
    for f in fragments:
        for node in f.root.walk():
            if isinstance(node, MergeNode) and id(node) in merge_edges:
                index, kind, key = merge_edges[id(node)]
                node.upstream_fragment_id = fragments[index].fragment_id
                f.upstreams.append((fragments[index].fragment_id, kind, key))
    # Distribution, parallelism and mapping, upstream fragments first.
    workers: dict[int, int] = {}
    for f in fragments:
        leaves = f.leaves()
        scans = [n for n in leaves if isinstance(n, StreamScanNode)]
        if scans:
            upstream = _materialize_fragment(runtime, scans[0].table_id)
            for s in scans:
                s.upstream_fragment_id = upstream.fragment_id
            if scans[0].mirrors_upstream:
                n = len(upstream.actor_ids)
                f.distribution = upstream.distribution
                f.mapping = upstream.mapping
                f.dist_key = list(scans[0].stream_key) if upstream.mapping is not None else []
            else:
                # Arrangement: the job's own parallelism, rows hashed to it by the
                # upstream's distribution key (the upstream's vnodes, so its state).
                n = parallelism
                f.distribution = Distribution.HASH
                f.mapping = even_mapping(n)
                f.dist_key = _scan_dist_key(scans[0])
        elif f.upstreams and all(kind is ExchangeKind.SIMPLE for _, kind, _ in f.upstreams):
            n = 1
            f.distribution = Distribution.SINGLE
            f.mapping = None
        else:
            n = parallelism
            f.distribution = Distribution.HASH
            f.mapping = even_mapping(n)
            hash_keys = [key for _, kind, key in f.upstreams if kind is ExchangeKind.HASH]
            dml = [n_ for n_ in leaves if isinstance(n_, DmlNode)]
            if hash_keys:
                f.dist_key = list(hash_keys[0])
            elif dml:
                f.dist_key = list(_materialize(f).state_schema.dist_key)  # type: ignore[union-attr]
            elif any(isinstance(x, SourceNode) for x in leaves):
                f.dist_key = []
        first_actor = catalog.allocate("next_actor_id", change, 1, n)
        f.actor_ids = list(range(first_actor, first_actor + n))
        for actor_id, worker in zip(f.actor_ids, cluster.place(n)):
            workers[actor_id] = worker
    # Internal state tables get ids of their own (or their old ones, when rebuilt).
    reused = list(reuse_internal or ())
    internal: list[StateTableSchema] = []

    def internal_id() -> int:
        return reused.pop(0) if reused else catalog.allocate_id(change)

    scans: list[StreamScanNode] = []
    for f in fragments:
        for node in f.root.walk():
            if isinstance(node, StreamScanNode):
                scans.append(node)
            tables = getattr(node, "state_tables", None)
            if tables:
                assigned = []
                for schema in tables:
                    if schema.table_id == 0:
                        schema = replace(schema, table_id=internal_id())
                        internal.append(schema)
                    assigned.append(schema)
                node.state_tables = assigned  # type: ignore[attr-defined]
            source_state = getattr(node, "state_schema", None)
            if (
                isinstance(node, SourceNode)
                and isinstance(source_state, StateTableSchema)
                and source_state.table_id == 0
            ):
                node.state_schema = replace(source_state, table_id=internal_id())
                internal.append(node.state_schema)
    # Scans' progress and log tables come last: jobs persisted before scans had them
    # find their other tables at the same positions (and, rebuilt as ``none``, need none).
    for scan in scans:
        for attr in ("progress_table", "log_table"):
            schema = getattr(scan, attr)
            if schema is None or schema.table_id != 0:
                continue
            if reuse_internal is not None and not reused:
                setattr(scan, attr, None)  # a rebuild never allocates
                continue
            schema = replace(schema, table_id=internal_id())
            setattr(scan, attr, schema)
            internal.append(schema)
    return FragmentedJob(JobGraph(job_id, fragments), workers, internal)


def _scan_dist_key(scan: StreamScanNode) -> list[int]:
    """The scan's output columns that hold the upstream's distribution key."""
    assert scan.state_schema is not None
    where = {c: i for i, c in enumerate(scan.columns)}
    key = [where.get(c) for c in scan.state_schema.dist_key]
    return [k for k in key if k is not None] if None not in key else []


def _materialize(fragment: Fragment) -> MaterializeNode:
    for node in fragment.root.walk():
        if isinstance(node, MaterializeNode):
            return node
    raise ValueError(f"fragment {fragment.fragment_id} materializes nothing")


def _materialize_fragment(runtime: StreamRuntime, table_id: int) -> Fragment:
    job = runtime.jobs.get(table_id)
    if job is None:
        raise ValueError(f"relation {table_id} has no running job")
    for f in job.graph.fragments:
        if any(isinstance(n, MaterializeNode) for n in f.root.walk()):
            return f
    raise ValueError(f"relation {table_id} has no materialize fragment")
