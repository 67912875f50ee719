"""Writing DML into a table: the materialize step with RisingWave's overwrite-on-conflict.

A DML chunk says what should become true per key (rows to upsert, keys to delete). The
writer looks the keys up (own writes first, then committed state), then emits the change
chunk that gets there - Insert for a new key, UpdateDelete/UpdateInsert for a replaced
row, Delete for a removed one - and writes it into the table's state for this epoch. The
change chunk is what downstream operators will consume. Every step is vectorized.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import ROW_ID_COLUMN, VNODE_COLUMN, Op, StreamChunk
from rivulet.storage.state_table import StateTable, last_per_key, quote_ident

_EXISTS = "__exists"


@dataclass(frozen=True, slots=True)
class WriteResult:
    changes: StreamChunk
    rows_affected: int


class RowIdGenerator:
    """Fresh ``_row_id`` values for a table without a primary key (monotonic, unique)."""

    def __init__(self) -> None:
        self._next: int | None = None
        self._lock = threading.Lock()

    def allocate(self, n: int, state: StateTable, cursor: duckdb.DuckDBPyConnection) -> np.ndarray:
        with self._lock:
            if self._next is None:
                row = cursor.execute(
                    f"SELECT max({quote_ident(ROW_ID_COLUMN)}) FROM {state.schema.physical_name}"
                ).fetchall()
                row = row[0] if row else None
                self._next = (int(row[0]) + 1) if row and row[0] is not None else 1
                # Rows still in memory (not yet committed) have ids above the committed max.
                for layer in state.overlay_layers():
                    col = layer.column(ROW_ID_COLUMN)
                    if len(col):
                        self._next = max(self._next, int(pc.max(col).as_py()) + 1)
            start = self._next
            self._next += n
        return np.arange(start, start + n, dtype=np.int64)


class TableWriter:
    """The single writer of one table's state. Hold ``lock`` around ``write``; the
    barrier manager takes it too before sealing the epoch, so a chunk is never split
    across epochs."""

    def __init__(self, state: StateTable, *, has_row_id: bool) -> None:
        self.state = state
        self.has_row_id = has_row_id
        self.lock = asyncio.Lock()
        # Set (under ``lock``) when the table is being dropped: writes are refused.
        self.dropped = False
        self.row_ids = RowIdGenerator()

    # Blocking (DuckDB lookups): call from a worker thread while holding ``lock``.
    def insert(self, rows: pa.Table, cursor: duckdb.DuckDBPyConnection) -> WriteResult:
        """Insert rows (the table's visible columns); an existing key is overwritten."""
        if rows.num_rows == 0:
            return WriteResult(StreamChunk.inserts(self.state.arrow_schema().empty_table()), 0)
        if self.has_row_id:
            ids = self.row_ids.allocate(rows.num_rows, self.state, cursor)
            rows = rows.append_column(ROW_ID_COLUMN, pa.array(ids, pa.int64()))
            data = self.state.with_vnodes(rows).cast(self.state.arrow_schema())
            # Fresh row ids never collide: a pure append, no lookup needed.
            chunk = StreamChunk.inserts(data)
            self.state.write(chunk, overwrites=False)
            return WriteResult(chunk, rows.num_rows)
        data = self.state.with_vnodes(rows)
        return self._apply(data, np.ones(data.num_rows, dtype=bool), cursor, rows.num_rows)

    def delete(self, rows: pa.Table, cursor: duckdb.DuckDBPyConnection) -> WriteResult:
        """Delete the rows with these keys (``rows`` holds ``_vnode`` and all stored columns)."""
        return self._apply(rows, np.zeros(rows.num_rows, dtype=bool), cursor, rows.num_rows)

    def update(
        self, old: pa.Table, new: pa.Table, cursor: duckdb.DuckDBPyConnection
    ) -> WriteResult:
        """Replace each ``old`` row (``_vnode`` and all stored columns) by the ``new`` row
        at the same index (stored columns). A changed key deletes the old key."""
        # Both sides in the stored schema: DuckDB may spell types differently (a
        # timestamptz read back is tz="Etc/UTC", the schema says "UTC").
        schema = self.state.arrow_schema()
        new = self.state.with_vnodes(new).cast(schema)
        data = pa.concat_tables([old.select(schema.names).cast(schema), new])
        present = np.concatenate(
            [np.zeros(old.num_rows, dtype=bool), np.ones(new.num_rows, dtype=bool)]
        )
        return self._apply(data, present, cursor, old.num_rows)

    def _apply(
        self,
        data: pa.Table,
        present: np.ndarray,
        cursor: duckdb.DuckDBPyConnection,
        rows_affected: int,
    ) -> WriteResult:
        """Make each key's last row in ``data`` true: present (upsert) or not (delete)."""
        state = self.state
        key_names = state.schema.key_names
        data = data.select([VNODE_COLUMN, *state.schema.column_names]).cast(state.arrow_schema())
        wanted = last_per_key(data.append_column(_EXISTS, pa.array(present)), key_names)
        before = state.lookup(wanted.select(key_names), state.overlay_layers(), cursor)

        after_present = wanted.filter(wanted.column(_EXISTS)).drop_columns([_EXISTS])
        deleted_keys = wanted.filter(pc.invert(wanted.column(_EXISTS))).select(key_names)
        # Rows that existed and are now replaced or deleted.
        replaced_old = before.join(
            after_present.select(key_names), key_names, join_type="left semi"
        )
        removed = before.join(deleted_keys, key_names, join_type="left semi")
        inserted = after_present.join(before.select(key_names), key_names, join_type="left anti")
        replaced_new = after_present.join(
            before.select(key_names), key_names, join_type="left semi"
        )

        parts: list[StreamChunk] = []
        if removed.num_rows:
            parts.append(StreamChunk.deletes(removed))
        if replaced_old.num_rows:
            parts.append(_update_pairs(replaced_old, replaced_new, key_names))
        if inserted.num_rows:
            parts.append(StreamChunk.inserts(inserted))
        if not parts:
            return WriteResult(StreamChunk.inserts(data.slice(0, 0)), rows_affected)
        changes = StreamChunk.concat([StreamChunk(p.data.cast(data.schema), p.ops) for p in parts])
        state.write(changes, overwrites=before.num_rows > 0)
        return WriteResult(changes, rows_affected)


def _update_pairs(old: pa.Table, new: pa.Table, key_names: list[str]) -> StreamChunk:
    """UpdateDelete/UpdateInsert pairs, each old row directly followed by its new row."""
    old = old.sort_by([(k, "ascending") for k in key_names])
    new = new.sort_by([(k, "ascending") for k in key_names])
    n = old.num_rows
    both = pa.concat_tables([old, new.cast(old.schema)])
    order = np.empty(2 * n, dtype=np.int64)
    order[0::2] = np.arange(n)
    order[1::2] = np.arange(n, 2 * n)
    ops = np.empty(2 * n, dtype=np.int8)
    ops[0::2] = Op.UPDATE_DELETE
    ops[1::2] = Op.UPDATE_INSERT
    return StreamChunk(both.take(pa.array(order)), ops)
