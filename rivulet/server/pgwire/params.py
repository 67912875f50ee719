"""Bind parameters: wire bytes (text or binary format) to the Python values the engine binds."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct
import uuid
from collections.abc import Callable

from rivulet.common.errors import INVALID_TEXT_REPRESENTATION, Error, sql_error
from rivulet.server.pgwire.oids import (
    ARRAY_ELEMENT_OID,
    BOOL_OID,
    BYTEA_OID,
    DATE_OID,
    EXACT_DECIMAL,
    FLOAT4_OID,
    FLOAT8_OID,
    INT2_OID,
    INT4_OID,
    INT8_OID,
    INTERVAL_OID,
    JSON_OID,
    JSONB_OID,
    NUMERIC_OID,
    OID_OID,
    PG_EPOCH_DATE,
    PG_EPOCH_TS,
    PG_EPOCH_TSTZ,
    TIME_OID,
    TIMESTAMP_OID,
    TIMESTAMPTZ_OID,
    TYPE_BY_OID,
    UUID_OID,
)


def param_error(oid: int, raw: bytes | str) -> Error:
    shown = raw if isinstance(raw, str) else raw[:40].hex()
    return sql_error(
        INVALID_TEXT_REPRESENTATION,
        f"invalid input for parameter of type {_type_name(oid)}: {shown!r}",
    )


def _type_name(oid: int) -> str:
    t = TYPE_BY_OID.get(oid)
    return t.name if t is not None else f"oid {oid}"


_INTERVAL_UNITS = {
    "year": 12, "years": 12, "y": 12, "yr": 12, "yrs": 12,
    "mon": 1, "mons": 1, "month": 1, "months": 1,
}  # fmt: skip
_INTERVAL_DAYS = {"day": 1, "days": 1, "d": 1, "week": 7, "weeks": 7, "w": 7}
_INTERVAL_MICROS = {
    "hour": 3_600_000_000, "hours": 3_600_000_000, "h": 3_600_000_000, "hr": 3_600_000_000,
    "hrs": 3_600_000_000, "minute": 60_000_000, "minutes": 60_000_000, "min": 60_000_000,
    "mins": 60_000_000, "m": 60_000_000, "second": 1_000_000, "seconds": 1_000_000,
    "sec": 1_000_000, "secs": 1_000_000, "s": 1_000_000, "millisecond": 1000,
    "milliseconds": 1000, "ms": 1000, "microsecond": 1, "microseconds": 1, "us": 1,
}  # fmt: skip
_INTERVAL_TOKEN = re.compile(
    r"\s*(?:(?P<clock>[+-]?\d+:\d{1,2}(?::\d{1,2}(?:\.\d+)?)?)"
    r"|(?P<num>[+-]?\d+(?:\.\d+)?)\s*(?P<unit>[a-z]+))\s*,?",
    re.IGNORECASE,
)


def parse_interval(text: str) -> tuple[int, int, int]:
    """(months, days, microseconds) of an interval in PostgreSQL's usual text forms
    (``1 year 2 mons 3 days 04:05:06.5``, ``-1 days +02:00:00``, ``3 hours``)."""
    months = days = micros = 0
    pos = 0
    s = text.strip()
    ago = s.lower().endswith(" ago")
    if ago:
        s = s[:-4]
    if not s:
        raise ValueError("empty interval")
    while pos < len(s):
        m = _INTERVAL_TOKEN.match(s, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"bad interval: {text!r}")
        pos = m.end()
        if m.group("clock"):
            clock = m.group("clock")
            negative = clock.startswith("-")
            parts = clock.lstrip("+-").split(":")
            h, mi = int(parts[0]), int(parts[1])
            sec = decimal.Decimal(parts[2]) if len(parts) > 2 else decimal.Decimal(0)
            value = h * 3_600_000_000 + mi * 60_000_000 + int(sec * 1_000_000)
            micros += -value if negative else value
            continue
        num = decimal.Decimal(m.group("num"))
        unit = m.group("unit").lower()
        if unit in _INTERVAL_UNITS:
            whole = int(num)
            months += whole * _INTERVAL_UNITS[unit]
            days += int((num - whole) * _INTERVAL_UNITS[unit] * 30)
        elif unit in _INTERVAL_DAYS:
            whole = int(num * _INTERVAL_DAYS[unit])
            days += whole
            micros += int((num * _INTERVAL_DAYS[unit] - whole) * 86_400_000_000)
        elif unit in _INTERVAL_MICROS:
            micros += int(num * _INTERVAL_MICROS[unit])
        else:
            raise ValueError(f"bad interval unit {unit!r}")
    if ago:
        months, days, micros = -months, -days, -micros
    return months, days, micros


def interval_value(months: int, days: int, micros: int) -> object:
    """A DuckDB INTERVAL parameter (a timedelta cannot carry months)."""
    if months == 0:
        return dt.timedelta(days=days, microseconds=micros)
    from duckdb.value.constant import IntervalValue

    return IntervalValue(f"{months} months {days} days {micros} microseconds")


_TRUE = frozenset({"t", "true", "1", "y", "yes", "on"})
_FALSE = frozenset({"f", "false", "0", "n", "no", "off"})


def _parse_bool(text: str) -> bool:
    v = text.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(text)


def _parse_bytea_text(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    out = bytearray()
    i = 0
    raw = text.encode("utf-8")
    while i < len(raw):
        c = raw[i]
        if c == 0x5C and raw[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif c == 0x5C and len(raw) >= i + 4:
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(c)
            i += 1
    return bytes(out)


def _parse_timestamp(text: str, with_tz: bool) -> object:
    value = dt.datetime.fromisoformat(text.strip())
    if with_tz and value.tzinfo is None:
        return text  # let DuckDB read it in the session's zone
    return value


def _parse_text_array(text: str, element: Callable[[str], object]) -> list[object]:
    """A one-dimensional ``{a,"b c",NULL}`` literal."""
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise ValueError("array literal must be enclosed in braces")
    items: list[object] = []
    i, n = 1, len(s) - 1
    while i < n:
        if s[i] == '"':
            i += 1
            buf = []
            while i < n and s[i] != '"':
                if s[i] == "\\":
                    i += 1
                buf.append(s[i])
                i += 1
            i += 1
            items.append(element("".join(buf)))
        else:
            j = s.find(",", i)
            j = n if j < 0 else j
            word = s[i:j].strip()
            if word.startswith("{"):
                raise ValueError("multidimensional arrays are not supported")
            items.append(None if word.upper() == "NULL" else element(word))
            i = j
        while i < n and s[i] in " ,":
            i += 1
    return items


_TEXT_DECODERS: dict[int, Callable[[str], object]] = {
    BOOL_OID: _parse_bool,
    INT2_OID: int,
    INT4_OID: int,
    INT8_OID: int,
    OID_OID: int,
    FLOAT4_OID: float,
    FLOAT8_OID: float,
    NUMERIC_OID: decimal.Decimal,
    DATE_OID: dt.date.fromisoformat,
    TIME_OID: dt.time.fromisoformat,
    TIMESTAMP_OID: lambda s: _parse_timestamp(s, False),
    TIMESTAMPTZ_OID: lambda s: _parse_timestamp(s, True),
    INTERVAL_OID: lambda s: interval_value(*parse_interval(s)),
    UUID_OID: uuid.UUID,
    BYTEA_OID: _parse_bytea_text,
}


def decode_text_param(oid: int, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise sql_error("22021", "invalid byte sequence for encoding UTF8") from None
    decoder = _TEXT_DECODERS.get(oid)
    if decoder is None:
        element = ARRAY_ELEMENT_OID.get(oid)
        if element is None:
            return text
        element_decoder = _TEXT_DECODERS.get(element, str)
        try:
            return _parse_text_array(text, element_decoder)
        except (ValueError, ArithmeticError, IndexError):
            raise param_error(oid, text) from None
    try:
        return decoder(text)
    except (ValueError, ArithmeticError):
        if oid in (DATE_OID, TIME_OID, TIMESTAMP_OID, TIMESTAMPTZ_OID, INTERVAL_OID):
            return text  # 'infinity', 'epoch', BC dates...: DuckDB's cast decides
        raise param_error(oid, text) from None


def _binary_numeric(raw: bytes) -> decimal.Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", raw)
    if sign == 0xC000:
        return decimal.Decimal("NaN")
    if sign in (0xD000, 0xF000):
        return decimal.Decimal("Infinity" if sign == 0xD000 else "-Infinity")
    groups = struct.unpack_from(f"!{ndigits}H", raw, 8)
    value = 0
    for g in groups:
        value = value * 10000 + g
    exponent = (weight - ndigits + 1) * 4
    with decimal.localcontext(EXACT_DECIMAL):
        result = decimal.Decimal(value).scaleb(exponent)
        if sign == 0x4000:
            result = -result
        if dscale < 0:
            raise ValueError("negative display scale")
        return result.quantize(decimal.Decimal(1).scaleb(-dscale))


def _binary_timestamp(raw: bytes, tz: bool) -> object:
    (micros,) = struct.unpack("!q", raw)
    if micros in (2**63 - 1, -(2**63)):
        return "infinity" if micros > 0 else "-infinity"
    base = PG_EPOCH_TSTZ if tz else PG_EPOCH_TS
    return base + dt.timedelta(microseconds=micros)


def _binary_interval(raw: bytes) -> object:
    micros, days, months = struct.unpack("!qii", raw)
    return interval_value(months, days, micros)


def _binary_jsonb(raw: bytes) -> str:
    if not raw or raw[0] != 1:
        raise ValueError("unsupported jsonb version")
    return raw[1:].decode("utf-8")


_BINARY_DECODERS: dict[int, Callable[[bytes], object]] = {
    BOOL_OID: lambda b: struct.unpack("!?", b)[0],
    INT2_OID: lambda b: struct.unpack("!h", b)[0],
    INT4_OID: lambda b: struct.unpack("!i", b)[0],
    INT8_OID: lambda b: struct.unpack("!q", b)[0],
    OID_OID: lambda b: struct.unpack("!I", b)[0],
    FLOAT4_OID: lambda b: struct.unpack("!f", b)[0],
    FLOAT8_OID: lambda b: struct.unpack("!d", b)[0],
    NUMERIC_OID: _binary_numeric,
    BYTEA_OID: bytes,
    DATE_OID: lambda b: PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", b)[0]),
    TIME_OID: lambda b: (
        dt.datetime.min + dt.timedelta(microseconds=struct.unpack("!q", b)[0])
    ).time(),
    TIMESTAMP_OID: lambda b: _binary_timestamp(b, False),
    TIMESTAMPTZ_OID: lambda b: _binary_timestamp(b, True),
    INTERVAL_OID: _binary_interval,
    UUID_OID: lambda b: uuid.UUID(bytes=bytes(b)),
    JSONB_OID: _binary_jsonb,
    JSON_OID: lambda b: b.decode("utf-8"),
}


def _binary_array(raw: bytes, oid: int) -> list[object]:
    ndim, _flags, element_oid = struct.unpack_from("!iii", raw)
    if ndim == 0:
        return []
    if ndim != 1:
        raise ValueError("multidimensional arrays are not supported")
    length, _lower = struct.unpack_from("!ii", raw, 12)
    pos = 20
    items: list[object] = []
    for _ in range(length):
        (size,) = struct.unpack_from("!i", raw, pos)
        pos += 4
        if size < 0:
            items.append(None)
            continue
        items.append(decode_binary_param(element_oid, raw[pos : pos + size]))
        pos += size
    return items


def decode_binary_param(oid: int, raw: bytes) -> object:
    decoder = _BINARY_DECODERS.get(oid)
    try:
        if decoder is not None:
            return decoder(raw)
        if oid in ARRAY_ELEMENT_OID:
            return _binary_array(raw, oid)
        return raw.decode("utf-8")
    except Error:
        raise
    except (ValueError, struct.error, ArithmeticError, OverflowError, UnicodeDecodeError):
        raise sql_error(
            "22P03", f"incorrect binary data format in parameter of type {_type_name(oid)}"
        ) from None


def decode_param(oid: int, fmt: int, raw: bytes | None) -> object:
    """A Bind parameter as the Python value the engine binds (None for NULL)."""
    if raw is None:
        return None
    if fmt == 1:
        return decode_binary_param(oid, raw)
    return decode_text_param(oid, raw)
