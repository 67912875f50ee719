"""The vnode hash: state is stored under keys that begin with the vnode, so the hash may
never change between versions. The pinned values below are the contract: if one of these
tests fails, a data directory written by an earlier version would be read wrongly."""

from __future__ import annotations

import datetime as dt
import tracemalloc
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from rivulet.common import vnode
from rivulet.common.vnode import VNODE_COUNT, compute_vnodes, hash_columns


def vnodes(*columns: pa.Array | pa.ChunkedArray) -> list[int]:
    return compute_vnodes(list(columns)).tolist()


# ------------------------------------------------------------------- pinned values


def test_pinned_integer_vnodes() -> None:
    values = [0, 1, 2, 3, 42, -1, 2**31 - 1, 2**63 - 1, None]
    assert vnodes(pa.array(values, pa.int64())) == [0, 226, 168, 12, 155, 125, 147, 106, 86]


def test_pinned_64_bit_hashes() -> None:
    h = hash_columns([pa.array([1, 2], pa.int64())])
    assert h.dtype == np.uint64
    assert [hex(x) for x in h.tolist()] == ["0x7d6e4ac38b2b1be2", "0x2f001c5a9cf66fa8"]


def test_pinned_string_vnodes() -> None:
    values = ["", "a", "hello", "héllo", "x" * 100, None]
    assert vnodes(pa.array(values)) == [0, 242, 227, 124, 247, 86]


def test_pinned_other_types() -> None:
    assert vnodes(pa.array([True, False])) == [226, 0]
    assert vnodes(pa.array([1.5, 0.0, -0.0, float("nan")])) == [199, 0, 0, 74]
    assert vnodes(pa.array([dt.date(2024, 1, 1)])) == [132]
    assert vnodes(pa.array([dt.datetime(2024, 1, 1, 12)], pa.timestamp("us"))) == [116]


def test_pinned_composite_key() -> None:
    assert vnodes(pa.array([1, 2], pa.int32()), pa.array(["a", "b"])) == [63, 119]


# ---------------------------------------------------------------- equal values


@pytest.mark.parametrize("width", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_integer_widths_agree(width: pa.DataType) -> None:
    """SMALLINT 5 and BIGINT 5 are the same key: they must land on the same vnode."""
    values = [0, 1, -1, 5, 100, -128, 127, None]
    assert vnodes(pa.array(values, width)) == vnodes(pa.array(values, pa.int64()))


def test_unsigned_and_signed_agree_on_small_values() -> None:
    values = [0, 1, 7, 200]
    assert vnodes(pa.array(values, pa.uint16())) == vnodes(pa.array(values, pa.int64()))


def test_timestamp_units_agree() -> None:
    """The same instant in seconds, milliseconds, microseconds or nanoseconds."""
    instant = dt.datetime(2024, 2, 29, 12, 30, 15)
    expected = vnodes(pa.array([instant], pa.timestamp("us")))
    for unit in ("s", "ms", "ns"):
        assert vnodes(pa.array([instant], pa.timestamp(unit))) == expected


def test_date_widths_agree() -> None:
    day = dt.date(2023, 12, 31)
    assert vnodes(pa.array([day], pa.date32())) == vnodes(pa.array([day], pa.date64()))


def test_string_kinds_agree() -> None:
    values = ["", "k", "key-1", "ünïcode ✓", "z" * 60, None]
    base = vnodes(pa.array(values, pa.string()))
    assert vnodes(pa.array(values, pa.large_string())) == base
    assert vnodes(pa.array(values, pa.string()).dictionary_encode()) == base
    if hasattr(pa, "string_view"):
        assert vnodes(pa.array(values, pa.string_view())) == base


def test_bytea_hashes_its_bytes_like_a_string() -> None:
    values = ["abc", "", "key"]
    assert vnodes(pa.array([v.encode() for v in values], pa.binary())) == vnodes(pa.array(values))


def test_decimal_and_float_agree() -> None:
    assert vnodes(pa.array([Decimal("1.50"), Decimal("0")], pa.decimal128(10, 2))) == vnodes(
        pa.array([1.5, 0.0])
    )


def test_negative_zero_and_nans_fold() -> None:
    nan_a = np.float64("nan")
    nan_b = np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), dtype=np.float64)[0]
    assert np.isnan(nan_b)
    assert vnodes(pa.array([0.0, nan_a])) == vnodes(pa.array([-0.0, nan_b]))


def test_intervals_hash_every_field() -> None:
    iv = pa.array(
        [pa.scalar((1, 2, 3), pa.month_day_nano_interval()).as_py()] * 2
        + [(0, 2, 3), (1, 0, 3), (1, 2, 0)],
        pa.month_day_nano_interval(),
    )
    result = vnodes(iv)
    assert result[0] == result[1]
    h = hash_columns([iv]).tolist()
    assert len(set(h[1:])) == 4


# ------------------------------------------------------------- arrays and slices


def test_sliced_string_arrays_hash_like_fresh_arrays() -> None:
    """Slices share their parent's buffers with an offset: the hash must read only the
    slice's own values."""
    words = [f"word-{i}" * (i % 7) for i in range(200)]
    full = pa.array(words)
    for start, length in [(0, 10), (1, 1), (37, 50), (150, 50), (199, 1), (5, 0)]:
        sliced = full.slice(start, length)
        fresh = pa.array(words[start : start + length], pa.string())
        assert hash_columns([sliced]).tolist() == hash_columns([fresh]).tolist()


