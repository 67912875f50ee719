"""Hop window: each row once per hopping window that contains its time.

RisingWave's HOP semantics: windows start at every multiple of ``slide`` counted from the
epoch (1970-01-01 00:00:00, in UTC for timestamptz); a row with time ``t`` belongs to the
``size / slide`` windows with ``window_start <= t < window_start + size`` (with an offset,
windows start at multiples of ``slide`` plus the offset); rows whose time
is NULL belong to no window. Intervals count a month as 30 days and a day as 24 hours, as
RisingWave's ``tumble_start`` does.

Vectorized with numpy: every row is repeated ``size / slide`` times and the window starts
computed from its time in microseconds. The output must stay a consistent change stream
whose key is (input key, window_start), so copies are ordered row by row (every copy of a
row before any copy of the next row), and an UpdateDelete/UpdateInsert pair is emitted
window by window: the windows both sides share become adjacent UpdateDelete/UpdateInsert
pairs; a window only the old side has becomes a Delete, one only the new side has an
Insert (an update that moved the time).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import Op, StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.message import Message


def window_starts(t: np.ndarray, slide: int, size: int, offset: int = 0) -> np.ndarray:
    """``[len(t), size // slide]`` window starts of each time ``t`` (microseconds),
    earliest first: the first is RisingWave's ``tumble_start(t - (size - slide), slide,
    offset)``."""
    units = size // slide
    shifted = t - (size - slide)
    first = shifted - np.mod(shifted - offset, slide)  # floor to a multiple, plus offset
    return first[:, None] + np.arange(units, dtype=np.int64)[None, :] * slide


class HopWindowExecutor(Executor):
    def __init__(
        self,
        ctx: ActorContext,
        schema: Schema,
        input: Executor,
        time_col: int,
        slide: int,
        size: int,
        offset: int = 0,
    ) -> None:
        super().__init__(ctx, schema)
        if slide <= 0 or size <= 0 or size % slide:
            raise ValueError(f"window size {size} is not a positive multiple of slide {slide}")
        self.input = input
        self.time_col = time_col
        self.slide = slide
        self.size = size
        self.offset = offset
        arrow = schema.arrow()
        self._data_schema = pa.schema(list(arrow)[:-2])
        self._window_type = arrow.field(len(arrow) - 2).type

    async def execute(self) -> AsyncIterator[Message]:
        async for msg in self.input.execute():
            if isinstance(msg, StreamChunk):
                out = self.apply(msg)
                if out.num_rows:
                    yield out
            else:
                yield msg

    def _times(self, column: pa.ChunkedArray) -> np.ndarray:
        """Microseconds since the epoch (a date is its midnight), NULLs as 0."""
        if pa.types.is_date(column.type):
            column = column.cast(pa.timestamp("us"))
        elif column.type != pa.timestamp("us", tz=getattr(column.type, "tz", None)):
            column = column.cast(pa.timestamp("us", tz=getattr(column.type, "tz", None)))
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        return np.asarray(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))

    def apply(self, chunk: StreamChunk) -> StreamChunk:
        """The windowed copies of a chunk's rows."""
        time = chunk.data.column(self.time_col)
        if time.null_count:
            chunk = chunk.take(np.asarray(time.is_valid().to_numpy(zero_copy_only=False)))
            time = chunk.data.column(self.time_col)
        n = chunk.num_rows
        if n == 0:
            return chunk
        units = self.size // self.slide
        starts = window_starts(self._times(time), self.slide, self.size, self.offset).ravel()
        rows = np.repeat(np.arange(n, dtype=np.int64), units)
        ops = np.repeat(chunk.ops, units)
        pairs = chunk.update_pairs()
        if len(pairs):
            # Both sides of a pair share a group (the UpdateDelete's row); within a group,
            # copies go by window start, then old before new.
            group = np.arange(n, dtype=np.int64)
            group[pairs + 1] = pairs
            order = np.lexsort((rows, starts, np.repeat(group, units)))
            rows, starts, ops = rows[order], starts[order], ops[order]
            # An UpdateDelete whose next copy is not its UpdateInsert in the same window is
            # a Delete; an UpdateInsert not right after its UpdateDelete is an Insert.
            m = len(ops)
            same_next = np.zeros(m, dtype=bool)
            same_next[:-1] = (
                (ops[:-1] == Op.UPDATE_DELETE)
                & (ops[1:] == Op.UPDATE_INSERT)
                & (starts[:-1] == starts[1:])
                & (rows[1:] == rows[:-1] + 1)
            )
            matched_insert = np.zeros(m, dtype=bool)
            matched_insert[1:] = same_next[:-1]
            ops = ops.copy()
            ops[(ops == Op.UPDATE_DELETE) & ~same_next] = Op.DELETE
            ops[(ops == Op.UPDATE_INSERT) & ~matched_insert] = Op.INSERT
        data = chunk.data.take(pa.array(rows))
        data = data.rename_columns(self._data_schema.names).cast(self._data_schema)
        start_col = pa.array(starts, pa.int64()).cast(self._window_type)
        end_col = pa.array(starts + self.size, pa.int64()).cast(self._window_type)
        out = pa.Table.from_arrays([*data.columns, start_col, end_col], schema=self.schema.arrow())
        return StreamChunk(out, ops)
