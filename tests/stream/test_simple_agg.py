"""Global aggregates (SimpleAgg) against the oracle: one row from the moment the MV is
created - also over an empty input (count 0, sum NULL, ...) - updated in place under
random INSERT/UPDATE/DELETE, at parallelism 1 and 4. Comparisons as in test_hash_agg.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_oracle import sorted_rows, sql_literal

import rivulet
from rivulet.stream.executors.aggregate.simple_agg import SimpleAggExecutor

TABLE = (
    "CREATE TABLE t (id BIGINT PRIMARY KEY, k INT, a INT, b BIGINT, d DECIMAL(10, 2), "
    "f DOUBLE, s VARCHAR, bo BOOLEAN)"
)

# name -> (query, indexes of string_agg columns with their delimiter)
QUERIES: dict[str, tuple[str, dict[int, str]]] = {
    "all": (
        "SELECT count(*) AS n, count(a) AS na, sum(a) AS sa, sum(b) AS sb, sum(d) AS sd,"
        " sum(f) AS sf, min(a) AS mina, max(s) AS maxs, avg(a) AS ava, avg(d) AS avd,"
        " bool_and(bo) AS band, bool_or(bo) AS bor, string_agg(s, ',') AS ss,"
        " count(DISTINCT k) AS ck, sum(DISTINCT a) AS sda FROM t",
        {12: ","},
    ),
    "filtered": (
        "SELECT sum(a * 2) FILTER (WHERE k > 1) AS s2, max(d) AS md,"
        " count(*) FILTER (WHERE bo) AS nbo, string_agg(DISTINCT s, '/') AS ds,"
        " count(*) + coalesce(sum(a), 0) AS x FROM t WHERE id < 12",
        {3: "/"},
    ),
    # count(*) alone reads no input column.
    "count_only": ("SELECT count(*) AS n FROM t", {}),
}

KS = st.one_of(st.none(), st.integers(0, 3))
AS = st.one_of(st.none(), st.integers(-3, 6))
BS = st.one_of(st.none(), st.sampled_from([-(2**62), 5, 2**62 + 1]))
DS = st.one_of(st.none(), st.sampled_from(["-1.25", "0.10", "99999999.99"]))
FS = st.one_of(st.none(), st.sampled_from([-0.5, 0.25, 1e6]))
SS = st.one_of(st.none(), st.sampled_from(["p", "q", "", "pq"]))
BOS = st.one_of(st.none(), st.booleans())
IDS = st.integers(1, 14)
ROWS = st.tuples(IDS, KS, AS, BS, DS, FS, SS, BOS)


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["insert", "insert", "update", "delete", "delete_some", "clear"]))
    if kind == "insert":
        rows = draw(st.lists(ROWS, min_size=1, max_size=5))
        values = ", ".join("(" + ", ".join(sql_literal(v) for v in r) + ")" for r in rows)
        return f"INSERT INTO t VALUES {values}"
    if kind == "update":
        col = draw(st.sampled_from(["a", "b", "s", "bo", "k"]))
        value = draw({"a": AS, "b": BS, "s": SS, "bo": BOS, "k": KS}[col])
        return f"UPDATE t SET {col} = {sql_literal(value)} WHERE id % 4 = {draw(st.integers(0, 3))}"
    if kind == "delete":
        return f"DELETE FROM t WHERE id = {draw(IDS)}"
    if kind == "delete_some":
        return f"DELETE FROM t WHERE k = {draw(st.integers(0, 3))}"
    return "DELETE FROM t"  # back to the empty input's row


def _check(cur: rivulet.Cursor, after: str) -> None:
    for name, (q, aggs) in QUERIES.items():
        got, want = sorted_rows(cur, f"SELECT * FROM mv_{name}", aggs), sorted_rows(cur, q, aggs)
        assert len(got) == 1, f"mv_{name} has {len(got)} rows after {after!r}"
        assert got == want, f"mv_{name} differs after {after!r}"


def _connect(parallel: bool) -> rivulet.Connection:
    if parallel:
        return rivulet.connect(workers=2, slots=2, deterministic=True)
    return rivulet.connect(workers=1, slots=1, deterministic=True)


def _setup(con: rivulet.Connection) -> rivulet.Cursor:
    cur = con.cursor()
    cur.execute(TABLE)
    for name, (q, _) in QUERIES.items():
        cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
    return cur


SCRIPT = [
    "INSERT INTO t VALUES (1, 1, 2, 5, 0.10, 0.25, 'p', TRUE), (2, 2, NULL, NULL, NULL, NULL, NULL, NULL)",
    "INSERT INTO t VALUES (3, 2, 6, 4611686018427387905, 99999999.99, 1e6, 'q', FALSE)",
    "UPDATE t SET a = -3 WHERE id = 3",  # the min moves
    "DELETE FROM t WHERE id = 1",
    "UPDATE t SET s = NULL",  # string_agg of no value: NULL
    "DELETE FROM t",  # empty again: count 0, sums NULL
    "INSERT INTO t VALUES (4, 3, 1, -4611686018427387904, -1.25, -0.5, '', NULL)",
]


def _clear_caches(con: rivulet.Connection) -> None:
    """Between statements (deterministic mode: nothing runs, every epoch committed)."""
    engine = con._thread.engine  # type: ignore[attr-defined]
    for job in engine.runtime.jobs.values():
        for actor in job.actors.values():
            ex = actor.root
            while ex is not None:
                if isinstance(ex, SimpleAggExecutor):
                    ex.core.clear_cache()
                ex = getattr(ex, "input", None)


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
def test_global_aggregates_follow_a_fixed_script(parallel: bool) -> None:
    con = _connect(parallel)
    try:
        cur = _setup(con)
        _check(cur, "create")  # the empty input's row is there at once
        assert sorted_rows(cur, "SELECT n, sa, ss FROM mv_all", {}) == [(0, None, None)]
        for i, stmt in enumerate(SCRIPT):
            cur.execute(stmt)
            if i == 2:
                cur.execute("RECOVER")  # the row is reloaded, not emitted again
                cur.execute("FLUSH")
            if i == 4:
                _clear_caches(con)
            _check(cur, stmt)
    finally:
        con.close()


def test_global_aggregate_over_existing_rows_and_an_mv() -> None:
    con = _connect(True)
    try:
        cur = con.cursor()
        cur.execute(TABLE)
        cur.execute(SCRIPT[0])
        cur.execute(SCRIPT[1])
        cur.execute("CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k")
        cur.execute(
            "CREATE MATERIALIZED VIEW total AS SELECT sum(n) AS s, max(n) AS m, count(*) AS c "
            "FROM per_k"
        )
        oracle = (
            "SELECT sum(n), max(n), count(*) FROM (SELECT k, count(*) AS n FROM t GROUP BY k) x"
        )
        for stmt in ["FLUSH", *SCRIPT[2:]]:
            cur.execute(stmt)
            assert sorted_rows(cur, "SELECT * FROM total", {}) == sorted_rows(cur, oracle, {}), stmt
    finally:
        con.close()


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=st.lists(statements(), min_size=4, max_size=10))
def test_random_changes_match_the_oracle(parallel: bool, script: list[str]) -> None:
    con = _connect(parallel)
    try:
        cur = _setup(con)
        for stmt in script:
            cur.execute(stmt)
            _check(cur, stmt)
    finally:
        con.close()
