"""The aggregation minus the actor plumbing (``AggCore``): chunks folded into slots,
outputs and state rows produced per epoch, groups loaded from the committed state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.common.columns import (
    concat_state,
    differs,
    loose_schema,
    to_arrow,
    to_polars,
)
from rivulet.common.types import arrow_type_of
from rivulet.common.vnode import VNODE_COUNT
from rivulet.storage.state_table import StateTable
from rivulet.stream.executor import Schema
from rivulet.stream.executors.aggregate.accumulators import (
    Acc,
    BoolAcc,
    ChunkContext,
    CountAcc,
    MinMaxAcc,
    NumMinMaxAcc,
    StringAggAcc,
    SumAcc,
    count_expr,
)
from rivulet.stream.executors.aggregate.group_index import GroupIndex
from rivulet.stream.executors.aggregate.value_state import ValueAcc
from rivulet.stream.plan import AggCall
from rivulet.stream.state_layouts import ROW_COUNT, uses_value_table


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
        exprs = [count_expr("_rows", sign, ctx)]
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
        rows = self.result.committed_matches(cur, probe)
        if rows.num_rows:
            idx = rows.column("_i").to_numpy()
            found = slots[idx]
            self.row_count[found] = rows.column(ROW_COUNT).to_numpy()
            self.emitted[found] = True
            for acc in self.accs:
                acc.load(found, rows)
        for acc, table in zip(self.value_accs, self.value_tables):
            acc.load_values(slots, table.committed_matches(cur, probe, ["v", "_count"]))

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
            {k: concat_state([b[2][j][k] for b in self._before]) for k in self._before[0][2][j]}
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
            changed |= differs(o, c)
        deleted = np.flatnonzero(before & ~after)
        inserted = np.flatnonzero(~before & after)
        updated = np.flatnonzero(before & after & changed)
        if not (len(deleted) or len(inserted) or len(updated)):
            return Output(None, None)
        names = self.output_arrow.names
        old = pa.Table.from_arrays(old_cols, names=names).cast(self.output_arrow)
        new = pa.Table.from_arrays(new_cols, names=names).cast(self.output_arrow)
        parts = []
        if len(deleted):
            parts.append(StreamChunk.deletes(old.take(pa.array(deleted))))
        if len(inserted):
            parts.append(StreamChunk.inserts(new.take(pa.array(inserted))))
        if len(updated):
            rows = pa.array(updated)
            parts.append(StreamChunk.updates(old.take(rows), new.take(rows)))
        out = StreamChunk.concat(parts)
        return Output(out.data, out.ops)

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
        table = pa.Table.from_arrays(cols, schema=loose_schema(schema, cols)).cast(schema)
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
        data = pa.Table.from_arrays(cols, schema=loose_schema(schema, cols)).cast(schema)
        ops = np.where(n > 0, Op.INSERT, Op.DELETE).astype(np.int8)
        table.write(StreamChunk(data, ops), overwrites=overwrites, unique=True)
