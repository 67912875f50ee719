"""OverWindow: window functions (``f(...) OVER (PARTITION BY ... ORDER BY ... frame)``),
maintained incrementally.

Output: every input column, then one column per window call. A change to one row can
change the window outputs of every row of its partition (a row_number shifts, a running
sum moves), so the unit of work is the partition:

1. State: every input row, in a state table keyed by ``(partition key, stream key)`` and
   distributed by the partition key - an actor holds whole partitions. In front of it a
   cache holds the rows of the partitions touched lately *with their current outputs*.
2. Per epoch (its chunks are applied together at the barrier, or every ``BATCH_ROWS``
   rows, so that a partition many chunks touch is recomputed once): the partitions the
   changes touch are loaded into the cache if they are not there (one DuckDB statement
   over the committed rows and this actor's uncommitted overlays, which also computes
   their outputs); the net change per key turns their old rows into their new rows; one
   DuckDB statement computes every window call over the new rows of all touched
   partitions at once; old and new outputs are compared per key and the difference leaves
   as one change set (Delete, UpdateDelete/UpdateInsert, Insert). Rows whose outputs did
   not change emit nothing.

Ties: the planner appends the input's stream key to the ORDER BY of the calls whose
result depends on the order among peers (row_number, lag, lead, ROWS frames, and as the
argument order of first/last_value over RANGE frames), so that recomputing a partition
always gives the same answer. Window calls are DuckDB SQL over the columns ``c0, c1, ...``
(the binder's rewrites applied: the same SQL a batch query runs); a call that fails on
some row is recomputed with its NULL-on-error form.

The cache is dropped at a barrier once it holds more than ``CACHE_MAX_ROWS`` rows (it
refills from state as chunks touch partitions). An actor rebuilt after recovery or a
reschedule reads state only once the epoch of its first barrier is committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import duckdb
import numpy as np
import pyarrow as pa

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.storage.state_table import StateTable, quote_ident, registered
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.executors.epoch_batched import BATCH_ROWS, EpochBatchedExecutor
from rivulet.stream.executors.top_n import diff_by_key, key_ids
from rivulet.stream.expression import ExprSet, count_errors
from rivulet.stream.message import Barrier

# The cache is dropped at a barrier above this many rows (it refills lazily from state).
CACHE_MAX_ROWS = 1_000_000


class OverWindowExecutor(EpochBatchedExecutor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        state: StateTable,
        partition: list[int],
        calls: ExprSet,
        wait_committed: Callable[[int], Awaitable[int]] | None = None,
    ) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.state = state
        self.state_tables = [state]
        self.calls = calls
        self.wait_committed = wait_committed
        names = state.schema.column_names  # c0, c1, ...: the input's columns
        self.in_names = names
        self.part = [names[i] for i in partition]
        # Rows are identified by (partition key, stream key); by all their columns when
        # the input has no stream key (then it holds at most one row per partition).
        self.key = [names[i] for i in state.schema.pk] or list(names)
        self.w_names = [f"w{j}" for j in range(len(calls.strict))]
        self.in_arrow = pa.schema([f for f in state.arrow_schema() if f.name != VNODE_COLUMN])
        out_arrow = schema.arrow()
        w_fields = [
            pa.field(n, out_arrow.field(len(names) + j).type) for j, n in enumerate(self.w_names)
        ]
        self.cache_arrow = pa.schema([*self.in_arrow, *w_fields])
        self._out_arrow = out_arrow
        self.cache: pa.Table = self.cache_arrow.empty_table()
        # Partition keys whose rows are all in the cache (no partition: one flag).
        self.loaded: pa.Table = pa.schema([self.in_arrow.field(p) for p in self.part]).empty_table()
        self.whole_loaded = False
        # Whether state may hold rows the cache lacks (False for a new job's actor until
        # its cache is first dropped).
        self.may_have_state = True
        self._started = False
        self._vnodes = ctx.vnodes.copy() if ctx is not None else None

    # ----------------------------------------------------------------- running
    def before_barrier(self, barrier: Barrier) -> None:
        if self.cache.num_rows > CACHE_MAX_ROWS:
            self.clear_cache()

    def clear_cache(self) -> None:
        """Forget every cached partition: later chunks reload theirs from state."""
        self.cache = self.cache_arrow.empty_table()
        self.loaded = self.loaded.schema.empty_table()
        self.whole_loaded = False
        self.may_have_state = True

    # ------------------------------------------------------------------ a chunk
    def apply(self, chunk: StreamChunk, cur: duckdb.DuckDBPyConnection) -> StreamChunk | None:
        """Apply a chunk to state and cache; the output changes it causes."""
        if self._vnodes is not None and not np.array_equal(self._vnodes, self.ctx.vnodes):
            # Vnodes moved: partitions cached here may have changed elsewhere.
            self._vnodes = self.ctx.vnodes.copy()
            self.clear_cache()
        data = chunk.data.rename_columns(self.in_names).cast(self.in_arrow)
        ops = chunk.ops
        # The chunk's net change per key: its last op (the input is a consistent stream).
        (k_data,) = key_ids([data], self.key)
        net, net_ops = data, ops
        if len(np.unique(k_data)) < len(k_data):
            _, first_from_end = np.unique(k_data[::-1], return_index=True)
            last = np.sort(len(k_data) - 1 - first_from_end)
            net, net_ops = data.take(pa.array(last)), ops[last]
        present = (net_ops == Op.INSERT) | (net_ops == Op.UPDATE_INSERT)

        # Every partition the chunk touches, deleted rows' included (a row may move).
        if self.part:
            groups = data.select(self.part).group_by(self.part, use_threads=False).aggregate([])
            self._ensure_loaded(groups.select(self.part), cur)
            g_cache, g_groups = key_ids([self.cache, groups], self.part)
            touched = np.isin(g_cache, g_groups)
        else:
            self._ensure_loaded(None, cur)
            touched = np.ones(self.cache.num_rows, dtype=bool)
        old = self.cache.filter(pa.array(touched))
        rest = self.cache.filter(pa.array(~touched))

        k_old, k_net = key_ids([old, net], self.key)
        kept = old.filter(pa.array(~np.isin(k_old, k_net))).select(self.in_names)
        new_rows = pa.concat_tables([kept, net.filter(pa.array(present))])
        new = self._compute(new_rows, cur)

        rows = self.state.with_vnodes(data)
        self.state.write(StreamChunk(rows, chunk.ops), overwrites=False)
        self.cache = pa.concat_tables([rest, new]).combine_chunks()
        return self._diff(old, new)

    # ------------------------------------------------------------------- loading
    def _ensure_loaded(self, groups: pa.Table | None, cur: duckdb.DuckDBPyConnection) -> None:
        """Bring the partitions ``groups`` (all when None) into the cache."""
        if groups is None:
            if self.whole_loaded:
                return
            self.whole_loaded = True
            if self.may_have_state:
                self.cache = pa.concat_tables([self.cache, self._load(None, cur)])
            return
        g_new, g_known = key_ids([groups, self.loaded], self.part)
        missing = groups.filter(pa.array(~np.isin(g_new, g_known)))
        if missing.num_rows == 0:
            return
        if self.may_have_state:
            self.cache = pa.concat_tables([self.cache, self._load(missing, cur)])
        self.loaded = pa.concat_tables([self.loaded, missing.cast(self.loaded.schema)])
        self.loaded = self.loaded.combine_chunks()

    def _load(self, groups: pa.Table | None, cur: duckdb.DuckDBPyConnection) -> pa.Table:
        """The stored rows of partitions ``groups`` (all when None) with their outputs:
        committed rows overridden by this actor's uncommitted writes."""
        layers = self.state.overlay_layers()  # before reading DuckDB: see StateTable.lookup
        committed = self.state.is_committed(cur)
        if not committed and not layers:
            return self.cache_arrow.empty_table()
        select = ", ".join(map(quote_ident, self.state.schema.column_names))
        with self.state.visible(
            cur, layers, probe=groups, on=self.part, committed=committed
        ) as visible:
            return self._run(cur, f"SELECT {select} FROM {visible} v")

    # ---------------------------------------------------------------- computing
    def _compute(self, rows: pa.Table, cur: duckdb.DuckDBPyConnection) -> pa.Table:
        """``rows`` (input columns) with every window call's value, in one statement."""
        if rows.num_rows == 0:
            return self.cache_arrow.empty_table()
        with registered(cur, rows) as (name,):
            return self._run(cur, f"SELECT * FROM {name}")

    def _run(self, cur: duckdb.DuckDBPyConnection, rows_sql: str) -> pa.Table:
        """The window calls over ``rows_sql`` (its safe forms if the strict ones fail)."""
        select = ", ".join(map(quote_ident, self.in_names))

        def run(exprs: list[str]) -> pa.Table:
            calls = "".join(f", {e} AS {quote_ident(n)}" for e, n in zip(exprs, self.w_names))
            sql = f"SELECT {select}{calls} FROM ({rows_sql}) AS input"
            return cur.sql(sql).to_arrow_table()

        try:
            out = run(self.calls.strict)
        except duckdb.InterruptException:
            raise
        except duckdb.Error as exc:
            if not self.calls.can_fail:
                raise
            out = run(self.calls.safe)
            rows = cur.sql(f"SELECT {select} FROM ({rows_sql}) AS input").to_arrow_table()
            self.ctx.report_row_errors("OverWindow", count_errors(cur, rows, self.calls, exc))
        return out.cast(self.cache_arrow)

    # ------------------------------------------------------------------- output
    def _diff(self, old: pa.Table, new: pa.Table) -> StreamChunk | None:
        """Deletes, then update pairs, then inserts that turn ``old`` into ``new``."""
        out = diff_by_key(old, new, self.key, self.cache_arrow.names)
        if out is None:
            return None
        data = out.data.rename_columns(self._out_arrow.names).cast(self._out_arrow)
        return StreamChunk(data, out.ops)


__all__ = ["BATCH_ROWS", "CACHE_MAX_ROWS", "OverWindowExecutor"]
