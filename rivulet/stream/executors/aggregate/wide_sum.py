"""Exact 128-bit sums in numpy: a column as 32-bit limbs, summed per slot, carried now
and then, and turned back into decimals or floats."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.columns import combine

_M32 = np.int64(0xFFFFFFFF)
_S32 = np.int64(32)


def to_limbs(arr: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """An integer or decimal column as 32-bit limbs (int64; the top one signed) whose
    weighted sum is the value (unscaled for decimals). NULLs give garbage: mask them."""
    t = arr.type
    if pa.types.is_decimal(t):
        a = combine(arr)
        if not pa.types.is_decimal128(t):
            a = a.cast(pa.decimal128(38, t.scale))
        raw = np.frombuffer(a.buffers()[1], dtype=np.int64)[2 * a.offset : 2 * (a.offset + len(a))]
        lo, hi = raw[0::2], raw[1::2]
        return [lo & _M32, (lo >> _S32) & _M32, hi & _M32, hi >> _S32]
    if arr.null_count:
        arr = pc.fill_null(arr, 0)
    x = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)
    if t.bit_width < 64:
        return [x]
    return [x & _M32, x >> _S32]


def normalize(limbs: list[np.ndarray]) -> None:
    """Carry limbs 0-2 into [0, 2^32), in place (the value stays the same)."""
    for k in range(3):
        carry = limbs[k] >> _S32
        limbs[k] &= _M32
        limbs[k + 1] += carry


# Limbs of a running sum are carried once this many rows were added (each row adds less
# than 2^32 to a limb, so no limb can reach 2^63 in between).
NORMALIZE_ROWS = 1 << 29


def limbs_to_decimal(limbs: list[np.ndarray], valid: np.ndarray, scale: int) -> pa.Array:
    n = len(valid)
    limbs = [np.array(limb, dtype=np.int64) for limb in limbs]
    normalize(limbs)
    lo = limbs[0].astype(np.uint64) | (limbs[1].astype(np.uint64) << np.uint64(32))
    hi = (limbs[3] << _S32) | limbs[2]
    data = np.empty((n, 2), dtype=np.int64)
    data[:, 0] = lo.view(np.int64)
    data[:, 1] = hi
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, scale), n, [validity, pa.py_buffer(data)])


def limbs_to_float(limbs: list[np.ndarray]) -> np.ndarray:
    f = limbs[3].astype(np.float64)
    for k in (2, 1, 0):
        f = f * 4294967296.0 + limbs[k].astype(np.float64)
    return f


def with_validity(values: np.ndarray, valid: np.ndarray, t: pa.DataType | None) -> pa.Array:
    return pa.array(values, mask=~valid, type=t)
