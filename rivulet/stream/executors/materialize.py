"""Materialize: writes a stream into a table's or MV's state table, then passes it on.

For a table (``conflict="overwrite"``, RisingWave's default), a chunk says what should
become true per key - Insert/UpdateInsert rows are upserts, Delete/UpdateDelete rows remove
their key. The executor looks the keys up (this epoch's writes first, then committed
state) and emits the change chunk that gets there: Insert for a new key,
UpdateDelete/UpdateInsert for a replaced row, Delete for a removed one. For an MV
(``conflict="none"``) the input already is such a change stream; it is written as is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import VNODE_COLUMN, Op, StreamChunk
from rivulet.storage.state_table import StateTable, last_per_key
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Message

_EXISTS = "__exists"


class MaterializeExecutor(Executor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        state: StateTable,
        *,
        conflict: str,
        fresh_inserts: bool = False,
    ) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.state = state
        self.conflict = conflict
        # Inserts of generated row ids never meet an existing key: no lookup needed.
        self.fresh_inserts = fresh_inserts
        self.state_tables = [state]

    async def execute(self) -> AsyncIterator[Message]:
        async for msg in self.input.execute():
            if isinstance(msg, StreamChunk):
                if self.conflict == "overwrite" and not (
                    self.fresh_inserts and bool((msg.ops == Op.INSERT).all())
                ):
                    out = await self.ctx.run_blocking(lambda cur, m=msg: self.overwrite(m, cur))
                else:
                    out = await self.ctx.run_compute(lambda m=msg: self.write(m), msg.num_rows)
                if out is not None and out.num_rows:
                    yield out
                continue
            self.seal(msg)
            yield msg

    def write(self, chunk: StreamChunk) -> StreamChunk:
        """An MV: the change stream is consistent; write it as it is."""
        data = self.state.with_vnodes(chunk.data.rename_columns(self.state.schema.column_names))
        self.state.write(
            StreamChunk(data.cast(self.state.arrow_schema()), chunk.ops), overwrites=False
        )
        return chunk

    def overwrite(self, chunk: StreamChunk, cur: duckdb.DuckDBPyConnection) -> StreamChunk | None:
        """A table: make each key's last row in ``chunk`` true (present or deleted)."""
        state = self.state
        names = state.schema.column_names
        data = state.with_vnodes(chunk.data.rename_columns(names)).cast(state.arrow_schema())
        present = chunk.is_insert()
        key_names = state.schema.key_names
        wanted = last_per_key(data.append_column(_EXISTS, pa.array(present)), key_names)
        before = state.lookup(wanted.select(key_names), state.overlay_layers(), cur)

        exists = wanted.column(_EXISTS)
        after_present = wanted.filter(exists).drop_columns([_EXISTS])
        deleted_keys = wanted.filter(pc.invert(exists)).select(key_names)
        before_keys = before.select(key_names)
        replaced_old = before.join(
            after_present.select(key_names), key_names, join_type="left semi"
        )
        removed = before.join(deleted_keys, key_names, join_type="left semi")
        inserted = after_present.join(before_keys, key_names, join_type="left anti")
        replaced_new = after_present.join(before_keys, key_names, join_type="left semi")

        parts: list[StreamChunk] = []
        if removed.num_rows:
            parts.append(StreamChunk.deletes(removed))
        if replaced_old.num_rows:
            parts.append(_update_pairs(replaced_old, replaced_new, key_names))
        if inserted.num_rows:
            parts.append(StreamChunk.inserts(inserted))
        if not parts:
            return None
        schema = state.arrow_schema()
        changes = StreamChunk.concat([StreamChunk(p.data.cast(schema), p.ops) for p in parts])
        state.write(changes, overwrites=before.num_rows > 0)
        return StreamChunk(changes.data.drop_columns([VNODE_COLUMN]), changes.ops)


def _update_pairs(old: pa.Table, new: pa.Table, key_names: list[str]) -> StreamChunk:
    """UpdateDelete/UpdateInsert pairs, each old row directly followed by its new row."""
    order = [(k, "ascending") for k in key_names]
    old = old.sort_by(order)
    new = new.sort_by(order)
    return StreamChunk.updates(old, new)
