"""The cross-shape oracle: every maintained MV shape - and MVs stacked on MVs - held at
once over three base tables, checked after every step against DuckDB evaluating the same
query as a batch SELECT over the base tables' current rows.

A hypothesis state machine drives the tables (with and without a primary key, NULLs,
duplicate rows, multi-row INSERTs that overwrite existing keys, UPDATEs that move keys,
groups and join keys, DELETEs of many rows at once), RECOVERs (the dataflow is rebuilt
from the last checkpoint), online reschedules (ALTER ... SET PARALLELISM of a table or
an MV), creates MVs mid-stream over tables that hold rows (their snapshot read must be
exact) and drops them (with and without CASCADE). It runs at
parallelism 1 and 3; at 3, each MV is created with its own ``streaming_parallelism``, so
fragments of different parallelism feed each other.

The oracle is an independent DuckDB database: after each step it loads the base tables'
rows from Rivulet and evaluates every MV's query there (MVs on MVs as DuckDB views over
the views of the MVs they read; where DuckDB's SQL means something else, e.g. integer
division, a shape gives DuckDB its own text). Results compare as multisets; numbers
compare by value (integral values as integers, the rest rounded to 9 significant digits:
the two may type a sum or an avg differently); string_agg results compare as sorted lists
of their parts, since their order is unspecified. ORDER BY ... LIMIT shapes order by a
unique key last, so that the batch answer is unique, and DuckDB sorts NULLs as
PostgreSQL does.

The default run is deterministic: hypothesis derandomized, one example per parallelism -
every shape, BASE_ROWS and the PRELUDE statements, checked after each - so that it stays
within about 20 s. The ``slow`` variant runs many random examples without the prelude.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import duckdb
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import rivulet
from rivulet.stream.executors import top_n

TABLES = {
    "t1": "CREATE TABLE t1 (id INT PRIMARY KEY, k INT, v INT, price DECIMAL(10, 2),"
    " name VARCHAR, d DATE, flag BOOLEAN, f DOUBLE)",
    "t2": "CREATE TABLE t2 (id BIGINT PRIMARY KEY, k INT, w INT, tag VARCHAR)",
    # No primary key: rows may repeat, and DELETE/UPDATE hit every copy.
    "t3": "CREATE TABLE t3 (k INT, s VARCHAR, n INT)",
}


@dataclass(frozen=True)
class Shape:
    sql: str  # the MV's query
    oracle: str | None = None  # the same query in DuckDB's SQL, where the two differ
    splits: dict[int, str] = field(default_factory=dict)  # string_agg column -> delimiter

    @property
    def deps(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(re.findall(r"\bmv_\w+", self.sql)))


PROJECTION = (
    "SELECT id, v * 2 + 1 AS v2, v / 2 AS half, v % 3 AS m3,"
    " CASE WHEN v > 3 THEN 'hi' WHEN v IS NULL THEN 'none' ELSE 'lo' END AS band,"
    " coalesce(name, 'anon') AS nm, upper(name) || '!' AS up, length(name) AS ln,"
    " abs(v - 3) AS dist, extract(year FROM d) AS yr, d + 7 AS wk, CAST(v AS VARCHAR) AS vs,"
    " price * 2 AS p2, CAST(price AS INT) AS pi, round(price * 3, 1) AS r,"
    " greatest(v, k) AS g, substr(name, 2) AS tail, f * 2 AS f2 FROM t1"
)

# name -> shape; the MV is called mv_<name>. MVs read earlier MVs only.
SHAPES: dict[str, Shape] = {
    "proj": Shape(
        PROJECTION,
        # PostgreSQL's integer division truncates; DuckDB's / gives a double.
        PROJECTION.replace("v / 2 AS half", "CAST(trunc(v / 2) AS INTEGER) AS half"),
    ),
    "filter": Shape(
        "SELECT id, k, name, v FROM t1 WHERE (v > 1 AND name IS NOT NULL) OR flag OR name LIKE 'c%'"
    ),
    "agg_k": Shape(
        "SELECT k, count(*) AS n, count(v) AS nv, count(DISTINCT v) AS dv, sum(v) AS sv,"
        " min(v) AS minv, max(v) AS maxv, avg(v) AS av, sum(price) AS sp, min(name) AS mn,"
        " max(d) AS md, bool_and(flag) AS ba, bool_or(flag) AS bo,"
        " string_agg(name, ',') AS names FROM t1 GROUP BY k",
        splits={13: ","},
    ),
    "agg_having": Shape(
        "SELECT k % 2 AS par, name, sum(v) AS sv, count(*) AS n, max(f) AS mf FROM t1"
        " GROUP BY k % 2, name HAVING sum(v) > 2 OR count(*) > 1"
    ),
    "global": Shape(
        "SELECT count(*) AS n, sum(v) AS sv, max(price) AS mp, min(d) AS md, avg(f) AS af,"
        " string_agg(DISTINCT name, '|') AS names, count(DISTINCT k) AS dk,"
        " bool_or(v > 4) AS big FROM t1",
        splits={5: "|"},
    ),
    "global_t3": Shape("SELECT count(*) AS n, sum(n) AS sn, max(s) AS ms, min(n) AS mn FROM t3"),
    "agg_t3": Shape(
        "SELECT s, count(*) AS c, sum(n) AS sn, min(k) AS mk, max(k) AS xk FROM t3 GROUP BY s"
    ),
    "join_inner": Shape(
        "SELECT t1.id AS id1, t2.id AS id2, t1.k, t1.v, t2.w, t2.tag FROM t1 JOIN t2 ON t1.k = t2.k"
    ),
    "join_left": Shape(
        "SELECT t1.id AS id1, t2.id AS id2, t1.v, t2.w"
        " FROM t1 LEFT JOIN t2 ON t1.k = t2.k AND t1.v < t2.w"
    ),
    "join_right": Shape(
        "SELECT t2.id AS id2, t3.k, t3.s, t3.n FROM t2 RIGHT JOIN t3 ON t2.k = t3.k AND t2.w > t3.n"
    ),
    "join_full": Shape(
        "SELECT t1.id AS id1, t1.name, t3.s, t3.n FROM t1 FULL JOIN t3 ON t1.k = t3.k"
    ),
    "join_three": Shape(
        "SELECT t1.id AS id1, t2.id AS id2, t3.s, t3.n"
        " FROM t1 JOIN t2 ON t1.k = t2.k LEFT JOIN t3 ON t2.w = t3.n"
    ),
    # FROM a, b WHERE: the equality on an expression joins, the rest filters.
    "join_where": Shape(
        "SELECT t1.id AS id1, t2.id AS id2, t1.v FROM t1, t2 WHERE t1.k + 1 = t2.k AND t1.v <> t2.w"
    ),
    "join_agg": Shape(
        "SELECT t2.tag, count(*) AS n, sum(t1.v) AS sv, max(t1.name) AS mx,"
        " count(DISTINCT t1.id) AS ids, min(t2.w) AS mw FROM t1 JOIN t2 ON t1.k = t2.k"
        " GROUP BY t2.tag"
    ),
    "outer_agg": Shape(
        "SELECT t3.s, count(t1.id) AS n1, sum(t1.v) AS sv, count(*) AS n"
        " FROM t3 LEFT JOIN t1 ON t3.k = t1.k GROUP BY t3.s"
    ),
    "distinct": Shape("SELECT DISTINCT k, name FROM t1"),
    "distinct_t3": Shape("SELECT DISTINCT s, n FROM t3"),
    "union": Shape(
        "SELECT k, v AS x FROM t1 WHERE v > 0 UNION ALL SELECT k, w FROM t2"
        " UNION ALL SELECT k, n FROM t3"
    ),
    "join_keys2": Shape(
        "SELECT t1.id AS id1, t2.id AS id2, t2.tag"
        " FROM t1 LEFT JOIN t2 ON t1.k = t2.k AND t1.v = t2.w"
    ),
    "self_t3": Shape("SELECT a.s, b.n FROM t3 a JOIN t3 b ON a.k = b.k"),
    "sub_agg": Shape(
        "SELECT c, count(*) AS groups, min(k) AS mk"
        " FROM (SELECT k, count(*) AS c FROM t1 GROUP BY k) x GROUP BY c"
    ),
    "sub_join": Shape(
        "SELECT x.k, x.sv, t2.tag FROM (SELECT k, sum(v) AS sv FROM t1 GROUP BY k) x"
        " LEFT JOIN t2 ON x.k = t2.k"
    ),
    "agg_join_strings": Shape(
        "SELECT t3.s, string_agg(t1.name, ';') AS names, count(*) AS n"
        " FROM t3 JOIN t1 ON t3.k = t1.k GROUP BY t3.s",
        splits={1: ";"},
    ),
    "union_join": Shape(
        "SELECT t1.id AS x, t2.tag AS label FROM t1 JOIN t2 ON t1.k = t2.k"
        " UNION ALL SELECT n, s FROM t3"
    ),
    "topn": Shape("SELECT id, v, name FROM t1 ORDER BY v DESC, id LIMIT 3 OFFSET 1"),
    "topn_expr": Shape(
        "SELECT id, v * 2 AS v2, upper(name) AS up FROM t1 WHERE flag IS NOT NULL"
        " ORDER BY v2 DESC, id LIMIT 2"
    ),
    "topn_t3": Shape("SELECT k, s, n FROM t3 ORDER BY n, s, k LIMIT 4"),
    # INT then BIGINT: the column is BIGINT; the top-N is over the whole UNION ALL.
    "topn_union": Shape(
        "SELECT n AS x, s FROM t3 UNION ALL SELECT id, tag FROM t2 ORDER BY x DESC, s LIMIT 3"
    ),
    # MVs on MVs: an aggregate over a join MV, a Top-N over that (three deep), a Top-N
    # over an aggregate MV, an aggregate MV joined with a table and with another MV,
    # DISTINCT over UNION ALL, an aggregate over a Top-N.
    "c_join_agg": Shape(
        "SELECT tag, count(*) AS n, sum(v) AS sv, max(w) AS mw FROM mv_join_inner GROUP BY tag"
    ),
    "c_top_join_agg": Shape("SELECT tag, n, sv FROM mv_c_join_agg ORDER BY sv DESC, tag LIMIT 2"),
    "c_top_agg": Shape("SELECT k, n, sv FROM mv_agg_k ORDER BY n DESC, k LIMIT 2"),
    "c_agg_join": Shape(
        "SELECT a.k, a.n, a.maxv, t3.s FROM mv_agg_k a JOIN t3 ON a.k = t3.k WHERE a.n > 1"
    ),
    "c_distinct_union": Shape("SELECT DISTINCT x FROM mv_union"),
    "c_agg_of_topn": Shape("SELECT count(*) AS n, sum(v) AS sv, max(name) AS mx FROM mv_topn"),
    "c_join_mvs": Shape("SELECT a.k, a.n, d.name FROM mv_agg_k a JOIN mv_distinct d ON a.k = d.k"),
}


def _order(names: list[str]) -> list[str]:
    """``names`` and the MVs they read, each after the MVs it reads."""
    out: list[str] = []

    def visit(name: str) -> None:
        for dep in SHAPES[name].deps:
            visit(dep.removeprefix("mv_"))
        if name not in out:
            out.append(name)

    for n in names:
        visit(n)
    return out


# ------------------------------------------------------------------ comparing
def _norm(v: object, delim: str | None) -> object:
    if delim is not None and isinstance(v, str):
        return ("parts", tuple(sorted(v.split(delim))))
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, Decimal):
        if v == v.to_integral_value():
            return int(v)
        v = float(v)
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < 2**53:
            return int(v)
        return float(f"{v:.9g}")
    return v


def _multiset(rows: list[tuple], splits: dict[int, str]) -> list[tuple]:
    norm = [tuple(_norm(v, splits.get(i)) for i, v in enumerate(r)) for r in rows]
    return sorted(norm, key=repr)


class Oracle:
    """An independent DuckDB database with the base tables' rows and a view per MV."""

    def __init__(self) -> None:
        self.db = duckdb.connect()
        # PostgreSQL's order: NULLs are larger than every value.
        self.db.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
        self._views_made = False

    def load(self, cur: rivulet.Cursor) -> None:
        for table in TABLES:
            cur.execute(f"SELECT * FROM {table}")
            rows = cur.fetch_arrow_table()  # noqa: F841 (read by DuckDB's replacement scan)
            self.db.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM rows")
        if not self._views_made:
            for name in _order(list(SHAPES)):
                shape = SHAPES[name]
                self.db.execute(f"CREATE VIEW mv_{name} AS {shape.oracle or shape.sql}")
            self._views_made = True

    def rows(self, name: str) -> list[tuple]:
        return self.db.execute(f"SELECT * FROM mv_{name}").fetchall()


