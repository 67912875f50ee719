"""The vnode hash: which of the 256 virtual nodes a row belongs to.

State is persisted under keys that begin with the vnode, so this function must never
change between versions. It is therefore defined here, on each key column's canonical
value, and not borrowed from a library whose hash makes no such promise:

* integers, booleans, dates, times and timestamps hash their value as a 64-bit integer
  (timestamps in microseconds), so ``SMALLINT 5`` and ``BIGINT 5`` land on the same vnode;
* floats and decimals hash their float64 bits, with -0.0 folded into 0.0 and every NaN
  into one NaN;
* strings, bytea and jsonb hash their UTF-8 bytes with a polynomial over 2^64;
* intervals hash (months, days, nanoseconds);
* NULL hashes to a fixed constant.

Each column value is mixed with the murmur3 64-bit finalizer and folded into the row hash
column by column. Everything is vectorized with numpy over Arrow buffers: no per-row Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.columns import plain_values

VNODE_COUNT = 256

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_STRING_BASE = np.uint64(0x100000001B3)
_NULL_HASH = np.uint64(0x2545F4914F6CDD1D)
_S33 = np.uint64(33)
# Values up to this many bytes are hashed one byte position at a time across all rows.
_SHORT_STRING = 48
# Long values are hashed this many bytes at a time.
_HASH_BLOCK = 1 << 16
_INTERVAL_DTYPE = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


def _fmix64(k: np.ndarray) -> np.ndarray:
    k = k ^ (k >> _S33)
    k = k * _M1
    k = k ^ (k >> _S33)
    k = k * _M2
    return k ^ (k >> _S33)


def _as_int64(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _hash_bytes(arr: pa.Array) -> np.ndarray:
    """Polynomial hash of each value's bytes (vectorized over the data buffer)."""
    arr = pc.cast(arr, pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    start, end = int(offsets[0]), int(offsets[-1])
    if end == start:
        return np.zeros(n, dtype=np.uint64)
    data = np.frombuffer(data_buf, dtype=np.uint8)[start:end]
    rel = offsets - start
    lengths = np.diff(rel)
    max_len = int(lengths.max())
    with np.errstate(over="ignore"):
        if max_len <= _SHORT_STRING:
            h = _horner_by_position(data, rel[:-1], lengths, max_len)
        else:
            h = _horner_flat(data, rel, lengths, max_len)
        return h ^ (lengths.astype(np.uint64) * _GOLDEN)


def _horner_by_position(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, max_len: int
) -> np.ndarray:
    """h = h * base + (byte + 1) over each value's bytes, one vector step per position."""
    h = np.zeros(len(starts), dtype=np.uint64)
    for pos in range(max_len):
        live = lengths > pos
        idx = np.where(live, starts + pos, 0)
        step = h * _STRING_BASE + (data[idx].astype(np.uint64) + np.uint64(1))
        h = np.where(live, step, h)
    return h


def _powers(count: int, base: np.uint64) -> np.ndarray:
    """base^0 .. base^(count-1) over 2^64."""
    powers = np.ones(count, dtype=np.uint64)
    powers[1:] = base
    return np.cumprod(powers, dtype=np.uint64)


def _horner_flat(
    data: np.ndarray, rel: np.ndarray, lengths: np.ndarray, max_len: int
) -> np.ndarray:
    """The same sum for long values: byte p of a value of length L weighs base^(L-1-p).
    The bytes go in blocks, with base^e = (base^B)^(e // B) * base^(e % B), so the work
    space stays a few MB however long a value is (per byte at once it was ~50x the data:
    a 10 MB string took 500 MB)."""
    n_rows = len(lengths)
    h = np.zeros(n_rows, dtype=np.uint64)
    low = _powers(_HASH_BLOCK, _STRING_BASE)
    high = _powers(max_len // _HASH_BLOCK + 1, low[-1] * _STRING_BASE)
    row_end = rel[1:]
    for start in range(0, len(data), _HASH_BLOCK):
        end = min(start + _HASH_BLOCK, len(data))
        pos = np.arange(start, end, dtype=np.int64)
        rows = np.searchsorted(row_end, pos, side="right")
        exponent = row_end[rows] - 1 - pos
        weight = high[exponent // _HASH_BLOCK] * low[exponent % _HASH_BLOCK]
        contrib = (data[start:end].astype(np.uint64) + np.uint64(1)) * weight
        csum = np.concatenate(([np.uint64(0)], np.cumsum(contrib, dtype=np.uint64)))
        touched = np.arange(rows[0], rows[-1] + 1)
        first = np.clip(rel[touched] - start, 0, end - start)
        last = np.clip(rel[touched + 1] - start, 0, end - start)
        h[touched] += csum[last] - csum[first]
    return h


def _canonical(arr: pa.Array) -> np.ndarray:
    """Each value of a key column as a uint64 before mixing."""
    arr = plain_values(arr)
    t = arr.type
    if pa.types.is_boolean(t):
        return _as_int64(pc.cast(arr, pa.int8())).view(np.uint64)
    if pa.types.is_integer(t):
        return _as_int64(arr).view(np.uint64)
    if pa.types.is_timestamp(t):
        return _as_int64(pc.cast(arr, pa.timestamp("us", tz=t.tz))).view(np.uint64)
    if pa.types.is_date(t):
        return _as_int64(pc.cast(arr, pa.date32()).cast(pa.int32())).view(np.uint64)
    if pa.types.is_time(t):
        return _as_int64(pc.cast(arr, pa.time64("us")).cast(pa.int64())).view(np.uint64)
    if pa.types.is_duration(t):
        return _as_int64(pc.cast(arr, pa.duration("us")).cast(pa.int64())).view(np.uint64)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        f = np.asarray(
            pc.cast(arr, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False),
            dtype=np.float64,
        )
        f = np.where(f == 0.0, 0.0, f)  # -0.0 == 0.0
        f = np.where(np.isnan(f), np.nan, f)
        return f.view(np.uint64)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or getattr(pa.types, "is_string_view", lambda _t: False)(t)
        or getattr(pa.types, "is_binary_view", lambda _t: False)(t)
    ):
        return _hash_bytes(arr)
    if t == pa.month_day_nano_interval():
        fields = np.frombuffer(arr.buffers()[1], dtype=_INTERVAL_DTYPE)[
            arr.offset : arr.offset + len(arr)
        ]
        with np.errstate(over="ignore"):
            h = _fmix64(fields["months"].astype(np.int64).view(np.uint64))
            h = _fmix64(h * _GOLDEN + fields["days"].astype(np.int64).view(np.uint64))
            return _fmix64(h * _GOLDEN + fields["nanos"].view(np.uint64))
    raise TypeError(f"no vnode hash for Arrow type {t}")


def hash_columns(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The 64-bit row hash of the given key columns (all of one length)."""
    if not columns:
        raise ValueError("a distribution key needs at least one column")
    n = len(columns[0])
    h = np.zeros(n, dtype=np.uint64)
    for col in columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        v = _canonical(col)
        if col.null_count:
            v = np.where(np.asarray(col.is_null().to_numpy(zero_copy_only=False)), _NULL_HASH, v)
        with np.errstate(over="ignore"):
            h = _fmix64(h * _GOLDEN + _fmix64(v))
    return h


def compute_vnodes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The vnode (0..255) of each row, as int16."""
    return (hash_columns(columns) % np.uint64(VNODE_COUNT)).astype(np.int16)
