"""Stream chunks keep update pairs whole or break them into a Delete and an Insert: no
chunk that leaves an operator holds half a pair."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rivulet.common.chunk import Op, StreamChunk

# A chunk as a list of changes: a single Insert or Delete, or an update pair.
change = st.sampled_from(["insert", "delete", "update"])


def chunk_of(changes: list[str]) -> StreamChunk:
    ops: list[int] = []
    for c in changes:
        if c == "insert":
            ops.append(Op.INSERT)
        elif c == "delete":
            ops.append(Op.DELETE)
        else:
            ops += [Op.UPDATE_DELETE, Op.UPDATE_INSERT]
    return StreamChunk(pa.table({"row": np.arange(len(ops))}), np.array(ops, dtype=np.int8))


def assert_pairs_whole(chunk: StreamChunk) -> None:
    ops = chunk.ops
    for i, op in enumerate(ops):
        if op == Op.UPDATE_DELETE:
            assert i + 1 < len(ops) and ops[i + 1] == Op.UPDATE_INSERT, ops
        if op == Op.UPDATE_INSERT:
            assert i > 0 and ops[i - 1] == Op.UPDATE_DELETE, ops


def signs(chunk: StreamChunk) -> dict[int, int]:
    """Each row's effect: +1 adds it, -1 removes it."""
    return {
        r: 1 if o in (Op.INSERT, Op.UPDATE_INSERT) else -1
        for r, o in zip(chunk.data.column("row").to_pylist(), chunk.ops)
    }


@settings(max_examples=200, deadline=None, derandomize=True)
@given(changes=st.lists(change, max_size=12), data=st.data())
def test_take_keeps_the_rows_asked_for_and_no_half_pair(
    changes: list[str], data: st.DataObject
) -> None:
    chunk = chunk_of(changes)
    keep = np.array(
        data.draw(st.lists(st.booleans(), min_size=chunk.num_rows, max_size=chunk.num_rows)),
        dtype=bool,
    )
    out = chunk.take(keep)
    assert out.data.column("row").to_pylist() == list(np.flatnonzero(keep))
    assert_pairs_whole(out)
    # Each kept row still adds or removes what it did.
    assert signs(out) == {r: s for r, s in signs(chunk).items() if keep[r]}
    # A pair kept whole stays a pair.
    for p in chunk.update_pairs():
        if keep[p] and keep[p + 1]:
            at = out.data.column("row").to_pylist().index(p)
            assert (out.ops[at], out.ops[at + 1]) == (Op.UPDATE_DELETE, Op.UPDATE_INSERT)


def test_an_update_half_without_its_partner_is_a_lone_change() -> None:
    """Input that begins or ends mid-pair (or was cut by hand) is repaired too."""
    chunk = StreamChunk(
        pa.table({"row": [0, 1, 2]}),
        np.array([Op.UPDATE_INSERT, Op.INSERT, Op.UPDATE_DELETE], np.int8),
    )
    assert list(chunk.take(np.ones(3, bool)).ops) == [Op.INSERT, Op.INSERT, Op.DELETE]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(changes=st.lists(change, max_size=12), data=st.data())
def test_unpair_breaks_exactly_the_pairs_named(changes: list[str], data: st.DataObject) -> None:
    chunk = chunk_of(changes)
    pairs = chunk.update_pairs()
    assert len(pairs) == changes.count("update")
    broken = np.array(
        data.draw(st.lists(st.sampled_from(list(pairs)), unique=True)) if len(pairs) else [],
        dtype=np.int64,
    )
    out = chunk.unpair(broken)
    assert_pairs_whole(out)
    assert signs(out) == signs(chunk)
    assert sorted(out.update_pairs()) == sorted(set(pairs) - set(broken))


def test_updates_put_each_old_row_right_before_its_new_one() -> None:
    old = pa.table({"k": [1, 2], "v": ["a", "b"]})
    new = pa.table({"k": [1, 2], "v": ["A", "B"]})
    chunk = StreamChunk.updates(old, new)
    assert chunk.data.to_pylist() == [
        {"k": 1, "v": "a"},
        {"k": 1, "v": "A"},
        {"k": 2, "v": "b"},
        {"k": 2, "v": "B"},
    ]
    assert list(chunk.ops) == [Op.UPDATE_DELETE, Op.UPDATE_INSERT] * 2
    assert list(chunk.update_pairs()) == [0, 2]