# -------------------------------------------------------------- the machine
IDS = st.integers(0, 11)
KS = st.one_of(st.none(), st.integers(0, 3))
VS = st.one_of(st.none(), st.integers(-2, 7))
PRICES = st.one_of(st.none(), st.sampled_from(["0.25", "1.50", "2.35", "10.00", "-3.45"]))
NAMES = st.one_of(st.none(), st.sampled_from(["ann", "bob", "cy", "", "dan"]))
DATES = st.one_of(
    st.none(), st.sampled_from(["2023-12-31", "2024-01-01", "2024-02-29", "1999-07-04"])
)
FLAGS = st.one_of(st.none(), st.booleans())
FS = st.one_of(st.none(), st.sampled_from([0.5, -1.25, 3.0, 1e6]))
TAGS = st.one_of(st.none(), st.sampled_from(["p", "q", "r"]))
SS = st.one_of(st.none(), st.sampled_from(["x", "y", "zz"]))
SNAMES = st.sampled_from(["'x'", "'y'", "'zz'"])
NS = st.one_of(st.none(), st.integers(0, 5))

T1_ROWS = st.tuples(IDS, KS, VS, PRICES, NAMES, DATES, FLAGS, FS)
T2_ROWS = st.tuples(IDS, KS, VS, TAGS)
T3_ROWS = st.tuples(KS, SS, NS)


