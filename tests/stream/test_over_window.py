"""Window functions (OVER) in MVs against the oracle: after every statement each MV equals
its query run as a batch SELECT over the base tables, at parallelism 1 and 4.

Two plans: ``row_number() ... WHERE rn <= n`` over a subquery is a group top-N; every other
window call is an OverWindow that recomputes the partitions a chunk touches. Ties in ORDER
BY are broken by the stream key in the MV, which a batch query need not do, so the queries
here order by keys unique within their partitions (``..., id``) or use only functions whose
result does not depend on the order among peers (rank, dense_rank, RANGE-framed aggregates).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_oracle import sorted_rows, sql_literal

import rivulet
from rivulet.common.errors import Error
from rivulet.stream.executors import over_window

TABLES = {
    "t": "CREATE TABLE t (id BIGINT PRIMARY KEY, k INT, v INT)",
    "u": "CREATE TABLE u (k INT PRIMARY KEY, name VARCHAR)",
}

# name -> MV query (the oracle runs the same query). Several calls share an MV (and an
# OverWindow when they share a PARTITION BY): every MV costs a checkpoint per statement.
QUERIES = {
    "ranks": (
        "SELECT id, k, v, row_number() OVER (PARTITION BY k ORDER BY v, id) AS rn,"
        " rank() OVER (PARTITION BY k ORDER BY v) AS r,"
        " dense_rank() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST) AS d FROM t"
    ),
    "calls": (
        "SELECT id, k, lag(v) OVER (PARTITION BY k ORDER BY id) AS prev,"
        " lead(v, 2, -1) OVER (PARTITION BY k ORDER BY id) AS next2,"
        " first_value(v) OVER (PARTITION BY k ORDER BY id DESC) AS fv,"
        " last_value(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING)"
        " AS lv, sum(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN 2 PRECEDING AND"
        " 1 FOLLOWING) AS s, count(*) OVER (PARTITION BY k) AS n,"
        " min(v) OVER (PARTITION BY k ORDER BY v) AS lo,"
        " max(v) OVER (PARTITION BY k ORDER BY id ROWS UNBOUNDED PRECEDING) AS hi,"
        " avg(v) OVER (PARTITION BY k) AS mean, count(v) OVER (PARTITION BY k ORDER BY v) AS c"
        " FROM t"
    ),
    # Two OverWindows in a row: no partition (one actor), then a computed partition key.
    "global": (
        "SELECT id, row_number() OVER (ORDER BY v DESC, id) AS rn, sum(v) OVER () AS total,"
        " v - lag(v, 1, 0) OVER (ORDER BY id) AS delta,"
        " row_number() OVER (PARTITION BY abs(k - 1) ORDER BY v * 2 + 1, id) AS rn2 FROM t"
    ),
    "top": (
        "SELECT id, k, v FROM (SELECT id, k, v, row_number() OVER (PARTITION BY k"
        " ORDER BY v DESC NULLS LAST, id) AS rn FROM t) s WHERE rn <= 2"
    ),
    "top_rn": (
        "SELECT * FROM (SELECT id, k, v, row_number() OVER (PARTITION BY k ORDER BY v, id)"
        " AS rn FROM t) s WHERE rn BETWEEN 2 AND 3 AND id > 1"
    ),
    "top1": (
        "SELECT id, v FROM (SELECT *, row_number() OVER (ORDER BY v DESC, id) AS rn FROM t) s"
        " WHERE rn = 1"
    ),
    "rank_filter": (
        "SELECT id, k, r FROM (SELECT id, k, rank() OVER (PARTITION BY k ORDER BY v) AS r"
        " FROM t) s WHERE r < 3"
    ),
    "after_agg": (
        "SELECT k, sum(v) AS s, rank() OVER (ORDER BY sum(v) DESC NULLS LAST) AS r"
        " FROM t GROUP BY k"
    ),
    "join": (
        "SELECT t.id, u.name, row_number() OVER (PARTITION BY u.name ORDER BY t.id) AS rn,"
        " sum(t.v) OVER (PARTITION BY u.name) AS s FROM t JOIN u ON t.k = u.k"
    ),
}

# The random scripts check a subset (every statement costs a checkpoint per MV).
RANDOM_QUERIES = {k: QUERIES[k] for k in ("calls", "top_rn", "join")}

VS = st.one_of(st.none(), st.integers(0, 6))
KS = st.one_of(st.none(), st.integers(0, 3))
IDS = st.integers(1, 12)


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(
        st.sampled_from(["insert", "insert", "insert", "update", "move", "shift", "delete", "u"])
    )
    if kind == "insert":
        rows = draw(st.lists(st.tuples(IDS, KS, VS), min_size=1, max_size=5))
        values = ", ".join(f"({i}, {sql_literal(k)}, {sql_literal(v)})" for i, k, v in rows)
        return f"INSERT INTO t VALUES {values}"
    if kind == "update":
        return f"UPDATE t SET v = {sql_literal(draw(VS))} WHERE id = {draw(IDS)}"
    if kind == "move":  # a row changes partition
        return f"UPDATE t SET k = {sql_literal(draw(KS))} WHERE id % 3 = {draw(st.integers(0, 2))}"
    if kind == "shift":
        return (
            f"UPDATE t SET v = v + {draw(st.integers(-3, 3))} WHERE k = {draw(st.integers(0, 3))}"
        )
    if kind == "delete":
        return f"DELETE FROM t WHERE id = {draw(IDS)} OR v = {draw(st.integers(0, 6))}"
    k = draw(st.integers(0, 3))
    if draw(st.booleans()):
        return f"DELETE FROM u WHERE k = {k}"
    return f"INSERT INTO u VALUES ({k}, '{draw(st.sampled_from(['p', 'q']))}')"


def _setup(con: rivulet.Connection, queries: dict[str, str]) -> rivulet.Cursor:
    cur = con.cursor()
    for ddl in TABLES.values():
        cur.execute(ddl)
    for name, q in queries.items():
        cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
    return cur


def _check(cur: rivulet.Cursor, queries: dict[str, str], after: str) -> None:
    for name, q in queries.items():
        got, want = sorted_rows(cur, f"SELECT * FROM mv_{name}"), sorted_rows(cur, q)
        assert got == want, f"mv_{name} differs after {after!r}"


@pytest.fixture
def con():  # type: ignore[no-untyped-def]
    """Two actors per hash fragment; the random tests run at parallelism 1 and 4."""
    c = rivulet.connect(workers=1, slots=2)
    yield c
    c.close()


SCRIPT = [
    "INSERT INTO t VALUES (1, 1, 5), (2, 1, 3), (3, 2, NULL), (4, 1, 1), (5, NULL, 4)",
    "INSERT INTO u VALUES (1, 'p'), (2, 'q'), (3, 'p')",
    "INSERT INTO t VALUES (6, 2, 3), (7, 3, 6), (8, 1, 3), (9, NULL, NULL), (10, 2, 0)",
    "UPDATE t SET v = 0 WHERE id = 1",  # to the front of its partition: numbers shift
    "UPDATE t SET k = 2 WHERE id = 4",  # moves to another partition
    "DELETE FROM t WHERE id = 2",
    "UPDATE t SET v = v + 10 WHERE k = 1",
    "DELETE FROM u WHERE k = 3",
    "INSERT INTO t VALUES (11, 3, 2), (12, 3, 2)",  # ties in v
    "UPDATE t SET k = NULL WHERE k = 3",
    "DELETE FROM t WHERE v < 3",
    "RECOVER",  # rebuilt actors reload their partitions from state
    "INSERT INTO t VALUES (2, 1, 1), (3, 1, 2)",
    "DELETE FROM t",
    "INSERT INTO t VALUES (1, 1, 1)",
]


@pytest.fixture
def tiny_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop the cache at every barrier: partitions come back from the state table."""
    monkeypatch.setattr(over_window, "CACHE_MAX_ROWS", 0)


