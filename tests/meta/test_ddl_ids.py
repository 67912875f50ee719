"""DDL never breaks later DDL: names the store cannot hold are refused before anything is
written, ids only move forward (across failed statements, recoveries and restarts), and a
fragment keeps its id for its job's life (a reschedule or a recovery changes only the
actors). The random run mixes valid DDL with statements that fail, RECOVER and ALTER, and
checks after every step that the next valid DDL succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import rivulet

BAD_DDL = [
    ('CREATE TABLE bad ("A" INT, a INT)', "42701"),
    ('CREATE TABLE bad (id INT PRIMARY KEY, "ID" INT)', "42701"),
    ("CREATE TABLE bad (_vnode INT)", "42701"),
    ('CREATE TABLE bad ("_ROW_ID" INT)', "42701"),
    ('CREATE TABLE bad ("" INT)', "42601"),
    ("CREATE TABLE bad (xmin INT)", "42701"),
    ("CREATE TABLE bad AS SELECT 1, 2", "42701"),
    ('CREATE MATERIALIZED VIEW bad AS SELECT id AS x, v AS "X" FROM t0', "42701"),
    ("CREATE MATERIALIZED VIEW bad AS SELECT id AS _vnode FROM t0", "42701"),
    ("CREATE MATERIALIZED VIEW bad AS SELECT nope FROM t0", "42703"),
]


def fragments(con: rivulet.Connection) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for fragment_id, job_id in con.execute(
        "SELECT fragment_id, table_id FROM rw_fragments ORDER BY fragment_id"
    ).fetchall():
        out.setdefault(job_id, []).append(fragment_id)
    return out


def actors(con: rivulet.Connection) -> set[int]:
    return {r[0] for r in con.execute("SELECT actor_id FROM rw_actors").fetchall()}


@pytest.mark.parametrize(("sql", "sqlstate"), BAD_DDL)
def test_names_the_store_cannot_hold_are_refused_and_change_nothing(
    sql: str, sqlstate: str
) -> None:
    with rivulet.connect(workers=1, slots=2) as con:
        con.execute("CREATE TABLE t0 (id INT PRIMARY KEY, v INT)")
        before = (fragments(con), actors(con))
        with pytest.raises(rivulet.Error) as info:
            con.execute(sql)
        assert info.value.sqlstate == sqlstate
        assert (fragments(con), actors(con)) == before
        assert con.execute("SELECT count(*) FROM rw_recovery_events").fetchone() == (0,)
        # The next DDL works, and gets new ids.
        con.execute("CREATE TABLE ok (a INT)")
        con.execute("CREATE MATERIALIZED VIEW okm AS SELECT a FROM ok")
        assert con.execute("SELECT count(*) FROM okm").fetchone() == (0,)


def test_long_identifiers_are_truncated_with_a_notice() -> None:
    with rivulet.connect() as con:
        long = "x" * 70
        cur = con.execute(f"CREATE TABLE {long} (c INT)")
        con.execute(f"INSERT INTO {long} VALUES (1)")
        assert con.execute(f"SELECT c FROM {'x' * 63}").fetchall() == [(1,)]
        assert con.execute("SELECT name FROM rw_tables").fetchall() == [("x" * 63,)]
        del cur


def test_fragments_keep_their_ids_through_reschedules_recoveries_and_restarts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    with rivulet.connect(path, workers=1, slots=4) as con:
        con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
        con.execute("INSERT INTO t VALUES (1, 1, 1), (2, 2, 2)")
        con.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS s FROM t GROUP BY k")
        original = fragments(con)
        seen = actors(con)
        for statement in (
            "ALTER MATERIALIZED VIEW m SET PARALLELISM = 2",
            "RECOVER",
            "ALTER TABLE t SET PARALLELISM = 3",
        ):
            con.execute(statement)
            assert fragments(con) == original, statement
            now = actors(con)
            moved = now - seen
            assert moved and min(moved) > max(seen), statement  # new actors, new ids
            seen |= now
        con.add_worker(2)
        assert fragments(con) == original
    with rivulet.connect(path) as con:
        assert fragments(con) == original
        assert min(actors(con)) > max(seen)
        con.execute("CREATE TABLE u (a INT)")
        new = fragments(con)
        assert min(new[max(new)]) > max(f for fs in original.values() for f in fs)


class RandomDdl(RuleBasedStateMachine):
    """Valid and failing DDL, recoveries and reschedules in any order: every valid
    statement succeeds, ids never go back, existing fragments keep theirs."""

    @initialize()
    def start(self) -> None:
        self.con = rivulet.connect(workers=1, slots=2)
        self.con.execute("CREATE TABLE t0 (id INT PRIMARY KEY, v INT)")
        self.con.execute("INSERT INTO t0 VALUES (1, 1), (2, 2)")
        self.n = 0
        self.jobs: list[str] = ["t0"]
        self.known = fragments(self.con)
        self.max_fragment = max(f for fs in self.known.values() for f in fs)
        self.live_actors = actors(self.con)
        self.max_actor = max(self.live_actors)

    def _valid(self, sql: str) -> None:
        self.con.execute(sql)

    @rule(kind=st.sampled_from(["table", "mv", "mv_agg"]))
    def create(self, kind: str) -> None:
        self.n += 1
        name = f"j{self.n}"
        if kind == "table":
            self._valid(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
        elif kind == "mv":
            self._valid(f"CREATE MATERIALIZED VIEW {name} AS SELECT id, v * 2 AS w FROM t0")
        else:
            self._valid(
                f"CREATE MATERIALIZED VIEW {name} AS SELECT v % 2 AS k, count(*) FROM t0"
                " GROUP BY v % 2"
            )
        self.jobs.append(name)

    @rule(bad=st.sampled_from(BAD_DDL))
    def fail(self, bad: tuple[str, str]) -> None:
        with pytest.raises(rivulet.Error) as info:
            self.con.execute(bad[0])
        assert info.value.sqlstate == bad[1]

    @rule()
    def recover(self) -> None:
        self._valid("RECOVER")

    @rule(n=st.integers(1, 3), which=st.integers(0, 100))
    def reschedule(self, n: int, which: int) -> None:
        name = self.jobs[which % len(self.jobs)]
        kind = "TABLE" if name == "t0" or self._is_table(name) else "MATERIALIZED VIEW"
        self._valid(f"ALTER {kind} {name} SET PARALLELISM = {n}")

    def _is_table(self, name: str) -> bool:
        row = self.con.execute("SELECT count(*) FROM rw_tables WHERE name = %s", [name])
        return row.fetchone() == (1,)

    @rule(which=st.integers(0, 100))
    def drop(self, which: int) -> None:
        if len(self.jobs) <= 1:
            return
        name = self.jobs[1 + which % (len(self.jobs) - 1)]
        kind = "TABLE" if self._is_table(name) else "MATERIALIZED VIEW"
        self._valid(f"DROP {kind} {name}")
        self.jobs.remove(name)

    @rule()
    def write(self) -> None:
        self._valid("INSERT INTO t0 VALUES (3, 3)")
        self._valid("DELETE FROM t0 WHERE id = 3")

    @invariant()
    def ids_only_move_forward(self) -> None:
        if not hasattr(self, "con"):
            return
        now = fragments(self.con)
        for job, ids in now.items():
            if job in self.known:
                assert ids == self.known[job], f"fragments of job {job} were renumbered"
            else:
                assert min(ids) > self.max_fragment
                self.max_fragment = max(ids)
        self.known = now
        live = actors(self.con)
        new_actors = live - self.live_actors
        if new_actors:
            assert min(new_actors) > self.max_actor
            self.max_actor = max(new_actors)
        self.live_actors = live
        failures = "SELECT count(*) FROM rw_recovery_events WHERE reason <> 'RECOVER'"
        assert self.con.execute(failures).fetchone() == (0,)
        for name in self.jobs:  # every job still answers
            self.con.execute(f"SELECT count(*) FROM {name}").fetchone()

    def teardown(self) -> None:
        if hasattr(self, "con"):
            self.con.close()


RandomDdl.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_ddl_with_failures = RandomDdl.TestCase