BASE_ROWS: dict[str, list[tuple]] = {
    "t1": [
        (1, 1, 5, "2.50", "ann", "2024-01-31", True, 0.5),
        (2, None, -2, None, None, None, None, None),
        (3, 1, 2, "1.25", "bob", "2023-12-31", False, -1.25),
        (4, 2, 7, "10.00", "cy", "2024-02-29", True, 3.0),
        (5, 0, 0, "0.25", "", "1999-07-04", None, 1e6),
        (6, 3, 3, "2.35", "dan", "2024-01-01", False, 0.5),
    ],
    "t2": [(1, 1, 4, "p"), (2, 1, 6, "q"), (3, 2, None, "p"), (4, None, 2, None), (5, 2, 3, "r")],
    "t3": [(1, "x", 1), (1, "x", 1), (2, "y", 4), (None, "zz", 2), (3, None, 3), (2, "y", 5)],
}


# MVs of the prelude created mid-stream, over the rows there (with the MVs they read).
LATE = ["join_three", "topn_union", "c_top_agg", "c_agg_join", "c_join_mvs", "c_agg_of_topn"]
# Statements of every run, after BASE_ROWS ("CREATE LATE": create the LATE MVs).
PRELUDE = [
    "UPDATE t1 SET k = 3 WHERE id % 3 = 1",  # rows move between groups and join partners
    "UPDATE t1 SET id = (id + 5) % 12 WHERE v > 1",  # keys move, onto other rows' keys too
    "DELETE FROM t3 WHERE s = 'x'",  # every copy of a repeated row
    "INSERT INTO t1 VALUES (0, 2, 9, 1.50, 'eve', DATE '2024-03-01', TRUE, -0.5),"
    " (2, 1, 4, NULL, 'bob', NULL, FALSE, 2.0)",  # id 2 is there: the new row overwrites it
    "RECOVER",
    "CREATE LATE",
    "ALTER TABLE t1 SET PARALLELISM = 2",  # an online reschedule under every MV over t1
    "DELETE FROM t2 WHERE k = 2 OR w IS NULL",
    "DELETE FROM t1 WHERE id IN (SELECT id FROM t1 ORDER BY v DESC, id LIMIT 2)",
]


