"""The layouts of streaming jobs' state tables: which columns an executor keeps and how
they are keyed and distributed. The planner assigns them (the fragmenter gives them ids)
and the executors read and write them, so both take them from here."""

from __future__ import annotations

import pyarrow as pa

from rivulet.common.types import BIGINT, BOOLEAN, DOUBLE, SMALLINT, DataType, arrow_type_of
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.executor import Schema
from rivulet.stream.plan import REBUILT_SCAN_TYPE, SCAN_TYPES, AggCall, PlanNode, StreamScanNode

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
# A scan's progress columns after the last key read, and its log's columns before the
# logged row (the backfill executor reads them by these names).
PROGRESS_DONE = "done"
PROGRESS_ROW_COUNT = "row_count"
LOG_SEQ = "seq"
LOG_OP = "op"


def topn_state_schema(node: PlanNode) -> StateTableSchema:
    cols = tuple((f"c{i}", f.type) for i, f in enumerate(node.schema))
    return StateTableSchema(0, cols, tuple(node.stream_key), ())


def progress_state_schema(upstream: StateTableSchema) -> StateTableSchema:
    """Per-vnode progress over ``upstream``: (_vnode; last pk read as ``pk0..``, done,
    row_count). Keyed by the vnode alone; id assigned by the fragmenter."""
    cols = tuple((f"pk{i}", upstream.columns[c][1]) for i, c in enumerate(upstream.pk))
    cols += ((PROGRESS_DONE, BOOLEAN), (PROGRESS_ROW_COUNT, BIGINT))
    return StateTableSchema(0, cols, (), ())


def log_state_schema(upstream: StateTableSchema) -> StateTableSchema:
    """A snapshot scan's log of upstream changes: (_vnode, seq; op, the upstream's stored
    columns as ``c0..``), keyed by (vnode, seq), replayed in seq order."""
    cols = ((LOG_SEQ, BIGINT), (LOG_OP, SMALLINT))
    cols += tuple((f"c{i}", t) for i, (_, t) in enumerate(upstream.columns))
    return StateTableSchema(0, cols, (0,), ())


def apply_scan_type(root: PlanNode, scan_type: str, *, created: bool = False) -> None:
    """Give every scan of a job's plan ``scan_type`` and the state tables it needs (ids 0:
    the fragmenter assigns them): progress for all, a log for ``snapshot``. ``created``:
    the job is rebuilt after its backfill completed - its scans keep the tables (a rebuilt
    job's internal tables must stay the same) but only forward changes (``none``)."""
    assert scan_type in SCAN_TYPES, scan_type
    for node in root.walk():
        if isinstance(node, StreamScanNode):
            assert node.state_schema is not None
            node.scan_type = REBUILT_SCAN_TYPE if created else scan_type
            if node.progress_table is None:
                node.progress_table = progress_state_schema(node.state_schema)
            if scan_type == "snapshot":
                node.log_table = log_state_schema(node.state_schema)
            else:
                node.log_table = None


def source_state_schema() -> StateTableSchema:
    """Per-split offsets of a source (split id -> offset): the connectors' layout."""
    from rivulet.stream.connectors import offsets_state_schema

    return offsets_state_schema()
