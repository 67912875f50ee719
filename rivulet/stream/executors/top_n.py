"""Top-N: ORDER BY ... LIMIT n OFFSET m, over the whole input or per group.

The output is the change stream of the rows ranked ``[offset, offset + limit)`` (per
group): an Insert when a row enters that range, a Delete when it leaves, an
UpdateDelete/UpdateInsert pair when a row in it changes but stays.

State, as RisingWave keeps it: the state table holds every input row (keyed by the stream
key), so that a delete inside the top-N can pull the next row up. In front of it, a cache
holds the first rows of each group in sort order - up to ``capacity`` of them, a little
more than ``offset + limit`` so that deletes rarely need a reload. Invariant: a group's
cached rows are exactly its first rows in sort order; a group is *complete* when the cache
holds all its rows, otherwise its *bound* (the last row cached when it was last filled) says
where the cache stops: a new row that sorts after the bound stays in the state table only.
When deletes leave an incomplete group with fewer than ``offset + limit`` cached rows, its
first ``capacity`` rows are read back from the state table (committed rows in DuckDB
merged with this actor's uncommitted overlays). The cache is rebuilt lazily from the state
table after a restart or recovery.

Append-only input (no row ever leaves) keeps only the first ``offset + limit`` rows of each
group in the state table: a row pushed out can never come back.

Order: the ORDER BY columns with their direction and NULL placement (PostgreSQL: NULLS LAST
for ASC, NULLS FIRST for DESC, as the planner passes them), then the stream key ascending
(NULLs last). Ties in the ORDER BY columns are thus broken by the stream key: the result is
always one of the valid answers of ``ORDER BY ... LIMIT``, and always the same one.

Per epoch (its chunks are applied together at the barrier, or every ``BATCH_ROWS`` rows):
the net change per key (its last op) is applied to the cached rows of the groups it
touches in one vectorized pass (Arrow sort and numpy), the top range is compared before
and after, and one consolidated change set is emitted.

Per-group top-N is what ``row_number() OVER (PARTITION BY g ORDER BY o) <= n`` plans to;
``rank_output`` then adds each row's row_number as a last column (a row whose position
changes is updated). A new job's actor never reads state for a group it has not seen (it
caches every group it writes); a rebuilt one reads state once its first epoch committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.common.columns import differs
from rivulet.storage.state_table import StateTable, quote_ident
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.executors.epoch_batched import EpochBatchedExecutor

# A constant column standing for "the one group" when there is no GROUP key.
_G = "__topn_group"
_COMPLETE = "__complete"
_MARK = "__mark"
# The row_number column a top-N planned from ``row_number() OVER (...) <= n`` outputs.
_RANK = "__rank"
# Reloads read this many rows beyond offset + limit (at least), to absorb deletes.
MIN_SPARE_ROWS = 64


def key_ids(parts: Sequence[pa.Table], cols: Sequence[str]) -> list[np.ndarray]:
    """For each table, an int64 id per row such that rows with equal ``cols`` (NULLs
    equal to each other) get equal ids across all tables. Vectorized, null-safe."""
    sizes = [p.num_rows for p in parts]
    if list(cols) == [_G]:  # the one group of a top-N without GROUP key
        return [np.zeros(n, dtype=np.int64) for n in sizes]
    total = sum(sizes)
    if len(cols) == 1 and total:
        # One integer column without NULLs: its values are the ids.
        column = [p.column(cols[0]) for p in parts]
        if pa.types.is_integer(column[0].type) and not any(c.null_count for c in column):
            return [np.asarray(c.to_numpy(), dtype=np.int64) for c in column]
    ids = np.zeros(total, dtype=np.int64)
    for c in cols:
        arrays = [a for p in parts for a in p.column(c).chunks]
        if not arrays or total == 0:
            break
        arr = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
        enc = pc.dictionary_encode(arr, null_encoding="encode")
        codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        _, ids = np.unique(ids * (len(enc.dictionary) + 1) + codes, return_inverse=True)
        ids = ids.astype(np.int64, copy=False)
    return list(np.split(ids, np.cumsum(sizes)[:-1]))


def diff_by_key(
    old: pa.Table, new: pa.Table, key: Sequence[str], compare: Sequence[str]
) -> StreamChunk | None:
    """The changes that turn result rows ``old`` into ``new`` (rows identified by
    ``key``): deletes, then update pairs for kept keys whose ``compare`` columns changed
    (NULL equals NULL), then inserts. None when nothing changed. Shared by top-N and
    the window functions, which both recompute a partition's rows and emit the
    difference."""
    if old.num_rows == 0 and new.num_rows == 0:
        return None
    k_old, k_new = key_ids([old, new], key)
    in_new = np.isin(k_old, k_new)
    in_old = np.isin(k_new, k_old)
    parts: list[StreamChunk] = []
    removed = old.filter(pa.array(~in_new))
    if removed.num_rows:
        parts.append(StreamChunk.deletes(removed))
    if in_new.any():
        # Pair each kept old row with the new row of its key.
        o_idx = np.flatnonzero(in_new)
        n_idx = np.flatnonzero(in_old)
        o_idx = o_idx[np.argsort(k_old[o_idx], kind="stable")]
        n_idx = n_idx[np.argsort(k_new[n_idx], kind="stable")]
        old_kept = old.take(pa.array(o_idx))
        new_kept = new.take(pa.array(n_idx))
        changed = np.zeros(len(o_idx), dtype=bool)
        for name in compare:
            a = old_kept.column(name).combine_chunks()
            b = new_kept.column(name).combine_chunks()
            changed |= differs(a, b)
        idx = np.flatnonzero(changed)
        if len(idx):
            rows = pa.array(idx)
            parts.append(StreamChunk.updates(old_kept.take(rows), new_kept.take(rows)))
    added = new.filter(pa.array(~in_old))
    if added.num_rows:
        parts.append(StreamChunk.inserts(added))
    return StreamChunk.concat(parts) if parts else None


def _group_starts(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For contiguous group ids: each row's rank inside its group, and each row's group
    ordinal (0, 1, ... in order of appearance)."""
    n = len(gid)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new = np.ones(n, dtype=bool)
    new[1:] = gid[1:] != gid[:-1]
    ordinal = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    rank = np.arange(n, dtype=np.int64) - firsts[ordinal]
    return rank, ordinal


