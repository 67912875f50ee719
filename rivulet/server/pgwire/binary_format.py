"""PostgreSQL's binary format for result values (what asyncpg asks for)."""

from __future__ import annotations

import decimal
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.errors import INVALID_TEXT_REPRESENTATION, sql_error
from rivulet.common.types import DataType
from rivulet.server.pgwire.oids import (
    ARRAY_ELEMENT_OID,
    BOOL_OID,
    DATE_OID,
    EXACT_DECIMAL,
    FLOAT4_OID,
    FLOAT8_OID,
    INT2_OID,
    INT4_OID,
    INT8_OID,
    INTERVAL_OID,
    JSONB_OID,
    NUMERIC_OID,
    OID_OID,
    PG_EPOCH_DAYS,
    PG_EPOCH_US,
    TIME_OID,
    TIMESTAMP_OID,
    TIMESTAMPTZ_OID,
    TYPE_BY_OID,
    UUID_OID,
)
from rivulet.server.pgwire.rows import (
    Encoded,
    bytes_column,
    encoded_values,
    fixed_width,
    from_binary_array,
    interval_parts,
    validity,
)
from rivulet.server.pgwire.text_format import text_array

_BIG_ENDIAN = {
    INT2_OID: (pa.int16(), ">i2"),
    INT4_OID: (pa.int32(), ">i4"),
    INT8_OID: (pa.int64(), ">i8"),
    OID_OID: (pa.uint32(), ">u4"),
    FLOAT4_OID: (pa.float32(), ">f4"),
    FLOAT8_OID: (pa.float64(), ">f8"),
}


def _numbers(arr: pa.Array, arrow_type: pa.DataType, zero: object = 0) -> np.ndarray:
    if arr.type != arrow_type:
        arr = pc.cast(arr, arrow_type)
    if arr.null_count:
        arr = pc.fill_null(arr, zero)
    return arr.to_numpy(zero_copy_only=False)