def test_window_mvs_follow_a_fixed_script(con: rivulet.Connection) -> None:
    cur = _setup(con, QUERIES)
    for stmt in SCRIPT:
        cur.execute(stmt)
        _check(cur, QUERIES, stmt)


def test_history_is_backfilled_and_mvs_stack(con: rivulet.Connection) -> None:
    cur = con.cursor()
    cur.execute(TABLES["t"])
    cur.execute("INSERT INTO t SELECT i, i % 7, (i * 37) % 101 FROM generate_series(1, 300) s(i)")
    queries = {k: QUERIES[k] for k in ("ranks", "top")}
    for name, q in queries.items():
        cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
    # An MV over a window MV, and a window over an MV.
    on_top = "SELECT k, max(rn) AS m FROM mv_ranks GROUP BY k"
    cur.execute(f"CREATE MATERIALIZED VIEW mv_on_top AS {on_top}")
    over_mv = (
        "SELECT id, lag(id) OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, id) AS p FROM mv_top"
    )
    cur.execute(f"CREATE MATERIALIZED VIEW mv_over_mv AS {over_mv}")
    for stmt in ["SELECT 1", "DELETE FROM t WHERE v > 90", "UPDATE t SET k = (k + 1) % 7"]:
        cur.execute(stmt)
        _check(cur, queries, stmt)
        assert sorted_rows(cur, "SELECT * FROM mv_on_top") == sorted_rows(
            cur, on_top.replace("mv_ranks", f"({QUERIES['ranks']}) x")
        )
        assert sorted_rows(cur, "SELECT * FROM mv_over_mv") == sorted_rows(
            cur, over_mv.replace("mv_top", f"({QUERIES['top']}) x")
        )


