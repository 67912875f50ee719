"""Columns between Arrow and polars (intervals, which polars lacks, as structs), and the
per-row masks and comparisons executors take from them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc


def combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def plain_values(arr: pa.Array) -> pa.Array:
    """The values of a column as a plain array: a dictionary decoded, an extension
    type's storage (equal values stay equal, for hashing and joining)."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    return arr


_INTERVAL_STRUCT = pa.struct(
    [pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("nanos", pa.int64())]
)
_INTERVAL_DTYPE = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def to_polars(arr: pa.Array | pa.ChunkedArray, name: str) -> pl.Series:
    """A column as a polars series (intervals, which polars lacks, as structs)."""
    if arr.type == pa.month_day_nano_interval():
        a = combine(arr)
        f = np.frombuffer(a.buffers()[1], dtype=_INTERVAL_DTYPE)[a.offset : a.offset + len(a)]
        arr = pa.StructArray.from_arrays(
            [pa.array(f["months"]), pa.array(f["days"]), pa.array(f["nanos"])],
            fields=list(_INTERVAL_STRUCT),
            mask=a.is_null(),
        )
    s = pl.from_arrow(arr)
    assert isinstance(s, pl.Series)
    return s.alias(name)


def to_arrow(s: pl.Series, t: pa.DataType) -> pa.Array:
    """A polars series as an Arrow array of type ``t`` (the inverse of ``to_polars``)."""
    arr = combine(s.to_arrow())
    if t == pa.month_day_nano_interval():
        n = len(arr)
        f = np.zeros(n, dtype=_INTERVAL_DTYPE)
        if n:
            f["months"] = arr.field("months").fill_null(0).to_numpy(zero_copy_only=False)
            f["days"] = arr.field("days").fill_null(0).to_numpy(zero_copy_only=False)
            f["nanos"] = arr.field("nanos").fill_null(0).to_numpy(zero_copy_only=False)
        validity = None
        if arr.null_count:
            validity = pa.py_buffer(
                np.packbits(arr.is_valid().to_numpy(zero_copy_only=False), bitorder="little")
            )
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(f.tobytes())])
    if arr.type != t:
        arr = arr.cast(t)
    return arr


def bool_np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def valid_np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def polars_dtype(t: pa.DataType) -> pl.DataType:
    """The polars type ``to_polars`` gives a column of Arrow type ``t``."""
    return to_polars(pa.array([], type=t), "x").dtype


def differs(old: pa.Array, new: pa.Array) -> np.ndarray:
    """Per row: the values differ (NULL equals NULL)."""
    if old.type == pa.month_day_nano_interval():  # no Arrow comparison kernel
        same = to_polars(old, "o").eq_missing(to_polars(new, "n"))
        return ~same.to_numpy()
    both_null = pc.and_(old.is_null(), new.is_null())
    diff = pc.fill_null(pc.not_equal(old, new), True)
    return bool_np(pc.and_not(diff, both_null))


def loose_schema(schema: pa.Schema, cols: list[pa.Array]) -> pa.Schema:
    """``schema``'s names with the arrays' own types (cast to ``schema`` afterwards)."""
    return pa.schema([pa.field(f.name, c.type) for f, c in zip(schema, cols)])


def concat_state(parts: list[object]) -> object:
    if isinstance(parts[0], pl.Series):
        return pl.concat(parts) if len(parts) > 1 else parts[0]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]  # type: ignore[arg-type]


def to_ipc(table: pa.Table) -> pa.Buffer:
    """``table`` as one Arrow IPC stream (schema and batches): how tables cross processes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def from_ipc(payload: bytes | pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()
