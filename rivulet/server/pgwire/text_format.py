"""PostgreSQL's text format for result values, computed a column at a time with Arrow
kernels (and for COPY TO STDOUT lines)."""

from __future__ import annotations

import decimal
import json
import math
import re
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.types import DataType
from rivulet.server.pgwire.oids import (
    ARRAY_ELEMENT_OID,
    BOOL_OID,
    FLOAT4_OID,
    FLOAT8_OID,
    INT2_OID,
    INT4_OID,
    INT8_OID,
    JSON_OID,
    JSONB_OID,
    NUMERIC_OID,
    TYPE_BY_OID,
    UUID_OID,
)
from rivulet.server.pgwire.rows import (
    Encoded,
    from_binary_array,
    interval_parts,
    per_value,
    string_array,
)
from rivulet.sql.session_config import zone_offset

_TRIM_FRACTION = r"(\.\d*?[1-9])0+$|\.0+$"


def _trim_fraction(s: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(s, _TRIM_FRACTION, r"\1")


def _float_text(arr: pa.Array, float4: bool) -> pa.Array:
    """Shortest round-trip digits, laid out as PostgreSQL's float output does."""
    text = pc.cast(arr, pa.string())
    limit = 1e6 if float4 else 1e15
    magnitude = pc.abs(arr)
    odd = pc.or_kleene(
        pc.or_kleene(pc.greater_equal(magnitude, limit), pc.is_nan(arr)),
        pc.and_kleene(pc.less(magnitude, 1e-4), pc.not_equal(magnitude, 0.0)),
    )
    odd = pc.fill_null(pc.or_kleene(odd, pc.match_substring(text, "e")), False)
    if not pc.any(odd).as_py():
        return text
    # Only the rare values outside Arrow's agreement with PostgreSQL go through Python.
    mask = np.asarray(odd.to_numpy(zero_copy_only=False), dtype=bool)
    values = text.to_pylist()
    for i, v in zip(np.flatnonzero(mask), pc.filter(arr, odd).to_pylist()):
        values[i] = None if v is None else pg_float(v, float4)
    return pa.array(values, pa.string())


def pg_float(value: float, float4: bool = False) -> str:
    """One float as PostgreSQL prints it (shortest digits; exponent outside 1e-4..1e15)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = str(np.float32(value)) if float4 else repr(float(value))
    d = decimal.Decimal(shortest)
    sign, digits, exponent = d.as_tuple()
    digits_text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    sci_exp = len(digits) + exponent - 1
    if sci_exp < -4 or sci_exp >= (6 if float4 else 15):
        mantissa = digits_text[0] + ("." + digits_text[1:] if len(digits_text) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'-' if sci_exp < 0 else '+'}{abs(sci_exp):02d}"
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _numeric_text(arr: pa.Array, dtype: DataType) -> pa.Array:
    if not pa.types.is_decimal(arr.type):
        return pc.cast(arr, pa.string())
    text = pc.cast(arr, pa.string())
    scientific = pc.fill_null(pc.match_substring(text, "E"), False)
    if pc.any(scientific).as_py():
        values = text.to_pylist()
        for i in np.flatnonzero(np.asarray(scientific.to_numpy(zero_copy_only=False))):
            values[i] = format(decimal.Decimal(values[i]), "f")
        text = pa.array(values, pa.string())
    if dtype.is_numeric_unconstrained:
        text = pc.replace_substring_regex(text, r"(\.\d*?[1-9])0+$|\.0+$", r"\1")
    return text


def _whole_seconds(arr: pa.Array) -> pa.Array | None:
    """The column in seconds when no value has a fraction of a second (the common case:
    then no fraction needs trimming from the text)."""
    unit = arr.type.unit
    if unit == "s":
        return arr
    per_second = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    ticks = arr.cast(pa.int64())
    if arr.null_count:
        ticks = pc.fill_null(ticks, 0)
    if np.any(ticks.to_numpy(zero_copy_only=False) % per_second):
        return None
    return arr.cast(pa.timestamp("s", tz=arr.type.tz))


def _timestamp_text(arr: pa.Array) -> pa.Array:
    whole = _whole_seconds(arr)
    if whole is not None:
        return pc.cast(whole, pa.string())
    return _trim_fraction(pc.cast(arr, pa.string()))


_OFFSET_ZONE = re.compile(r"([+-])(\d\d):(\d\d)")


def _timestamptz_text(arr: pa.Array, timezone: str) -> pa.Array:
    zone = arrow_zone(timezone)
    fixed = _OFFSET_ZONE.fullmatch(zone)
    if zone == "UTC" or fixed:
        # One offset for every row: shift to local time, print it, append the offset.
        suffix = "+00"
        naive = arr.cast(pa.timestamp(arr.type.unit))
        if fixed:
            sign, hours, minutes = fixed.groups()
            seconds = (int(hours) * 3600 + int(minutes) * 60) * (-1 if sign == "-" else 1)
            per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
            shift = pa.scalar(seconds * per_second[arr.type.unit], pa.int64())
            naive = pc.add(naive.cast(pa.int64()), shift).cast(pa.timestamp(arr.type.unit))
            suffix = f"{sign}{hours}" + (f":{minutes}" if minutes != "00" else "")
        return pc.binary_join_element_wise(_timestamp_text(naive), suffix, "")
    if arr.type.tz != zone:
        arr = pc.cast(arr, pa.timestamp(arr.type.unit, tz=zone))
    whole = _whole_seconds(arr)
    if whole is not None:
        text = pc.strftime(whole, format="%Y-%m-%d %H:%M:%S%z")
    else:
        text = pc.strftime(arr, format="%Y-%m-%d %H:%M:%S%z")
        text = pc.replace_substring_regex(text, r"(\.\d*?[1-9])0+([+-])|\.0+([+-])", r"\1\2\3")
    text = pc.replace_substring_regex(text, r"([+-]\d\d)00$", r"\1")
    return pc.replace_substring_regex(text, r"([+-]\d\d)(\d\d)$", r"\1:\2")


def arrow_zone(timezone: str) -> str:
    """A session ``timezone`` value as an Arrow time zone (offsets as +HH:MM)."""
    tz = timezone.strip()
    if tz.upper() in ("UTC", "GMT", "Z", ""):
        return "UTC"
    return zone_offset(tz) or tz


def _interval_text(arr: pa.Array) -> pa.Array:
    """PostgreSQL's ``postgres`` interval style, built with vectorized string kernels."""
    if arr.type != pa.month_day_nano_interval():
        return pc.cast(arr, pa.string())
    months, days, micros = interval_parts(arr)
    years = np.trunc(months / 12).astype(np.int64)
    mons = months - years * 12
    pieces: list[pa.Array] = []
    empty = pa.scalar("")
    is_zero = np.ones(len(arr), dtype=bool)  # nothing printed yet
    is_before = np.zeros(len(arr), dtype=bool)  # the last printed field was negative
    for values, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        values = values.astype(np.int64)
        present = values != 0
        sep = np.where(~is_zero, " ", "")
        plus = np.where(is_before & (values > 0), "+", "")
        suffix = np.where(values != 1, "s", "")
        part = pc.binary_join_element_wise(
            pa.array(sep), pa.array(plus), pc.cast(pa.array(values), pa.string()),
            pa.array(np.char.add(" " + unit, suffix)), "",
        )  # fmt: skip
        pieces.append(pc.if_else(pa.array(present), part, empty))
        is_before = np.where(present, values < 0, is_before)
        is_zero &= ~present
    show_time = is_zero | (micros != 0)
    negative = micros < 0
    total = np.abs(micros)
    hours, rest = np.divmod(total, 3_600_000_000)
    minutes, rest = np.divmod(rest, 60_000_000)
    seconds, fraction = np.divmod(rest, 1_000_000)
    sign = np.where(negative, "-", np.where(is_before, "+", ""))
    sep = np.where(~is_zero, " ", "")
    frac = pc.binary_join_element_wise(
        ".", pc.utf8_lpad(pc.cast(pa.array(fraction), pa.string()), 6, "0"), ""
    )
    frac = pc.if_else(pa.array(fraction != 0), pc.replace_substring_regex(frac, "0+$", ""), empty)
    clock = pc.binary_join_element_wise(
        pa.array(sep), pa.array(sign),
        pc.utf8_lpad(pc.cast(pa.array(hours), pa.string()), 2, "0"), ":",
        pc.utf8_lpad(pc.cast(pa.array(minutes), pa.string()), 2, "0"), ":",
        pc.utf8_lpad(pc.cast(pa.array(seconds), pa.string()), 2, "0"), frac, "",
    )  # fmt: skip
    pieces.append(pc.if_else(pa.array(show_time), clock, empty))
    text = pc.binary_join_element_wise(*pieces, "")
    if arr.null_count:
        text = pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.string()))
    return text