def test_sliced_long_strings_use_the_same_hash() -> None:
    words = [("long-" * 20) + str(i) for i in range(20)]
    full = pa.array(words, pa.large_string())
    assert (
        hash_columns([full.slice(3, 9)]).tolist() == hash_columns([pa.array(words[3:12])]).tolist()
    )


def test_short_and_long_string_paths_agree() -> None:
    """Strings up to 48 bytes and longer ones are hashed by two vectorized paths; a value
    must hash the same whichever path its batch takes."""
    short = ["", "a", "abc", "x" * 48]
    alone = hash_columns([pa.array(short)]).tolist()
    with_long = hash_columns([pa.array([*short, "y" * 49])]).tolist()
    assert with_long[: len(short)] == alone


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 16])
def test_long_values_hash_the_same_whatever_the_block(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long values are hashed a block of bytes at a time; values that straddle blocks,
    fill several or sit between empty ones hash as the one-position-at-a-time form."""
    rng = np.random.default_rng(5)
    values = [
        "",
        "z" * 49,
        "",
        *("".join(rng.choice(list("ab€é"), n)) for n in (1, 63, 64, 65, 300)),
    ]
    expected = hash_columns([pa.array([v[:48] for v in values])]).tolist()  # short path
    monkeypatch.setattr(vnode, "_HASH_BLOCK", block)
    truncated = hash_columns([pa.array([*(v[:48] for v in values), "q" * 49])]).tolist()
    assert truncated[: len(values)] == expected
    whole = hash_columns([pa.array(values)]).tolist()
    monkeypatch.setattr(vnode, "_HASH_BLOCK", 1 << 16)
    assert whole == hash_columns([pa.array(values)]).tolist()


def test_a_long_value_hashes_in_bounded_memory() -> None:
    """A 10 MB key must not take hundreds of MB to hash (an MV's string_agg value, a
    large text key)."""
    tracemalloc.start()
    try:
        hash_columns([pa.array(["y" * 10_000_000])])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 30_000_000


def test_sliced_integer_and_interval_arrays() -> None:
    ints = pa.array(list(range(100)), pa.int32())
    assert vnodes(ints.slice(40, 10)) == vnodes(pa.array(list(range(40, 50)), pa.int32()))
    iv = pa.array([(i, i, i) for i in range(10)], pa.month_day_nano_interval())
    expected = vnodes(pa.array([(i, i, i) for i in range(4, 8)], pa.month_day_nano_interval()))
    assert vnodes(iv.slice(4, 4)) == expected


def test_chunked_arrays_hash_like_contiguous_ones() -> None:
    chunked = pa.chunked_array([pa.array(["a", "b"]), pa.array(["c"]), pa.array([], pa.string())])
    assert vnodes(chunked) == vnodes(pa.array(["a", "b", "c"]))


def test_nulls_hash_to_a_constant_whatever_the_type() -> None:
    types = [
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint16(),
        pa.float64(),
        pa.bool_(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us"),
        pa.decimal128(10, 2),
        pa.month_day_nano_interval(),
    ]
    # The full 64-bit hash, not only the vnode: alone, among values, or in a slice.
    hashes = {hash_columns([pa.array([None], t)])[0] for t in types}
    hashes |= {hash_columns([pa.array([None, None], t).slice(1)])[0] for t in types}
    hashes.add(hash_columns([pa.array([5, None, 7], pa.int64())])[1])
    hashes.add(hash_columns([pa.array(["a", None], pa.string())])[1])
    assert len(hashes) == 1, hashes
    assert len({vnodes(pa.array([None], t))[0] for t in types}) == 1
    # A null is not the same key as the type's zero value.
    null_hash = hash_columns([pa.array([None], pa.int64())])[0]
    assert null_hash != hash_columns([pa.array([0], pa.int64())])[0]
    assert null_hash != hash_columns([pa.array([""], pa.string())])[0]


def test_column_order_matters_in_a_composite_key() -> None:
    a = pa.array([1, 2, 3], pa.int64())
    b = pa.array([3, 2, 1], pa.int64())
    assert hash_columns([a, b]).tolist() != hash_columns([b, a]).tolist()


# ------------------------------------------------------------------ distribution


def test_vnodes_are_in_range_and_int16() -> None:
    result = compute_vnodes([pa.array(np.arange(10_000, dtype=np.int64))])
    assert result.dtype == np.int16
    assert result.min() >= 0 and result.max() < VNODE_COUNT


def test_sequential_keys_spread_over_every_vnode() -> None:
    result = compute_vnodes([pa.array(np.arange(25_600, dtype=np.int64))])
    counts = np.bincount(result, minlength=VNODE_COUNT)
    assert (counts > 0).all()
    # 100 keys per vnode on average: no vnode gets more than twice its share.
    assert counts.max() < 200


def test_unsupported_types_fail_loudly() -> None:
    with pytest.raises(TypeError, match="no vnode hash"):
        compute_vnodes([pa.array([[1, 2]], pa.list_(pa.int64()))])
    with pytest.raises(ValueError):
        compute_vnodes([])