def _numeric_binary_value(value: object, normalize: bool) -> bytes:
    """One value in PostgreSQL's binary numeric layout (base-10000 digits)."""
    d = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if normalize:
        with decimal.localcontext(EXACT_DECIMAL):
            d = d.quantize(decimal.Decimal(1)) if d == d.to_integral_value() else d.normalize()
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    if exponent >= 0:
        int_part, frac_part, dscale = text + "0" * exponent, "", 0
    else:
        frac_len = -exponent
        text = text.rjust(frac_len, "0")
        int_part, frac_part, dscale = (
            text[: len(text) - frac_len],
            text[len(text) - frac_len :],
            frac_len,
        )
    int_part = int_part.lstrip("0")
    int_part = int_part.rjust((len(int_part) + 3) // 4 * 4, "0")
    frac_part = frac_part.ljust((len(frac_part) + 3) // 4 * 4, "0")
    groups = [int(int_part[i : i + 4]) for i in range(0, len(int_part), 4)]
    weight = len(groups) - 1
    groups += [int(frac_part[i : i + 4]) for i in range(0, len(frac_part), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    header = struct.pack("!hhHh", len(groups), weight, 0x4000 if sign else 0, dscale)
    return header + struct.pack(f"!{len(groups)}H", *groups)


_GROUPS = 5  # base-10000 digits of an int64 magnitude (10000**5 > 2**63)
_NUMERIC_RECORD = np.dtype(
    [("ndigits", ">i2"), ("weight", ">i2"), ("sign", ">u2"), ("dscale", ">i2"),
     ("digits", ">u2", (_GROUPS,))]
)  # fmt: skip
_INT64_MIN = np.iinfo(np.int64).min


def _numeric_binary_vectorized(arr: pa.Array, scale: int, normalize: bool) -> Encoded | None:
    """Binary numerics of a decimal128 column whose unscaled values fit in 64 bits, with
    numpy; None when some value does not fit (the caller goes value by value)."""
    n = len(arr)
    if scale < 0 or scale > 18:
        return None
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * n, offset=arr.offset * 16)
    lo, hi = raw[0::2], raw[1::2]
    valid = validity(arr)
    fits = (hi == (lo >> 63)) & (lo != _INT64_MIN)
    unscaled = lo if valid is None else np.where(valid, lo, 0)
    if valid is not None:
        fits |= ~valid
    pad = -scale % 4
    magnitude = np.abs(unscaled)
    if not fits.all() or (pad and (magnitude >= np.iinfo(np.int64).max // 10**pad).any()):
        return None
    if normalize:
        trailing = np.zeros(n, dtype=np.int64)
        for k in range(1, scale + 1):
            trailing += magnitude % 10**k == 0
        dscale = scale - trailing
    else:
        dscale = np.full(n, scale, dtype=np.int64)
    groups = np.empty((n, _GROUPS), dtype=np.int64)  # least significant first
    rest = magnitude * 10**pad
    for k in range(_GROUPS):
        rest, groups[:, k] = np.divmod(rest, 10000)
    nonzero = groups != 0
    any_nonzero = nonzero.any(axis=1)
    top = _GROUPS - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    bottom = np.argmax(nonzero, axis=1)
    ndigits = np.where(any_nonzero, top - bottom + 1, 0)
    index = np.clip(top[:, None] - np.arange(_GROUPS)[None, :], 0, _GROUPS - 1)
    record = np.zeros(n, dtype=_NUMERIC_RECORD)
    record["ndigits"] = ndigits
    record["weight"] = np.where(any_nonzero, top - (scale + pad) // 4, 0)
    record["sign"] = np.where(unscaled < 0, 0x4000, 0)
    record["dscale"] = dscale
    record["digits"] = np.take_along_axis(groups, index, axis=1)
    width = _NUMERIC_RECORD.itemsize
    lengths = 8 + 2 * ndigits
    keep = np.arange(width)[None, :] < lengths[:, None]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Encoded(offsets, record.view(np.uint8).reshape(n, width)[keep], valid)


def _binary_array_value(
    items: list[bytes | None], element_oid: int
) -> bytes:  # one array value: header, dimension, elements
    has_null = any(v is None for v in items)
    if not items:
        return struct.pack("!iii", 0, 0, element_oid)
    parts = [struct.pack("!iiiii", 1, int(has_null), element_oid, len(items), 1)]
    for v in items:
        parts.append(b"\xff\xff\xff\xff" if v is None else struct.pack("!i", len(v)) + v)
    return b"".join(parts)


def encode_binary(arr: pa.Array, dtype: DataType, timezone: str = "UTC") -> Encoded:
    """A column in PostgreSQL's binary format for its type OID."""
    oid = dtype.oid
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    valid = validity(arr)
    if oid in _BIG_ENDIAN:
        arrow_type, np_type = _BIG_ENDIAN[oid]
        return fixed_width(_numbers(arr, arrow_type).astype(np_type), valid)
    if oid == BOOL_OID:
        return fixed_width(_numbers(arr, pa.bool_(), False).astype(np.uint8), valid)
    if oid == DATE_OID and pa.types.is_date(t):
        days = _numbers(pc.cast(arr, pa.date32()).cast(pa.int32()), pa.int32())
        return fixed_width((days - PG_EPOCH_DAYS).astype(">i4"), valid)
    if oid in (TIMESTAMP_OID, TIMESTAMPTZ_OID) and pa.types.is_timestamp(t):
        if t.unit != "us":
            arr = pc.cast(arr, pa.timestamp("us", tz=t.tz))
        micros = _numbers(arr.cast(pa.int64()), pa.int64())
        return fixed_width((micros - PG_EPOCH_US).astype(">i8"), valid)
    if oid == TIME_OID and pa.types.is_time(t):
        if t != pa.time64("us"):
            arr = pc.cast(arr, pa.time64("us"))
        return fixed_width(_numbers(arr.cast(pa.int64()), pa.int64()).astype(">i8"), valid)
    if oid == INTERVAL_OID and t == pa.month_day_nano_interval():
        months, days, micros = interval_parts(arr)
        out = np.empty(len(arr), dtype=np.dtype([("us", ">i8"), ("d", ">i4"), ("m", ">i4")]))
        out["us"], out["d"], out["m"] = micros, days, months
        return fixed_width(out.view(np.uint8).reshape(len(arr), 16), valid)
    if oid == UUID_OID:
        if pa.types.is_fixed_size_binary(t) or pa.types.is_binary(t):
            return from_binary_array(pc.cast(arr, pa.binary()))
        return _uuid_binary(arr)
    if oid == NUMERIC_OID:
        normalize = dtype.is_numeric_unconstrained
        if pa.types.is_decimal128(t):
            fast = _numeric_binary_vectorized(arr, t.scale, normalize)
            if fast is not None:
                return fast
        return bytes_column(
            [None if v is None else _numeric_binary_value(v, normalize) for v in arr.to_pylist()]
        )
    if oid == JSONB_OID:
        text = text_array(arr, dtype, timezone)
        return from_binary_array(pc.binary_join_element_wise("\x01", text, ""))
    if oid in ARRAY_ELEMENT_OID and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        element_oid = ARRAY_ELEMENT_OID[oid]
        element_type = TYPE_BY_OID.get(element_oid)
        if element_type is not None and not pa.types.is_nested(arr.values.type):
            items = encoded_values(encode_binary(arr.values, element_type, timezone))
            offsets = arr.offsets.to_pylist()
            return bytes_column(
                [
                    None
                    if not ok
                    else _binary_array_value(items[offsets[i] : offsets[i + 1]], element_oid)
                    for i, ok in enumerate(arr.is_valid().to_pylist())
                ]
            )
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return from_binary_array(arr)
    # Text, varchar, name, char, json and anything without its own layout: the text bytes.
    return from_binary_array(text_array(arr, dtype, timezone))


def _uuid_binary(arr: pa.Array) -> Encoded:
    hex_text = pc.replace_substring(pc.cast(arr, pa.string()), "-", "")
    enc = from_binary_array(pc.fill_null(hex_text, "0" * 32))
    raw = enc.data[enc.offsets[0] : enc.offsets[-1]]
    if len(raw) != 32 * len(arr):
        raise sql_error(INVALID_TEXT_REPRESENTATION, "invalid uuid value in result")
    nibbles = _HEX_VALUES[raw].reshape(-1, 2)
    data = (nibbles[:, 0] << 4) | nibbles[:, 1]
    return fixed_width(data.astype(np.uint8).reshape(len(arr), 16), validity(arr))


_HEX_VALUES = np.zeros(256, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_VALUES[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX_VALUES[_c] = 10 + _i
