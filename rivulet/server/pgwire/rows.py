"""Encoded columns and DataRow assembly.

An ``Encoded`` column holds every row's wire bytes of one column (offsets into one byte
buffer, plus validity). ``data_rows`` interleaves encoded columns into DataRow messages:
with numpy scatter stores for large results, in plain Python for tiny ones.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(slots=True)
class Encoded:
    """One column's wire values: value ``i`` is ``data[offsets[i]:offsets[i+1]]``; rows
    where ``valid`` is False are NULL (sent as length -1)."""

    offsets: np.ndarray  # int64, n + 1
    data: np.ndarray  # uint8
    valid: np.ndarray | None  # bool per row; None when no value is NULL
    width: int = -1  # every valid value has this many bytes (-1: varies)


def validity(arr: pa.Array) -> np.ndarray | None:
    """Per-row validity, or None when no value is NULL (the fast paths skip masking)."""
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def from_binary_array(arr: pa.Array) -> Encoded:
    """Wrap a string/binary Arrow array's buffers (no copy of the value bytes)."""
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        off_type = np.int32
    elif pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        off_type = np.int64
    else:
        arr = pc.cast(arr, pa.large_string())
        off_type = np.int64
    bufs = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(
        bufs[1], dtype=off_type, count=n + 1, offset=arr.offset * off_type(0).itemsize
    )
    offsets = offsets.astype(np.int64)
    data = (
        np.frombuffer(bufs[2], dtype=np.uint8)
        if bufs[2] is not None and bufs[2].size
        else np.zeros(0, np.uint8)
    )
    return Encoded(offsets, data, validity(arr))


def fixed_width(values: np.ndarray, valid: np.ndarray | None) -> Encoded:
    """A column of fixed-width big-endian values (one numpy row per value)."""
    n = values.shape[0]
    width = values.dtype.itemsize if values.ndim == 1 else values.dtype.itemsize * values.shape[1]
    data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return Encoded(np.arange(n + 1, dtype=np.int64) * width, data, valid, width)


