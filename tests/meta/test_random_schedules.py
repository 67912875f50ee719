"""Random schedules of DML, MV creation (every backfill type, foreground and background,
rate limited), online and deferred reschedules, workers joining and leaving, WAIT and
RECOVER, driven by a hypothesis state machine. After every step, FLUSH and then:

- every CREATED MV equals its query evaluated by DuckDB over the base tables (the oracle,
  one statement per MV so that both sides read the same committed epoch);
- the backfill progress of a CREATING job (consumed rows in SHOW JOBS) never decreases,
  unless a RECOVER happened in between;
- an online ALTER fails (55000, "Cannot alter the job ...") exactly when a CREATING
  no_shuffle job is the target or reads it, and then changes nothing.

At teardown every rate limit goes back to DEFAULT, WAIT, and every MV must equal its query.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import rivulet
from rivulet.common.errors import Error

# (query, the tables it reads). Deterministic, no floats; `t` has a primary key, `u` none.
QUERIES: list[tuple[str, tuple[str, ...]]] = [
    ("SELECT k, count(*) AS n, sum(v) AS s, max(v) AS mx FROM t GROUP BY k", ("t",)),
    ("SELECT id, k, v FROM t WHERE v % 3 = 0", ("t",)),
    ("SELECT t.id, u.a, t.v + u.w AS vw FROM t JOIN u ON t.k = u.k", ("t", "u")),
    ("SELECT a, k, w * 2 AS w2 FROM u", ("u",)),
    ("SELECT k, count(*) AS n, sum(w) AS s, max(a) AS mx FROM u GROUP BY k", ("u",)),
    ("SELECT count(*) AS n, sum(v) AS s FROM t", ("t",)),
]
# Hypothesis shrinks towards the first element of each list: put the interesting ones first.
BACKFILL_TYPES = ["no_shuffle", "arrangement", "snapshot", "upstream_only", None]
UNMOVABLE = "no_shuffle"
POLICIES = ["1", "2", "3", "ADAPTIVE", "'bounded(2)'", "'ratio(0.5)'", "DEFAULT"]
MAX_MVS = 6
MAX_WORKERS = 3
KEYS = 5
# (query index, backfill type, background, rate limit, parallelism, backfill parallelism)
MV_SPEC = st.tuples(
    st.integers(0, len(QUERIES) - 1),
    st.sampled_from(BACKFILL_TYPES),
    st.sampled_from([True, False]),
    st.sampled_from([5, 50, None, 0, 1000]),
    st.sampled_from(["adaptive", "1", "2", "3"]),
    st.sampled_from(["DEFAULT", "1", "2"]),
)
# Objects are picked by index (modulo the count), so that what hypothesis draws never
# depends on timing (it replays examples and insists on the same draws).
PICK = st.integers(0, 1000)
PROGRESS = re.compile(r"\((\d+)/(\d+)\)")


class RandomSchedules(RuleBasedStateMachine):
    @initialize(rows=st.sampled_from([120, 0, 30]), specs=st.lists(MV_SPEC, min_size=1, max_size=3))
    def setup(self, rows: int, specs: list[tuple]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rivulet-sched-"))
        self.con = rivulet.connect(self.dir / "db", workers=1, slots=2)
        self.dml = rivulet.connect(self.dir / "db")  # a second session on the same engine
        self.con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
        self.con.execute("CREATE TABLE u (a INT, k INT, w INT)")
        self.next_id = 0
        self.next_a = 0
        self.mv_count = 0
        # name -> (query, tables, backfill type)
        self.mvs: dict[str, tuple[str, tuple[str, ...], str]] = {}
        self.progress: dict[int, int] = {}  # job id -> consumed rows last seen
        self.refused = 0  # online ALTERs refused as expected
        if rows:
            self.insert_t(rows, 0, 0)
            self.insert_u(rows // 2, 0, 0)
        for spec in specs:
            self.create(*spec)

    def teardown(self) -> None:
        con = getattr(self, "con", None)
        try:
            if con is not None and not con.closed:
                for name in self.mvs:
                    con.execute(f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT")
                con.execute("WAIT")
                con.execute("FLUSH")
                assert all(s == "CREATED" for s in self.jobs().values())
                self.check_oracle()
        finally:
            for c in (getattr(self, "dml", None), con):
                if c is not None and not c.closed:
                    c.close()
            if hasattr(self, "dir"):
                shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------- helpers
    def jobs(self) -> dict[str, str]:
        """name -> status of every streaming job."""
        return dict(self.con.execute("SELECT name, status FROM rw_streaming_jobs").fetchall())

    def job_row(self, name: str) -> tuple:
        return self.con.execute(
            "SELECT id, status, parallelism, target_parallelism, backfill_parallelism"
            " FROM rw_streaming_jobs WHERE name = %s",
            [name],
        ).fetchone()

    def pick_mv(self, i: int) -> str:
        names = list(self.mvs)
        return names[i % len(names)]

    def blockers(self, target: str) -> set[str]:
        """CREATING no_shuffle MVs that make an online ALTER of ``target`` fail."""
        status = self.jobs()
        return {
            name
            for name, (_, tables, bt) in self.mvs.items()
            if bt == UNMOVABLE
            and status[name] == "CREATING"
            and (name == target or target in tables)
        }

    def check_oracle(self) -> None:
        status = self.jobs()
        for name, (query, _, _) in self.mvs.items():
            if status[name] != "CREATED":
                continue
            diff = self.con.execute(
                f"SELECT count(*) FROM ((SELECT * FROM {name} EXCEPT ALL {query})"
                f" UNION ALL ({query} EXCEPT ALL SELECT * FROM {name})) AS d"
            ).fetchone()
            assert diff == (0,), f"{name} differs from its query: {query}"

    def alter_checked(self, target: str, stmt: str, *, deferred: bool) -> None:
        """Run an ALTER on ``target``: it may fail only when a creating no_shuffle job ties
        ``target`` (and then with the documented error, changing nothing)."""
        blockers = set() if deferred else self.blockers(target)
        if not blockers:
            self.con.execute(stmt)
            return
        before = self.job_row(target)
        try:
            self.con.execute(stmt)
        except Error as exc:
            self.refused += 1
            if currently_in_test_context():
                event("online ALTER refused")
            assert exc.sqlstate == "55000", exc
            assert str(exc).startswith(f"Cannot alter the job {before[0]} "), exc
            status = self.jobs()
            if all(status[b] == "CREATING" for b in blockers):
                assert self.job_row(target) == before, "a refused ALTER changed the catalog"
        else:
            # Only possible if every blocker finished its backfill meanwhile.
            status = self.jobs()
            assert all(status[b] == "CREATED" for b in blockers), (stmt, blockers)

    # --------------------------------------------------------------- DML
    @rule(n=st.integers(1, 40), k0=st.integers(0, KEYS - 1), v0=st.integers(0, 50))
    def insert_t(self, n: int, k0: int, v0: int) -> None:
        rows = ", ".join(
            f"({self.next_id + i}, {(k0 + i) % KEYS}, {(v0 + 7 * i) % 100})" for i in range(n)
        )
        self.next_id += n
        self.dml.execute(f"INSERT INTO t VALUES {rows}")

    @rule(n=st.integers(1, 20), k0=st.integers(0, KEYS), w0=st.integers(0, 50))
    def insert_u(self, n: int, k0: int, w0: int) -> None:
        # Duplicate rows on purpose: u has no primary key.
        rows = ", ".join(
            f"({self.next_a + i // 2}, {(k0 + i) % (KEYS + 1)}, {(w0 + i // 2) % 60})"
            for i in range(n)
        )
        self.next_a += n
        self.dml.execute(f"INSERT INTO u VALUES {rows}")

    @rule(m=st.integers(2, 7), r=st.integers(0, 6), d=st.integers(-5, 5))
    def update_t(self, m: int, r: int, d: int) -> None:
        self.dml.execute(f"UPDATE t SET v = v + {d} WHERE id % {m} = {r % m}")

    @rule(m=st.integers(2, 7), r=st.integers(0, 6), d=st.integers(1, 3))
    def update_u_key(self, m: int, r: int, d: int) -> None:
        self.dml.execute(
            f"UPDATE u SET k = (k + {d}) % {KEYS + 1}, w = w + 1 WHERE a % {m} = {r % m}"
        )

    @rule(m=st.integers(3, 9), r=st.integers(0, 8))
    def delete_t(self, m: int, r: int) -> None:
        self.dml.execute(f"DELETE FROM t WHERE id % {m} = {r % m}")

    @rule(m=st.integers(3, 9), r=st.integers(0, 8))
    def delete_u(self, m: int, r: int) -> None:
        self.dml.execute(f"DELETE FROM u WHERE a % {m} = {r % m}")

    # ------------------------------------------------------------ CREATE
    def create(
        self,
        q: int,
        backfill_type: str | None,
        background: bool,
        rate_limit: int | None,
        parallelism: str,
        backfill_parallelism: str,
    ) -> None:
        query, tables = QUERIES[q]
        if backfill_type == "upstream_only":
            # It reads no history: its query is its oracle only over empty tables.
            counts = [self.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables]
            if any(counts):
                backfill_type = "arrangement"
        if not background and rate_limit is not None:
            rate_limit = None  # a foreground CREATE would wait for a throttled backfill
        name = f"m{self.mv_count}"
        self.mv_count += 1
        options = []
        if backfill_type is not None:
            options.append(f"backfill_type = '{backfill_type}'")
        if rate_limit is not None:
            options.append(f"backfill_rate_limit = {rate_limit}")
        with_clause = f" WITH ({', '.join(options)})" if options else ""
        self.con.execute(f"SET background_ddl = {'true' if background else 'false'}")
        self.con.execute(f"SET streaming_parallelism = {parallelism}")
        self.con.execute(f"SET streaming_parallelism_for_backfill = {backfill_parallelism}")
        self.con.execute(f"CREATE MATERIALIZED VIEW {name}{with_clause} AS {query}")
        self.mvs[name] = (query, tables, backfill_type or "arrangement")
        if not background:
            assert self.jobs()[name] == "CREATED"

    @precondition(lambda self: len(self.mvs) < MAX_MVS)
    @rule(spec=MV_SPEC)
    def create_mv(self, spec: tuple) -> None:
        self.create(*spec)

    @precondition(lambda self: self.mvs)
    @rule(i=PICK)
    def drop_mv(self, i: int) -> None:
        """DROP of a CREATING job cancels it."""
        name = self.pick_mv(i)
        self.con.execute(f"DROP MATERIALIZED VIEW {name}")
        del self.mvs[name]
        assert name not in self.jobs()

    # ------------------------------------------------------------- ALTER
    @rule(i=PICK, policy=st.sampled_from(POLICIES), deferred=st.booleans())
    def alter_parallelism(self, i: int, policy: str, deferred: bool) -> None:
        targets = ["t", "u", *self.mvs]
        target = targets[i % len(targets)]
        kind = "TABLE" if target in ("t", "u") else "MATERIALIZED VIEW"
        stmt = f"ALTER {kind} {target} SET PARALLELISM = {policy}"
        if deferred:
            stmt += " DEFERRED"
        self.alter_checked(target, stmt, deferred=deferred)

    @precondition(lambda self: self.mvs)
    @rule(i=PICK, n=st.sampled_from(["1", "2", "3"]), deferred=st.booleans())
    def alter_backfill_parallelism(self, i: int, n: str, deferred: bool) -> None:
        target = self.pick_mv(i)
        stmt = f"ALTER MATERIALIZED VIEW {target} SET BACKFILL_PARALLELISM = {n}"
        if deferred:
            stmt += " DEFERRED"
        self.alter_checked(target, stmt, deferred=deferred)

    @precondition(lambda self: self.mvs)
    @rule(i=PICK, limit=st.sampled_from(["0", "1", "5", "50", "DEFAULT"]))
    def alter_rate_limit(self, i: int, limit: str) -> None:
        target = self.pick_mv(i)
        self.con.execute(f"ALTER MATERIALIZED VIEW {target} SET BACKFILL_RATE_LIMIT = {limit}")

    # ----------------------------------------------------------- workers
    @rule(slots=st.integers(1, 2))
    def add_worker(self, slots: int) -> None:
        before = {w for w, _ in self.con.workers()}
        if len(before) >= MAX_WORKERS:
            return
        wid = self.con.add_worker(slots=slots)
        assert wid not in before
        assert (wid, slots) in self.con.workers()

    @rule(i=PICK)
    def remove_worker(self, i: int) -> None:
        workers = sorted(w for w, _ in self.con.workers())
        wid = workers[i % len(workers)]
        if len(workers) == 1:
            with pytest.raises(Error) as info:
                self.con.remove_worker(wid)
            assert info.value.sqlstate == "55000"
            assert [w for w, _ in self.con.workers()] == workers
        else:
            self.con.remove_worker(wid)
            assert wid not in {w for w, _ in self.con.workers()}

    # ------------------------------------------------------ WAIT, RECOVER
    @rule()
    def wait(self) -> None:
        status = self.jobs()
        for name in self.mvs:
            if status[name] == "CREATING":
                self.con.execute(
                    f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_RATE_LIMIT = DEFAULT"
                )
        self.con.execute("WAIT")
        assert all(s == "CREATED" for s in self.jobs().values())

    @rule()
    def recover(self) -> None:
        self.con.execute("RECOVER")
        self.progress.clear()  # progress may fall back to the last checkpoint

    # -------------------------------------------------------- invariants
    @invariant()
    def mvs_equal_their_queries(self) -> None:
        if not hasattr(self, "con"):
            return
        self.con.execute("FLUSH")
        assert set(self.jobs()) == {"t", "u", *self.mvs}
        self.check_oracle()

    @invariant()
    def backfill_progress_never_decreases(self) -> None:
        if not hasattr(self, "con"):
            return
        seen: dict[int, int] = {}
        for job_id, _stmt, _kind, progress in self.con.execute("SHOW JOBS").fetchall():
            match = PROGRESS.search(progress)
            assert match, progress
            consumed = int(match.group(1))
            job_id = int(job_id)
            last = self.progress.get(job_id, 0)
            assert consumed >= last, f"job {job_id}: progress fell from {last} to {consumed}"
            seen[job_id] = consumed
        self.progress = seen


SETTINGS = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
}


def test_random_schedules() -> None:
    run_state_machine_as_test(
        RandomSchedules, settings=settings(max_examples=10, stateful_step_count=30, **SETTINGS)
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_random_schedules_long() -> None:
    run_state_machine_as_test(
        RandomSchedules, settings=settings(max_examples=80, stateful_step_count=60, **SETTINGS)
    )


def test_refused_alters_scenario() -> None:
    """A fixed walk through the cases the random runs rarely meet: a throttled no_shuffle
    backfill blocks online ALTERs of itself and of the table it reads (not of the other
    table or of another job), DEFERRED goes through, workers come and go meanwhile."""
    m = RandomSchedules()
    m.setup(120, [(0, "no_shuffle", True, 1, "adaptive", "DEFAULT")])
    try:
        m.create(3, "arrangement", True, 5, "2", "1")  # on u: m1
        m.mvs_equal_their_queries()
        for target in ("t", "m0"):
            assert m.blockers(target) == {"m0"}
            with pytest.raises(Error, match=r"^Cannot alter the job"):
                m.con.execute(
                    f"ALTER {'TABLE' if target == 't' else 'MATERIALIZED VIEW'} {target}"
                    " SET PARALLELISM = 1"
                )
        with pytest.raises(Error, match=r"^Cannot alter the job"):
            m.con.execute("ALTER MATERIALIZED VIEW m0 SET BACKFILL_PARALLELISM = 1")
        m.alter_parallelism(0, "1", False)  # t: refused (checked by the rule)
        assert m.refused == 1
        m.alter_parallelism(2, "'bounded(2)'", True)  # m0, DEFERRED
        m.alter_parallelism(1, "1", False)  # u: online
        m.alter_parallelism(3, "1", False)  # m1 (creating, arrangement): online
        m.alter_backfill_parallelism(1, "2", False)
        m.insert_t(10, 1, 1)
        m.update_u_key(2, 1, 1)
        m.backfill_progress_never_decreases()
        m.add_worker(1)
        m.mvs_equal_their_queries()
        m.backfill_progress_never_decreases()
        m.remove_worker(0)
        m.backfill_progress_never_decreases()
        m.alter_rate_limit(0, "DEFAULT")
        m.wait()
        m.alter_parallelism(0, "1", False)  # t: no blocker any more
        m.mvs_equal_their_queries()
        assert m.job_row("m0")[2:4] == ("bounded(2)", "bounded(2)")
    finally:
        m.teardown()


def test_recover_succeeds_while_a_checkpoint_commits(tmp_path: Path) -> None:
    """Reproduction (fixed): RECOVER issued while a checkpoint was being committed failed
    with its own "the stream jobs were rebuilt by RECOVER" (the deferred recovery failed
    the RECOVER's flush). Only other statements' writes may get that error."""
    con = rivulet.connect(tmp_path / "db", workers=1, slots=2)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
    con.execute("INSERT INTO t SELECT i, i % 5, 1 FROM generate_series(100000, 100299) AS g(i)")
    con.execute("SET background_ddl = true")
    con.execute(
        "CREATE MATERIALIZED VIEW m WITH (backfill_rate_limit = 100)"
        " AS SELECT k, count(*) AS n FROM t GROUP BY k"
    )
    stop = threading.Event()

    def writer() -> None:
        w = rivulet.connect(tmp_path / "db")
        i = 0
        while not stop.is_set():
            try:
                w.execute(f"INSERT INTO t VALUES ({i}, {i % 5}, 1)")
            except Error:
                pass  # a write lost to the recovery
            i += 1
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(40):
            con.execute("RECOVER")
    finally:
        stop.set()
        thread.join(60)
    con.execute("WAIT")
    con.execute("FLUSH")
    q = "SELECT k, count(*) AS n FROM t GROUP BY k"
    assert sorted(con.execute("SELECT * FROM m").fetchall()) == sorted(con.execute(q).fetchall())
    con.close()