class TopNExecutor(EpochBatchedExecutor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        state: StateTable,
        order: list[tuple[int, bool, bool]],
        limit: int | None,
        offset: int,
        group_key: list[int],
        *,
        append_only: bool,
        rank_output: bool = False,
        wait_committed: Callable[[int], Awaitable[int]] | None = None,
    ) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.state = state
        self.state_tables = [state]
        self.order = order
        self.offset = offset
        self.end: int | None = None if limit is None else offset + limit
        self.append_only = append_only
        if self.end is None:
            self.capacity: int | None = None
        elif append_only:
            self.capacity = self.end
        else:
            self.capacity = self.end + max(self.end, MIN_SPARE_ROWS)
        names = state.schema.column_names
        self.names = names
        # Columns compared and output: the row's, then its position if asked for.
        self.rank_output = rank_output
        self.out_cols = [*names, _RANK] if rank_output else list(names)
        self.synthetic_group = not group_key
        self.gcols = [names[i] for i in group_key] or [_G]
        # The key rows are identified by in memory (all columns when there is no key:
        # then the state table holds at most one row, e.g. a global aggregate's).
        self.key = [names[i] for i in state.schema.pk] or list(names)
        fields = [f for f in state.arrow_schema() if f.name != VNODE_COLUMN]
        if self.synthetic_group:
            fields.append(pa.field(_G, pa.int8()))
        self.row_schema = pa.schema(fields)
        self._out_schema = schema.arrow()
        self.cache: pa.Table = self.row_schema.empty_table()
        gfields = [self.row_schema.field(c) for c in self.gcols]
        self.loaded: pa.Table = pa.schema([*gfields, pa.field(_COMPLETE, pa.bool_())]).empty_table()
        self.bounds: pa.Table = self.row_schema.empty_table()
        self._one_group = pa.table({_G: pa.array([0], pa.int8())})
        # Whether state may hold groups the cache has not seen: False for a new job's
        # actor (it caches every group it writes), so that new groups need no read.
        self.may_have_state = True
        self.wait_committed = wait_committed
        self._started = False

    # ------------------------------------------------------------------ rows
    def _rows(self, data: pa.Table) -> pa.Table:
        """Input or stored columns as cache rows (state column names, stored types)."""
        data = data.rename_columns(self.names[: data.num_columns])
        if self.synthetic_group and _G not in data.column_names:
            data = data.append_column(_G, pa.array(np.zeros(data.num_rows, np.int8)))
        return data.select(self.row_schema.names).cast(self.row_schema)

    def _sort(self, table: pa.Table, gid: np.ndarray, mark: np.ndarray | None = None) -> np.ndarray:
        """Row order: group, ORDER BY columns (direction, NULL placement), stream key
        ascending with NULLs last, then ``mark`` (bounds after equal rows)."""
        cols: dict[str, object] = {"g": pa.array(gid)}
        keys: list[tuple[str, str]] = [("g", "ascending")]
        sort_cols = [(self.names[c], asc, nf) for c, asc, nf in self.order]
        sort_cols += [(k, True, False) for k in self.key]
        for j, (name, asc, nulls_first) in enumerate(sort_cols):
            col = table.column(name)
            if col.type == pa.month_day_nano_interval():
                col = _interval_sort_key(col)
            if col.null_count:
                cols[f"n{j}"] = pc.is_null(col)
                keys.append((f"n{j}", "descending" if nulls_first else "ascending"))
            if pa.types.is_floating(col.type):
                # NaN is the largest number (PostgreSQL, DuckDB); Arrow would put it last.
                cols[f"f{j}"] = pc.fill_null(pc.is_nan(col), False)
                keys.append((f"f{j}", "ascending" if asc else "descending"))
            cols[f"v{j}"] = col
            keys.append((f"v{j}", "ascending" if asc else "descending"))
        if mark is not None:
            cols["m"] = pa.array(mark)
            keys.append(("m", "ascending"))
        sort_table = pa.table(cols)
        return np.asarray(pc.sort_indices(sort_table, sort_keys=keys).to_numpy())

    def _order_sql(self) -> str:
        parts = []
        for c, asc, nulls_first in self.order:
            parts.append(
                f"{quote_ident(self.names[c])} {'ASC' if asc else 'DESC'} "
                f"NULLS {'FIRST' if nulls_first else 'LAST'}"
            )
        parts += [f"{quote_ident(k)} ASC NULLS LAST" for k in self.key]
        return ", ".join(parts)

    def _window(self, table: pa.Table) -> pa.Table:
        """The rows ranked in ``[offset, end)`` of a sorted, group-contiguous table."""
        if table.num_rows == 0:
            if self.rank_output:
                table = table.append_column(_RANK, pa.array([], pa.int64()))
            return table
        (gid,) = key_ids([table], self.gcols)
        rank, _ = _group_starts(gid)
        keep = rank >= self.offset
        if self.end is not None:
            keep &= rank < self.end
        if self.rank_output:
            table = table.append_column(_RANK, pa.array(rank + 1, pa.int64()))
        return table.filter(pa.array(keep))

    # ----------------------------------------------------------------- state
    def _load(self, groups: pa.Table, cur: duckdb.DuckDBPyConnection) -> pa.Table:
        """The first ``capacity`` rows of each group from the state table (committed rows
        overridden by this actor's uncommitted writes), sorted, groups contiguous."""
        layers = self.state.overlay_layers()  # before reading DuckDB: see StateTable.lookup
        select = ", ".join(map(quote_ident, self.state.schema.column_names))
        probe = None if self.synthetic_group else groups
        with self.state.visible(cur, layers, probe=probe, on=self.gcols) as visible:
            sql = f"SELECT {select} FROM {visible} v"
            if self.synthetic_group:
                sql += f" ORDER BY {self._order_sql()}"
                if self.capacity is not None:
                    sql += f" LIMIT {self.capacity}"
            elif self.capacity is not None:
                part = ", ".join(map(quote_ident, self.gcols))
                sql += (
                    f" QUALIFY row_number() OVER (PARTITION BY {part} "
                    f"ORDER BY {self._order_sql()}) <= {self.capacity}"
                )
            rows = self._rows(cur.sql(sql).to_arrow_table())
        (gid,) = key_ids([rows], self.gcols)
        return rows.take(pa.array(self._sort(rows, gid)))

    def _loaded_state(self, rows: pa.Table, groups: pa.Table) -> tuple[np.ndarray, pa.Table]:
        """For freshly loaded ``rows`` of ``groups``: whether each group is complete (all
        its rows loaded), and the bound rows (last loaded) of the incomplete ones."""
        if self.capacity is None or self.append_only:
            return np.ones(groups.num_rows, dtype=bool), rows.schema.empty_table()
        g_rows, g_req = key_ids([rows, groups], self.gcols)
        complete = _counts(g_rows, g_req) < self.capacity
        rank, _ = _group_starts(g_rows)
        return complete, rows.filter(pa.array(rank == self.capacity - 1))

    def _ensure_loaded(self, groups: pa.Table, cur: duckdb.DuckDBPyConnection) -> None:
        """Load the groups the cache has not seen yet."""
        g_new, g_known = key_ids([groups, self.loaded], self.gcols)
        missing = groups.filter(pa.array(~np.isin(g_new, g_known)))
        if missing.num_rows == 0:
            return
        rows = self._load(missing, cur) if self.may_have_state else self.row_schema.empty_table()
        complete, bounds = self._loaded_state(rows, missing)
        self.cache = pa.concat_tables([self.cache, rows]).combine_chunks()
        entries = missing.append_column(_COMPLETE, pa.array(complete))
        self.loaded = pa.concat_tables(
            [self.loaded, entries.cast(self.loaded.schema)]
        ).combine_chunks()
        self.bounds = pa.concat_tables([self.bounds, bounds]).combine_chunks()

    # ----------------------------------------------------------------- apply
    def apply(self, chunk: StreamChunk, cur: duckdb.DuckDBPyConnection) -> StreamChunk | None:
        """Apply a chunk to state and cache; the change of the top range it causes."""
        data = self._rows(chunk.data)
        # The net change per key: its last op in the chunk.
        (k_data,) = key_ids([data], self.key)
        ops = chunk.ops
        net = data
        if len(np.unique(k_data)) < len(k_data):
            _, first_from_end = np.unique(k_data[::-1], return_index=True)
            last = np.sort(len(k_data) - 1 - first_from_end)
            net, ops = data.take(pa.array(last)), ops[last]
        present = (ops == Op.INSERT) | (ops == Op.UPDATE_INSERT)
        if self.synthetic_group:
            groups = self._one_group
            if self.loaded.num_rows == 0:
                self._ensure_loaded(groups, cur)
        else:
            # Every row's group, deleted ones included: a row may move between groups.
            groups = data.select(self.gcols).group_by(self.gcols, use_threads=False).aggregate([])
            groups = groups.select(self.gcols)
            self._ensure_loaded(groups, cur)

        g_cache, g_touched, g_loaded, g_bounds = key_ids(
            [self.cache, groups, self.loaded, self.bounds], self.gcols
        )
        touched = np.isin(g_cache, g_touched)
        old = self.cache.filter(pa.array(touched))
        rest = self.cache.filter(pa.array(~touched))
        old_out = self._window(old)
        loaded_touched = np.isin(g_loaded, g_touched)
        prev_complete = _lookup_bool(
            g_loaded[loaded_touched],
            self.loaded.column(_COMPLETE).filter(pa.array(loaded_touched)),
            g_touched,
        )
        bounds_touched = np.isin(g_bounds, g_touched)
        old_bounds = self.bounds.filter(pa.array(bounds_touched))

        # Cached rows minus the changed keys, plus the rows inserted; cut at the bounds.
        k_old, k_net = key_ids([old, net], self.key)
        kept = old.filter(pa.array(~np.isin(k_old, k_net)))
        inserted = net.filter(pa.array(present))
        combined = pa.concat_tables([kept, inserted, old_bounds])
        mark = np.zeros(combined.num_rows, dtype=np.int8)
        mark[kept.num_rows + inserted.num_rows :] = 1
        (gid,) = key_ids([combined], self.gcols)
        idx = self._sort(combined, gid, mark)
        gid_s, mark_s = gid[idx], mark[idx]
        _, ordinal = _group_starts(gid_s)
        seen = np.cumsum(mark_s, dtype=np.int64)
        firsts = np.flatnonzero(np.r_[True, gid_s[1:] != gid_s[:-1]]) if len(gid_s) else gid_s
        keep = (seen - (seen - mark_s)[firsts][ordinal]) == 0
        idx, gid_s = idx[keep], gid_s[keep]
        rank, _ = _group_starts(gid_s)
        truncated_bounds = combined.schema.empty_table()
        if self.capacity is not None:
            over = rank >= self.capacity
            if over.any():
                truncated_bounds = combined.take(pa.array(idx[rank == self.capacity - 1]))
                idx = idx[~over]
        new = combined.take(pa.array(idx))

        if self.append_only:
            self._write_diff(old, new)
        else:
            # The input is a consistent change stream: an Insert is a new key, so a chunk
            # of inserts overwrites nothing (``write`` notes deletes and updates itself).
            rows = self.state.with_vnodes(chunk.data.rename_columns(self.names))
            self.state.write(
                StreamChunk(rows.cast(self.state.arrow_schema()), chunk.ops), overwrites=False
            )

        # Bookkeeping of the touched groups (in the order of ``groups``): complete flags
        # and bounds. A group cut at the capacity is incomplete, bounded by its last row.
        g_new, g_trunc, g_oldb, g_grp = key_ids(
            [new, truncated_bounds, old_bounds, groups], self.gcols
        )
        truncated = np.isin(g_grp, g_trunc)
        complete = prev_complete & ~truncated
        bound_parts = [truncated_bounds, old_bounds.filter(pa.array(~np.isin(g_oldb, g_trunc)))]
        # Incomplete groups left with too few cached rows are read back from state.
        if self.end is not None and not self.append_only:
            refill = ~complete & (_counts(g_new, g_grp) < self.end)
            if refill.any():
                want = groups.filter(pa.array(refill))
                rows = self._load(want, cur)
                re_complete, re_bounds = self._loaded_state(rows, want)
                g_want = g_grp[refill]
                new = pa.concat_tables([new.filter(pa.array(~np.isin(g_new, g_want))), rows])
                complete[refill] = re_complete
                g_trunc_b, g_old_b, g_want_b = key_ids([*bound_parts, want], self.gcols)
                bound_parts = [
                    bound_parts[0].filter(pa.array(~np.isin(g_trunc_b, g_want_b))),
                    bound_parts[1].filter(pa.array(~np.isin(g_old_b, g_want_b))),
                    re_bounds,
                ]
        self.cache = pa.concat_tables([rest, new]).combine_chunks()
        entries = groups.append_column(_COMPLETE, pa.array(complete)).cast(self.loaded.schema)
        self.loaded = pa.concat_tables(
            [self.loaded.filter(pa.array(~loaded_touched)), entries]
        ).combine_chunks()
        self.bounds = pa.concat_tables(
            [self.bounds.filter(pa.array(~bounds_touched)), *bound_parts]
        ).combine_chunks()
        return self._diff(old_out, self._window(new))

    def _write_diff(self, old: pa.Table, new: pa.Table) -> None:
        """Append-only input: the state table holds exactly the cached rows."""
        k_old, k_new = key_ids([old, new], self.key)
        gone = old.filter(pa.array(~np.isin(k_old, k_new)))
        came = new.filter(pa.array(~np.isin(k_new, k_old)))
        parts = []
        if gone.num_rows:
            parts.append(StreamChunk.deletes(gone))
        if came.num_rows:
            parts.append(StreamChunk.inserts(came))
        if not parts:
            return
        changes = StreamChunk.concat(parts)
        rows = self.state.with_vnodes(changes.data.select(self.names))
        self.state.write(
            StreamChunk(rows.cast(self.state.arrow_schema()), changes.ops),
            overwrites=gone.num_rows > 0,
        )

    def _diff(self, old: pa.Table, new: pa.Table) -> StreamChunk | None:
        """Deletes, then update pairs, then inserts that turn ``old`` into ``new``."""
        out = diff_by_key(old, new, self.key, self.out_cols)
        if out is None:
            return None
        data = out.data.select(self.out_cols).rename_columns(self.schema.names)
        data = data.cast(self._out_schema)
        return StreamChunk(data, out.ops)


