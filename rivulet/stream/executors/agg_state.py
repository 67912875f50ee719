"""Aggregation state shared by HashAgg and SimpleAgg: layouts, accumulators, group index.

An aggregation keeps, per group, the *intermediate* state of every aggregate (counts,
128-bit sums as 32-bit limbs, current min/max, true/false counts...) plus the group's row
count. It lives in memory as columns indexed by a *slot* per group (numpy arrays, polars
series), in front of the result state table (one row per group: keys, state, row count).

Aggregates that cannot be kept from a running summary - DISTINCT ones always, and min,
max and string_agg when the input may delete rows - also keep a *value table* per
aggregate: ``(group keys, value) -> count``, the multiset of the group's values; their
result is recomputed from it for the groups an epoch touched. An append-only input never
needs that for min/max/string_agg, so its state holds aggregates only, never input rows.

The work per chunk is a handful of vectorized calls: one polars group-by computes every
aggregate's signed partial per group, the group index maps the chunk's groups to slots
(a sorted array of 64-bit key hashes, verified against the stored keys), and numpy merges
the partials into the slots. Outputs and state rows are produced once per epoch, at the
barrier, for the groups the epoch changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.common.types import BIGINT, DOUBLE, DataType, arrow_type_of
from rivulet.common.vnode import VNODE_COUNT, hash_columns
from rivulet.storage.state_table import StateTable, StateTableSchema, quote_ident
from rivulet.stream.executor import Schema
from rivulet.stream.plan import AggCall

__all__ = ["AggCore", "agg_state_schemas", "uses_value_table"]

_M32 = np.int64(0xFFFFFFFF)
_S32 = np.int64(32)
_DISTINCT_KINDS = ("count_distinct", "sum_distinct", "avg_distinct", "string_agg_distinct")
_names = itertools.count()
# A value aggregate sums up its epoch's deltas once they exceed this many rows.
_PENDING_ROWS = 1 << 20
ROW_COUNT = "_row_count"


# ------------------------------------------------------------------- layouts
def uses_value_table(call: AggCall, append_only: bool) -> bool:
    """Whether the aggregate keeps its groups' value multisets (see the module doc)."""
    if call.kind in _DISTINCT_KINDS:
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


# ------------------------------------------------------- arrow <-> polars
def _combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


_INTERVAL_STRUCT = pa.struct(
    [pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("nanos", pa.int64())]
)
_INTERVAL_DTYPE = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def to_polars(arr: pa.Array | pa.ChunkedArray, name: str) -> pl.Series:
    """A column as a polars series (intervals, which polars lacks, as structs)."""
    if arr.type == pa.month_day_nano_interval():
        a = _combine(arr)
        f = np.frombuffer(a.buffers()[1], dtype=_INTERVAL_DTYPE)[a.offset : a.offset + len(a)]
        arr = pa.StructArray.from_arrays(
            [pa.array(f["months"]), pa.array(f["days"]), pa.array(f["nanos"])],
            fields=list(_INTERVAL_STRUCT),
            mask=a.is_null(),
        )
    s = pl.from_arrow(arr)
    assert isinstance(s, pl.Series)
    return s.alias(name)


def to_arrow(s: pl.Series, t: pa.DataType) -> pa.Array:
    """A polars series as an Arrow array of type ``t`` (the inverse of ``to_polars``)."""
    arr = _combine(s.to_arrow())
    if t == pa.month_day_nano_interval():
        n = len(arr)
        f = np.zeros(n, dtype=_INTERVAL_DTYPE)
        if n:
            f["months"] = arr.field("months").fill_null(0).to_numpy(zero_copy_only=False)
            f["days"] = arr.field("days").fill_null(0).to_numpy(zero_copy_only=False)
            f["nanos"] = arr.field("nanos").fill_null(0).to_numpy(zero_copy_only=False)
        validity = None
        if arr.null_count:
            validity = pa.py_buffer(
                np.packbits(arr.is_valid().to_numpy(zero_copy_only=False), bitorder="little")
            )
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(f.tobytes())])
    if arr.type != t:
        arr = arr.cast(t)
    return arr


def _bool_np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def _valid_np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


# ------------------------------------------------------------ 128-bit sums
def _limbs(arr: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """An integer or decimal column as 32-bit limbs (int64; the top one signed) whose
    weighted sum is the value (unscaled for decimals). NULLs give garbage: mask them."""
    t = arr.type
    if pa.types.is_decimal(t):
        a = _combine(arr)
        if not pa.types.is_decimal128(t):
            a = a.cast(pa.decimal128(38, t.scale))
        raw = np.frombuffer(a.buffers()[1], dtype=np.int64)[2 * a.offset : 2 * (a.offset + len(a))]
        lo, hi = raw[0::2], raw[1::2]
        return [lo & _M32, (lo >> _S32) & _M32, hi & _M32, hi >> _S32]
    if arr.null_count:
        arr = pc.fill_null(arr, 0)
    x = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)
    if t.bit_width < 64:
        return [x]
    return [x & _M32, x >> _S32]


def _normalize(limbs: list[np.ndarray]) -> None:
    """Carry limbs 0-2 into [0, 2^32), in place (the value stays the same)."""
    for k in range(3):
        carry = limbs[k] >> _S32
        limbs[k] &= _M32
        limbs[k + 1] += carry


# Limbs of a running sum are carried once this many rows were added (each row adds less
# than 2^32 to a limb, so no limb can reach 2^63 in between).
_NORMALIZE_ROWS = 1 << 29


def _limbs_to_decimal(limbs: list[np.ndarray], valid: np.ndarray, scale: int) -> pa.Array:
    n = len(valid)
    limbs = [np.array(limb, dtype=np.int64) for limb in limbs]
    _normalize(limbs)
    lo = limbs[0].astype(np.uint64) | (limbs[1].astype(np.uint64) << np.uint64(32))
    hi = (limbs[3] << _S32) | limbs[2]
    data = np.empty((n, 2), dtype=np.int64)
    data[:, 0] = lo.view(np.int64)
    data[:, 1] = hi
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, scale), n, [validity, pa.py_buffer(data)])


def _limbs_to_float(limbs: list[np.ndarray]) -> np.ndarray:
    f = limbs[3].astype(np.float64)
    for k in (2, 1, 0):
        f = f * 4294967296.0 + limbs[k].astype(np.float64)
    return f


def _with_validity(values: np.ndarray, valid: np.ndarray, t: pa.DataType | None) -> pa.Array:
    return pa.array(values, mask=~valid, type=t)


