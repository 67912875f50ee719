"""Hash join: an equi-join of two change streams, maintained incrementally.

Both sides arrive hashed by their join key, so every row of a key meets the other side's
rows of that key in this actor. Each side's rows live in a state table keyed by
``(join key, side stream key)``; a side that an outer join preserves also stores its
*degree*, the number of rows of the other side it matches (ON condition included), so
that the join knows when a row's NULL-padded version must appear or disappear.

A chunk from one side is handled at once, vectorized:

1. its rows go into its side's state (rows with a NULL join key never match anything and
   are not stored; a preserved side pads them);
2. the other side's rows for the chunk's distinct keys are taken from an in-memory cache,
   filled lazily from the state table (this epoch's overlays first, then DuckDB), so it is
   rebuilt by itself after recovery or a reschedule;
3. a polars join on the keys gives (chunk row, cached row) pairs; the ON condition filters
   them (DuckDB); the output is the pairs, as inserts for the chunk's inserts and deletes
   for its deletes, in chunk order;
4. outer joins: a preserved chunk row without a match is NULL-padded; a preserved row of
   the other side whose degree goes from 0 to more retracts its padded row (emitted before
   the pairs), one whose degree drops to 0 gets it back (emitted after them).

Every retraction therefore retracts a row emitted before, exactly. Updates leave as
Delete + Insert pairs.

A side's state keeps only the input columns the join's consumers read (plus its join key
and stream key; the planner decides, ``prune_join_columns``): the others are never stored
and leave the join as NULL, so that a bid-auction join does not store whole bids.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import Op, StreamChunk
from rivulet.common.columns import plain_values
from rivulet.storage.state_table import StateTable
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.executors.two_input import LEFT, RIGHT, aligned
from rivulet.stream.expression import ExprSet, evaluate_predicate
from rivulet.stream.message import Barrier, Message
from rivulet.stream.plan import JoinKind

DEGREE_COLUMN = "_degree"
# A side's cache is dropped at a barrier once it holds more than this many bytes of rows
# or keys (it refills lazily from the state table).
CACHE_MAX_BYTES = 128 << 20
CACHE_MAX_KEYS = 1_000_000

_LI = "__li"  # row index in the chunk
_RI = "__ri"  # row index in the cache


# ------------------------------------------------------------------ key frames
def _common_key_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides' values of a key column are compared in (None: as they are).
    Mirrors how the vnode hash canonicalizes a hash family."""
    if a == b:
        return None

    def integral(t: pa.DataType) -> bool:
        return pa.types.is_integer(t) or pa.types.is_boolean(t)

    def numeric(t: pa.DataType) -> bool:
        return integral(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)

    def text(t: pa.DataType) -> bool:
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    if integral(a) and integral(b):
        return pa.int64()
    if numeric(a) and numeric(b):
        return pa.float64()
    if text(a) and text(b):
        return pa.large_string()
    return a


def _polars_column(arr: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column polars can import, with the same equalities as the original."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = plain_values(arr)
    t = arr.type
    if t == pa.month_day_nano_interval():
        # Its 16 bytes per value, as a binary (zero copy).
        return pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(16), len(arr), arr.buffers()[:2], arr.null_count, arr.offset
        )
    return arr


def _frame(columns: list[pa.ChunkedArray | pa.Array], names: list[str]) -> pl.DataFrame:
    """Key columns as a polars frame (columns that polars cannot take: as strings)."""
    out: dict[str, pl.Series] = {}
    for name, col in zip(names, columns):
        arr = _polars_column(col)
        try:
            out[name] = pl.Series(name, arr)
        except Exception:
            out[name] = pl.Series(name, pc.cast(arr, pa.large_string()))
    return pl.DataFrame(out)