def _lit(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        if re.fullmatch(r"\d{4}-\d\d-\d\d", v):
            return f"DATE '{v}'"
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def _values(rows: list[tuple]) -> str:
    return ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)


class OracleMachine(RuleBasedStateMachine):
    """Subclasses set ``workers``/``slots`` (and thereby the parallelism)."""

    workers = 1
    slots = 1
    parallelisms: tuple[str, ...] = ("default",)
    # "served": every actor reads its committed state through the storage service.
    state_reads = "local"
    # "processes": the actors run on compute node processes (not deterministic then).
    compute = "in-process"
    prelude = True  # run PRELUDE after the setup

    def __init__(self) -> None:
        super().__init__()
        self.con = rivulet.connect(
            workers=self.workers,
            slots=self.slots,
            deterministic=self.compute == "in-process",
            state_reads=self.state_reads,
            compute=self.compute,
        )
        self.cur = self.con.cursor()
        self.oracle = Oracle()
        self.live: list[str] = []  # MVs that exist, in creation order
        self.log: list[str] = []  # statements so far, for the failure report
        # Top-N caches one row beyond offset + limit: deletes reload the top from state.
        self._spare_rows, top_n.MIN_SPARE_ROWS = top_n.MIN_SPARE_ROWS, 1

    def teardown(self) -> None:
        top_n.MIN_SPARE_ROWS = self._spare_rows
        self.con.close()
        self.oracle.db.close()

    # ---------------------------------------------------------------- helpers
    def run(self, sql: str) -> None:
        self.log.append(sql)
        self.cur.execute(sql)

    def create(self, name: str, parallelism: str) -> None:
        if parallelism != "default" or len(self.parallelisms) > 1:
            self.run(f"SET streaming_parallelism = {parallelism}")
        self.run(f"CREATE MATERIALIZED VIEW mv_{name} AS {SHAPES[name].sql}")
        self.live.append(name)

    def drop_mv(self, name: str, cascade: bool) -> None:
        dependents = self.dependents(name)
        if dependents and not cascade:
            with pytest.raises(rivulet.Error) as info:
                self.run(f"DROP MATERIALIZED VIEW mv_{name}")
            assert info.value.sqlstate == "2BP01", info.value
            return  # nothing changed: the invariant checks every MV still
        self.run(f"DROP MATERIALIZED VIEW mv_{name}" + (" CASCADE" if cascade else ""))
        for gone in [name, *dependents]:
            self.live.remove(gone)
        self.cur.execute("SHOW MATERIALIZED VIEWS")
        assert sorted(r[0] for r in self.cur.fetchall()) == sorted(f"mv_{n}" for n in self.live)

    def dependents(self, name: str) -> list[str]:
        """The live MVs that read ``name``, directly or through others."""
        out: list[str] = []
        for other in self.live:
            if any(d.removeprefix("mv_") in [name, *out] for d in SHAPES[other].deps):
                out.append(other)
        return out

    # ------------------------------------------------------------------ rules
    @initialize(deferred=st.lists(st.sampled_from(list(SHAPES)), unique=True, max_size=8))
    def setup(self, deferred: list[str]) -> None:
        """Every shape's MV over the empty tables but the ``deferred`` ones and the MVs
        over them (the rules create them later, over rows); then the same rows and (with
        ``prelude``) statements in every run, each followed by the check."""
        for ddl in TABLES.values():
            self.run(ddl)
        later = set(deferred) | (set(LATE) if self.prelude else set())
        for name in SHAPES:
            if any(d.removeprefix("mv_") in later for d in SHAPES[name].deps):
                later.add(name)
        for i, name in enumerate(n for n in SHAPES if n not in later):
            self.create(name, self.parallelisms[i % len(self.parallelisms)])
        for table, rows in BASE_ROWS.items():
            self.run(f"INSERT INTO {table} VALUES {_values(rows)}")
        if not self.prelude:
            return
        self.every_mv_equals_its_query()
        for stmt in PRELUDE:
            if stmt == "CREATE LATE":  # over the rows there, their snapshot read exact
                for i, name in enumerate(n for n in _order(LATE) if n not in self.live):
                    self.create(name, self.parallelisms[-1 - i % len(self.parallelisms)])
            else:
                self.run(stmt)
            self.every_mv_equals_its_query()

    @rule(
        stmt=st.one_of(
            st.lists(T1_ROWS, min_size=1, max_size=5).map(
                lambda rows: f"INSERT INTO t1 VALUES {_values(rows)}"
            ),
            st.lists(T2_ROWS, min_size=1, max_size=4).map(
                lambda rows: f"INSERT INTO t2 VALUES {_values(rows)}"
            ),
            # Each row twice, sometimes: copies of one row in a table without a key.
            st.tuples(st.lists(T3_ROWS, min_size=1, max_size=4), st.booleans()).map(
                lambda r: f"INSERT INTO t3 VALUES {_values(r[0] * (2 if r[1] else 1))}"
            ),
        )
    )
    def insert(self, stmt: str) -> None:
        self.run(stmt)

    @rule(
        stmt=st.one_of(
            st.builds("UPDATE t1 SET v = v + {} WHERE k = {}".format, st.integers(-3, 3), st.integers(0, 3)),
            st.builds(
                "UPDATE t1 SET name = {}, flag = {}, price = {} WHERE id = {}".format,
                NAMES.map(_lit), FLAGS.map(_lit), PRICES.map(_lit), IDS,
            ),
            # Rows move between groups and join partners.
            st.builds("UPDATE t1 SET k = {} WHERE id % 3 = {}".format, KS.map(_lit), st.integers(0, 2)),
            # The primary key moves (onto other rows' keys too: the new row overwrites).
            st.builds("UPDATE t1 SET id = (id + {}) % 12 WHERE v > {}".format, st.integers(1, 11), st.integers(-3, 5)),
            st.builds("UPDATE t1 SET d = d + {}, f = f * 2 WHERE k IS NULL OR k = {}".format, st.integers(-40, 40), KS.map(_lit)),
            st.builds("UPDATE t2 SET k = {}, w = {} WHERE id = {}".format, KS.map(_lit), VS.map(_lit), IDS),
            st.builds("UPDATE t2 SET tag = {} WHERE k = {}".format, TAGS.map(_lit), st.integers(0, 3)),
            st.builds("UPDATE t2 SET id = id + 1 WHERE w IS NOT NULL".format),
            st.builds("UPDATE t3 SET k = {}, n = n + 1 WHERE s = {}".format, KS.map(_lit), SNAMES),
        )
    )  # fmt: skip
    def update(self, stmt: str) -> None:
        self.run(stmt)

    @rule(
        stmt=st.one_of(
            st.builds("DELETE FROM t1 WHERE id = {}".format, IDS),
            st.builds("DELETE FROM t1 WHERE k = {} OR v < {}".format, st.integers(0, 3), st.integers(-2, 3)),
            st.builds("DELETE FROM t2 WHERE k = {} OR w IS NULL".format, st.integers(0, 3)),
            st.builds("DELETE FROM t3 WHERE s = {}".format, SNAMES),
            st.builds("DELETE FROM t3 WHERE k IS NULL OR n > {}".format, st.integers(0, 5)),
            st.sampled_from(["DELETE FROM t1", "DELETE FROM t2", "DELETE FROM t3"]),
            st.just("DELETE FROM t1 WHERE id IN (SELECT id FROM t1 ORDER BY v DESC, id LIMIT 2)"),
        )
    )  # fmt: skip
    def delete(self, stmt: str) -> None:
        self.run(stmt)

    @rule()
    def recover(self) -> None:
        self.run("RECOVER")
        self.run("FLUSH")

    @precondition(lambda self: bool(self.live))
    @rule(
        data=st.data(),
        table=st.booleans(),
        parallelism=st.sampled_from(["1", "2", "3", "ADAPTIVE", "DEFAULT"]),
    )
    def reschedule(self, data: st.DataObject, table: bool, parallelism: str) -> None:
        """An online ALTER ... SET PARALLELISM of a table (its MVs read it through new
        dispatchers) or an MV."""
        if table:
            target = "TABLE " + data.draw(st.sampled_from(sorted(TABLES)))
        else:
            target = "MATERIALIZED VIEW mv_" + data.draw(st.sampled_from(self.live))
        self.run(f"ALTER {target} SET PARALLELISM = {parallelism}")

    @precondition(lambda self: len(self.live) < len(SHAPES))
    @rule(data=st.data())
    def create_mid_stream(self, data: st.DataObject) -> None:
        missing = [n for n in SHAPES if n not in self.live]
        name = data.draw(st.sampled_from(missing))
        for n in _order([name]):
            if n not in self.live:
                self.create(n, data.draw(st.sampled_from(self.parallelisms)))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), cascade=st.booleans())
    def drop(self, data: st.DataObject, cascade: bool) -> None:
        self.drop_mv(data.draw(st.sampled_from(self.live)), cascade)

    # -------------------------------------------------------------- invariant
    @invariant()
    def every_mv_equals_its_query(self) -> None:
        if not self.log:
            return
        self.cur.execute("FLUSH")
        self.oracle.load(self.cur)
        for name in self.live:
            shape = SHAPES[name]
            self.cur.execute(f"SELECT * FROM mv_{name}")
            got = _multiset(self.cur.fetchall(), shape.splits)
            want = _multiset(self.oracle.rows(name), shape.splits)
            if got != want:
                extra = list((Counter(got) - Counter(want)).elements())
                missing = list((Counter(want) - Counter(got)).elements())
                raise AssertionError(
                    f"mv_{name} differs from its query after:\n  "
                    + "\n  ".join(self.log[-8:])
                    + f"\nin the MV only: {extra}\nin the query only: {missing}"
                )


