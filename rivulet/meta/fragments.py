"""Fragments and actors in the meta store (what rw_fragments and rw_actors show)."""

from __future__ import annotations

import numpy as np

from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_store import META_SCHEMA
from rivulet.stream.plan import (
    DmlNode,
    JobGraph,
    MaterializeNode,
    SourceNode,
    StreamScanNode,
)
from rivulet.stream.runtime import RunningJob


def fragment_flags(graph: JobGraph, fragment_index: int) -> list[str]:
    """RisingWave's fragment type flags (MVIEW, SOURCE, DML, STREAM_SCAN...)."""
    flags = []
    nodes = graph.fragments[fragment_index].root.walk()
    if any(isinstance(n, MaterializeNode) for n in nodes):
        flags.append("MVIEW")
    if any(isinstance(n, SourceNode) for n in nodes):
        flags.append("SOURCE")
    if any(isinstance(n, DmlNode) for n in nodes):
        flags.append("DML")
    if any(isinstance(n, StreamScanNode) for n in nodes):
        flags.append("STREAM_SCAN")
    return flags


def explain_fragment(root: object) -> str:
    """The fragment's operators, one per line, indented by depth."""
    from rivulet.stream.plan import PlanNode

    lines: list[str] = []

    def walk(node: PlanNode, depth: int) -> None:
        lines.append("  " * depth + node.describe())
        for child in node.inputs:
            walk(child, depth + 1)

    assert isinstance(root, PlanNode)
    walk(root, 0)
    return "\n".join(lines)


def persist_graph(graph: JobGraph, workers: dict[int, int], change: CatalogChange) -> None:
    """Rows of meta.fragments and meta.actors for a new job."""
    for i, f in enumerate(graph.fragments):
        change.statements.append(
            (
                f"INSERT INTO {META_SCHEMA}.fragments VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    f.fragment_id, graph.job_id, f.distribution.value, fragment_flags(graph, i),
                    [u for u, _, _ in f.upstreams] + [
                        n.upstream_fragment_id for n in f.leaves() if isinstance(n, StreamScanNode)
                    ],
                    f.state_table_ids(), list(f.dist_key), explain_fragment(f.root),
                ],
            )
        )  # fmt: skip
        for index, actor_id in enumerate(f.actor_ids):
            vnodes = (
                np.flatnonzero(f.mapping == index).tolist()
                if f.mapping is not None
                else list(range(256))
            )
            change.statements.append(
                (
                    f"INSERT INTO {META_SCHEMA}.actors VALUES (?, ?, ?, ?, ?)",
                    [actor_id, f.fragment_id, workers[actor_id], len(vnodes), vnodes],
                )
            )


def delete_graph(graph: JobGraph, change: CatalogChange) -> None:
    """The stored fragments and actors of ``graph``'s job."""
    change.statements.append(
        (
            f"DELETE FROM {META_SCHEMA}.actors WHERE fragment_id IN"
            f" (SELECT fragment_id FROM {META_SCHEMA}.fragments WHERE job_id = ?)",
            [graph.job_id],
        )
    )
    change.statements.append(
        (f"DELETE FROM {META_SCHEMA}.fragments WHERE job_id = ?", [graph.job_id])
    )


def replace_graph(jobs: list[RunningJob], change: CatalogChange, *, only: bool = False) -> None:
    """The fragments and actors of rebuilt jobs replace every stored one (``only``: the
    stored ones of these jobs)."""
    if only:
        for job in jobs:
            delete_graph(job.graph, change)
    else:
        change.statements.append((f"DELETE FROM {META_SCHEMA}.actors", []))
        change.statements.append((f"DELETE FROM {META_SCHEMA}.fragments", []))
    for job in jobs:
        persist_graph(job.graph, job.workers or dict.fromkeys(job.actors, 1), change)
