"""GROUP BY MVs (HashAgg) against the oracle: after every statement each MV equals its
query run as a batch SELECT over the base tables, at parallelism 1 and 4.

string_agg's order is unspecified in DuckDB (and in the MV: parts come in arrival order
over an append-only input, in value order otherwise), so string_agg columns are compared
as sorted multisets of their parts. Floats (avg, sums of doubles) are compared rounded
to 9 significant digits; the test values make most of them exact anyway.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_oracle import sorted_rows, sql_literal

import rivulet
from rivulet.common.vnode import compute_vnodes
from rivulet.stream.executors.aggregate.group_index import GroupIndex
from rivulet.stream.executors.aggregate.hash_agg import HashAggExecutor
from rivulet.stream.plan import HashAggNode

TABLE = (
    "CREATE TABLE t (id BIGINT PRIMARY KEY, k INT, g VARCHAR, a INT, b BIGINT, "
    "d DECIMAL(10, 2), f DOUBLE, s VARCHAR, bo BOOLEAN)"
)
COLUMNS = ("id", "k", "g", "a", "b", "d", "f", "s", "bo")

# name -> (query, indexes of string_agg columns with their delimiter)
QUERIES: dict[str, tuple[str, dict[int, str]]] = {
    "kinds": (
        "SELECT k, count(*) AS n, count(a) AS na, sum(a) AS sa, sum(b) AS sb, sum(d) AS sd,"
        " sum(f) AS sf, min(a) AS mina, max(a) AS maxa, min(s) AS mins, max(d) AS maxd,"
        " avg(a) AS ava, avg(d) AS avd, avg(f) AS avf, bool_and(bo) AS band,"
        " bool_or(bo) AS bor, string_agg(s, ',') AS sts FROM t GROUP BY k",
        {16: ","},
    ),
    "distinct": (
        "SELECT g, count(DISTINCT a) AS ca, sum(DISTINCT a) AS sa, avg(DISTINCT b) AS ab,"
        " string_agg(DISTINCT s, '|') AS ss, min(DISTINCT a) AS ma, count(*) AS n,"
        " sum(b) AS sb, avg(b) AS avb, sum(CAST(b AS DECIMAL(38, 0)) * 1000000000) AS big"
        " FROM t GROUP BY g",
        {4: "|"},
    ),
    "filter_having": (
        "SELECT k % 3 AS m, g, count(*) FILTER (WHERE a > 2) AS big,"
        " sum(a) FILTER (WHERE bo) AS sbo, sum(a) AS sa, max(s) FILTER (WHERE a < 4) AS ms,"
        " count(DISTINCT b) FILTER (WHERE bo IS NOT NULL) AS cdb"
        " FROM t GROUP BY k % 3, g HAVING count(*) > 1",
        {},
    ),
    "select_distinct": ("SELECT DISTINCT k, g FROM t", {}),
}
EXPR_OVER_AGGS = (
    "SELECT k, sum(a) * 2 + count(*) AS x, max(a) - min(a) AS spread,"
    " coalesce(max(s), 'none') AS ms FROM t WHERE b IS NOT NULL OR a > 1 GROUP BY k"
)

KS = st.one_of(st.none(), st.integers(0, 4))
GS = st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))
AS = st.one_of(st.none(), st.integers(0, 6))
BS = st.one_of(st.none(), st.sampled_from([-(2**62), -3, 0, 7, 2**62 + 5, 9_000_000_000_000]))
DS = st.one_of(st.none(), st.sampled_from(["-1.25", "0.10", "3.33", "99999999.99"]))
FS = st.one_of(st.none(), st.sampled_from([-0.5, 0.25, 1.75, 1e6]))
SS = st.one_of(st.none(), st.sampled_from(["p", "q", "r", "pq", ""]))
BOS = st.one_of(st.none(), st.booleans())
IDS = st.integers(1, 14)
ROWS = st.tuples(IDS, KS, GS, AS, BS, DS, FS, SS, BOS)


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(
        st.sampled_from(
            ["insert", "insert", "insert", "update", "update_key", "shift", "delete", "del_k"]
        )
    )
    if kind == "insert":
        rows = draw(st.lists(ROWS, min_size=1, max_size=6))
        values = ", ".join("(" + ", ".join(sql_literal(v) for v in r) + ")" for r in rows)
        return f"INSERT INTO t VALUES {values}"
    if kind == "update":
        col = draw(st.sampled_from(["a", "b", "s", "bo", "d", "f"]))
        value = draw({"a": AS, "b": BS, "s": SS, "bo": BOS, "d": DS, "f": FS}[col])
        return f"UPDATE t SET {col} = {sql_literal(value)} WHERE id = {draw(IDS)}"
    if kind == "update_key":  # rows move between groups
        return f"UPDATE t SET k = {sql_literal(draw(KS))}, g = {sql_literal(draw(GS))} WHERE id % 3 = {draw(st.integers(0, 2))}"
    if kind == "shift":
        return (
            f"UPDATE t SET a = a + {draw(st.integers(-2, 2))} WHERE k = {draw(st.integers(0, 4))}"
        )
    if kind == "delete":
        return f"DELETE FROM t WHERE id = {draw(IDS)}"
    return f"DELETE FROM t WHERE k = {draw(st.integers(0, 4))}"  # a group vanishes


def _setup(
    con: rivulet.Connection, queries: dict[str, tuple[str, dict[int, str]]]
) -> rivulet.Cursor:
    cur = con.cursor()
    cur.execute(TABLE)
    for name, (q, _) in queries.items():
        cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
    return cur


def _check(cur: rivulet.Cursor, queries: dict[str, tuple[str, dict[int, str]]], after: str) -> None:
    for name, (q, aggs) in queries.items():
        got, want = sorted_rows(cur, f"SELECT * FROM mv_{name}", aggs), sorted_rows(cur, q, aggs)
        assert got == want, f"mv_{name} differs after {after!r}"


def _connect(parallel: bool) -> rivulet.Connection:
    if parallel:
        return rivulet.connect(workers=2, slots=2, deterministic=True)
    return rivulet.connect(workers=1, slots=1, deterministic=True)


@pytest.fixture(params=[False, True], ids=["p1", "p4"])
def con(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    c = _connect(request.param)
    yield c
    c.close()


SCRIPT = [
    "INSERT INTO t VALUES (1, 1, 'x', 2, 7, 3.33, 0.25, 'p', TRUE),"
    " (2, 1, 'x', 3, -3, -1.25, 1.75, 'q', FALSE), (3, NULL, NULL, 5, NULL, NULL, NULL, NULL, NULL),"
    " (4, 2, 'y', NULL, 9000000000000, 0.10, -0.5, 'r', TRUE)",
    "INSERT INTO t VALUES (5, 1, 'y', 2, 7, 3.33, 0.25, 'p', NULL), (6, 3, NULL, 6, 0, NULL, 1e6, '', FALSE)",
    "UPDATE t SET a = 1 WHERE id = 2",  # the max of group 1 goes: min/max from the values
    "UPDATE t SET k = 2 WHERE id = 1",  # a row moves between groups
    "DELETE FROM t WHERE id = 3",  # the NULL group vanishes
    "INSERT INTO t VALUES (3, NULL, NULL, 4, 1, 1.00, 0.25, 'q', TRUE)",  # and comes back
    "UPDATE t SET s = NULL, bo = NULL WHERE k = 1",
    "DELETE FROM t WHERE k = 2",
    "UPDATE t SET b = 4611686018427387904 WHERE id = 5",
    "INSERT INTO t VALUES (7, 1, 'y', 2, 4611686018427387904, 99999999.99, 1e6, 'pq', TRUE)",
    "DELETE FROM t",
    "INSERT INTO t VALUES (8, 4, 'z', 0, 0, 0.00, 0.0, 'p', FALSE)",
]


def test_hash_agg_follows_a_fixed_script(con: rivulet.Connection) -> None:
    """Every kind of aggregate through groups that appear, change, vanish and come back;
    twice the actors are rebuilt (RECOVER) and reload their groups - result rows and
    value multisets - from the state tables the first time a chunk touches them."""
    cur = _setup(con, QUERIES)
    _check(cur, QUERIES, "create")
    for i, stmt in enumerate(SCRIPT):
        cur.execute(stmt)
        if i in (3, 7):
            cur.execute("RECOVER")
            cur.execute("FLUSH")
        _check(cur, QUERIES, stmt)
        if i == 5:
            _check_state_vnodes(con)
        if i == 9:
            _clear_caches(con)  # every group is reloaded from the committed state


def _clear_caches(con: rivulet.Connection) -> None:
    """Between statements (deterministic mode: nothing runs, every epoch committed)."""
    engine = con._thread.engine  # type: ignore[attr-defined]
    cleared = 0
    for job in engine.runtime.jobs.values():
        for actor in job.actors.values():
            ex = actor.root
            while ex is not None:
                if isinstance(ex, HashAggExecutor):
                    ex.core.clear_cache()
                    cleared += 1
                ex = getattr(ex, "input", None)
    assert cleared


def _check_state_vnodes(con: rivulet.Connection) -> None:
    """Every stored group sits in the vnode of its key (where a rescheduled owner of
    that vnode looks for it), in the result table and in the value tables."""
    engine = con._thread.engine  # type: ignore[attr-defined]
    schemas = [
        s
        for job in engine.runtime.jobs.values()
        for f in job.graph.fragments
        for node in f.root.walk()
        if isinstance(node, HashAggNode)
        for s in node.state_tables
    ]
    assert schemas
    cur = engine.store.cursor()
    checked = 0
    for schema in schemas:
        rows = cur.sql(f"SELECT * FROM {schema.physical_name}").to_arrow_table()
        keys = [rows.column(schema.columns[i][0]) for i in schema.dist_key]
        if rows.num_rows:
            assert (rows.column("_vnode").to_numpy() == compute_vnodes(keys)).all()
            checked += rows.num_rows
    assert checked, "no stored group was checked"


def test_mv_over_existing_rows_and_mv_on_mv() -> None:
    con = _connect(True)
    try:
        cur = con.cursor()
        cur.execute(TABLE)
        cur.execute(SCRIPT[0])
        cur.execute(SCRIPT[1])
        queries = {"kinds": QUERIES["kinds"], "expr": (EXPR_OVER_AGGS, {})}
        for name, (q, _) in queries.items():
            cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
        on_mv = "SELECT maxa, count(*) AS c, sum(n) AS s, min(k) AS mk FROM mv_kinds GROUP BY maxa"
        cur.execute(f"CREATE MATERIALIZED VIEW mv_on_mv AS {on_mv}")
        inner = QUERIES["kinds"][0]
        _check(cur, queries, "create")
        for stmt in SCRIPT[2:9]:
            cur.execute(stmt)
            _check(cur, queries, stmt)
            assert sorted_rows(cur, "SELECT * FROM mv_on_mv", {}) == sorted_rows(
                cur, on_mv.replace("mv_kinds", f"({inner}) m"), {}
            ), stmt
    finally:
        con.close()


def test_append_only_source() -> None:
    """Over an append-only input, min/max/string_agg keep running values (no value
    tables): only the aggregates are stored, never the input rows."""
    con = rivulet.connect(workers=2, slots=2)
    try:
        cur = con.cursor()
        cur.execute(
            "CREATE SOURCE g (id BIGINT, v INT, w VARCHAR) WITH (connector = 'datagen', "
            "fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '3000', "
            "fields.v.min = '0', fields.v.max = '50', fields.w.length = '2', "
            "datagen.rows.per.second = '100000')"
        )
        cur.execute("CREATE MATERIALIZED VIEW g_all AS SELECT * FROM g")
        q = (
            "SELECT v % 7 AS m, count(*) AS n, sum(id) AS s, max(id) AS mx, min(w) AS mw,"
            " avg(v) AS av, string_agg(w, ';') AS sw, count(DISTINCT v) AS cd,"
            " bool_or(v > 40) AS bo, max(w) FILTER (WHERE v > 10) AS mf FROM {} GROUP BY v % 7"
        )
        cur.execute(f"CREATE MATERIALIZED VIEW g_agg AS {q.format('g')}")
        cur.execute(
            "CREATE MATERIALIZED VIEW g_one AS SELECT count(*) AS n, max(w) AS mw, sum(v) AS s FROM g"
        )
        # Each MV runs source actors of its own: wait until every one has taken all rows.
        everything = (
            "SELECT (SELECT count(*) FROM g_all), (SELECT sum(n) FROM g_agg), (SELECT n FROM g_one)"
        )
        deadline = time.monotonic() + 15
        while True:
            cur.execute("FLUSH")
            done = sorted_rows(cur, everything) == [(3000, 3000, 3000)]
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert done
        cur.execute("FLUSH")
        assert sorted_rows(cur, "SELECT * FROM g_agg", {6: ";"}) == sorted_rows(
            cur, q.format("g_all"), {6: ";"}
        )
        assert sorted_rows(cur, "SELECT * FROM g_one", {}) == sorted_rows(
            cur, "SELECT count(*), max(w), sum(v) FROM g_all", {}
        )
    finally:
        con.close()


def test_group_index_survives_hash_collisions() -> None:
    """Different keys with one hash: the index still tells them apart."""
    index = GroupIndex([pa_int32()])
    index.hash_fn = lambda cols: (  # every key lands on one of two hashes
        np.asarray(cols[0].fill_null(0).to_numpy(zero_copy_only=False)) % 2
    ).astype(np.uint64)
    keys = pl.DataFrame({"k0": pl.Series([1, 2, 3, None, 5], dtype=pl.Int32)})
    slots, h = index.lookup(keys)
    assert (slots == -1).all()
    new = index.add(keys, h)
    assert list(new) == [0, 1, 2, 3, 4]
    probe = pl.DataFrame({"k0": pl.Series([5, None, 3, 2, 1, 7, 9], dtype=pl.Int32)})
    slots, h = index.lookup(probe)
    assert list(slots) == [4, 3, 2, 1, 0, -1, -1]
    more = index.add(probe[5:], h[5:])
    assert list(more) == [5, 6]
    slots, _ = index.lookup(probe)
    assert list(slots) == [4, 3, 2, 1, 0, 5, 6]


def test_group_index_finds_every_key_across_many_small_adds() -> None:
    """Keys added a chunk at a time (through the merges of its recent run into the
    main one) are all found again, with the slots they were given."""
    index = GroupIndex([pa_int32()])
    rng = np.random.default_rng(7)
    keys = rng.permutation(30_000).astype(np.int32)
    given_slots: dict[int, int] = {}
    for chunk in np.array_split(keys, 60):
        frame = pl.DataFrame({"k0": pl.Series(chunk, dtype=pl.Int32)})
        slots, h = index.lookup(frame)
        assert (slots == -1).all()
        for k, s in zip(chunk.tolist(), index.add(frame, h).tolist()):
            given_slots[k] = s
        probe = pl.DataFrame({"k0": pl.Series(keys[:5000], dtype=pl.Int32)})
        found, _ = index.lookup(probe)
        assert found.tolist() == [given_slots.get(k, -1) for k in keys[:5000].tolist()]
    vn = index.vnodes_of(np.arange(index.size))
    assert len(vn) == 30_000 and vn.min() >= 0


@pytest.mark.parametrize("kind", ["max", "min", "count_distinct", "string_agg"])
def test_value_multisets_follow_their_deltas(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value-state aggregate folds each epoch's signed deltas into its per-group
    multisets: the changes it reports (old and new count of each touched value) and its
    results follow a plain model, through the forgetting of values that are gone."""
    from collections import Counter

    from rivulet.common.types import BIGINT, VARCHAR
    from rivulet.stream.executor import Field, Schema
    from rivulet.stream.executors.aggregate.value_state import ValueAcc
    from rivulet.stream.plan import AggCall

    monkeypatch.setattr(ValueAcc, "COMPACT_MIN", 50)
    text = kind == "string_agg"
    vtype = VARCHAR if text else BIGINT
    out = VARCHAR if text else BIGINT
    acc = ValueAcc(0, AggCall(kind, (0,), out), Schema((Field("v", vtype),)))
    groups = 5
    acc.grow(groups)
    rng = np.random.default_rng(3)
    model: dict[int, Counter[object]] = {g: Counter() for g in range(groups)}
    compactions = 0
    for _ in range(60):
        slots, values, deltas = [], [], []
        before = {g: Counter(c) for g, c in model.items()}
        for _ in range(int(rng.integers(1, 40))):
            g = int(rng.integers(groups))
            held = [v for v, n in model[g].items() if n > 0]
            if held and rng.random() < 0.45:
                v = held[int(rng.integers(len(held)))]
                d = -int(rng.integers(1, model[g][v] + 1))
            else:
                v = int(rng.integers(30))
                d = int(rng.integers(1, 3))
            v = f"s{v:02d}" if text and isinstance(v, int) else v
            model[g][v] += d
            slots.append(g)
            values.append(v)
            deltas.append(d)
        acc.pending = [
            pl.DataFrame(
                [
                    pl.Series("slot", slots, dtype=pl.Int64),
                    pl.Series("v", values, dtype=acc.v_dtype),
                    pl.Series("d", deltas, dtype=pl.Int64),
                ]
            )
        ]
        changes, _ = acc.flush()
        assert changes is not None
        for g, v, n in changes.iter_rows():
            assert max(n, 0) == model[g][v], (g, v, n)
            assert before[g][v] != model[g][v]
        compactions += len(acc.counts.values) < sum(len(c) for c in before.values())
        held = acc.frame
        assert Counter({(g, v): n for g, v, n in held.iter_rows()}) == Counter(
            {(g, v): n for g, c in model.items() for v, n in c.items() if n > 0}
        )
        for g in range(groups):
            vals = sorted(v for v, n in model[g].items() if n > 0)
            want: object = None
            if kind == "max" and vals:
                want = vals[-1]
            elif kind == "min" and vals:
                want = vals[0]
            elif kind == "count_distinct":
                want = len(vals)
            elif kind == "string_agg" and vals:  # each value as often as it is there
                want = ",".join(str(v) for v in vals for _ in range(model[g][v]))
            got = acc.values[g]
            if g not in set(slots) and kind != "count_distinct":
                continue  # a group this epoch did not touch keeps its result
            assert got == want, (kind, g, got, want)
    assert compactions > 0  # values that were gone were forgotten on the way