# ------------------------------------------------------------------ chunks
@dataclass
class ChunkContext:
    """One input chunk as the accumulators see it: columns, signs, per-call masks, and
    the columns they add for the group-by (``extra``)."""

    data: pa.Table
    sign: np.ndarray | None  # int64 +1/-1 per row; None when every row inserts
    extra: dict[str, pl.Series | np.ndarray] = field(default_factory=dict)
    _valid: dict[tuple[int | None, int | None], np.ndarray | None] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    def valid(self, call: AggCall) -> np.ndarray | None:
        """Rows that count for ``call``: its FILTER holds and its argument is not NULL
        (None: every row)."""
        arg = call.args[0] if call.args and call.kind != "count_star" else None
        key = (call.filter, arg)
        if key not in self._valid:
            mask = None
            if call.filter is not None:
                mask = _bool_np(self.data.column(call.filter))
            if arg is not None:
                nn = _valid_np(self.data.column(arg))
                if nn is not None:
                    mask = nn if mask is None else mask & nn
            self._valid[key] = mask
        return self._valid[key]

    def weight(self, call: AggCall) -> np.ndarray | None:
        """Per row: +1/-1 for rows that count, 0 for the others (None: all +1)."""
        mask = self.valid(call)
        if mask is None:
            return self.sign
        if self.sign is None:
            return mask.astype(np.int64)
        return np.where(mask, self.sign, 0)

    def delimiter(self, call: AggCall, default: str) -> str:
        if call.delimiter is None:
            return default
        col = self.data.column(call.delimiter).drop_null()
        return str(col[0].as_py()) if len(col) else default


def _weighted(values: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    return values if w is None else values * w


def _count_expr(name: str, w: np.ndarray | None, ctx: ChunkContext) -> pl.Expr:
    if w is None:
        return pl.len().cast(pl.Int64).alias(name)
    ctx.extra[name] = w
    return pl.col(name).sum().alias(name)


# ------------------------------------------------------------ accumulators
class Acc:
    """One aggregate's per-slot state. ``prepare`` adds its partial's columns and
    expressions to the chunk's group-by; ``merge`` folds the partials into slots."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        self.i = index
        self.call = call
        self.out_type = arrow_type_of(call.output_type)
        self.input_schema = input_schema

    def grow(self, capacity: int) -> None:
        raise NotImplementedError

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        return []

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        pass

    def gather(self, slots: np.ndarray) -> dict[str, object]:
        raise NotImplementedError

    def output(self, state: dict[str, object]) -> pa.Array:
        raise NotImplementedError

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        """The state's columns in the result table (``_state_columns`` order)."""
        raise NotImplementedError

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        """Set ``slots`` from result-table rows (columns named as ``_state_columns``)."""
        raise NotImplementedError


class _NumpyAcc(Acc):
    """State as numpy arrays (``_arrays`` names them), grown by doubling."""

    _arrays: tuple[tuple[str, type], ...] = ()

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        super().__init__(index, call, input_schema)
        self.st: dict[str, np.ndarray] = {n: np.zeros(0, dtype=d) for n, d in self._arrays}

    def grow(self, capacity: int) -> None:
        for name, arr in self.st.items():
            if len(arr) < capacity:
                new = np.zeros(capacity, dtype=arr.dtype)
                new[: len(arr)] = arr
                self.st[name] = new

    def gather(self, slots: np.ndarray) -> dict[str, object]:
        return {name: arr[slots] for name, arr in self.st.items()}


class CountAcc(_NumpyAcc):
    _arrays = (("n", np.int64),)

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        return [_count_expr(f"_p{self.i}", ctx.weight(self.call), ctx)]

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        self.st["n"][slots] += partial[f"_p{self.i}"].to_numpy()

    def output(self, state: dict[str, object]) -> pa.Array:
        return pa.array(state["n"], type=pa.int64())

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self.output(state)]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        self.st["n"][slots] = rows.column(f"a{self.i}").fill_null(0).to_numpy()


class SumAcc(_NumpyAcc):
    """sum and avg: an exact 128-bit sum (four 32-bit limbs) of integers and decimals, a
    float64 sum of floats, and the count of values summed (NULL when it is 0)."""

    _arrays = (
        ("l0", np.int64), ("l1", np.int64), ("l2", np.int64), ("l3", np.int64),
        ("f", np.float64), ("n", np.int64),
    )  # fmt: skip

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        super().__init__(index, call, input_schema)
        arg_type = arrow_type_of(input_schema[call.args[0]].type)
        self.exact = pa.types.is_integer(arg_type) or pa.types.is_decimal(arg_type)
        self.scale = arg_type.scale if pa.types.is_decimal(arg_type) else 0
        self.avg = call.kind == "avg"
        self.sum_name = f"a{index}_sum" if self.avg else f"a{index}"
        self.nlimbs = 0
        self.rows_since_carry = 0

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        w = ctx.weight(self.call)
        col = ctx.data.column(self.call.args[0])
        exprs = [_count_expr(f"_p{self.i}_n", w, ctx)]
        if self.exact:
            limbs = _limbs(col)
            self.nlimbs = len(limbs)
            self.rows_since_carry += ctx.num_rows
            mask = ctx.valid(self.call)
            for k, limb in enumerate(limbs):
                if mask is not None and w is None:
                    limb = np.where(mask, limb, 0)
                name = f"_p{self.i}_l{k}"
                ctx.extra[name] = _weighted(limb, w)
                exprs.append(pl.col(name).sum().alias(name))
        else:
            x = np.asarray(
                pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False),
                dtype=np.float64,
            )
            mask = ctx.valid(self.call)
            if mask is not None:
                x = np.where(mask, x, 0.0)
            if ctx.sign is not None:
                x = x * ctx.sign
            ctx.extra[f"_p{self.i}_f"] = x
            exprs.append(pl.col(f"_p{self.i}_f").sum().alias(f"_p{self.i}_f"))
        return exprs

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        st = self.st
        st["n"][slots] += partial[f"_p{self.i}_n"].to_numpy()
        if self.exact:
            limbs = [st["l0"], st["l1"], st["l2"], st["l3"]]
            for k in range(self.nlimbs):
                limbs[k][slots] += partial[f"_p{self.i}_l{k}"].to_numpy()
            if self.rows_since_carry >= _NORMALIZE_ROWS:
                _normalize(limbs)
                self.rows_since_carry = 0
        else:
            f = st["f"][slots] + partial[f"_p{self.i}_f"].to_numpy()
            # No value left: forget the rounding residue of retracted floats.
            st["f"][slots] = np.where(st["n"][slots] == 0, 0.0, f)

    def _sum(self, state: dict[str, object]) -> pa.Array:
        n = state["n"]
        assert isinstance(n, np.ndarray)
        valid = n != 0
        if self.exact:
            limbs = [state[f"l{k}"] for k in range(4)]
            return _limbs_to_decimal(limbs, valid, self.scale)  # type: ignore[arg-type]
        return _with_validity(state["f"], valid, pa.float64())  # type: ignore[arg-type]

    def output(self, state: dict[str, object]) -> pa.Array:
        n = state["n"]
        assert isinstance(n, np.ndarray)
        if not self.avg:
            return self._sum(state).cast(self.out_type)
        valid = n != 0
        if self.exact:
            total = _limbs_to_float([state[f"l{k}"] for k in range(4)])  # type: ignore[misc]
            total = total / (10.0**self.scale)
        else:
            total = state["f"]  # type: ignore[assignment]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(valid, total / np.where(valid, n, 1), 0.0)
        return _with_validity(mean, valid, pa.float64()).cast(self.out_type)

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self._sum(state), pa.array(state["n"], type=pa.int64())]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        col = rows.column(self.sum_name)
        self.st["n"][slots] = rows.column(f"a{self.i}_n").fill_null(0).to_numpy()
        if self.exact:
            limbs = _limbs(col.cast(pa.decimal128(38, self.scale)))
            valid = _valid_np(col)
            for k in range(4):
                v = limbs[k] if valid is None else np.where(valid, limbs[k], 0)
                self.st[f"l{k}"][slots] = v
        else:
            self.st["f"][slots] = pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy()


