"""The pgwire value codec on its own: PostgreSQL's text spellings, binary layouts, and the
agreement of the two DataRow assembly paths."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivulet.common import types as T
from rivulet.server.pgwire import binary_format, codec, oids, params, rows, text_format


@pytest.mark.parametrize(
    ("value", "float4", "text"),
    [
        (1.5, False, "1.5"),
        (0.1, False, "0.1"),
        (1e15, False, "1e+15"),
        (123456789012345.0, False, "123456789012345"),
        (1.2345678901234567e16, False, "1.2345678901234568e+16"),
        (0.0001, False, "0.0001"),
        (0.00001, False, "1e-05"),
        (-2.5e-300, False, "-2.5e-300"),
        (float("inf"), False, "Infinity"),
        (float("-inf"), False, "-Infinity"),
        (float("nan"), False, "NaN"),
        (-0.0, False, "-0"),
        (1.1, True, "1.1"),
        (1e6, True, "1e+06"),
        (123456.0, True, "123456"),
    ],
)
def test_float_text(value: float, float4: bool, text: str) -> None:
    assert text_format.pg_float(value, float4) == text
    arrow_type = pa.float32() if float4 else pa.float64()
    column = codec.text_array(pa.array([value, None], arrow_type), T.REAL if float4 else T.DOUBLE)
    assert column.to_pylist() == [text, None]


def test_interval_text() -> None:
    values = [
        (14, 1, 7_200_000_000),
        (0, 0, 0),
        (0, -1, 7_200_000_000),
        (-1, 0, -1_500),
        (0, 1, 0),
        (-12, 0, 0),
        (0, 0, 90_000_000_000 + 500_000),
    ]
    arr = pa.array(
        [pa.MonthDayNano([m, d, us * 1000]) for m, d, us in values] + [None],
        pa.month_day_nano_interval(),
    )
    assert codec.text_array(arr, T.INTERVAL).to_pylist() == [
        "1 year 2 mons 1 day 02:00:00",
        "00:00:00",
        "-1 days +02:00:00",
        "-1 mons -00:00:00.0015",
        "1 day",
        "-1 years",
        "25:00:00.5",
        None,
    ]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("1 year 2 mons 3 days 04:05:06.5", (14, 3, 14_706_500_000)),
        ("-1 days +02:00:00", (0, -1, 7_200_000_000)),
        ("1 day 2:00:00", (0, 1, 7_200_000_000)),
        ("3 hours 30 minutes", (0, 0, 12_600_000_000)),
        ("2 weeks ago", (0, -14, 0)),
    ],
)
def test_parse_interval(text: str, parts: tuple[int, int, int]) -> None:
    assert params.parse_interval(text) == parts


def test_bytea_hex_and_timestamps() -> None:
    assert codec.text_array(pa.array([b"\x00\xab", b"", None]), T.BYTEA).to_pylist() == [
        "\\x00ab",
        "\\x",
        None,
    ]
    ts = pa.array([dt.datetime(2024, 1, 1, 10, 0), dt.datetime(2024, 1, 1, 10, 0, 0, 120000)])
    assert codec.text_array(ts, T.TIMESTAMP).to_pylist() == [
        "2024-01-01 10:00:00",
        "2024-01-01 10:00:00.12",
    ]
    tz = pa.array([dt.datetime(2024, 7, 1, 10, 0)], pa.timestamp("us", tz="UTC"))
    assert codec.text_array(tz, T.TIMESTAMPTZ, "America/New_York").to_pylist() == [
        "2024-07-01 06:00:00-04"
    ]
    # As PostgreSQL reads them: an HH:MM offset is POSIX (positive west), a bare number
    # ISO 8601 (positive east).
    assert codec.text_array(tz, T.TIMESTAMPTZ, "+05:30").to_pylist() == [
        "2024-07-01 04:30:00-05:30"
    ]
    assert codec.text_array(tz, T.TIMESTAMPTZ, "5").to_pylist() == ["2024-07-01 15:00:00+05"]


def test_array_text_quoting() -> None:
    arr = pa.array([["a b", "x", "", None, "NULL", 'q"', "back\\slash"], None, []])
    assert codec.text_array(arr, T.DataType.from_duckdb("VARCHAR[]")).to_pylist() == [
        '{"a b",x,"",NULL,"NULL","q\\"","back\\\\slash"}',
        None,
        "{}",
    ]
    assert params.decode_text_param(1009, b'{"a b",x,NULL,"q\\""}') == ["a b", "x", None, 'q"']
    assert params.decode_text_param(1007, b"{1,NULL,3}") == [1, None, 3]


def test_jsonb_text_is_normalized_like_postgres() -> None:
    arr = pa.array(['{"bb" : 1,  "a":[1,2.50, {"z":null}], "c": "é"}'])
    assert codec.text_array(arr, T.JSONB).to_pylist() == [
        '{"a": [1, 2.50, {"z": null}], "c": "é", "bb": 1}'
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
        lambda d: abs(d.adjusted()) < 60
    )
)
def test_numeric_binary_round_trip(value: decimal.Decimal) -> None:
    raw = binary_format._numeric_binary_value(value, normalize=False)
    back = params.decode_binary_param(oids.NUMERIC_OID, raw)
    assert back == value
    ndigits, _weight, _sign, dscale = struct.unpack_from("!hhHh", raw)
    assert len(raw) == 8 + 2 * ndigits
    assert dscale >= 0


def test_numeric_binary_known_layout() -> None:
    # 12345.678 = digits 1 2345 6780, weight 1, dscale 3
    raw = binary_format._numeric_binary_value(decimal.Decimal("12345.678"), normalize=False)
    assert raw == struct.pack("!hhHh3H", 3, 1, 0, 3, 1, 2345, 6780)
    raw = binary_format._numeric_binary_value(decimal.Decimal("1.5000000000"), normalize=True)
    assert raw == struct.pack("!hhHh2H", 2, 0, 0, 1, 1, 5000)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 12).flatmap(
        lambda scale: st.tuples(
            st.just(scale),
            st.lists(
                st.none()
                | st.integers(-(10**15), 10**15).map(lambda u: decimal.Decimal(u).scaleb(-scale)),
                min_size=1,
                max_size=30,
            ),
        )
    ),
    st.booleans(),
)
def test_vectorized_binary_numeric_matches_value_by_value(
    scale_values: tuple[int, list[decimal.Decimal | None]], unconstrained: bool
) -> None:
    scale, values = scale_values
    arr = pa.array(values, pa.decimal128(38, scale))
    dtype = T.NUMERIC if unconstrained else T.DataType.numeric(38, scale)
    fast = binary_format._numeric_binary_vectorized(arr, scale, dtype.is_numeric_unconstrained)
    assert fast is not None
    expected = [
        None
        if v is None
        else binary_format._numeric_binary_value(v, dtype.is_numeric_unconstrained)
        for v in arr.to_pylist()
    ]
    assert rows.encoded_values(fast) == expected


def _columns(values: list[int | None], strings: list[str | None]) -> list[codec.Encoded]:
    ints = pa.array(values, pa.int64())
    return [
        codec.encode_text(ints, T.BIGINT),
        codec.encode_binary(ints, T.BIGINT),
        codec.encode_text(pa.array(strings, pa.string()), T.VARCHAR),
        codec.encode_binary(pa.array([v is not None for v in values]), T.BOOLEAN),
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | st.text(max_size=12),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_small_and_vectorized_row_assembly_agree(
    table: list[tuple[int | None, str | None]],
) -> None:
    cols = _columns([r[0] for r in table], [r[1] for r in table])
    small = rows._data_rows_small(cols, len(table))
    assert small == rows._data_rows_vectorized(cols, len(table))
    # And the bytes parse back to the values.
    pos = 0
    for value, text in table:
        kind, length, ncols = struct.unpack_from("!cih", small, pos)
        assert (kind, ncols) == (b"D", 4)
        fields = []
        at = pos + 7
        for _ in range(ncols):
            (n,) = struct.unpack_from("!i", small, at)
            at += 4
            fields.append(None if n < 0 else small[at : at + n])
            at += max(n, 0)
        assert at == pos + 1 + length
        assert fields[0] == (None if value is None else str(value).encode())
        assert fields[1] == (None if value is None else struct.pack("!q", value))
        assert fields[2] == (None if text is None else text.encode())
        pos = at
    assert pos == len(small)


def test_binary_encodings_of_dates_and_intervals() -> None:
    date = codec.encode_binary(pa.array([dt.date(2000, 1, 2)]), T.DATE)
    assert date.data.tobytes() == struct.pack("!i", 1)
    ts = codec.encode_binary(pa.array([dt.datetime(2000, 1, 1, 0, 0, 1)]), T.TIMESTAMP)
    assert ts.data.tobytes() == struct.pack("!q", 1_000_000)
    iv = pa.array([pa.MonthDayNano([2, 3, 4_000])], pa.month_day_nano_interval())
    assert codec.encode_binary(iv, T.INTERVAL).data.tobytes() == struct.pack("!qii", 4, 3, 2)
    uuid_text = "12345678-1234-5678-1234-567812345678"
    enc = codec.encode_binary(pa.array([uuid_text, None]), T.UUID)
    assert enc.data.tobytes()[:16] == bytes.fromhex(uuid_text.replace("-", ""))
    assert enc.valid is not None and enc.valid.tolist() == [True, False]


def test_copy_text_rows_escapes() -> None:
    table = pa.table({"a": [1, None], "b": ["x\ty\\z", 'a,"b']})
    types = [T.INTEGER, T.VARCHAR]
    text = codec.copy_text_rows(table, types, {"format": "text"}, "UTC").to_pylist()
    assert text == ["1\tx\\ty\\\\z\n", '\\N\ta,"b\n']
    csv = codec.copy_text_rows(table, types, {"format": "csv"}, "UTC").to_pylist()
    assert csv == ["1,x\ty\\z\n", ',"a,""b"\n']


def test_wide_numerics_fall_back_to_exact_encoding() -> None:
    values = [decimal.Decimal("12345678901234567890123.4567890123"), decimal.Decimal("-1.5")]
    arr = pa.array(values, pa.decimal128(38, 10))
    assert binary_format._numeric_binary_vectorized(arr, 10, True) is None
    enc = codec.encode_binary(arr, T.NUMERIC)
    decoded = [params.decode_binary_param(oids.NUMERIC_OID, v) for v in rows.encoded_values(enc)]
    assert decoded == values


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.integers(-(2**31), 2**31 - 1),
            st.none() | st.booleans(),
            st.none() | st.text(max_size=8),
            st.none() | st.floats(allow_nan=True),
        ),
        min_size=0,
        max_size=16,
    ),
    st.sampled_from([[], [1], [0, 1, 0, 1]]),
)
def test_tiny_results_take_a_shortcut_to_the_same_bytes(
    table: list[tuple[object, ...]], formats: list[int]
) -> None:
    data = pa.table(
        {
            "i": pa.array([r[0] for r in table], pa.int32()),
            "b": pa.array([r[1] for r in table], pa.bool_()),
            "s": pa.array([r[2] for r in table], pa.string()),
            "f": pa.array([r[3] for r in table], pa.float64()),
        }
    )
    types = [T.INTEGER, T.BOOLEAN, T.VARCHAR, T.DOUBLE]
    expected = (
        rows._data_rows_vectorized(codec.encode_columns(data, types, formats, "UTC"), len(table))
        if table
        else b""
    )
    assert codec.encode_rows(data, types, formats, "UTC") == expected


def test_dates_past_four_digit_years() -> None:
    days = pa.array([-2440588, -719163, 0, 2145042905, None], pa.int32()).cast(pa.date32())
    assert codec.text_array(days, T.DATE).to_pylist() == [
        "4714-11-24 BC",
        "0001-12-31 BC",
        "1970-01-01",
        "5874897-12-31",
        None,
    ]