def _bytea_hex(arr: pa.Array) -> pa.Array:
    """``\\x`` followed by two lowercase hex digits per byte."""
    enc = from_binary_array(arr)
    off = enc.offsets
    n = len(off) - 1
    lengths = np.diff(off)
    new_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths * 2 + 2, out=new_off[1:])
    out = np.empty(int(new_off[-1]), dtype=np.uint8)
    starts = new_off[:-1]
    out[starts] = ord("\\")
    out[starts + 1] = ord("x")
    total = int(lengths.sum())
    if total:
        rep = np.repeat(np.arange(n), lengths)
        within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        src = enc.data[off[rep] + within]
        dest = starts[rep] + 2 + 2 * within
        out[dest] = _HEX_DIGITS[src >> 4]
        out[dest + 1] = _HEX_DIGITS[src & 15]
    return string_array(new_off, out, enc.valid)


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _needs_array_quotes(text: pa.Array) -> pa.Array:
    special = pc.match_substring_regex(text, r'^$|[{},"\\\s]|^[Nn][Uu][Ll][Ll]$')
    return pc.fill_null(special, False)


def _array_text(arr: pa.Array, dtype: DataType, timezone: str) -> pa.Array:
    """``{1,2,NULL}`` with PostgreSQL's quoting of elements."""
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return _fallback_text(arr)
    element_oid = ARRAY_ELEMENT_OID.get(dtype.oid)
    element_type = TYPE_BY_OID.get(element_oid or -1)
    values = arr.values
    if element_type is None or pa.types.is_nested(values.type):
        return _fallback_text(arr)
    text = text_array(values, element_type, timezone)
    if element_type.oid not in (BOOL_OID, INT2_OID, INT4_OID, INT8_OID, FLOAT4_OID, FLOAT8_OID):
        quoted = pc.binary_join_element_wise(
            '"',
            pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"'),
            '"',
            "",
        )
        text = pc.if_else(_needs_array_quotes(text), quoted, text)
    text = pc.fill_null(text, "NULL")
    lists = type(arr).from_arrays(arr.offsets, text, mask=arr.is_null())
    joined = pc.binary_join(lists, ",")
    return pc.binary_join_element_wise("{", joined, "}", "")


