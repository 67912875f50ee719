"""Value state: aggregates kept from their groups' value multisets (a value table per
aggregate): the DISTINCT kinds, and min/max/string_agg over an input that deletes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from rivulet.common.columns import polars_dtype, to_polars
from rivulet.common.types import arrow_type_of
from rivulet.stream.executor import Schema
from rivulet.stream.executors.aggregate.accumulators import ChunkContext, SeriesAcc
from rivulet.stream.executors.aggregate.group_index import GroupIndex, GrowableColumn
from rivulet.stream.plan import AggCall

# A value aggregate sums up its epoch's deltas once they exceed this many rows.
_PENDING_ROWS = 1 << 20


class ValueAcc(SeriesAcc):
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
        dtype = pl.Int64() if self.base == "count" else polars_dtype(out_type)
        super().__init__(index, call, input_schema, dtype)
        self.arg_type = arrow_type_of(input_schema[call.args[0]].type)
        self.v_dtype = polars_dtype(self.arg_type)
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
        self.counts = GrowableColumn(np.dtype(np.int64))
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
        self.set_values(slots, pl.Series(cur + delta["d"].to_numpy()))

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
            self.set_values(slots, new.to_series())
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
        self.set_values(results["slot"].to_numpy(), values.cast(self.values.dtype))

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