_INTERVAL = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def _interval_sort_key(col: pa.ChunkedArray) -> pa.Array:
    """Intervals as PostgreSQL orders them: a month is 30 days, a day 24 hours (Arrow
    cannot sort intervals). Microseconds, NULLs kept."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    f = np.frombuffer(arr.buffers()[1], dtype=_INTERVAL)[arr.offset : arr.offset + len(arr)]
    days = f["months"].astype(np.int64) * 30 + f["days"].astype(np.int64)
    micros = days * 86_400_000_000 + f["nanos"] // 1000
    return pa.array(
        micros, pa.int64(), mask=np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
    )


def _lookup_bool(ids: np.ndarray, values: pa.ChunkedArray, wanted: np.ndarray) -> np.ndarray:
    """``values`` (one per id in ``ids``) for each id in ``wanted``; True when missing."""
    vals = np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)
    out = np.ones(len(wanted), dtype=bool)
    if len(ids) == 0:
        return out
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    pos = np.minimum(pos, len(ids) - 1)
    found = ids[order][pos] == wanted
    out[found] = vals[order][pos][found]
    return out


def _counts(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """How many times each id of ``wanted`` occurs in ``ids``."""
    uniq, counts = np.unique(ids, return_counts=True)
    if len(uniq) == 0:
        return np.zeros(len(wanted), dtype=np.int64)
    pos = np.minimum(np.searchsorted(uniq, wanted), len(uniq) - 1)
    return np.where(uniq[pos] == wanted, counts[pos], 0)