class BoolAcc(_NumpyAcc):
    """bool_and / bool_or as counts of true and false values."""

    _arrays = (("t", np.int64), ("f", np.int64))

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        x = _bool_np(ctx.data.column(self.call.args[0]))
        mask = ctx.valid(self.call)
        f = ~x if mask is None else ~x & mask
        t = x if mask is None else x & mask
        t, f = t.astype(np.int64), f.astype(np.int64)
        if ctx.sign is not None:
            t, f = t * ctx.sign, f * ctx.sign
        ctx.extra[f"_p{self.i}_t"] = t
        ctx.extra[f"_p{self.i}_f"] = f
        return [pl.col(f"_p{self.i}_t").sum(), pl.col(f"_p{self.i}_f").sum()]

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        self.st["t"][slots] += partial[f"_p{self.i}_t"].to_numpy()
        self.st["f"][slots] += partial[f"_p{self.i}_f"].to_numpy()

    def output(self, state: dict[str, object]) -> pa.Array:
        t, f = state["t"], state["f"]
        assert isinstance(t, np.ndarray) and isinstance(f, np.ndarray)
        valid = (t + f) != 0
        value = (f == 0) if self.call.kind == "bool_and" else (t > 0)
        return _with_validity(value, valid, pa.bool_())

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [pa.array(state["t"], type=pa.int64()), pa.array(state["f"], type=pa.int64())]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        self.st["t"][slots] = rows.column(f"a{self.i}_t").fill_null(0).to_numpy()
        self.st["f"][slots] = rows.column(f"a{self.i}_f").fill_null(0).to_numpy()


class _SeriesAcc(Acc):
    """State as one polars series (any type), its value the aggregate's result."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema, dtype: pl.DataType) -> None:
        super().__init__(index, call, input_schema)
        self.values = pl.Series(f"a{index}", [], dtype=dtype)

    def grow(self, capacity: int) -> None:
        if len(self.values) < capacity:
            pad = pl.Series(self.values.name, [None], dtype=self.values.dtype).extend_constant(
                None, capacity - len(self.values) - 1
            )
            self.values = pl.concat([self.values, pad], rechunk=True)

    def gather(self, slots: np.ndarray) -> dict[str, object]:
        return {"v": self.values.gather(slots)}

    def output(self, state: dict[str, object]) -> pa.Array:
        s = state["v"]
        assert isinstance(s, pl.Series)
        return to_arrow(s, self.out_type)

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self.output(state)]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        values = to_polars(rows.column(f"a{self.i}"), "v").cast(self.values.dtype)
        self.values.scatter(slots, values)


def _polars_dtype(t: pa.DataType) -> pl.DataType:
    return to_polars(pa.array([], type=t), "x").dtype


class MinMaxAcc(_SeriesAcc):
    """min / max over an append-only input: the running extreme."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        arg_type = arrow_type_of(input_schema[call.args[0]].type)
        super().__init__(index, call, input_schema, _polars_dtype(arg_type))
        self.arg = f"c{call.args[0]}"

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        mask = ctx.valid(self.call)
        col = pl.col(self.arg)
        if mask is not None:
            ctx.extra[f"_p{self.i}_m"] = mask
            col = col.filter(pl.col(f"_p{self.i}_m"))
        col = col.min() if self.call.kind == "min" else col.max()
        return [col.alias(f"_p{self.i}")]

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        cur = self.values.gather(slots).alias("cur")
        part = partial[f"_p{self.i}"].cast(self.values.dtype).alias("part")
        better = (
            pl.col("part") < pl.col("cur")
            if self.call.kind == "min"
            else (pl.col("part") > pl.col("cur"))
        )
        take_part = pl.col("part").is_not_null() & (pl.col("cur").is_null() | better)
        new = pl.DataFrame([cur, part]).select(
            pl.when(take_part).then(pl.col("part")).otherwise(pl.col("cur"))
        )
        self.values.scatter(slots, new.to_series())


class NumMinMaxAcc(_NumpyAcc):
    """min / max of integers or floats over an append-only input, in numpy."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        arg_type = arrow_type_of(input_schema[call.args[0]].type)
        dtype = np.float64 if pa.types.is_floating(arg_type) else np.int64
        self._arrays = (("v", dtype), ("ok", np.bool_))
        super().__init__(index, call, input_schema)
        self.arg = f"c{call.args[0]}"
        self.is_min = call.kind == "min"

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        return MinMaxAcc.prepare(self, ctx)  # type: ignore[arg-type]

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        part = partial[f"_p{self.i}"]
        ok = part.is_not_null().to_numpy() if part.null_count() else None
        values = part.to_numpy() if ok is None else part.fill_null(0).to_numpy()
        cur, cur_ok = self.st["v"][slots], self.st["ok"][slots]
        better = values < cur if self.is_min else values > cur
        take = ~cur_ok | better
        if ok is not None:
            take &= ok
        self.st["v"][slots] = np.where(take, values, cur)
        self.st["ok"][slots] = cur_ok | take

    def output(self, state: dict[str, object]) -> pa.Array:
        return _with_validity(state["v"], state["ok"], None).cast(self.out_type)  # type: ignore[arg-type]

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self.output(state)]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        col = rows.column(f"a{self.i}")
        self.st["ok"][slots] = col.is_valid().to_numpy(zero_copy_only=False)
        self.st["v"][slots] = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)


class StringAggAcc(_SeriesAcc):
    """string_agg over an append-only input: the string so far, in arrival order."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        super().__init__(index, call, input_schema, pl.String())
        self.arg = f"c{call.args[0]}"
        self.delim = ","

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        self.delim = ctx.delimiter(self.call, self.delim)
        mask = ctx.valid(self.call)
        col = pl.col(self.arg).cast(pl.String)
        n = pl.col(self.arg).count()
        if mask is not None:
            ctx.extra[f"_p{self.i}_m"] = mask
            col = col.filter(pl.col(f"_p{self.i}_m"))
            n = col.count()
        return [col.str.join(self.delim).alias(f"_p{self.i}"), n.alias(f"_p{self.i}_n")]

    def merge(self, slots: np.ndarray, partial: pl.DataFrame) -> None:
        cur = self.values.gather(slots).alias("cur")
        part = partial[f"_p{self.i}"].alias("part")
        n = partial[f"_p{self.i}_n"].alias("n")
        new = pl.DataFrame([cur, part, n]).select(
            pl.when(pl.col("n") > 0)
            .then(pl.concat_str(["cur", "part"], separator=self.delim, ignore_nulls=True))
            .otherwise(pl.col("cur"))
        )
        self.values.scatter(slots, new.to_series())