def _fallback_text(arr: pa.Array) -> pa.Array:
    try:
        return pc.cast(arr, pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return per_value(arr, str)


def _sort_key(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return (len(raw), raw)


def pg_jsonb(value: object) -> str:
    """A parsed JSON value as PostgreSQL prints jsonb: keys sorted (shortest first),
    ``", "`` and ``": "`` separators, numbers as written."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: _sort_key(kv[0]))
        return "{" + ", ".join(f"{pg_jsonb(k)}: {pg_jsonb(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(pg_jsonb(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def _jsonb_normalize(text: str) -> str:
    try:
        parsed = json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal)
    except ValueError:
        return text
    return pg_jsonb(parsed)


# Days since 1970 of 0001-01-01 and 9999-12-31: Arrow writes the dates between them.
_FOUR_DIGIT_DAYS = (-719162, 2932896)


def _date_text(arr: pa.Array) -> pa.Array:
    """Dates as PostgreSQL writes them, past the year 9999 and BC ('4714-11-24 BC')."""
    days = pc.cast(pc.cast(arr, pa.date32()), pa.int32())
    low, high = pc.min(days).as_py(), pc.max(days).as_py()
    if low is None or (low >= _FOUR_DIGIT_DAYS[0] and high <= _FOUR_DIGIT_DAYS[1]):
        return pc.cast(arr, pa.string())

    def wide(n: int) -> str:
        text = str(np.datetime64(n, "D"))  # astronomical years: 0 is 1 BC
        y, _, month_day = text.lstrip("-").partition("-")
        year = -int(y) if text.startswith("-") else int(y)
        return f"{1 - year:04d}-{month_day} BC" if year <= 0 else text

    return per_value(days, wide)


def text_array(arr: pa.Array, dtype: DataType, timezone: str = "UTC") -> pa.Array:
    """A column's values in PostgreSQL's text format, as an Arrow string array."""
    oid = dtype.oid
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if oid == BOOL_OID and pa.types.is_boolean(t):
        return pc.if_else(arr, "t", "f")
    if pa.types.is_integer(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_floating(t):
        return _float_text(arr, float4=(oid == FLOAT4_OID or pa.types.is_float32(t)))
    if oid == NUMERIC_OID or pa.types.is_decimal(t):
        return _numeric_text(arr, dtype)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if oid in (JSONB_OID, JSON_OID):
            return per_value(arr, _jsonb_normalize)
        return arr
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            return _timestamptz_text(arr, timezone)
        return _timestamp_text(arr)
    if pa.types.is_date(t):
        return _date_text(arr)
    if pa.types.is_time(t):
        return _trim_fraction(pc.cast(arr, pa.string()))
    if t == pa.month_day_nano_interval():
        return _interval_text(arr)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if oid == UUID_OID:
            return per_value(arr, lambda b: str(uuid.UUID(bytes=b)))
        return _bytea_hex(arr)
    if pa.types.is_fixed_size_binary(t):
        if oid == UUID_OID and t.byte_width == 16:
            return per_value(arr, lambda b: str(uuid.UUID(bytes=b)))
        return _bytea_hex(pc.cast(arr, pa.binary()))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _array_text(arr, dtype, timezone)
    return _fallback_text(arr)


def encode_text(arr: pa.Array, dtype: DataType, timezone: str = "UTC") -> Encoded:
    return from_binary_array(text_array(arr, dtype, timezone))


def copy_text_rows(
    table: pa.Table, types: list[DataType], options: dict[str, object], timezone: str
) -> pa.Array:
    """Every row as one line of COPY text or CSV (with its newline)."""
    csv = options.get("format") == "csv"
    delimiter = str(options.get("delimiter") or ("," if csv else "\t"))
    null = str(options.get("null") if options.get("null") is not None else ("" if csv else "\\N"))
    columns = []
    for i, dtype in enumerate(types):
        chunked = table.column(i)
        arr = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        text = text_array(arr, dtype, timezone)
        if csv:
            quoted = pc.binary_join_element_wise(
                '"', pc.replace_substring(text, '"', '""'), '"', ""
            )
            pattern = "[" + re.escape(delimiter) + '"\r\n]'
            needs = pc.fill_null(pc.match_substring_regex(text, pattern), False)
            if null == "":
                needs = pc.or_(needs, pc.fill_null(pc.equal(text, ""), False))
            text = pc.if_else(needs, quoted, text)
        else:
            text = pc.replace_substring(text, "\\", "\\\\")
            for raw, escaped in (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
                text = pc.replace_substring(text, raw, escaped)
            if delimiter not in ("\t", "\n", "\r", "\\"):
                text = pc.replace_substring(text, delimiter, "\\" + delimiter)
        columns.append(pc.fill_null(text, null))
    if not columns:
        return pa.array(["\n"] * table.num_rows, pa.string())
    joined = pc.binary_join_element_wise(*columns, delimiter)
    return pc.binary_join_element_wise(joined, "\n", "")


def csv_header(names: list[str], delimiter: str) -> str:
    out = []
    for name in names:
        if re.search("[" + re.escape(delimiter) + '"\r\n]', name) or name == "":
            name = '"' + name.replace('"', '""') + '"'
        out.append(name)
    return delimiter.join(out) + "\n"