def test_a_long_epoch_of_distinct_values_is_summed_up_a_few_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An epoch's deltas are summed up as they grow; values that do not cancel are summed
    again only once they doubled, not at every chunk (that made a large backfill epoch
    quadratic). The result is the same."""
    import pyarrow as pa

    from rivulet.common.types import BIGINT
    from rivulet.stream.executor import Field, Schema
    from rivulet.stream.executors.aggregate import value_state
    from rivulet.stream.executors.aggregate.accumulators import ChunkContext
    from rivulet.stream.executors.aggregate.value_state import ValueAcc
    from rivulet.stream.plan import AggCall

    monkeypatch.setattr(value_state, "_PENDING_ROWS", 100)
    acc = ValueAcc(0, AggCall("max", (0,), BIGINT), Schema((Field("v", BIGINT),)))
    acc.grow(4)
    sums = 0
    for i in range(60):
        values = np.arange(i * 20, (i + 1) * 20, dtype=np.int64)
        acc.collect(values % 4, ChunkContext(pa.table({"v": values}), None))
        sums += len(acc.pending) == 1
    assert sums <= 5  # at 100, 200, 400, 800 rows
    changes, _ = acc.flush()
    assert changes is not None and changes.height == 1200
    assert [acc.values[g] for g in range(4)] == [1196, 1197, 1198, 1199]


def pa_int32():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.int32()


def _random_run(parallel: bool, script: list[str]) -> None:
    con = _connect(parallel)
    try:
        cur = _setup(con, QUERIES)
        for i, stmt in enumerate(script):
            cur.execute(stmt)
            if i == len(script) // 2:
                cur.execute("RECOVER")
                cur.execute("FLUSH")
            _check(cur, QUERIES, stmt)
    finally:
        con.close()


_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(max_examples=2, **_SETTINGS)  # type: ignore[arg-type]
@given(script=st.lists(statements(), min_size=4, max_size=9))
def test_random_changes_match_the_oracle(parallel: bool, script: list[str]) -> None:
    _random_run(parallel, script)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(max_examples=40, **{**_SETTINGS, "derandomize": False})  # type: ignore[arg-type]
@given(script=st.lists(statements(), min_size=10, max_size=40))
def test_random_changes_match_the_oracle_long(parallel: bool, script: list[str]) -> None:
    _random_run(parallel, script)