class ValueAcc(_SeriesAcc):
    """An aggregate kept from its groups' value multisets (a value table): the distinct
    kinds, and min/max/string_agg over an input that deletes. Chunks only collect signed
    deltas; at the barrier they are consolidated into the multisets (and the value
    table) and the result is recomputed for the groups they touched. string_agg's parts
    come in value order (DuckDB's order is unspecified)."""

    # Pairs that are gone are forgotten once there are this many and more than are held.
    COMPACT_MIN = 65_536

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        kind = call.kind
        self.base = kind.removesuffix("_distinct")
        self.distinct = kind.endswith("_distinct")
        out_type = arrow_type_of(call.output_type)
        dtype = pl.Int64() if self.base == "count" else _polars_dtype(out_type)
        super().__init__(index, call, input_schema, dtype)
        self.arg_type = arrow_type_of(input_schema[call.args[0]].type)
        self.v_dtype = _polars_dtype(self.arg_type)
        if self.base == "string_agg":
            self.v_dtype = pl.String()
        self.delim = ","
        self.pending: list[pl.DataFrame] = []
        self.pending_rows = 0
        self._sum_at = _PENDING_ROWS
        # The multisets: each (slot, value) pair ever held has an id in ``pairs`` and its
        # count in ``counts`` (0: gone). An epoch's deltas look their pairs up, so folding
        # them in costs in proportion to the deltas, not to the values held.
        self.v_arrow = pa.string() if self.base == "string_agg" else self.arg_type
        self._new_pairs()

    def _new_pairs(self) -> None:
        self.pairs = GroupIndex([pa.int64(), self.v_arrow])
        self.counts = _Column(np.dtype(np.int64))
        self.dead = 0  # pairs whose count went to 0

    @property
    def frame(self) -> pl.DataFrame:
        """Every (slot, v, n) with n > 0."""
        return self._live(np.flatnonzero(self.counts.values > 0))

    def _live(self, ids: np.ndarray) -> pl.DataFrame:
        keys = self.pairs.keys[ids]
        return pl.DataFrame(
            [
                keys["k0"].alias("slot"),
                keys["k1"].alias("v"),
                pl.Series("n", self.counts.values[ids]),
            ]
        )

    def _add_pairs(self, keys: pl.DataFrame, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add ``deltas`` to the counts of distinct (k0 = slot, k1 = v) pairs, taking in
        those not held. Returns their counts before and after (a count never stays below
        0: a value deleted more often than it was there is gone)."""
        ids, h, taken = self.pairs.lookup_hashes(keys)
        known = ids >= 0
        old = np.zeros(len(ids), dtype=np.int64)
        old[known] = self.counts.values[ids[known]]
        new = old + deltas
        fresh = np.flatnonzero(~known & (new > 0))
        if len(fresh):
            ids[fresh] = self.pairs.add(keys[fresh], h[fresh], taken[fresh])
            self.counts.append(np.zeros(len(fresh), dtype=np.int64))
        kept = ids >= 0
        self.counts.values[ids[kept]] = np.maximum(new[kept], 0)
        self.dead += int(((old > 0) & (new <= 0)).sum()) - int(
            ((old == 0) & (new > 0) & known).sum()
        )
        if self.dead > max(self.COMPACT_MIN, len(self.counts.values) - self.dead):
            self._compact()
        return old, new

    def _compact(self) -> None:
        """Forget the pairs that are gone (when they outnumber those held)."""
        live = self.frame
        self._new_pairs()
        if live.height:
            keys = live.select(pl.col("slot").alias("k0"), pl.col("v").alias("k1"))
            self._add_pairs(keys, live["n"].to_numpy())

    def grow(self, capacity: int) -> None:
        before = len(self.values)
        super().grow(capacity)
        if self.base == "count" and len(self.values) > before:
            self.values.scatter(np.arange(before, len(self.values)), 0)

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        if self.base == "string_agg":
            self.delim = ctx.delimiter(self.call, self.delim)
        return []

    def collect(self, row_slots: np.ndarray, ctx: ChunkContext) -> None:
        """The chunk's signed (slot, value) deltas, consolidated at the barrier."""
        mask = ctx.valid(self.call)
        rows = None if mask is None else np.flatnonzero(mask)
        col = ctx.data.column(self.call.args[0])
        w = ctx.sign if ctx.sign is not None else np.ones(ctx.num_rows, dtype=np.int64)
        slots = row_slots
        if rows is not None:
            col, w, slots = col.take(pa.array(rows)), w[rows], row_slots[rows]
        if not len(slots):
            return
        v = to_polars(col, "v").cast(self.v_dtype)
        self.pending.append(pl.DataFrame([pl.Series("slot", slots), v, pl.Series("d", w)]))
        self.pending_rows += len(slots)
        if self.pending_rows > self._sum_at:  # a long epoch: keep its deltas summed up
            self.pending = [pl.concat(self.pending).group_by(["slot", "v"]).agg(pl.col("d").sum())]
            self.pending_rows = self.pending[0].height
            # Deltas that do not cancel stay as many: sum again only once they doubled
            # (summing at every chunk made a long epoch quadratic).
            self._sum_at = max(_PENDING_ROWS, 2 * self.pending_rows)

    def load_values(self, slots: np.ndarray, rows: pa.Table) -> None:
        """Add value-table rows (``_i``: index into ``slots``, ``v``, ``_count``)."""
        if rows.num_rows == 0:
            return
        idx = rows.column("_i").to_numpy()
        keys = pl.DataFrame(
            [
                pl.Series("k0", slots[idx].astype(np.int64)),
                to_polars(rows.column("v"), "k1").cast(self.v_dtype),
            ]
        )
        self._add_pairs(keys, rows.column("_count").to_numpy().astype(np.int64))

    def flush(self) -> tuple[pl.DataFrame | None, bool]:
        """Fold the epoch's deltas in and update the touched groups' results. Returns the
        value-table changes (``slot, v, n``: n <= 0 deletes) and whether any of them
        replaces a stored row."""
        if not self.pending:
            return None, False
        self.pending_rows = 0
        self._sum_at = _PENDING_ROWS
        deltas = (
            pl.concat(self.pending)
            .group_by(["slot", "v"])
            .agg(pl.col("d").sum())
            .filter(pl.col("d") != 0)
        )
        self.pending = []
        if deltas.height == 0:
            return None, False
        # Only the pairs the epoch touched are looked up and rewritten: the multisets can
        # hold millions of values (a backfill, a join's output).
        keys = deltas.select(pl.col("slot").alias("k0"), pl.col("v").alias("k1"))
        old, new = self._add_pairs(keys, deltas["d"].to_numpy())
        changes = deltas.select("slot", "v").with_columns(
            pl.Series("old", old), pl.Series("new", new)
        )
        if self.base in ("min", "max"):
            self._update_extreme(changes)
        elif self.base == "count":
            self._update_count(changes)
        else:
            self._recompute(changes["slot"].unique())
        return (
            changes.select("slot", "v", pl.col("new").alias("n")),
            bool((changes["old"] > 0).any()),
        )

    def _update_count(self, changes: pl.DataFrame) -> None:
        """count(DISTINCT): + values that appeared, - values that vanished."""
        appeared = (pl.col("old") <= 0) & (pl.col("new") > 0)
        vanished = (pl.col("old") > 0) & (pl.col("new") <= 0)
        delta = changes.group_by("slot").agg(
            (appeared.cast(pl.Int64).sum() - vanished.cast(pl.Int64).sum()).alias("d")
        )
        slots = delta["slot"].to_numpy()
        cur = self.values.gather(slots).to_numpy()
        self.values.scatter(slots, pl.Series(cur + delta["d"].to_numpy()))

    def _update_extreme(self, changes: pl.DataFrame) -> None:
        """min/max: a group whose extreme vanished is recomputed from its multiset; the
        others take the better of their extreme and the values that appeared."""
        is_max = self.base == "max"
        vanished = changes.filter((pl.col("old") > 0) & (pl.col("new") <= 0))
        lost = np.zeros(0, dtype=np.int64)
        if vanished.height:
            vslots = vanished["slot"].to_numpy()
            cur = self.values.gather(vslots)
            hit = vanished["v"].cast(cur.dtype).eq_missing(cur).to_numpy()
            lost = np.unique(vslots[hit])
        appeared = changes.filter((pl.col("old") <= 0) & (pl.col("new") > 0))
        if appeared.height:
            v = pl.col("v")
            best = appeared.group_by("slot").agg((v.max() if is_max else v.min()).alias("b"))
            slots = best["slot"].to_numpy()
            cur = self.values.gather(slots).alias("cur")
            part = best["b"].cast(cur.dtype).alias("b")
            better = pl.col("b") > pl.col("cur") if is_max else pl.col("b") < pl.col("cur")
            new = pl.DataFrame([cur, part]).select(
                pl.when(pl.col("cur").is_null() | better).then("b").otherwise("cur")
            )
            self.values.scatter(slots, new.to_series())
        if len(lost):
            self._recompute(pl.Series("slot", lost))

    def _recompute(self, slots: pl.Series) -> None:
        """The results of ``slots`` from their whole multisets."""
        wanted = self.pairs.keys["k0"].is_in(slots.implode()).to_numpy()
        sub = self._live(np.flatnonzero(wanted & (self.counts.values > 0)))
        results = pl.DataFrame([slots.alias("slot")]).join(
            self._result(sub.lazy()).collect(), on="slot", how="left"
        )
        values = results["r"]
        if self.base == "count":
            values = values.fill_null(0)
        self.values.scatter(results["slot"].to_numpy(), values.cast(self.values.dtype))

    def _result(self, sub: pl.LazyFrame) -> pl.LazyFrame:
        """Per slot of ``sub`` (slot, v, n rows), the aggregate over its values."""
        v = pl.col("v")
        base = self.base
        if base == "string_agg":
            if not self.distinct:
                sub = sub.select("slot", v.repeat_by("n")).explode("v")
            expr = v.sort().str.join(self.delim)
        elif base == "count":
            expr = pl.len().cast(pl.Int64)
        elif base == "min":
            expr = v.min()
        elif base == "max":
            expr = v.max()
        elif pa.types.is_integer(self.arg_type) or pa.types.is_decimal(self.arg_type):
            # Exact (128-bit) sums; an average divides the exact sum, as DuckDB does.
            scale = self.arg_type.scale if pa.types.is_decimal(self.arg_type) else 0
            expr = v.cast(pl.Decimal(38, scale)).sum()
            if base == "avg":
                expr = expr.cast(pl.Float64) / pl.len()
        else:
            expr = v.cast(pl.Float64).sum() if base == "sum" else v.cast(pl.Float64).mean()
        return sub.group_by("slot").agg(expr.alias("r"))


def make_acc(index: int, call: AggCall, input_schema: Schema, append_only: bool) -> Acc:
    if uses_value_table(call, append_only):
        return ValueAcc(index, call, input_schema)
    kind = call.kind
    if kind in ("count_star", "count"):
        return CountAcc(index, call, input_schema)
    if kind in ("sum", "avg"):
        return SumAcc(index, call, input_schema)
    if kind in ("bool_and", "bool_or"):
        return BoolAcc(index, call, input_schema)
    if kind in ("min", "max"):
        arg_type = arrow_type_of(input_schema[call.args[0]].type)
        if pa.types.is_integer(arg_type) or pa.types.is_floating(arg_type):
            return NumMinMaxAcc(index, call, input_schema)
        return MinMaxAcc(index, call, input_schema)
    if kind == "string_agg":
        return StringAggAcc(index, call, input_schema)
    raise NotImplementedError(f"aggregate {kind}")


# ------------------------------------------------------------- group index
def _mirror_dtype(t: pa.DataType) -> type | None:
    if pa.types.is_integer(t):
        return np.int64
    if pa.types.is_floating(t):
        return np.float64
    return None


def _mirror_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    valid = _valid_np(arr)
    if valid is None:
        valid = np.ones(len(arr), dtype=bool)
        values = arr.to_numpy(zero_copy_only=False)
    else:
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        return values.astype(np.float64, copy=False), valid
    return values.astype(np.int64, copy=False), valid


class _SortedHashes:
    """64-bit hashes -> slots, sorted for ``searchsorted``: a large main run and a small
    recent run. New hashes go into the recent run (cheap while it is small) and it is
    merged into the main one when it reaches an eighth of it, so adding a chunk of keys
    costs in proportion to the chunk, not to the groups already held."""

    _MIN_MERGE = 4096

    def __init__(self) -> None:
        self.runs = [
            (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
            (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
        ]

    def __len__(self) -> int:
        return len(self.runs[0][0]) + len(self.runs[1][0])

    def find(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash: whether it is held, and its slot where it is."""
        hit = np.zeros(len(h), dtype=bool)
        slots = np.full(len(h), -1, dtype=np.int64)
        if not len(self) or not len(h):
            return hit, slots
        order = np.argsort(h, kind="stable")  # probing in order is cache-friendly
        hs = h[order]
        for hashes, hash_slots in self.runs:
            if not len(hashes):
                continue
            pos = np.searchsorted(hashes, hs)
            np.minimum(pos, len(hashes) - 1, out=pos)
            found = np.flatnonzero(hashes[pos] == hs)
            hit[order[found]] = True
            slots[order[found]] = hash_slots[pos[found]]
        return hit, slots

    def insert(self, h: np.ndarray, slots: np.ndarray) -> None:
        """Add hashes not held yet (distinct, sorted)."""
        self.runs[1] = _merge_sorted(self.runs[1], (h, slots))
        main, recent = self.runs
        if len(recent[0]) >= max(self._MIN_MERGE, len(main[0]) // 8):
            self.runs = [
                _merge_sorted(main, recent),
                (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
            ]


def _merge_sorted(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Two runs of sorted hashes with their slots, merged in one pass (no sort)."""
    if not len(b[0]):
        return a
    at = np.searchsorted(a[0], b[0]) + np.arange(len(b[0]))  # b's places in the result
    rest = np.ones(len(a[0]) + len(b[0]), dtype=bool)
    rest[at] = False
    out = []
    for x, y in zip(a, b):
        merged = np.empty(len(rest), dtype=x.dtype)
        merged[rest] = x
        merged[at] = y
        out.append(merged)
    return out[0], out[1]


class _Column:
    """A growable numpy array (amortized doubling): appending costs the rows appended."""

    def __init__(self, dtype: np.dtype) -> None:
        self.buf = np.zeros(64, dtype=dtype)
        self.n = 0

    def append(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.buf):
            grown = np.zeros(max(need, 2 * len(self.buf)), dtype=self.buf.dtype)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : need] = values
        self.n = need

    @property
    def values(self) -> np.ndarray:
        return self.buf[: self.n]


class GroupIndex:
    """Group keys -> slots: 64-bit key hashes (the vnode hash, so the vnode comes for
    free) with their slots, each hit verified against the stored keys; keys whose hash
    collides with another key's live in a small dict. Adding keys costs in proportion to
    the keys added, so a large, cold index warms up at a steady cost per chunk."""

    def __init__(self, key_types: list[pa.DataType]) -> None:
        self.key_types = key_types
        self.names = [f"k{i}" for i in range(len(key_types))]
        self.keys = pl.DataFrame(
            [pl.Series(n, [], dtype=_polars_dtype(t)) for n, t in zip(self.names, key_types)]
        )
        self.hashes = _SortedHashes()
        self._vnodes = _Column(np.dtype(np.int16))
        self.collided: dict[tuple[object, ...], int] = {}
        self.size = 1 if not key_types else 0
        self.hash_fn = hash_columns
        # Integer and float keys also as numpy (values, valid) by slot: cheap to verify.
        self.mirrors: list[tuple[_Column, _Column] | None] = [
            (_Column(np.dtype(_mirror_dtype(t))), _Column(np.dtype(bool)))
            if _mirror_dtype(t) is not None
            else None
            for t in key_types
        ]

    def key_arrays(self, keys: pl.DataFrame) -> list[pa.Array]:
        return [to_arrow(keys[n], t) for n, t in zip(self.names, self.key_types)]

    def lookup(self, keys: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Slots of ``keys`` (distinct group keys), -1 where unknown, and their hashes."""
        slots, h, _ = self.lookup_hashes(keys)
        return slots, h

    def lookup_hashes(self, keys: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``lookup``, and whether each hash is taken (by the key or another): ``add``
        need not look again."""
        n = keys.height
        arrays = self.key_arrays(keys)
        h = self.hash_fn(arrays)
        slots = np.full(n, -1, dtype=np.int64)
        hit = np.zeros(n, dtype=bool)
        if len(self.hashes):
            hit, cand_all = self.hashes.find(h)
            rows = np.flatnonzero(hit)
            cand = cand_all[rows]
            same = self._same(arrays, keys, rows, cand)
            slots[rows[same]] = cand[same]
            if not same.all():
                for r in rows[~same]:
                    slots[r] = self.collided.get(self._tuple(keys, int(r)), -1)
        return slots, h, hit

    def _same(
        self, arrays: list[pa.Array], keys: pl.DataFrame, rows: np.ndarray, slots: np.ndarray
    ) -> np.ndarray:
        """Whether ``keys[rows]`` equal the stored keys of ``slots`` (NULL equals NULL)."""
        same = np.ones(len(slots), dtype=bool)
        stored: pl.DataFrame | None = None
        for n, mirror, arr in zip(self.names, self.mirrors, arrays):
            if mirror is not None:
                values, valid = _mirror_of(arr)
                values, valid = values[rows], valid[rows]
                sv, sm = mirror[0].values[slots], mirror[1].values[slots]
                eq = values == sv
                if values.dtype.kind == "f":
                    eq |= np.isnan(values) & np.isnan(sv)
                same &= np.where(valid & sm, eq, valid == sm)
                continue
            if stored is None:
                stored = self.keys[slots]
            same &= stored[n].eq_missing(keys[n][rows]).to_numpy()
        return same

    @staticmethod
    def _tuple(keys: pl.DataFrame, row: int) -> tuple[object, ...]:
        return tuple(keys.row(row))

    def add(self, keys: pl.DataFrame, h: np.ndarray, taken: np.ndarray | None = None) -> np.ndarray:
        """New slots for ``keys`` (unknown, distinct), in order. ``taken``: whether each
        hash is held already (``lookup_hashes``), else looked up here."""
        n = keys.height
        start = self.size
        new = np.arange(start, start + n, dtype=np.int64)
        self.size += n
        if not self.names:
            return new
        self.keys = pl.concat([self.keys, keys.select(self.names)], rechunk=False)
        if self.keys.n_chunks() > 32:
            self.keys = self.keys.rechunk()
        self._vnodes.append((h % np.uint64(VNODE_COUNT)).astype(np.int16))
        for j, (t, mirror) in enumerate(zip(self.key_types, self.mirrors)):
            if mirror is not None:
                values, valid = _mirror_of(to_arrow(keys[self.names[j]], t))
                mirror[0].append(values)
                mirror[1].append(valid)
        # A hash that is taken (or repeats within ``keys``) is a collision.
        order = np.argsort(h, kind="stable")
        hs = h[order]
        first = np.ones(n, dtype=bool)
        first[1:] = hs[1:] != hs[:-1]
        if taken is not None:
            first &= ~taken[order]
        elif len(self.hashes):
            first &= ~self.hashes.find(hs)[0]
        for r in order[~first]:
            self.collided[self._tuple(keys, int(r))] = int(new[r])
        ins = order[first]
        self.hashes.insert(h[ins], new[ins])
        return new

    def vnodes_of(self, slots: np.ndarray) -> np.ndarray:
        if not self.names:
            return np.zeros(len(slots), dtype=np.int16)
        return self._vnodes.values[slots]


# -------------------------------------------------------------------- core
@dataclass
class Output:
    """An epoch's output changes (None: nothing changed)."""

    data: pa.Table | None
    ops: np.ndarray | None


class AggCore:
    """The aggregation minus the actor plumbing: ``apply`` a chunk, ``flush`` at a
    barrier (output changes + state writes). ``always_present``: a global aggregate
    (one row, present even when no input row is)."""

    def __init__(
        self,
        input_schema: Schema,
        output_schema: Schema,
        group_key: list[int],
        aggs: list[AggCall],
        tables: Sequence[StateTable],
        append_only: bool,
        always_present: bool,
    ) -> None:
        self.input_schema = input_schema
        self.output_arrow = output_schema.arrow()
        self.group_key = group_key
        self.aggs = aggs
        self.append_only = append_only
        self.always_present = always_present
        self.accs = [make_acc(i, c, input_schema, append_only) for i, c in enumerate(aggs)]
        self.value_accs = [a for a in self.accs if isinstance(a, ValueAcc)]
        if len(tables) != 1 + len(self.value_accs):
            raise ValueError(
                f"aggregation expects {1 + len(self.value_accs)} state tables, got {len(tables)}"
            )
        self.result = tables[0]
        self.value_tables = list(tables[1:])
        key_types = [arrow_type_of(input_schema[k].type) for k in group_key]
        self.index = GroupIndex(key_types)

        # Columns the group-by reads, by input position. Value-state aggregates read
        # their arguments from the chunk itself (a long value is not copied for them).
        used = set(group_key)
        for c, acc in zip(aggs, self.accs):
            if not isinstance(acc, ValueAcc):
                used.update(a for a in c.args if c.kind != "count_star")
        self.used = sorted(used)
        # Per slot: input row count, whether the group's row is in the output (and the
        # result table).
        self.row_count = np.zeros(0, dtype=np.int64)
        self.emitted = np.zeros(0, dtype=bool)
        self.dirty = np.zeros(0, dtype=bool)
        self._capacity = 0
        # Before-images of the slots first touched this epoch.
        self._before: list[tuple[np.ndarray, np.ndarray, list[dict[str, object]]]] = []
        # Whether the committed state may hold groups (False: a new job, never read).
        self.may_have_state = True
        self._grow(self.index.size)

    def clear_cache(self) -> None:
        """Forget every cached group (after ``flush``, at a barrier); groups are then
        reloaded from the committed state as chunks touch them, so the next read must
        wait until that barrier's epoch is committed (as a rebuilt actor does). For an
        actor whose vnodes change in place: a group it gives away and gets back later
        must not come from its stale cache."""
        assert not self._before, "clear the cache at a barrier, after flush"
        key_types = self.index.key_types
        self.__dict__.update(
            AggCore(
                self.input_schema, Schema(()), self.group_key, self.aggs,
                [self.result, *self.value_tables], self.append_only, self.always_present,
            ).__dict__,
            output_arrow=self.output_arrow,
        )  # fmt: skip
        assert self.index.key_types == key_types

    # ---------------------------------------------------------------- slots
    def _grow(self, size: int) -> None:
        if size <= self._capacity:
            return
        capacity = max(size, 2 * self._capacity, 64)
        for name in ("row_count", "emitted", "dirty"):
            arr = getattr(self, name)
            new = np.zeros(capacity, dtype=arr.dtype)
            new[: len(arr)] = arr
            setattr(self, name, new)
        for acc in self.accs:
            acc.grow(capacity)
        self._capacity = capacity

    def _touch(self, slots: np.ndarray) -> None:
        """Record the before-image of slots this epoch has not touched yet."""
        fresh = slots[~self.dirty[slots]]
        if len(fresh):
            self.dirty[fresh] = True
            self._before.append(
                (fresh, self.emitted[fresh].copy(), [a.gather(fresh) for a in self.accs])
            )

    def ensure_global_row(self, cur: duckdb.DuckDBPyConnection | None) -> None:
        """A global aggregate's one row: loaded, or created to be emitted at the next
        barrier."""
        if self._capacity and (self.emitted[0] or self.dirty[0]):
            return
        if cur is not None and self.may_have_state:
            self._load(cur, pl.DataFrame(), np.zeros(1, dtype=np.int64), np.zeros(1, np.uint64))
        self._touch(np.zeros(1, dtype=np.int64))

    # ---------------------------------------------------------------- chunks
    def apply(self, data: pa.Table, ops: np.ndarray, cur: duckdb.DuckDBPyConnection) -> None:
        n = data.num_rows
        if n == 0:
            return
        inserts = (ops == Op.INSERT) | (ops == Op.UPDATE_INSERT)
        sign = None if inserts.all() else np.where(inserts, 1, -1).astype(np.int64)
        if sign is not None and self.append_only:
            raise RuntimeError("an append-only aggregation input deleted rows")
        ctx = ChunkContext(data, sign)
        exprs = [_count_expr("_rows", sign, ctx)]
        for acc in self.accs:
            exprs += acc.prepare(ctx)
        if self.value_accs and self.group_key:
            ctx.extra["_r"] = np.arange(n, dtype=np.int64)
            exprs.append(pl.col("_r"))
        columns = [to_polars(data.column(i), f"c{i}") for i in self.used]
        columns += [pl.Series(name, v) for name, v in ctx.extra.items()]
        if not columns:  # count(*) alone reads no column: the frame still needs its rows
            columns.append(pl.Series("_n", np.zeros(n, dtype=np.int8)))
        frame = pl.DataFrame(columns)
        keys = [f"c{i}" for i in self.group_key]
        if keys:
            partial = frame.group_by(keys).agg(exprs)
            key_frame = pl.DataFrame([partial[k].alias(n) for k, n in zip(keys, self.index.names)])
        else:
            partial = frame.select(exprs)
            key_frame = pl.DataFrame()
        slots = self._slots(key_frame, cur)
        self._touch(slots)
        self.row_count[slots] += partial["_rows"].to_numpy()
        for acc in self.accs:
            acc.merge(slots, partial)
        if self.value_accs:
            if keys:
                lists = partial["_r"]
                row_slots = np.empty(n, dtype=np.int64)
                row_slots[lists.explode().to_numpy()] = np.repeat(
                    slots, lists.list.len().to_numpy()
                )
            else:
                row_slots = np.zeros(n, dtype=np.int64)
            for acc in self.value_accs:
                acc.collect(row_slots, ctx)

    def _slots(self, keys: pl.DataFrame, cur: duckdb.DuckDBPyConnection) -> np.ndarray:
        if not self.group_key:
            if self.may_have_state and not (self.emitted[0] or self.dirty[0]):
                self.ensure_global_row(cur)  # a cleared cache
            return np.zeros(1, dtype=np.int64)
        slots, h = self.index.lookup(keys)
        miss = np.flatnonzero(slots < 0)
        if len(miss) == 0:
            return slots
        miss_keys = keys[miss]
        new = self.index.add(miss_keys, h[miss])
        self._grow(self.index.size)
        slots[miss] = new
        if self.may_have_state:
            self._load(cur, miss_keys, new, h[miss])
        return slots

    # ---------------------------------------------------------------- state
    def _load(
        self,
        cur: duckdb.DuckDBPyConnection,
        keys: pl.DataFrame,
        slots: np.ndarray,
        h: np.ndarray,
    ) -> None:
        """Read groups that are not cached from the committed state. A group this
        executor never cached has no uncommitted writes: it only writes groups it
        holds, and it starts reading once the epoch before it is committed."""
        arrays: list[pa.Array] = [
            pa.array((h % np.uint64(VNODE_COUNT)).astype(np.int16), pa.int16())
            if self.group_key
            else pa.array(np.zeros(len(slots), dtype=np.int16))
        ]
        names = [VNODE_COLUMN]
        for j, arr in enumerate(self.index.key_arrays(keys) if self.group_key else []):
            arrays.append(arr)
            names.append(f"g{j}")
        arrays.append(pa.array(np.arange(len(slots), dtype=np.int64)))
        names.append("_i")
        probe = pa.Table.from_arrays(arrays, names=names)
        rows = _semi_lookup(cur, self.result.schema, probe, "s.*")
        if rows.num_rows:
            idx = rows.column("_i").to_numpy()
            found = slots[idx]
            self.row_count[found] = rows.column(ROW_COUNT).to_numpy()
            self.emitted[found] = True
            for acc in self.accs:
                acc.load(found, rows)
        for acc, table in zip(self.value_accs, self.value_tables):
            acc.load_values(slots, _semi_lookup(cur, table.schema, probe, 's.v, s."_count"'))

    def flush(self) -> Output:
        """At a barrier: the epoch's output changes; state rows of touched groups."""
        for acc, table in zip(self.value_accs, self.value_tables):
            changes, overwrites = acc.flush()
            if changes is not None:
                self._write_values(table, changes, overwrites)
        if not self._before:
            return Output(None, None)
        slots = np.concatenate([b[0] for b in self._before])
        before_emitted = np.concatenate([b[1] for b in self._before])
        before_states = [
            {k: _concat([b[2][j][k] for b in self._before]) for k in self._before[0][2][j]}
            for j in range(len(self.accs))
        ]
        self._before = []
        self.dirty[slots] = False
        after_states = [acc.gather(slots) for acc in self.accs]
        present = self.row_count[slots] > 0
        if self.always_present:
            present[:] = True
        key_arrays = self.index.key_arrays(self.index.keys[slots]) if self.group_key else []
        out = self._changes(key_arrays, before_emitted, present, before_states, after_states)
        self._write_result(slots, key_arrays, before_emitted, present, after_states)
        self.emitted[slots] = present
        return out

    def _changes(
        self,
        key_arrays: list[pa.Array],
        before: np.ndarray,
        after: np.ndarray,
        before_states: list[dict[str, object]],
        after_states: list[dict[str, object]],
    ) -> Output:
        n = len(before)
        old_cols = key_arrays + [a.output(s) for a, s in zip(self.accs, before_states)]
        new_cols = key_arrays + [a.output(s) for a, s in zip(self.accs, after_states)]
        changed = np.zeros(n, dtype=bool)
        for o, c in zip(old_cols[len(key_arrays) :], new_cols[len(key_arrays) :]):
            changed |= _differs(o, c)
        deleted = np.flatnonzero(before & ~after)
        inserted = np.flatnonzero(~before & after)
        updated = np.flatnonzero(before & after & changed)
        if not (len(deleted) or len(inserted) or len(updated)):
            return Output(None, None)
        names = self.output_arrow.names
        old = pa.Table.from_arrays(old_cols, names=names).cast(self.output_arrow)
        new = pa.Table.from_arrays(new_cols, names=names).cast(self.output_arrow)
        both = pa.concat_tables([old, new])
        pairs = np.empty(2 * len(updated), dtype=np.int64)
        pairs[0::2] = updated
        pairs[1::2] = updated + n
        take = np.concatenate([deleted, inserted + n, pairs])
        ops = np.concatenate(
            [
                np.full(len(deleted), Op.DELETE, dtype=np.int8),
                np.full(len(inserted), Op.INSERT, dtype=np.int8),
                np.tile(
                    np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], dtype=np.int8), len(updated)
                ),
            ]
        )
        return Output(both.take(pa.array(take)), ops)

    def _write_result(
        self,
        slots: np.ndarray,
        key_arrays: list[pa.Array],
        before: np.ndarray,
        present: np.ndarray,
        states: list[dict[str, object]],
    ) -> None:
        rows = np.flatnonzero(present | before)
        if not len(rows):
            return
        cols: list[pa.Array] = [pa.array(self.index.vnodes_of(slots), pa.int16())]
        cols += key_arrays
        for acc, state in zip(self.accs, states):
            cols += acc.columns(state)
        cols.append(pa.array(self.row_count[slots], pa.int64()))
        schema = self.result.arrow_schema()
        table = pa.Table.from_arrays(cols, schema=_loose(schema, cols)).cast(schema)
        if len(rows) < len(slots):
            table = table.take(pa.array(rows))
        ops = np.where(present[rows], Op.INSERT, Op.DELETE).astype(np.int8)
        self.result.write(StreamChunk(table, ops), overwrites=bool(before[rows].any()), unique=True)

    def _write_values(self, table: StateTable, changes: pl.DataFrame, overwrites: bool) -> None:
        slots = changes["slot"].to_numpy()
        schema = table.arrow_schema()
        cols: list[pa.Array] = [pa.array(self.index.vnodes_of(slots), pa.int16())]
        if self.group_key:
            cols += self.index.key_arrays(self.index.keys[slots])
        cols.append(to_arrow(changes["v"], schema.field("v").type))
        n = changes["n"].to_numpy()
        cols.append(pa.array(n, pa.int64()))
        data = pa.Table.from_arrays(cols, schema=_loose(schema, cols)).cast(schema)
        ops = np.where(n > 0, Op.INSERT, Op.DELETE).astype(np.int8)
        table.write(StreamChunk(data, ops), overwrites=overwrites, unique=True)


def _differs(old: pa.Array, new: pa.Array) -> np.ndarray:
    """Per row: the values differ (NULL equals NULL)."""
    if old.type == pa.month_day_nano_interval():  # no Arrow comparison kernel
        same = to_polars(old, "o").eq_missing(to_polars(new, "n"))
        return ~same.to_numpy()
    both_null = pc.and_(old.is_null(), new.is_null())
    diff = pc.fill_null(pc.not_equal(old, new), True)
    return _bool_np(pc.and_not(diff, both_null))


def _loose(schema: pa.Schema, cols: list[pa.Array]) -> pa.Schema:
    """``schema``'s names with the arrays' own types (cast to ``schema`` afterwards)."""
    return pa.schema([pa.field(f.name, c.type) for f, c in zip(schema, cols)])


def _concat(parts: list[object]) -> object:
    if isinstance(parts[0], pl.Series):
        return pl.concat(parts) if len(parts) > 1 else parts[0]  # type: ignore[arg-type]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]  # type: ignore[arg-type]


def _semi_lookup(
    cur: duckdb.DuckDBPyConnection, schema: StateTableSchema, probe: pa.Table, select: str
) -> pa.Table:
    """Committed rows of ``schema``'s table whose group keys are in ``probe``
    (``_vnode, g0.., _i``), NULL keys matching NULL, with the probe's ``_i``."""
    name = f"__agg_probe_{next(_names)}"
    keys = [n for n in probe.column_names if n != "_i"]
    dist = {schema.columns[i][0] for i in schema.dist_key}
    if dist and dist <= set(keys) - {VNODE_COLUMN}:
        # The vnode is a function of the group key: joining without it is cheaper.
        keys.remove(VNODE_COLUMN)
    cond = " AND ".join(f"s.{quote_ident(k)} IS NOT DISTINCT FROM p.{quote_ident(k)}" for k in keys)
    cur.register(name, probe)
    try:
        return cur.sql(
            f"SELECT p._i AS _i, {select} FROM {schema.physical_name} s JOIN {name} p ON {cond}"
        ).to_arrow_table()
    finally:
        cur.unregister(name)


def table_exists(cur: duckdb.DuckDBPyConnection, schema: StateTableSchema) -> bool:
    """Whether the table is committed (a new job's tables appear with its first commit)."""
    from rivulet.storage.state_store import STATE_SCHEMA

    rows = cur.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
        [STATE_SCHEMA, f"t{schema.table_id}"],
    ).fetchall()
    return bool(rows[0][0])
