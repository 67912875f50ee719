"""PostgreSQL's binary COPY format (``COPY t FROM STDIN (FORMAT binary)``), read into Arrow.

The stream is a header (an 11-byte signature, flags, an extension area), then one tuple
per row - a field count and, per field, a length (-1 for NULL) and that many bytes in the
type's binary send format - then a trailer (a field count of -1). asyncpg's
``copy_records_to_table`` writes it. The framing is walked in Python (one step per field,
nothing else per row); each column is then decoded by vectorized numpy and Arrow work
over the whole batch: fixed-width values by one gather and a byte-order view, strings by
one gather into an Arrow buffer. Errors are PostgreSQL's (SQLSTATE and text).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa

from rivulet.common.errors import (
    BAD_COPY_FILE_FORMAT,
    CHARACTER_NOT_IN_REPERTOIRE,
    FEATURE_NOT_SUPPORTED,
    PROTOCOL_VIOLATION,
    Error,
    sql_error,
)
from rivulet.common.types import DataType, arrow_type_of

__all__ = ["SIGNATURE", "BinaryCopyReader", "check_binary_types"]

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
INVALID_BINARY_REPRESENTATION = "22P03"
_HEADER = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# PostgreSQL's epoch (2000-01-01) from Unix's, in days and in microseconds.
_PG_EPOCH_DAYS = 10_957
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400 * 1_000_000

# Fixed-width types: (bytes, big-endian numpy type); date/time ones shifted below.
_FIXED: dict[str, tuple[int, str]] = {
    "boolean": (1, "u1"),
    "smallint": (2, ">i2"),
    "integer": (4, ">i4"),
    "bigint": (8, ">i8"),
    "real": (4, ">f4"),
    "double precision": (8, ">f8"),
    "oid": (4, ">u4"),
    "date": (4, ">i4"),
    "time without time zone": (8, ">i8"),
    "timestamp without time zone": (8, ">i8"),
    "timestamp with time zone": (8, ">i8"),
}
_STRINGS = {"character varying", "text", "name", '"char"', "jsonb", "bytea"}
_PER_VALUE = {"numeric", "uuid", "interval"}


def check_binary_types(names: list[str], types: list[DataType]) -> None:
    """Refuse, before any data, a column whose binary format is not read here."""
    for name, dtype in zip(names, types):
        if dtype.name not in _FIXED and dtype.name not in _STRINGS | _PER_VALUE:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'COPY FROM in binary format does not support column "{name}" of type {dtype.name}',
                hint="Use COPY's text or CSV format for this table.",
            )


@dataclass
class _Fields:
    """Where each field of a batch of rows is: byte offsets and lengths (-1: NULL),
    row-major, and the input line (tuple) number of the batch's first row."""

    offsets: list[int]
    lengths: list[int]
    first_line: int


