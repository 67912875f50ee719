"""Reads of a state table's visible rows: committed rows with the uncommitted epochs'
overlays on top (the running one, then sealed ones, newest first), for a batch of keys or
key prefixes; whether the table is committed; Arrow relations registered for a block.

Every executor that loads state (joins, Top-N, window functions, aggregations) reads
through these, so they are checked here against a model: a dict of the rows written.
Each read is checked twice: from the store's DuckDB in this process, and with the
committed rows served over a socket by the storage service (``storage/state_service.py``),
as an actor on a compute node reads them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from functools import partial

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rivulet.common.chunk import Op, StreamChunk
from rivulet.common.types import INTEGER, VARCHAR
from rivulet.storage.state_service import (
    StateService,
    StateServiceClient,
    StateServiceError,
    StateServiceThread,
)
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.storage.state_table import StateTable, StateTableSchema, registered

# Keyed by (g, id): g is a key prefix, as a join key or a Top-N group is.
BY_GROUP = StateTableSchema(
    table_id=11, columns=(("g", INTEGER), ("id", INTEGER), ("v", VARCHAR)), pk=(0, 1), dist_key=(0,)
)
# Keyed by id alone: g is a plain column, which an update may change.
BY_ID = StateTableSchema(
    table_id=12, columns=(("g", INTEGER), ("id", INTEGER), ("v", VARCHAR)), pk=(1,), dist_key=(1,)
)

Row = tuple[int | None, int, str]


def rows_table(table: StateTable, rows: list[Row]) -> pa.Table:
    raw = pa.table(
        {
            "g": pa.array([r[0] for r in rows], pa.int32()),
            "id": pa.array([r[1] for r in rows], pa.int32()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    return table.with_vnodes(raw).cast(table.arrow_schema())


@contextlib.contextmanager
def served(store: StateStore) -> Iterator[tuple[StateService, StateServiceClient]]:
    """``store``'s committed state served on a loopback port (as meta serves it to the
    compute nodes), and a client of it."""
    served = StateServiceThread(store)
    try:
        yield served.service, served.start()
    finally:
        served.close()


class Model:
    """A state table and what it should hold: writes go to both. ``remote``: the table
    reads its committed rows through the storage service."""

    def __init__(self, schema: StateTableSchema, *, remote: bool = False) -> None:
        self.store = StateStore(None, StoreOptions())
        self.store.run_setup([schema.create_sql()])
        self._exit = contextlib.ExitStack()
        reader = None
        if remote:
            self.service, reader = self._exit.enter_context(served(self.store))
        self.table = StateTable(schema, reader)
        self.rows: dict[tuple[object, ...], Row] = {}
        self.epoch = 0

    def close(self) -> None:
        self._exit.close()
        self.store.close()

    def key(self, row: Row) -> tuple[object, ...]:
        return tuple(row[i] for i in self.table.schema.pk)

    def upsert(self, rows: list[Row]) -> None:
        old = [self.rows[self.key(r)] for r in rows if self.key(r) in self.rows]
        new = [r for r in rows if self.key(r) not in self.rows]
        if old:  # an update: the old version goes, the new one comes (as a pair)
            replaced = {self.key(r): r for r in rows}
            pairs = [x for o in old for x in (o, replaced[self.key(o)])]
            ops = np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], np.int8), len(old))
            data = rows_table(self.table, pairs)
            self.table.write(StreamChunk(data, ops), overwrites=True)
        if new:
            data = rows_table(self.table, new)
            ops = np.full(len(new), Op.INSERT, np.int8)
            self.table.write(StreamChunk(data, ops), overwrites=False)
        for r in rows:
            self.rows[self.key(r)] = r

    def delete(self, keys: list[tuple[object, ...]]) -> None:
        gone = [self.rows.pop(k) for k in keys if k in self.rows]
        if gone:
            data = rows_table(self.table, gone)
            self.table.write(
                StreamChunk(data, np.full(len(gone), Op.DELETE, np.int8)), overwrites=True
            )

    def seal(self) -> None:
        self.epoch += 1
        self.table.seal(self.epoch)

    def commit(self) -> None:
        """Commit every sealed epoch (the overlays go, DuckDB holds them)."""
        sealed = list(self.table._sealed)
        for epoch, memtable in sealed:
            self.store.commit_epoch(epoch, [partial(self.table.flush, memtable)])
            self.table.committed(epoch)

    def read(self, groups: list[int | None], *, nulls_equal: bool = True) -> list[Row]:
        probe = pa.table({"g": pa.array(groups, pa.int32())})
        found = self.table.read_visible(
            self.store.cursor(), self.table.overlay_layers(), probe, ["g"], nulls_equal=nulls_equal
        )
        return sorted(
            zip(
                found.column("g").to_pylist(),
                found.column("id").to_pylist(),
                found.column("v").to_pylist(),
            ),
            key=repr,
        )

    def expected(self, groups: list[int | None], *, nulls_equal: bool = True) -> list[Row]:
        wanted = {g for g in groups if nulls_equal or g is not None}
        return sorted(
            (r for r in self.rows.values() if r[0] in wanted and (nulls_equal or r[0] is not None)),
            key=repr,
        )


groups = st.one_of(st.none(), st.integers(0, 3))
step = st.one_of(
    st.tuples(st.just("upsert"), st.lists(st.tuples(groups, st.integers(0, 6)), max_size=5)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 6), max_size=3)),
    st.tuples(st.just("seal"), st.none()),
    st.tuples(st.just("commit"), st.none()),
    st.tuples(st.just("read"), st.lists(groups, min_size=1, max_size=3)),
)


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "served"])
@pytest.mark.parametrize("schema", [BY_GROUP, BY_ID], ids=["group-prefix", "plain-column"])
@settings(max_examples=150, deadline=None, derandomize=True)
@given(steps=st.lists(step, max_size=25), nulls_equal=st.booleans())
# A key's newer version in a newer overlay hides the older one in an older overlay.
@example(
    steps=[("upsert", [(1, 0)]), ("seal", None), ("upsert", [(1, 0)]), ("read", [1])],
    nulls_equal=True,
)
# An update that moved a committed key to another group hides it from its old group.
@example(
    steps=[("upsert", [(1, 0)]), ("commit", None), ("upsert", [(2, 0)]), ("read", [1])],
    nulls_equal=True,
)
def test_visible_rows_are_the_latest_written_version_of_each_key(
    schema: StateTableSchema, remote: bool, steps: list[tuple[str, object]], nulls_equal: bool
) -> None:
    """Whatever mix of committed, sealed and running epochs holds a key's versions, a
    read for some groups returns exactly each key's latest version, if present; also
    where an update moved a key to another group (``plain-column``)."""
    m = Model(schema, remote=remote)
    try:
        serial = 0
        for kind, arg in steps:
            if kind == "upsert":
                serial += 1
                rows = {}
                for g, i in arg:  # type: ignore[union-attr]
                    row = (g, i, f"v{serial}")
                    rows[m.key(row)] = row
                m.upsert(list(rows.values()))
            elif kind == "delete":
                keys = [k for k in m.rows if k[-1] in arg]  # type: ignore[operator]
                m.delete(keys)
            elif kind == "seal":
                m.seal()
            elif kind == "commit":
                m.seal()
                m.commit()
            else:
                assert m.read(arg, nulls_equal=nulls_equal) == m.expected(  # type: ignore[arg-type]
                    arg,  # type: ignore[arg-type]
                    nulls_equal=nulls_equal,
                )
        every = [None, 0, 1, 2, 3]
        assert m.read(every, nulls_equal=nulls_equal) == m.expected(every, nulls_equal=nulls_equal)
    finally:
        m.close()


def test_a_table_not_committed_yet_is_read_from_its_overlays_alone() -> None:
    """A new job's state table exists in DuckDB only from its first commit on: until then
    ``exists`` says so, and its reads come from the overlays (never from DuckDB)."""
    store = StateStore(None, StoreOptions())
    try:
        table = StateTable(BY_GROUP)
        cur = store.cursor()
        assert not table.exists(cur)
        probe = pa.table({"g": pa.array([1], pa.int32())})
        with table.visible(cur, [], probe=probe, on=["g"], committed=False) as rel:
            assert cur.sql(f"SELECT count(*) FROM {rel}").fetchall() == [(0,)]
        table.write(
            StreamChunk(rows_table(table, [(1, 1, "a"), (2, 2, "b")]), np.ones(2, np.int8)),
            overwrites=False,
        )
        with table.visible(
            cur, table.overlay_layers(), probe=probe, on=["g"], committed=False
        ) as rel:
            assert cur.sql(f"SELECT g, id, v FROM {rel}").fetchall() == [(1, 1, "a")]
        store.run_setup([BY_GROUP.create_sql()])
        assert table.exists(cur)
    finally:
        store.close()


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "served"])
def test_committed_matches_carry_the_probe_row_they_matched(remote: bool) -> None:
    """An aggregation loads uncached groups from the committed state by group key (NULL
    matching NULL) and needs to know which probe row each stored row answers."""
    m = Model(BY_GROUP, remote=remote)
    try:
        m.upsert([(None, 1, "n"), (1, 2, "a"), (2, 3, "b")])
        m.seal()
        m.commit()
        probe = m.table.with_vnodes(
            pa.table({"g": pa.array([2, None, 7], pa.int32())})
        ).append_column("_i", pa.array([0, 1, 2], pa.int64()))
        found = m.table.committed_matches(m.store.cursor(), probe, ["id"])
        assert sorted(zip(found.column("_i").to_pylist(), found.column("id").to_pylist())) == [
            (0, 3),
            (1, 1),
        ]
    finally:
        m.close()


def test_registered_relations_are_gone_after_the_block_even_when_it_fails() -> None:
    """A failed statement must not leave a relation behind on a cursor that other reads
    share (the next registration under the same name would see the old table)."""
    cur = duckdb.connect()
    with pytest.raises(duckdb.Error), registered(cur, pa.table({"x": [1]})) as (name,):
        assert cur.sql(f"SELECT x FROM {name}").fetchall() == [(1,)]
        cur.sql(f"SELECT nope FROM {name}")
    with pytest.raises(duckdb.CatalogException):
        cur.sql(f"SELECT * FROM {name}")


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "served"])
def test_a_lookup_by_key_sees_overlays_first_then_committed_rows(remote: bool) -> None:
    """Materialize and sources look rows up by key: the newest overlay's version, a key
    deleted in an overlay found nowhere, the committed version otherwise (NULL keys too)."""
    m = Model(BY_ID, remote=remote)
    try:
        m.upsert([(1, 1, "a"), (2, 2, "b"), (None, 3, "c")])
        m.seal()
        m.commit()
        m.upsert([(5, 2, "b2")])
        m.delete([(3,)])
        keys = m.table.with_vnodes(pa.table({"id": pa.array([1, 2, 3, 4], pa.int32())}))
        found = m.table.lookup(keys, m.table.overlay_layers(), m.store.cursor())
        assert sorted(zip(*(found.column(c).to_pylist() for c in ("g", "id", "v")))) == [
            (1, 1, "a"),
            (5, 2, "b2"),
        ]
    finally:
        m.close()


def test_the_service_says_when_a_table_is_committed() -> None:
    store = StateStore(None, StoreOptions())
    try:
        with served(store) as (_, client):
            table = StateTable(BY_GROUP, client)
            assert not table.exists(store.cursor())
            store.run_setup([BY_GROUP.create_sql()])
            assert table.exists(store.cursor())
    finally:
        store.close()


def test_the_service_reads_for_its_token_only() -> None:
    store = StateStore(None, StoreOptions())
    try:
        with served(store) as (service, client):
            stranger = StateServiceClient(*client.address, token="not-" + service.token)
            with pytest.raises(StateServiceError, match="invalid token"):
                stranger.exists(BY_GROUP)
            stranger.close()
            assert service.requests == 0
    finally:
        store.close()


def test_a_failed_read_is_reported_and_the_connection_serves_the_next() -> None:
    store = StateStore(None, StoreOptions())
    try:
        with served(store) as (_, client):
            probe = pa.table({"g": pa.array([1], pa.int32())})
            with pytest.raises(StateServiceError, match="t11"):
                client.matching(BY_GROUP, probe, ["g"], True)  # not created yet
            store.run_setup([BY_GROUP.create_sql()])
            assert client.matching(BY_GROUP, probe, ["g"], True).num_rows == 0
    finally:
        store.close()


def test_threads_read_at_once_each_on_its_own_connection() -> None:
    m = Model(BY_GROUP, remote=True)
    try:
        m.upsert([(g, i, f"v{g}.{i}") for g in range(4) for i in range(50)])
        m.seal()
        m.commit()
        results: dict[int, int] = {}

        def read(g: int) -> None:
            for _ in range(20):
                results[g] = len(m.read([g]))

        threads = [threading.Thread(target=read, args=(g,)) for g in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == {0: 50, 1: 50, 2: 50, 3: 50}
        assert len(m.table.reader._sockets) == 4  # type: ignore[union-attr]
        assert m.service.requests >= 80
    finally:
        m.close()