def _indices(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame.get_column(column).to_numpy().astype(np.int64, copy=False)


def _not_null(columns: list[pa.ChunkedArray]) -> np.ndarray:
    n = len(columns[0])
    valid = np.ones(n, dtype=bool)
    for col in columns:
        if col.null_count:
            valid &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return valid


def _ops(insert: np.ndarray) -> np.ndarray:
    return np.where(insert, Op.INSERT, Op.DELETE).astype(np.int8)


# ----------------------------------------------------------------------- sides
@dataclass(eq=False)
class _Side:
    """One input of the join: its state table and the cache in front of it."""

    index: int
    state: StateTable
    full: pa.Schema  # the input's columns, named c0, c1, ...
    key: list[int]
    stream_key: list[int]
    targets: list[pa.DataType | None]  # per key column: the type keys are compared in
    preserved: bool = False  # an outer join pads this side's unmatched rows
    # Cached rows (the state table's layout, ``[_vnode, c0.., _degree?]``) of the keys in
    # ``loaded``; every key in ``loaded`` has all its rows here.
    rows: pa.Table = None
    # The cached rows' state keys (normalized join key k0.., other stream key columns
    # p0..) and positions (__ri), built when first needed.
    row_index: pl.DataFrame | None = None
    loaded: pl.DataFrame | None = None  # normalized join keys (None: none yet)
    key_names: list[str] = field(default_factory=list)
    pk_names: list[str] = field(default_factory=list)
    pk_extra: list[int] = field(default_factory=list)  # stream key columns not in key

    def __post_init__(self) -> None:
        self.key_names = [f"k{i}" for i in range(len(self.key))]
        self.pk_extra = [i for i in dict.fromkeys(self.stream_key) if i not in self.key]
        self.pk_names = self.key_names + [f"p{i}" for i in self.pk_extra]
        names = self.state.schema.column_names
        self.has_degree = DEGREE_COLUMN in names
        # The input columns the state keeps (``c<i>``): those the join's consumers read,
        # its keys and its stream key; the others leave the join as NULL.
        self.kept = [int(n[1:]) for n in names if n != DEGREE_COLUMN]
        self.kept_names = [f"c{i}" for i in self.kept]
        self.width = len(self.full)
        self.state_arrow = self.state.arrow_schema()
        self.input_arrow = pa.schema(list(self.state_arrow)[1 : 1 + len(self.kept)])
        self.clear_cache()

    def clear_cache(self) -> None:
        self.rows = self.state_arrow.empty_table()
        self.row_index = None
        self.loaded = None

    def cache_too_big(self) -> bool:
        keys = self.loaded.height if self.loaded is not None else 0
        return keys > CACHE_MAX_KEYS or self.rows.nbytes > CACHE_MAX_BYTES

    def keys_of(self, table: pa.Table) -> pl.DataFrame:
        """Normalized join keys of rows in the input layout (``c<i>`` columns)."""
        cols = []
        for k, target in zip(self.key, self.targets):
            col = table.column(f"c{k}")
            cols.append(col if target is None else pc.cast(col, target))
        return _frame(cols, self.key_names)

    def pk_frame(self, table: pa.Table, start: int | None = None) -> pl.DataFrame:
        """The state keys of rows (normalized join key, then the other stream key
        columns); with their positions from ``start`` on as __ri if given."""
        frame = self.keys_of(table)
        if self.pk_extra:
            extra_names = self.pk_names[len(self.key) :]
            extra = _frame([table.column(f"c{i}") for i in self.pk_extra], extra_names)
            frame = pl.concat([frame, extra], how="horizontal")
        if start is not None:
            frame = frame.with_columns(
                pl.Series(_RI, np.arange(start, start + table.num_rows, dtype=np.int64))
            )
        return frame

    def cache_index(self) -> pl.DataFrame:
        if self.row_index is None:
            self.row_index = self.pk_frame(self.rows, 0)
        return self.row_index

    def append_rows(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        start = self.rows.num_rows
        self.rows = pa.concat_tables([self.rows, rows.cast(self.state_arrow)])
        if self.rows.column(0).num_chunks > 64:
            self.rows = self.rows.combine_chunks()
        if self.row_index is not None:
            more = self.pk_frame(rows, start)
            self.row_index = pl.concat([self.row_index, more], how="vertical_relaxed")

    def keep_rows(self, keep: np.ndarray) -> None:
        """Keep only the cached rows at the (sorted) positions ``keep``."""
        self.rows = self.rows.take(pa.array(keep, pa.int64()))
        if self.row_index is not None:
            self.row_index = self.row_index[keep].with_columns(
                pl.Series(_RI, np.arange(len(keep), dtype=np.int64))
            )

    def mark_loaded(self, keys: pl.DataFrame) -> None:
        if self.loaded is None:
            self.loaded = keys
        else:
            self.loaded = pl.concat([self.loaded, keys], how="vertical_relaxed")

    def full_columns(self, rows: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
        """All the input's columns for rows holding the kept ones (the others NULL)."""
        n = rows.num_rows
        kept = set(self.kept)
        return [
            rows.column(f"c{i}") if i in kept else pa.nulls(n, self.full.field(i).type)
            for i in range(self.width)
        ]


# -------------------------------------------------------------------- executor
class HashJoinExecutor(Executor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        left: Executor,
        right: Executor,
        *,
        kind: JoinKind,
        left_key: list[int],
        right_key: list[int],
        left_stream_key: list[int],
        right_stream_key: list[int],
        left_state: StateTable,
        right_state: StateTable,
        condition: ExprSet | str | None,
    ) -> None:
        super().__init__(ctx, schema)
        self.inputs = (left, right)
        self.kind = kind
        if isinstance(condition, str):
            condition = ExprSet.plain([condition])
        self.condition = condition
        full = [
            pa.schema([pa.field(f"c{i}", f.type) for i, f in enumerate(e.schema.arrow())])
            for e in (left, right)
        ]
        targets = [
            _common_key_type(full[0].field(a).type, full[1].field(b).type)
            for a, b in zip(left_key, right_key)
        ]
        self.sides = (
            _Side(LEFT, left_state, full[0], left_key, left_stream_key, targets),
            _Side(RIGHT, right_state, full[1], right_key, right_stream_key, targets),
        )
        for side in self.sides:
            side.preserved = kind is JoinKind.FULL or kind is (
                JoinKind.LEFT if side.index == LEFT else JoinKind.RIGHT
            )
            if side.preserved and not side.has_degree:
                raise ValueError(f"the {kind.value} join's preserved side needs a degree column")
        self.state_tables = [left_state, right_state]
        self._arrow = schema.arrow()
        self._vnodes = ctx.vnodes.copy()

    async def execute(self) -> AsyncIterator[Message]:
        async for item in aligned(self.ctx.actor_id, self.inputs):
            if isinstance(item, Barrier):
                self.seal(item)
                for side in self.sides:
                    if side.cache_too_big():
                        side.clear_cache()
                yield item
                continue
            side, chunk = item
            if chunk.num_rows == 0:
                continue
            out = await self.ctx.run_blocking(lambda cur, s=side, c=chunk: self.apply(s, c, cur))
            if out is not None and out.num_rows:
                yield out

    # ------------------------------------------------------------------ a chunk
    def apply(
        self, side_index: int, chunk: StreamChunk, cur: duckdb.DuckDBPyConnection
    ) -> StreamChunk | None:
        """The join's output for a chunk of one side; updates both sides' state."""
        if not np.array_equal(self._vnodes, self.ctx.vnodes):
            # Vnodes moved: other actors may have changed the rows of keys cached here.
            self._vnodes = self.ctx.vnodes.copy()
            for side in self.sides:
                side.clear_cache()
        s = self.sides[side_index]
        o = self.sides[1 - side_index]
        data = chunk.data
        if len(s.kept) < s.width:
            data = data.select(s.kept)
        data = data.rename_columns(s.kept_names)
        if not data.schema.equals(s.input_arrow):
            data = data.cast(s.input_arrow)
        n = data.num_rows
        insert = chunk.is_insert()
        valid = _not_null([data.column(f"c{k}") for k in s.key])
        valid_idx = np.flatnonzero(valid)

        # Match the chunk's rows with the other side's rows of the same keys.
        li = ri = np.empty(0, dtype=np.int64)
        probe: pl.DataFrame | None = None
        if len(valid_idx):
            probe = s.keys_of(data).with_columns(pl.Series(_LI, np.arange(n, dtype=np.int64)))
            if len(valid_idx) < n:
                probe = probe.filter(pl.Series(valid))
            self._load(o, s, data, probe, cur)
            if o.rows.num_rows:
                index = o.cache_index().select([*o.key_names, _RI])
                pairs = probe.join(index, on=s.key_names, how="inner", maintain_order="left_right")
                li, ri = _indices(pairs, _LI), _indices(pairs, _RI)
        matched = self._pairs(s, data, li, o, ri)
        if self.condition is not None and len(li):
            mask, errors = evaluate_predicate(cur, matched, self.condition)
            self.ctx.report_row_errors("HashJoin", errors)
            if not mask.all():
                li, ri = li[mask], ri[mask]
                matched = matched.filter(pa.array(mask))
        counts = np.bincount(li, minlength=n) if s.preserved else None

        # Output: padded rows of the other side that now match go first, then the chunk's
        # rows in order (pairs, or padded when a preserved row has none), then padded
        # rows of the other side that no longer match.
        parts: list[tuple[pa.Table, np.ndarray]] = []
        after: tuple[pa.Table, np.ndarray] | None = None
        if o.preserved and len(li):
            before, after = self._other_degrees(o, ri, np.where(insert[li], 1, -1))
            if before is not None:
                parts.append(before)
        if counts is not None:
            pad = np.flatnonzero(counts == 0)
            padded = self._padded(s, data.take(pa.array(pad)))
            order = np.argsort(np.concatenate([li, pad]), kind="stable")
            middle = pa.concat_tables([matched, padded]).take(pa.array(order))
            parts.append((middle, _ops(np.concatenate([insert[li], insert[pad]])[order])))
        elif len(li):
            parts.append((matched, _ops(insert[li])))
        if after is not None:
            parts.append(after)

        self._write_own(s, data, chunk.ops, valid_idx, counts, probe)
        if not parts:
            return None
        out = pa.concat_tables([t for t, _ in parts]) if len(parts) > 1 else parts[0][0]
        ops = np.concatenate([o_ for _, o_ in parts])
        return StreamChunk(out.rename_columns(self.schema.names).cast(self._arrow), ops)

    def _pairs(
        self, s: _Side, data: pa.Table, li: np.ndarray, o: _Side, ri: np.ndarray
    ) -> pa.Table:
        """Joined rows (left columns, then right columns) for index pairs."""
        n = data.num_rows
        if len(li) == n and n and li[0] == 0 and li[-1] == n - 1 and (np.diff(li) == 1).all():
            mine = s.full_columns(data)  # every row matched once, in order: no copy
        else:
            mine = s.full_columns(data.take(pa.array(li)))
        theirs = o.full_columns(o.rows.select(o.kept_names).take(pa.array(ri)))
        cols = mine + theirs if s.index == LEFT else theirs + mine
        return pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])

    def _padded(self, s: _Side, rows: pa.Table) -> pa.Table:
        """Rows of side ``s`` with the other side's columns NULL."""
        o = self.sides[1 - s.index]
        n = rows.num_rows
        mine = s.full_columns(rows)
        nulls = [pa.nulls(n, f.type) for f in o.full]
        cols = mine + nulls if s.index == LEFT else nulls + mine
        return pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])

    def _other_degrees(
        self, o: _Side, ri: np.ndarray, signs: np.ndarray
    ) -> tuple[tuple[pa.Table, np.ndarray] | None, tuple[pa.Table, np.ndarray] | None]:
        """Apply the chunk's matches to the degrees of the other side's cached rows: their
        new degrees go to the cache and the state table; padded rows to retract (degree
        left 0) and to emit (degree back to 0)."""
        delta = np.bincount(ri, weights=signs, minlength=o.rows.num_rows).astype(np.int64)
        touched = np.flatnonzero(delta)
        if not len(touched):
            return None, None
        position = o.rows.schema.get_field_index(DEGREE_COLUMN)
        degree = np.asarray(o.rows.column(position).to_numpy(), dtype=np.int64).copy()
        d0 = degree[touched]
        d1 = d0 + delta[touched]
        if (d1 < 0).any():
            raise RuntimeError(f"join degree below zero in actor {self.ctx.actor_id}")
        degree[touched] = d1
        o.rows = o.rows.set_column(position, DEGREE_COLUMN, pa.array(degree, pa.int64()))
        changed = o.rows.take(pa.array(touched))
        o.state.write(StreamChunk.inserts(changed), overwrites=True)
        unpad = touched[(d0 == 0) & (d1 > 0)]
        repad = touched[(d0 > 0) & (d1 == 0)]
        before = after = None
        if len(unpad):
            rows = o.rows.take(pa.array(unpad))
            before = (self._padded(o, rows), np.full(len(unpad), Op.DELETE, np.int8))
        if len(repad):
            rows = o.rows.take(pa.array(repad))
            after = (self._padded(o, rows), np.full(len(repad), Op.INSERT, np.int8))
        return before, after

    def _write_own(
        self,
        s: _Side,
        data: pa.Table,
        ops: np.ndarray,
        valid_idx: np.ndarray,
        counts: np.ndarray | None,
        probe: pl.DataFrame | None,
    ) -> None:
        """The chunk's rows (those with a join key) into their side's state and cache."""
        if not len(valid_idx):
            return
        rows = data if len(valid_idx) == data.num_rows else data.take(pa.array(valid_idx))
        if s.has_degree:
            degree = counts[valid_idx] if counts is not None else np.zeros(len(valid_idx))
            rows = rows.append_column(DEGREE_COLUMN, pa.array(degree, pa.int64()))
        rows = s.state.with_vnodes(rows)
        own_ops = ops[valid_idx]
        s.state.write(StreamChunk(rows, own_ops), overwrites=False)
        if s.loaded is None or probe is None:
            return
        # The cache holds every row of its loaded keys: keep it so.
        hit = probe.join(s.loaded, on=s.key_names, how="semi")
        if hit.height == 0:
            return
        position = np.full(data.num_rows, -1, dtype=np.int64)
        position[valid_idx] = np.arange(len(valid_idx))
        idx = position[_indices(hit, _LI)]
        ops_hit = own_ops[idx]
        present = (ops_hit == Op.INSERT) | (ops_hit == Op.UPDATE_INSERT)
        if present.all():
            s.append_rows(rows if len(idx) == rows.num_rows else rows.take(pa.array(idx)))
            return
        # Deletes and updates: drop every cached version of the chunk's keys, then add
        # each key's last version if it is present.
        changed = rows.take(pa.array(idx))
        keys = s.pk_frame(changed).with_columns(pl.Series(_LI, np.arange(len(idx))))
        last = keys.unique(subset=s.pk_names, keep="last", maintain_order=True)
        last_idx = _indices(last, _LI)
        last_idx = last_idx[present[last_idx]]
        cached = s.cache_index()
        keep = cached.join(keys, on=s.pk_names, how="anti", nulls_equal=True)
        s.keep_rows(np.sort(_indices(keep, _RI)))
        s.append_rows(changed.take(pa.array(last_idx)))

    # ------------------------------------------------------------------- loading
    def _load(
        self,
        o: _Side,
        s: _Side,
        data: pa.Table,
        probe: pl.DataFrame,
        cur: duckdb.DuckDBPyConnection,
    ) -> None:
        """Make sure the other side's cache holds every row of the chunk's keys."""
        missing = probe
        if o.loaded is not None:
            missing = probe.join(o.loaded, on=s.key_names, how="anti")
            if missing.height == 0:
                return
        distinct = missing.unique(subset=s.key_names, keep="first", maintain_order=True)
        # The keys in the chunk's own types; DuckDB compares them with the other side's.
        rep = data.take(pa.array(_indices(distinct, _LI)))
        keys = pa.Table.from_arrays(
            [rep.column(f"c{k}") for k in s.key], names=[f"c{k}" for k in o.key]
        )
        o.append_rows(self._lookup(o, keys, cur))
        o.mark_loaded(distinct.select(s.key_names))

    def _lookup(self, o: _Side, keys: pa.Table, cur: duckdb.DuckDBPyConnection) -> pa.Table:
        """Every visible row of side ``o`` with one of the join keys (``keys``, named as
        ``o``'s columns): this epoch's and uncommitted epochs' overlays over the committed
        table. A NULL key matches nothing."""
        layers = o.state.overlay_layers()
        return o.state.read_visible(cur, layers, keys, keys.column_names, nulls_equal=False)


__all__ = ["CACHE_MAX_BYTES", "CACHE_MAX_KEYS", "DEGREE_COLUMN", "HashJoinExecutor"]
