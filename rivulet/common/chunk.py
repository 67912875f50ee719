"""Stream chunks: the unit of data that flows between operators and into state.

A chunk is an Arrow table whose last column, ``__op``, says what each row does. The op
codes are RisingWave's. A table's DML produces chunks; so will every streaming operator.
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
