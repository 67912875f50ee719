"""Values on the wire, in one place for the connection: result columns encoded a column at
a time (``text_format``, ``binary_format``) and assembled into DataRows (``rows``), and Bind
parameters decoded (``params``)."""

from __future__ import annotations

import pyarrow as pa

from rivulet.common.types import DataType
from rivulet.server.pgwire.binary_format import encode_binary
from rivulet.server.pgwire.oids import (
    ARRAY_ELEMENT_OID,
    BOOL_OID,
    JSON_OID,
    JSONB_OID,
    TEXT_OID,
    oid_of_type_name,
    type_of_oid,
    wire_oid,
)
from rivulet.server.pgwire.params import decode_param
from rivulet.server.pgwire.rows import (
    SMALL_RESULT_ROWS,
    Encoded,
    data_rows,
    data_rows_from_values,
    encoded_values,
    frame_messages,
)
from rivulet.server.pgwire.text_format import copy_text_rows, csv_header, encode_text, text_array

__all__ = [
    "ARRAY_ELEMENT_OID", "TEXT_OID", "Encoded", "copy_text_rows", "csv_header", "data_rows",
    "decode_param", "encode_binary", "encode_columns", "encode_rows", "encode_text", "frame_messages",
    "oid_of_type_name", "text_array", "type_of_oid", "wire_oid",
]  # fmt: skip


def encode_columns(
    table: pa.Table, types: list[DataType], formats: list[int], timezone: str
) -> list[Encoded]:
    """Encode every column of ``table``; ``formats`` as Bind gives them (0, 1 or n codes)."""
    out: list[Encoded] = []
    for i, dtype in enumerate(types):
        fmt = formats[i] if len(formats) > 1 else (formats[0] if formats else 0)
        chunked = table.column(i)
        arr = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        if fmt == 1:
            out.append(encode_binary(arr, dtype, timezone))
        else:
            out.append(encode_text(arr, dtype, timezone))
    return out


def _simple_text_values(arr: pa.Array, dtype: DataType) -> list[bytes | None] | None:
    """Text-format bytes of a tiny integer, boolean or string column, straight from Python
    values (their PostgreSQL spelling is Python's); None for every other type."""
    t = arr.type
    if pa.types.is_integer(t):
        return [None if v is None else str(v).encode() for v in arr.to_pylist()]
    if pa.types.is_boolean(t) and dtype.oid == BOOL_OID:
        return [None if v is None else (b"t" if v else b"f") for v in arr.to_pylist()]
    if pa.types.is_string(t) and dtype.oid not in (JSONB_OID, JSON_OID):
        return [None if v is None else v.encode() for v in arr.to_pylist()]
    return None


def encode_rows(table: pa.Table, types: list[DataType], formats: list[int], timezone: str) -> bytes:
    """DataRow messages for every row of ``table``. Tiny results of simple columns skip the
    Arrow kernels, whose fixed cost per call is most of a one-row reply."""
    nrows = table.num_rows
    if nrows > SMALL_RESULT_ROWS:
        return data_rows(encode_columns(table, types, formats, timezone), nrows)
    values: list[list[bytes | None]] = []
    for i, dtype in enumerate(types):
        fmt = formats[i] if len(formats) > 1 else (formats[0] if formats else 0)
        chunked = table.column(i)
        arr = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        simple = _simple_text_values(arr, dtype) if fmt == 0 else None
        if simple is None:
            enc = (
                encode_binary(arr, dtype, timezone)
                if fmt == 1
                else encode_text(arr, dtype, timezone)
            )
            simple = encoded_values(enc)
        values.append(simple)
    return data_rows_from_values(values, nrows)