def test_plans_and_errors(con: rivulet.Connection) -> None:
    cur = _setup(con, {})

    def plan(q: str) -> str:
        cur.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {q}")
        return "\n".join(r[0] for r in cur.fetchall())

    assert "OverWindow { partition: [c1]" in plan(QUERIES["ranks"])
    top = plan(QUERIES["top"])
    assert "TopN" in top and "group_key: [c1]" in top and "OverWindow" not in top
    assert "output: row_number" in plan(QUERIES["top_rn"])
    assert "OverWindow" in plan(QUERIES["rank_filter"])  # rank: ties, the general path

    bad = [
        ("SELECT ntile(2) OVER (ORDER BY id) FROM t", "0A000", "ntile"),
        ("SELECT percent_rank() OVER (ORDER BY id) FROM t", "0A000", "percent_rank"),
        ("SELECT string_agg(id::varchar, ',') OVER (ORDER BY id) FROM t", "0A000", "string_agg"),
        ("SELECT sum(v) OVER (ORDER BY id GROUPS 1 PRECEDING) FROM t", "0A000", "GROUPS"),
        ("SELECT count(*) OVER w FROM t WINDOW w AS (ORDER BY id)", "0A000", "WINDOW"),
        ("SELECT id FROM t WHERE row_number() OVER (ORDER BY id) = 1", "42P20", "WHERE"),
        ("SELECT sum(row_number() OVER (ORDER BY id)) FROM t", "42803", "aggregate"),
        ("SELECT sum(DISTINCT v) OVER () FROM t", "0A000", "DISTINCT"),
    ]
    for sql, state, named in bad:
        with pytest.raises(Error) as err:
            cur.execute(f"CREATE MATERIALIZED VIEW bad AS {sql}")
        assert err.value.sqlstate == state, (sql, err.value)
        assert named in str(err.value), (sql, err.value)
        if named in ("ntile", "percent_rank", "string_agg", "GROUPS"):
            assert "row_number" in (err.value.hint or ""), sql  # what is supported
    cur.execute("SHOW MATERIALIZED VIEWS")
    assert cur.fetchall() == []


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(script=st.lists(statements(), min_size=6, max_size=10))
def test_random_changes_match_the_oracle(
    parallel: bool, script: list[str], tiny_cache: None
) -> None:
    _random_run(parallel, script)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=st.lists(statements(), min_size=10, max_size=30))
