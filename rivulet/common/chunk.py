"""Stream chunks: the unit of data that flows between operators and into state.

A chunk is an Arrow table whose last column, ``__op``, says what each row does. The op
codes are RisingWave's. A table's DML produces chunks; so will every streaming operator.

An update is an UpdateDelete directly followed by its UpdateInsert (an *update pair*).
Whoever drops rows of a chunk or sends its rows different ways keeps the pairs whole or
breaks them into a Delete and an Insert (``take``, ``unpair``): downstream never sees
half a pair. Both live here, with ``updates``, which builds pairs, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import pyarrow as pa

OP_COLUMN = "__op"
VNODE_COLUMN = "_vnode"
ROW_ID_COLUMN = "_row_id"


class Op(IntEnum):
    INSERT = 1
    DELETE = 2
    UPDATE_DELETE = 3
    UPDATE_INSERT = 4


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """Rows plus an op per row. ``data`` holds the row columns only."""

    data: pa.Table
    ops: np.ndarray  # int8, one per row

    def __post_init__(self) -> None:
        if len(self.ops) != self.data.num_rows:
            raise ValueError("a chunk needs one op per row")

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    @staticmethod
    def inserts(data: pa.Table) -> StreamChunk:
        return StreamChunk(data, np.full(data.num_rows, Op.INSERT, dtype=np.int8))

    @staticmethod
    def deletes(data: pa.Table) -> StreamChunk:
        return StreamChunk(data, np.full(data.num_rows, Op.DELETE, dtype=np.int8))

    @staticmethod
    def updates(old: pa.Table, new: pa.Table) -> StreamChunk:
        """Row i of ``old`` replaced by row i of ``new``: update pairs, each old row
        directly followed by its new one."""
        n = old.num_rows
        both = pa.concat_tables([old, new.cast(old.schema)])
        order = np.empty(2 * n, dtype=np.int64)
        order[0::2] = np.arange(n)
        order[1::2] = np.arange(n, 2 * n)
        ops = np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], dtype=np.int8), n)
        return StreamChunk(both.take(pa.array(order)), ops)

    def update_pairs(self) -> np.ndarray:
        """Where the update pairs begin: positions of an UpdateDelete directly followed by
        an UpdateInsert."""
        ops = self.ops
        if len(ops) < 2:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero((ops[:-1] == Op.UPDATE_DELETE) & (ops[1:] == Op.UPDATE_INSERT))

    def unpair(self, pairs: np.ndarray) -> StreamChunk:
        """The chunk with the update pairs beginning at ``pairs`` made a Delete and an
        Insert (their halves go different ways)."""
        if not len(pairs):
            return self
        ops = self.ops.copy()
        ops[pairs] = Op.DELETE
        ops[pairs + 1] = Op.INSERT
        return StreamChunk(self.data, ops)

    def take(self, keep: np.ndarray) -> StreamChunk:
        """The rows where ``keep`` holds, in order. A pair of which one half is dropped
        leaves a lone Delete or Insert; so does an UpdateDelete or UpdateInsert that had
        no partner to begin with."""
        ops = np.asarray(self.ops)
        n = len(ops)
        ud = ops == Op.UPDATE_DELETE
        ui = ops == Op.UPDATE_INSERT
        whole = np.zeros(n, dtype=bool)  # the first half of a pair kept whole
        if n > 1:
            whole[:-1] = ud[:-1] & ui[1:] & keep[:-1] & keep[1:]
        second = np.zeros(n, dtype=bool)
        second[1:] = whole[:-1]
        out = ops.copy()
        out[ud & ~whole] = Op.DELETE
        out[ui & ~second] = Op.INSERT
        if keep.all():
            return StreamChunk(self.data, out)
        idx = np.flatnonzero(keep)
        return StreamChunk(self.data.take(pa.array(idx)), out[idx])

    def is_insert(self) -> np.ndarray:
        """Rows that add a row (Insert or UpdateInsert)."""
        return (self.ops == Op.INSERT) | (self.ops == Op.UPDATE_INSERT)

    def to_table(self) -> pa.Table:
        """The chunk as one Arrow table with the ``__op`` column last."""
        return self.data.append_column(OP_COLUMN, pa.array(self.ops, type=pa.int8()))

    @staticmethod
    def concat(chunks: list[StreamChunk]) -> StreamChunk:
        if len(chunks) == 1:
            return chunks[0]
        return StreamChunk(
            pa.concat_tables([c.data for c in chunks]),
            np.concatenate([c.ops for c in chunks]),
        )
