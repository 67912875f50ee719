"""Accumulators: one aggregate's per-slot state kept from a running summary (counts,
exact sums, true/false counts, min/max and string_agg over an append-only input), and
the chunk as they see it (``ChunkContext``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.columns import (
    bool_np,
    polars_dtype,
    to_arrow,
    to_polars,
    valid_np,
)
from rivulet.common.types import arrow_type_of
from rivulet.stream.executor import Schema
from rivulet.stream.executors.aggregate.wide_sum import (
    NORMALIZE_ROWS,
    limbs_to_decimal,
    limbs_to_float,
    normalize,
    to_limbs,
    with_validity,
)
from rivulet.stream.plan import AggCall

# A string or binary state series is copied compactly once the bytes written into it
# since its last copy exceed what it held then, and this many (see SeriesAcc.set_values).
_COMPACT_AFTER_BYTES = 16 << 20


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
                mask = bool_np(self.data.column(call.filter))
            if arg is not None:
                nn = valid_np(self.data.column(arg))
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


def count_expr(name: str, w: np.ndarray | None, ctx: ChunkContext) -> pl.Expr:
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
        return [count_expr(f"_p{self.i}", ctx.weight(self.call), ctx)]

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
        exprs = [count_expr(f"_p{self.i}_n", w, ctx)]
        if self.exact:
            limbs = to_limbs(col)
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
            if self.rows_since_carry >= NORMALIZE_ROWS:
                normalize(limbs)
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
            return limbs_to_decimal(limbs, valid, self.scale)  # type: ignore[arg-type]
        return with_validity(state["f"], valid, pa.float64())  # type: ignore[arg-type]

    def output(self, state: dict[str, object]) -> pa.Array:
        n = state["n"]
        assert isinstance(n, np.ndarray)
        if not self.avg:
            return self._sum(state).cast(self.out_type)
        valid = n != 0
        if self.exact:
            total = limbs_to_float([state[f"l{k}"] for k in range(4)])  # type: ignore[misc]
            total = total / (10.0**self.scale)
        else:
            total = state["f"]  # type: ignore[assignment]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(valid, total / np.where(valid, n, 1), 0.0)
        return with_validity(mean, valid, pa.float64()).cast(self.out_type)

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self._sum(state), pa.array(state["n"], type=pa.int64())]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        col = rows.column(self.sum_name)
        self.st["n"][slots] = rows.column(f"a{self.i}_n").fill_null(0).to_numpy()
        if self.exact:
            limbs = to_limbs(col.cast(pa.decimal128(38, self.scale)))
            valid = valid_np(col)
            for k in range(4):
                v = limbs[k] if valid is None else np.where(valid, limbs[k], 0)
                self.st[f"l{k}"][slots] = v
        else:
            self.st["f"][slots] = pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy()


class BoolAcc(_NumpyAcc):
    """bool_and / bool_or as counts of true and false values."""

    _arrays = (("t", np.int64), ("f", np.int64))

    def prepare(self, ctx: ChunkContext) -> list[pl.Expr]:
        x = bool_np(ctx.data.column(self.call.args[0]))
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
        return with_validity(value, valid, pa.bool_())

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [pa.array(state["t"], type=pa.int64()), pa.array(state["f"], type=pa.int64())]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        self.st["t"][slots] = rows.column(f"a{self.i}_t").fill_null(0).to_numpy()
        self.st["f"][slots] = rows.column(f"a{self.i}_f").fill_null(0).to_numpy()


class SeriesAcc(Acc):
    """State as one polars series (any type), its value the aggregate's result."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema, dtype: pl.DataType) -> None:
        super().__init__(index, call, input_schema)
        self.values = pl.Series(f"a{index}", [], dtype=dtype)
        self._variable_width = dtype in (pl.String, pl.Binary)
        self._written_bytes = 0  # into a variable-width series since it was last copied
        self._held_bytes = 0  # what it held then

    def set_values(self, slots: np.ndarray, values: pl.Series) -> None:
        """``values[slots] = values``. A polars string (or binary) series only appends:
        the bytes of the values it replaces stay in its buffers, so a group whose 10 MB
        result is rewritten each epoch would cost 10 MB more each time. Once the bytes
        written since the last copy outgrow what the series held then, it is copied
        without them (through Arrow), which keeps the copies' cost in proportion to the
        bytes written."""
        self.values.scatter(slots, values)
        if not self._variable_width:
            return
        self._written_bytes += int(values.estimated_size())
        if self._written_bytes > max(_COMPACT_AFTER_BYTES, self._held_bytes):
            self.values = pl.Series(self.values.name, self.values.to_arrow()).cast(
                self.values.dtype
            )
            self._held_bytes = int(self.values.estimated_size())
            self._written_bytes = 0

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
        self.set_values(slots, values)


class MinMaxAcc(SeriesAcc):
    """min / max over an append-only input: the running extreme."""

    def __init__(self, index: int, call: AggCall, input_schema: Schema) -> None:
        arg_type = arrow_type_of(input_schema[call.args[0]].type)
        super().__init__(index, call, input_schema, polars_dtype(arg_type))
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
        self.set_values(slots, new.to_series())


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
        return with_validity(state["v"], state["ok"], None).cast(self.out_type)  # type: ignore[arg-type]

    def columns(self, state: dict[str, object]) -> list[pa.Array]:
        return [self.output(state)]

    def load(self, slots: np.ndarray, rows: pa.Table) -> None:
        col = rows.column(f"a{self.i}")
        self.st["ok"][slots] = col.is_valid().to_numpy(zero_copy_only=False)
        self.st["v"][slots] = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)


class StringAggAcc(SeriesAcc):
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
        self.set_values(slots, new.to_series())
