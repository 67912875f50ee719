"""State tables: vnode-prefixed keys, and the epoch overlay a writer reads its own
writes through (running epoch, then sealed epochs newest first, then DuckDB)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pytest

from rivulet.common.chunk import OP_COLUMN, VNODE_COLUMN, Op, StreamChunk
from rivulet.common.types import INTEGER, VARCHAR
from rivulet.common.vnode import compute_vnodes
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.storage.state_table import StateTable, StateTableSchema, last_per_key

SCHEMA = StateTableSchema(
    table_id=7, columns=(("id", INTEGER), ("v", VARCHAR)), pk=(0,), dist_key=(0,)
)


@pytest.fixture
def store():  # type: ignore[no-untyped-def]
    s = StateStore(None, StoreOptions())
    s.run_setup([SCHEMA.create_sql()])
    yield s
    s.close()


@pytest.fixture
def table() -> StateTable:
    return StateTable(SCHEMA)


def data(table: StateTable, ids: list[int], values: list[str | None]) -> pa.Table:
    raw = pa.table({"id": pa.array(ids, pa.int32()), "v": pa.array(values, pa.string())})
    return table.with_vnodes(raw).cast(table.arrow_schema())


def put(table: StateTable, ids: list[int], values: list[str | None], op: Op = Op.INSERT) -> None:
    rows = data(table, ids, values)
    table.write(StreamChunk(rows, np.full(len(ids), op, np.int8)), overwrites=op != Op.INSERT)


def lookup(table: StateTable, store: StateStore, ids: list[int]) -> dict[int, str | None]:
    keys = data(table, ids, [None] * len(ids)).select(SCHEMA.key_names)
    found = table.lookup(keys, table.overlay_layers(), store.cursor())
    return dict(zip(found.column("id").to_pylist(), found.column("v").to_pylist()))


def commit(table: StateTable, store: StateStore, epoch: int) -> None:
    sealed = table.seal(epoch)
    writes = [partial(table.flush, sealed)] if sealed is not None else []
    store.commit_epoch(epoch, writes)
    table.committed(epoch)


def stored(store: StateStore) -> list[tuple[object, ...]]:
    return (
        store.new_cursor().execute(f"SELECT * FROM {SCHEMA.physical_name} ORDER BY id").fetchall()
    )


def test_rows_are_stored_under_their_vnode(table: StateTable, store: StateStore) -> None:
    put(table, [1, 2, 3], ["a", "b", "c"])
    commit(table, store, 1)
    expected = compute_vnodes([pa.array([1, 2, 3], pa.int32())]).tolist()
    assert [(r[0], r[1]) for r in stored(store)] == list(zip(expected, [1, 2, 3]))
    assert SCHEMA.key_names == [VNODE_COLUMN, "id"]


def test_the_running_epoch_is_read_before_it_commits(table: StateTable, store: StateStore) -> None:
    put(table, [1, 2], ["a", "b"])
    assert lookup(table, store, [1, 2, 3]) == {1: "a", 2: "b"}
    assert stored(store) == []
    assert table.has_pending_writes


def test_committed_rows_are_read_from_duckdb(table: StateTable, store: StateStore) -> None:
    put(table, [1, 2], ["a", "b"])
    commit(table, store, 1)
    assert table.overlay_layers() == []
    assert not table.has_pending_writes
    assert lookup(table, store, [2, 1, 9]) == {1: "a", 2: "b"}


def test_the_newest_layer_wins(table: StateTable, store: StateStore) -> None:
    put(table, [1, 2, 3], ["committed", "committed", "committed"])
    commit(table, store, 1)
    put(table, [1, 2], ["sealed", "sealed"], Op.UPDATE_INSERT)
    assert table.seal(2) is not None  # sealed, its commit still pending
    put(table, [1], ["running"], Op.UPDATE_INSERT)
    assert lookup(table, store, [1, 2, 3]) == {1: "running", 2: "sealed", 3: "committed"}


def test_a_delete_in_the_overlay_hides_the_committed_row(
    table: StateTable, store: StateStore
) -> None:
    put(table, [1, 2], ["a", "b"])
    commit(table, store, 1)
    put(table, [1], ["a"], Op.DELETE)
    assert lookup(table, store, [1, 2]) == {2: "b"}
    commit(table, store, 2)
    assert lookup(table, store, [1, 2]) == {2: "b"}
    assert [r[1:] for r in stored(store)] == [(2, "b")]


def test_a_key_deleted_then_inserted_in_one_epoch(table: StateTable, store: StateStore) -> None:
    put(table, [1], ["old"])
    commit(table, store, 1)
    put(table, [1], ["old"], Op.DELETE)
    put(table, [1], ["new"], Op.INSERT)
    assert lookup(table, store, [1]) == {1: "new"}
    commit(table, store, 2)
    assert [r[1:] for r in stored(store)] == [(1, "new")]


def test_a_flush_overwrites_without_duplicates(table: StateTable, store: StateStore) -> None:
    put(table, [1, 2], ["a", "b"])
    commit(table, store, 1)
    put(table, [2], ["b"], Op.UPDATE_DELETE)
    put(table, [2], ["b2"], Op.UPDATE_INSERT)
    put(table, [2], ["b2"], Op.UPDATE_DELETE)
    put(table, [2], ["b3"], Op.UPDATE_INSERT)
    commit(table, store, 2)
    assert [r[1:] for r in stored(store)] == [(1, "a"), (2, "b3")]


def test_sealed_epochs_stay_visible_until_committed(table: StateTable, store: StateStore) -> None:
    put(table, [5], ["e"])
    sealed = table.seal(1)
    assert sealed is not None and len(sealed) == 1
    assert lookup(table, store, [5]) == {5: "e"}
    store.commit_epoch(1, [partial(table.flush, sealed)])
    # Committed in DuckDB but not yet acknowledged: reading both must not duplicate it.
    assert lookup(table, store, [5]) == {5: "e"}
    table.committed(1)
    assert table.overlay_layers() == []
    assert lookup(table, store, [5]) == {5: "e"}


def test_an_empty_epoch_seals_nothing(table: StateTable) -> None:
    assert table.seal(1) is None


def test_discarding_uncommitted_writes(table: StateTable, store: StateStore) -> None:
    put(table, [1], ["a"])
    commit(table, store, 1)
    put(table, [1], ["changed"], Op.UPDATE_INSERT)
    table.seal(2)
    put(table, [2], ["b"])
    table.discard_uncommitted()
    assert lookup(table, store, [1, 2]) == {1: "a"}
    assert table.overlay_layers() == []


def test_lookup_of_no_keys(table: StateTable, store: StateStore) -> None:
    assert lookup(table, store, []) == {}


def test_last_per_key_keeps_each_keys_last_row() -> None:
    t = pa.table(
        {
            "k": pa.array([1, 2, 1, 3, 2, 1]),
            "v": pa.array(["a", "b", "c", "d", "e", "f"]),
            OP_COLUMN: pa.array([1, 1, 4, 1, 2, 4], pa.int8()),
        }
    )
    out = last_per_key(t, ["k"])
    assert sorted(zip(out.column("k").to_pylist(), out.column("v").to_pylist())) == [
        (1, "f"),
        (2, "e"),
        (3, "d"),
    ]


def test_create_sql_marks_declared_not_null_columns() -> None:
    # A key column may hold NULL (a NULL group of an aggregation, an outer join's padded
    # side); a table's primary key is NOT NULL because the table declares it so.
    sql = SCHEMA.create_sql()
    assert '"id" INTEGER,' in sql
    assert '"v" VARCHAR)' in sql
    assert sql.startswith('CREATE TABLE state."t7"')
    declared = StateTableSchema(7, SCHEMA.columns, (0,), (0,), not_null=(0,))
    assert '"id" INTEGER NOT NULL' in declared.create_sql()


def test_identifiers_are_quoted() -> None:
    odd = StateTableSchema(table_id=8, columns=(('we"ird; DROP', INTEGER),), pk=(0,), dist_key=(0,))
    assert '"we""ird; DROP" INTEGER' in odd.create_sql()
