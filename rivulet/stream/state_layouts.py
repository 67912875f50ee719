"""The layouts of streaming jobs' state tables: which columns an executor keeps and how
they are keyed and distributed. The planner assigns them (the fragmenter gives them ids)
and the executors read and write them, so both take them from here."""

from __future__ import annotations

import pyarrow as pa

from rivulet.common.types import BIGINT, DOUBLE, DataType, arrow_type_of
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.executor import Schema
from rivulet.stream.plan import AggCall, PlanNode

DISTINCT_AGG_KINDS = ("count_distinct", "sum_distinct", "avg_distinct", "string_agg_distinct")
# An aggregation result table's count of input rows per group.
ROW_COUNT = "_row_count"


# ------------------------------------------------------------------ aggregation
def uses_value_table(call: AggCall, append_only: bool) -> bool:
    """Whether the aggregate keeps its groups' value multisets (see the module doc)."""
    if call.kind in DISTINCT_AGG_KINDS:
        return True
    return call.kind in ("min", "max", "string_agg") and not append_only


def _sum_type(arg: DataType) -> DataType:
    """The type of an exact running sum of ``arg`` (DuckDB's sum type)."""
    t = arrow_type_of(arg)
    if pa.types.is_integer(t):
        return DataType.from_duckdb("HUGEINT")
    if pa.types.is_decimal(t):
        return DataType.numeric(38, t.scale)
    return DOUBLE


def _state_columns(i: int, call: AggCall, input_schema: Schema) -> list[tuple[str, DataType]]:
    kind = call.kind
    if kind in ("count_star", "count", "count_distinct"):
        return [(f"a{i}", BIGINT)]
    if kind == "sum":
        return [(f"a{i}", call.output_type), (f"a{i}_n", BIGINT)]
    if kind == "avg":
        return [(f"a{i}_sum", _sum_type(input_schema[call.args[0]].type)), (f"a{i}_n", BIGINT)]
    if kind in ("bool_and", "bool_or"):
        return [(f"a{i}_t", BIGINT), (f"a{i}_f", BIGINT)]
    # min, max, string_agg and the distinct kinds keep their current result.
    return [(f"a{i}", call.output_type)]


def agg_state_schemas(
    input_schema: Schema, group_key: list[int], aggs: list[AggCall], append_only: bool
) -> list[StateTableSchema]:
    """The result table (group keys, each aggregate's state, ``_row_count``; keyed and
    distributed by the group keys), then one value table per aggregate that needs one
    (``uses_value_table``), in aggregate order: ``(group keys, v) -> _count``."""
    keys = [(f"g{i}", input_schema[k].type) for i, k in enumerate(group_key)]
    cols = list(keys)
    for i, call in enumerate(aggs):
        cols += _state_columns(i, call, input_schema)
    cols.append((ROW_COUNT, BIGINT))
    key = tuple(range(len(keys)))
    tables = [StateTableSchema(0, tuple(cols), key, key)]
    for call in aggs:
        if uses_value_table(call, append_only):
            vcols = [*keys, ("v", input_schema[call.args[0]].type), ("_count", BIGINT)]
            tables.append(StateTableSchema(0, tuple(vcols), (*key, len(keys)), key))
    return tables


# ----------------------------------------------------------------------- joins
def join_state_schema(
    side: PlanNode, key: list[int], degree: bool = False, columns: list[int] | None = None
) -> StateTableSchema:
    """A join side's rows keyed by (join key, stream key); id assigned by the fragmenter.
    ``degree``: the side an outer join preserves also keeps, per row, how many rows of the
    other side match it (``_degree``), to know when its NULL-padded row comes and goes.
    ``columns``: the input columns kept (default all; the key and stream key always); each
    is stored as ``c<its input index>``, which tells the executor which ones it has."""
    kept = sorted(set(range(len(side.schema)) if columns is None else columns))
    kept = sorted(set(kept) | set(key) | set(side.stream_key))
    cols = tuple((f"c{i}", side.schema[i].type) for i in kept)
    if degree:
        cols += (("_degree", BIGINT),)
    position = {c: p for p, c in enumerate(kept)}
    pk = tuple(position[i] for i in dict.fromkeys([*key, *side.stream_key]))
    return StateTableSchema(0, cols, pk, tuple(position[i] for i in key))


# ------------------------------------------------------- Top-N, scans, sources
def topn_state_schema(node: PlanNode) -> StateTableSchema:
    cols = tuple((f"c{i}", f.type) for i, f in enumerate(node.schema))
    return StateTableSchema(0, cols, tuple(node.stream_key), ())


def progress_state_schema(upstream: StateTableSchema) -> StateTableSchema:
    """A scan's per-vnode backfill progress: the executor's layout."""
    from rivulet.stream.executors.backfill import progress_state_schema as layout

    return layout(upstream)


def source_state_schema() -> StateTableSchema:
    """Per-split offsets of a source (split id -> offset): the connectors' layout."""
    from rivulet.stream.connectors import offsets_state_schema

    return offsets_state_schema()