def test_random_changes_match_the_oracle_long(parallel: bool, script: list[str]) -> None:
    _random_run(parallel, script, QUERIES)


def _random_run(
    parallel: bool, script: list[str], queries: dict[str, str] = RANDOM_QUERIES
) -> None:
    con = rivulet.connect(workers=2, slots=2) if parallel else rivulet.connect(workers=1, slots=1)
    try:
        cur = _setup(con, queries)
        for stmt in script:
            cur.execute(stmt)
            _check(cur, queries, stmt)
    finally:
        con.close()


# -------------------------------------------------------------- nexmark q6
# RisingWave's q6 (q6_group_top1): each auction's winning bid (row_number over the bids
# within the auction's lifetime, by price), then per seller the average of the last 11
# winning prices in time order.
Q6 = (
    "SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time"
    " ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) as avg"
    " FROM (SELECT ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC) as rank,"
    " A.id, A.seller, B.price as final, B.date_time"
    " FROM auction AS A, bid AS B"
    " WHERE A.id = B.auction and B.date_time between A.date_time and A.expires) AS Q"
    " WHERE Q.rank <= 1"
)

# q6 is not deterministic: an auction whose highest price was bid twice has two possible
# winning bids (the MV takes the one with the smaller hidden row id, a batch query any),
# and the winning bids of one seller may share a date_time (milliseconds), which leaves
# the order of the ROWS frame open. Those sellers' averages may legitimately differ from
# the batch query's, so they are compared only by row count per seller (which ties do not
# change); every other seller's rows must be equal.
AMBIGUOUS_SELLERS = """
WITH valid AS (
  SELECT A.id, A.seller, B.price, B.date_time FROM auction AS A, bid AS B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires),
top AS (SELECT id, max(price) AS price FROM valid GROUP BY id),
winners AS (SELECT v.id, v.seller, v.date_time FROM valid v JOIN top USING (id, price))
SELECT seller FROM winners GROUP BY seller, id HAVING count(*) > 1
UNION SELECT seller FROM winners GROUP BY seller, date_time HAVING count(*) > 1
"""


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
def test_nexmark_q6_matches_the_oracle(parallel: bool) -> None:
    con = rivulet.connect(workers=2 if parallel else 1, slots=2 if parallel else 1,
                          barrier_interval_ms=100)  # fmt: skip
    events = 20_000
    try:
        cur = con.cursor()
        for table, kind in (("auction", "Auction"), ("bid", "Bid")):
            cur.execute(
                f"CREATE TABLE {table} WITH (connector = 'nexmark', nexmark.table.type = '{kind}',"
                f" nexmark.event.num = '{events}', nexmark.min.event.gap.in.ns = '0')"
            )
        # Created while the events stream in: history and changes both.
        cur.execute(f"CREATE MATERIALIZED VIEW q6 AS {Q6}")
        deadline = time.monotonic() + 60
        while sorted_rows(cur, "SELECT count(*) FROM bid") != [(events * 46 // 50,)]:
            assert time.monotonic() < deadline, "the nexmark tables did not fill"
            time.sleep(0.05)
        cur.execute("FLUSH")
        ambiguous = f"seller IN ({AMBIGUOUS_SELLERS})"
        got = sorted_rows(cur, f"SELECT * FROM q6 WHERE NOT {ambiguous}")
        want = sorted_rows(cur, f"SELECT * FROM ({Q6}) q WHERE NOT {ambiguous}")
        assert got == want
        assert len(got) > 200  # most sellers are compared exactly
        counts = f"SELECT seller, count(*) FROM {{}} WHERE {ambiguous} GROUP BY seller"
        assert sorted_rows(cur, counts.format("q6")) == sorted_rows(cur, counts.format(f"({Q6}) q"))
    finally:
        con.close()