def string_array(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """An Arrow string array over bytes built with numpy (e.g. hex-encoded bytea)."""
    n = len(offsets) - 1
    bitmap = None if valid is None else pa.array(valid, pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(
        pa.large_string(),
        n,
        [bitmap, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data.tobytes())],
    )


def per_value(arr: pa.Array, fn: Callable[[Any], str]) -> pa.Array:
    """``fn`` over every non-NULL value: only for what no Arrow kernel can do."""
    return pa.array([None if v is None else fn(v) for v in arr.to_pylist()], pa.string())


def interval_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(months int32, days int32, microseconds int64) of a month_day_nano column."""
    view = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
    raw = np.frombuffer(arr.buffers()[1], dtype=view, count=len(arr), offset=arr.offset * 16)
    return raw["months"], raw["days"], raw["nanos"] // 1000


def encoded_values(enc: Encoded) -> list[bytes | None]:
    """Each row's wire bytes as Python bytes (None for NULL), for per-value assembly."""
    data = enc.data.tobytes()
    off = enc.offsets.tolist()
    valid = enc.valid
    return [
        data[off[i] : off[i + 1]] if valid is None or valid[i] else None
        for i in range(len(off) - 1)
    ]


def bytes_column(values: list[bytes | None]) -> Encoded:
    """An encoded column from values built one by one."""
    return from_binary_array(pa.array(values, pa.binary()))


# ------------------------------------------------------------------ DataRows
def _put(out: np.ndarray, at: np.ndarray, values: np.ndarray, np_type: str) -> None:
    """Store ``values`` as big-endian ``np_type`` at byte positions ``at`` of ``out``."""
    raw = values.astype(np_type).view(np.uint8).reshape(len(values), -1)
    out[at[:, None] + np.arange(raw.shape[1], dtype=np.int64)] = raw


# Up to this many rows, DataRows are assembled in plain Python: numpy's and Arrow's fixed
# cost per call outweighs their speed on tiny results (the ``SELECT 1`` round trip).
SMALL_RESULT_ROWS = 16
_NULL_FIELD = b"\xff\xff\xff\xff"
_ROW_HEADER = struct.Struct("!cih")
_LENGTH = struct.Struct("!i")


def data_rows_from_values(columns: list[list[bytes | None]], nrows: int) -> bytes:
    """DataRows from each column's per-row wire bytes (None for NULL): for tiny results."""
    ncols = len(columns)
    out = bytearray()
    for r in range(nrows):
        fields = []
        for values in columns:
            value = values[r]
            fields.append(_NULL_FIELD if value is None else _LENGTH.pack(len(value)) + value)
        body = b"".join(fields)
        out += _ROW_HEADER.pack(b"D", len(body) + 6, ncols)
        out += body
    return bytes(out)


def _data_rows_small(columns: list[Encoded], nrows: int) -> bytes:
    return data_rows_from_values([encoded_values(enc) for enc in columns], nrows)


def data_rows(columns: list[Encoded], nrows: int) -> bytes:
    """DataRow messages for ``nrows`` rows of encoded columns, in one bytes object."""
    if nrows == 0:
        return b""
    if nrows <= SMALL_RESULT_ROWS:
        return _data_rows_small(columns, nrows)
    return _data_rows_vectorized(columns, nrows)


def _data_rows_vectorized(columns: list[Encoded], nrows: int) -> bytes:
    """All rows' headers and fields written with numpy scatter stores."""
    ncols = len(columns)
    field_bytes = []
    field_lengths = []
    for enc in columns:
        lengths = np.diff(enc.offsets)
        if enc.valid is not None:
            lengths = np.where(enc.valid, lengths, 0)
            field_lengths.append(np.where(enc.valid, lengths, -1))
        else:
            field_lengths.append(lengths)
        field_bytes.append(lengths)
    body = np.full(nrows, 6 + 4 * ncols, dtype=np.int64)
    for lengths in field_bytes:
        body += lengths
    starts = np.zeros(nrows, dtype=np.int64)
    np.cumsum(body[:-1] + 1, out=starts[1:])
    out = np.empty(int(starts[-1] + body[-1] + 1), dtype=np.uint8)
    out[starts] = ord("D")
    _put(out, starts + 1, body, ">i4")
    _put(out, starts + 5, np.full(nrows, ncols), ">i2")
    pos = starts + 7
    for enc, lengths, wire_lengths in zip(columns, field_bytes, field_lengths):
        _put(out, pos, wire_lengths, ">i4")
        pos = pos + 4
        _scatter(out, pos, enc, lengths)
        pos = pos + lengths
    return out.tobytes()


def _scatter(out: np.ndarray, pos: np.ndarray, enc: Encoded, lengths: np.ndarray) -> None:
    """Copy each valid value's bytes to ``out[pos[i]:]``."""
    if enc.width > 0:
        rows = np.arange(len(pos)) if enc.valid is None else np.flatnonzero(enc.valid)
        if not len(rows):
            return
        cols = np.arange(enc.width, dtype=np.int64)
        out[pos[rows][:, None] + cols] = enc.data.reshape(-1, enc.width)[rows]
        return
    total = int(lengths.sum())
    if not total:
        return
    starts = enc.offsets[:-1]
    first = int(starts[0])
    if int(enc.offsets[-1]) - first == total:
        # The copied values are contiguous in the source (the usual case): every byte
        # moves by its row's shift, so one repeat and one arange index them all.
        shift = np.repeat(pos - starts, lengths)
        shift += np.arange(first, first + total, dtype=np.int64)
        out[shift] = enc.data[first : first + total]
        return
    # NULL slots that still own bytes in the source: index row by row.
    n = len(pos)
    rep = np.repeat(np.arange(n), lengths)
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[pos[rep] + within] = enc.data[starts[rep] + within]


def frame_messages(kind: bytes, payloads: pa.Array) -> bytes:
    """One message of type ``kind`` per (non-null) string in ``payloads`` (CopyData)."""
    enc = from_binary_array(payloads)
    n = len(enc.offsets) - 1
    if n == 0:
        return b""
    lengths = np.diff(enc.offsets)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] + 5, out=starts[1:])
    out = np.empty(int(starts[-1] + lengths[-1] + 5), dtype=np.uint8)
    out[starts] = kind[0]
    _put(out, starts + 1, lengths + 4, ">i4")
    _scatter(out, starts + 5, Encoded(enc.offsets, enc.data, None), lengths)
    return out.tobytes()