class Parallelism1(OracleMachine):
    workers, slots = 1, 1


class Parallelism3(OracleMachine):
    """Three slots; each MV at 1, 2 or 3 actors per fragment (adaptive: 3)."""

    workers, slots = 1, 3
    parallelisms = ("adaptive", "1", "2")


class ServedParallelism3(Parallelism3):
    """Parallelism3 with committed state served over a socket, as to compute nodes."""

    state_reads = "served"


class ProcessesParallelism3(Parallelism3):
    """Parallelism3 on compute nodes: three worker processes of one slot each."""

    workers, slots = 3, 1
    compute = "processes"


class LongParallelism1(Parallelism1):
    prelude = False


class LongParallelism3(Parallelism3):
    prelude = False


_FIXED = settings(
    max_examples=1,
    stateful_step_count=1,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
_LONG = settings(
    max_examples=25,
    stateful_step_count=30,
    derandomize=False,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize(
    "machine",
    [Parallelism1, Parallelism3, ServedParallelism3, ProcessesParallelism3],
    ids=["p1", "p3", "p3-served", "p3-processes"],
)
def test_every_shape_matches_the_oracle(machine: type[OracleMachine]) -> None:
    run_state_machine_as_test(machine, settings=_FIXED)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("machine", [LongParallelism1, LongParallelism3], ids=["p1", "p3"])
def test_every_shape_matches_the_oracle_long(machine: type[OracleMachine]) -> None:
    run_state_machine_as_test(machine, settings=_LONG)


def test_the_check_sees_a_wrong_mv() -> None:
    """The harness itself: an MV that is not its shape's query fails the check, and so
    does a string_agg that lost a part (its parts are compared, not just its length)."""
    machine = Parallelism1()
    try:
        for ddl in TABLES.values():
            machine.run(ddl)
        machine.run("CREATE MATERIALIZED VIEW mv_filter AS SELECT id, k, name, v FROM t1")
        machine.run(
            "CREATE MATERIALIZED VIEW mv_agg_t3 AS SELECT s, count(*) AS c, sum(n) AS sn,"
            " min(k) AS mk, max(k) AS xk FROM t3 GROUP BY s"
        )
        machine.live = ["agg_t3", "filter"]
        for table, rows in BASE_ROWS.items():
            machine.run(f"INSERT INTO {table} VALUES {_values(rows)}")
        with pytest.raises(AssertionError, match="mv_filter differs"):
            machine.every_mv_equals_its_query()
        machine.live = ["agg_t3"]
        machine.every_mv_equals_its_query()
        assert _multiset([("a,b",)], {0: ","}) != _multiset([("a,c",)], {0: ","})
        assert _multiset([("b,a", 1.0000000001)], {0: ","}) == _multiset([("a,b", 1)], {0: ","})
    finally:
        machine.teardown()