class BinaryCopyReader:
    """Reads a binary COPY stream piece by piece: ``read`` takes the bytes received so
    far and returns the complete rows among them (what is left waits for more)."""

    def __init__(self, table_name: str, names: list[str], types: list[DataType]) -> None:
        check_binary_types(names, types)
        self.table_name = table_name
        self.names = names
        self.types = types
        self._header_read = False
        self.ended = False
        self._line = 0  # rows (tuples) read so far

    def read(self, data: bytes, *, final: bool) -> tuple[pa.Table | None, int]:
        """The rows complete in ``data`` and how many bytes they (and the header or
        trailer) took. With ``final``, ``data`` is all that is left of the stream."""
        pos = 0
        if not self._header_read:
            pos = self._read_header(data, final)
            if pos == 0:
                return None, 0
        if self.ended:
            if pos < len(data):
                raise self._error("received copy data after EOF marker", line_no=self._line)
            return None, pos
        fields, pos = self._walk(data, pos, final)
        rows = len(fields.lengths) // len(self.names) if self.names else 0
        if not rows:
            return None, pos
        return self._decode(data, fields, rows), pos

    def _read_header(self, data: bytes, final: bool) -> int:
        if len(data) < len(SIGNATURE) + 8:
            if final:
                raise self._error("COPY file signature not recognized", header=True)
            return 0
        if data[: len(SIGNATURE)] != SIGNATURE:
            raise self._error("COPY file signature not recognized", header=True)
        flags, extension = _HEADER.unpack_from(data, len(SIGNATURE))
        if flags & 0xFFFF0000 & ~(1 << 16):
            raise self._error("unrecognized critical flags in COPY file header", header=True)
        if flags & (1 << 16):
            raise self._error("COPY file with OIDs is not supported", header=True)
        if extension < 0:
            raise self._error("invalid COPY file header (missing length)", header=True)
        end = len(SIGNATURE) + 8 + extension
        if len(data) < end:
            if final:
                raise self._error("invalid COPY file header (wrong length)", header=True)
            return 0
        self._header_read = True
        return end

    def _walk(self, data: bytes, pos: int, final: bool) -> tuple[_Fields, int]:
        """The fields of the complete tuples from ``pos`` on; stops at the trailer."""
        size = len(data)
        ncols = len(self.names)
        offsets: list[int] = []
        lengths: list[int] = []
        add_offset, add_length = offsets.append, lengths.append
        i16, i32 = _I16.unpack_from, _I32.unpack_from
        first_line = self._line
        cut_column: int | None = None  # the field the data ended in
        while pos + 2 <= size:
            (count,) = i16(data, pos)
            if count == -1:
                self.ended = True
                pos += 2
                if pos < size:
                    raise self._error("received copy data after EOF marker", line_no=self._line)
                break
            if count != ncols:
                self._line += 1
                raise self._error(f"row field count is {count}, expected {ncols}")
            row_start = len(offsets)
            p = pos + 2
            complete = True
            for field in range(ncols):
                if p + 4 > size:
                    complete = False
                    cut_column = field
                    break
                (length,) = i32(data, p)
                p += 4
                add_offset(p)
                add_length(length)
                if length > 0:
                    p += length
                elif length < -1:
                    self._line += 1
                    raise self._error(f"invalid field size {length}")
            if complete and p > size:
                cut_column = ncols - 1
            if not complete or p > size:
                # An incomplete tuple waits for more data (or the data ended inside it).
                del offsets[row_start:], lengths[row_start:]
                break
            pos = p
            self._line += 1
        if final and not self.ended and pos < size:
            self._line += 1
            raise self._error("unexpected EOF in COPY data", col=cut_column)
        return _Fields(offsets, lengths, first_line), pos

    def _decode(self, data: bytes, fields: _Fields, rows: int) -> pa.Table:
        buf = np.frombuffer(data, dtype=np.uint8)
        ncols = len(self.names)
        offsets = np.array(fields.offsets, dtype=np.int64).reshape(rows, ncols)
        lengths = np.array(fields.lengths, dtype=np.int64).reshape(rows, ncols)
        columns = [
            self._column(buf, data, offsets[:, i], lengths[:, i], i, fields.first_line)
            for i in range(ncols)
        ]
        return pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(ncols)])

    def _column(
        self,
        buf: np.ndarray,
        data: bytes,
        offsets: np.ndarray,
        lengths: np.ndarray,
        col: int,
        first_line: int,
    ) -> pa.Array:
        dtype = self.types[col]
        null = lengths == -1
        mask = null if null.any() else None
        if dtype.name in _FIXED:
            width, np_type = _FIXED[dtype.name]
            bad = np.flatnonzero(~null & (lengths != width))
            if bad.size:
                row = int(bad[0])
                if lengths[row] < width:  # read past the value, as PostgreSQL tells it
                    raise self._error(
                        "insufficient data left in message", col=col,
                        line_no=first_line + row, sqlstate=PROTOCOL_VIOLATION,
                    )  # fmt: skip
                raise self._bad_value(col, first_line + row)
            starts = np.where(null, 0, offsets)
            raw = buf[starts[:, None] + np.arange(width)].reshape(-1).view(np_type)
            return self._fixed(raw, dtype, mask, col, first_line, null)
        if dtype.name in _STRINGS:
            return self._strings(buf, offsets, lengths, null, dtype, col, first_line)
        values = [
            None if length == -1 else self._one_value(data[o : o + length], dtype, col, row)
            for row, (o, length) in enumerate(zip(offsets.tolist(), lengths.tolist()), first_line)
        ]
        if dtype.name == "interval":
            return pa.array(values, type=pa.month_day_nano_interval())
        return pa.array(values, type=pa.string())  # DuckDB casts it to the column's type

    def _fixed(
        self,
        raw: np.ndarray,
        dtype: DataType,
        mask: np.ndarray | None,
        col: int,
        first_line: int,
        null: np.ndarray,
    ) -> pa.Array:
        name = dtype.name
        if name == "boolean":  # any byte but 0 is true, as PostgreSQL reads it
            return pa.array(raw.astype(bool), mask=mask)
        if name == "date":
            days = raw.astype(np.int64) + _PG_EPOCH_DAYS
            out_of_range = np.flatnonzero(~null & (np.abs(days) >= 2**31))
            if out_of_range.size:
                line = first_line + int(out_of_range[0])
                raise self._error("date out of range", col=col, line_no=line)
            return pa.array(days.astype(np.int32), type=pa.date32(), mask=mask)
        if name.startswith("timestamp"):
            micros = raw.astype(np.int64)
            shifted = micros + np.int64(_PG_EPOCH_MICROS)
            overflow = np.flatnonzero(~null & (micros > np.iinfo(np.int64).max - _PG_EPOCH_MICROS))
            if overflow.size:
                line = first_line + int(overflow[0])
                raise self._error("timestamp out of range", col=col, line_no=line)
            return pa.array(shifted, type=arrow_type_of(dtype), mask=mask)
        if name == "time without time zone":
            micros = raw.astype(np.int64)
            bad = np.flatnonzero(~null & ((micros < 0) | (micros > 86_400_000_000)))
            if bad.size:
                raise self._error("time out of range", col=col, line_no=first_line + int(bad[0]))
            return pa.array(micros, type=pa.time64("us"), mask=mask)
        return pa.array(raw.astype(raw.dtype.newbyteorder("=")), mask=mask)

    def _strings(
        self,
        buf: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        null: np.ndarray,
        dtype: DataType,
        col: int,
        first_line: int,
    ) -> pa.Array:
        sizes = np.where(null, 0, lengths)
        starts = offsets.copy()
        if dtype.name == "jsonb":
            # jsonb's send format: a version byte (1), then the text.
            present = np.flatnonzero(~null)
            versions = buf[starts[present]] if present.size else np.empty(0, np.uint8)
            bad = np.flatnonzero((sizes[present] < 1) | (versions != 1))
            if bad.size:
                row = int(present[bad[0]])
                version = int(versions[bad[0]]) if sizes[row] >= 1 else 0
                raise self._error(
                    f"unsupported jsonb version number {version}", col=col, line_no=first_line + row
                )
            starts = np.where(null, starts, starts + 1)
            sizes = np.where(null, 0, sizes - 1)
        ends = np.cumsum(sizes)
        total = int(ends[-1]) if ends.size else 0
        out_offsets = np.concatenate([[0], ends]).astype(np.int64)
        index = np.repeat(starts - out_offsets[:-1], sizes) + np.arange(total, dtype=np.int64)
        gathered = buf[index]
        binary = dtype.name == "bytea"
        validity = pa.array(~null).buffers()[1] if null.any() else None
        array = pa.Array.from_buffers(
            pa.large_binary() if binary else pa.large_string(),
            len(sizes),
            [validity, pa.py_buffer(out_offsets), pa.py_buffer(gathered)],
            null_count=int(null.sum()),
        )
        if not binary:
            zero = np.flatnonzero(gathered == 0)
            if zero.size:
                row = int(np.searchsorted(ends, zero[0], side="right"))
                raise self._error(
                    'invalid byte sequence for encoding "UTF8": 0x00',
                    col=col,
                    line_no=first_line + row,
                    sqlstate=CHARACTER_NOT_IN_REPERTOIRE,
                )
            try:
                array.validate(full=True)
            except pa.ArrowInvalid:
                raise self._utf8_error(array, col, first_line) from None
        return array.cast(arrow_type_of(dtype))

    def _utf8_error(self, array: pa.Array, col: int, first_line: int) -> Error:
        """PostgreSQL's error for the first value that is not UTF-8 (only once a batch
        failed its check): the bytes of the bad sequence, the row and the column."""
        for row, value in enumerate(array.cast(pa.large_binary()).to_pylist()):
            if value is None:
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = value[exc.start : exc.start + _utf8_length(value[exc.start])]
                shown = " ".join(f"0x{b:02x}" for b in bad)
                return self._error(
                    f'invalid byte sequence for encoding "UTF8": {shown}', col=col,
                    line_no=first_line + row, sqlstate=CHARACTER_NOT_IN_REPERTOIRE,
                )  # fmt: skip
        return self._error(
            'invalid byte sequence for encoding "UTF8"', col=col, line_no=first_line,
            sqlstate=CHARACTER_NOT_IN_REPERTOIRE,
        )  # fmt: skip

    def _one_value(self, raw: bytes, dtype: DataType, col: int, line: int) -> object:
        """A value whose send format is decoded one at a time (numeric, uuid, interval)."""
        try:
            if dtype.name == "uuid":
                if len(raw) != 16:
                    raise ValueError
                return str(uuid.UUID(bytes=raw))
            if dtype.name == "interval":
                if len(raw) != 16:
                    raise ValueError
                micros, days, months = struct.unpack(">qii", raw)
                return (months, days, micros * 1000)
            return _numeric_text(raw)
        except (ValueError, struct.error):
            raise self._bad_value(col, line) from None

    def _bad_value(self, col: int, line: int) -> Error:
        return self._error(
            "incorrect binary data format", col=col, line_no=line,
            sqlstate=INVALID_BINARY_REPRESENTATION,
        )  # fmt: skip

    def _error(
        self,
        message: str,
        *,
        header: bool = False,
        col: int | None = None,
        line_no: int | None = None,
        sqlstate: str = BAD_COPY_FILE_FORMAT,
    ) -> Error:
        if header:  # PostgreSQL names no line for the header
            return sql_error(sqlstate, message)
        context = f"COPY {self.table_name}"
        context += f", line {(line_no if line_no is not None else self._line - 1) + 1}"
        if col is not None:
            context += f", column {self.names[col]}"
        return sql_error(sqlstate, message, context=context)


def _utf8_length(lead: int) -> int:
    """The length of a UTF-8 sequence from its first byte (1 for a byte that starts none)."""
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 1


def _numeric_text(raw: bytes) -> str:
    """numeric's send format (base-10000 digits, weight, sign, display scale) as text."""
    ndigits, weight, sign, dscale = struct.unpack_from(">hhHh", raw)
    if ndigits < 0 or len(raw) != 8 + 2 * ndigits or dscale < 0:
        raise ValueError("bad numeric")
    if sign == 0xC000:
        return "NaN"
    if sign == 0xD000:
        return "Infinity"
    if sign == 0xF000:
        return "-Infinity"
    if sign not in (0x0000, 0x4000):
        raise ValueError("bad numeric sign")
    digits = struct.unpack_from(f">{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise ValueError("bad numeric digit")
    coefficient = int("".join(f"{d:04d}" for d in digits) or "0")
    value = Decimal(coefficient).scaleb(4 * (weight + 1 - ndigits))
    value = value.quantize(Decimal(1).scaleb(-dscale)) if dscale else value.to_integral_value()
    return str(-value if sign == 0x4000 else value)
