"""The crash harness: the real server, killed with SIGKILL at random instants.

A seeded workload runs over pgwire on two connections at once: one writes (INSERT, UPSERT,
UPDATE, DELETE, COPY FROM STDIN, FLUSH) to ``kv`` (a table with a primary key) and ``log``
(an append-only table without one), every row with a unique id; the other runs DDL
(CREATE MATERIALIZED VIEW with a random scan type, foreground or with ``background_ddl``
and a backfill rate limit, DROP, ALTER ... SET PARALLELISM online and DEFERRED, SET
BACKFILL_PARALLELISM, RECOVER) and adds and removes workers over the admin endpoint (their
actors move online). A timer thread sends SIGKILL at a random instant, or a few
milliseconds after a chosen kind of statement went out. The server is restarted on the same
data directory and the harness checks:

* every acknowledged write is there exactly once; the statement in flight at the kill is
  either wholly there or wholly absent (the model follows whichever happened); a statement
  that returned an error changed nothing;
* every creating job finishes (WAIT, then SHOW JOBS and CREATING jobs empty);
* deferred parallelism targets are applied by the restart (at once, or when the creating
  backfill that blocked them completes), the workers are those acknowledged (or those of
  the add or removal in flight), and every job runs as many actors as its policy asks of
  their slots;
* every MV equals its query evaluated by DuckDB over the rows read back, and the same query
  run as a batch SELECT by the server.

A second test kills a server whose table is fed by a ``datagen`` source: the rows are there
exactly once (per split, the committed sequence values are a prefix: no duplicate, no gap).

CI runs fixed seeds (``KILLS`` in total); ``pytest -m slow`` runs longer ones.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg
import pyarrow as pa
import pytest
from conftest import ServerProcess, free_port, start_server

from rivulet.server.admin import TOKEN_FILE_NAME

SLOTS = 2  # one worker with two slots: ADAPTIVE means 2 actors
SERVER_ARGS = ("--workers", "1", "--slots", str(SLOTS))
# The crash runs start with two workers of one slot each, so that one can be removed at
# any time; workers are added (one slot each) while the slots in all stay within MAX_SLOTS.
RUN_ARGS = ("--workers", "2", "--slots", "1")
MAX_SLOTS = 4
GROUPS = 10

# MV definitions over kv(id, grp, val) and log(id, tag, n); all deterministic.
QUERIES = {
    "agg": "SELECT grp, count(*) AS n, sum(val) AS s, max(val) AS mx FROM kv GROUP BY grp",
    "filter": "SELECT id, grp, val * 2 AS v2 FROM kv WHERE val % 3 = 0",
    "log_agg": "SELECT tag, count(*) AS n, sum(n) AS s, min(id) AS first FROM log GROUP BY tag",
    "log_filter": "SELECT id, tag, n * 3 AS n3 FROM log WHERE n % 2 = 0",
    "join": "SELECT k.grp, count(*) AS c, sum(l.n) AS s FROM kv k JOIN log l ON k.id = l.n"
    " GROUP BY k.grp",
    "global": "SELECT count(*) AS c, sum(val) AS s, max(id) AS mx FROM kv",
    "topn": "SELECT id, val FROM kv ORDER BY val DESC, id LIMIT 5",
    "distinct": "SELECT DISTINCT grp, val % 5 AS r FROM kv",
}
READS = {
    k: ("log",) if k.startswith("log") else ("kv", "log") if k == "join" else ("kv",)
    for k in QUERIES
}
# An upstream_only MV sees only the changes made after it was created: over the
# append-only log, that is the rows of the log statements from some point on.
UPSTREAM_ONLY_QUERIES = ("log_agg", "log_filter")
SCAN_TYPES = ("arrangement", "snapshot", "no_shuffle", "upstream_only")
# ALTER ... SET PARALLELISM values, and how rw_streaming_jobs shows them.
POLICIES = {
    "1": "1",
    "2": "2",
    "ADAPTIVE": "adaptive",
    "DEFAULT": "adaptive",
    "'bounded(1)'": "bounded(1)",
    "'ratio(0.5)'": "ratio(0.5)",
}


def actors_for(policy: str, slots: int) -> int:
    """Actors per hash fragment that a policy asks of ``slots`` slots in all."""
    if policy == "adaptive":
        return slots
    if policy.startswith("bounded("):
        return min(slots, int(policy[8:-1]))
    if policy.startswith("ratio("):
        return max(int(slots * float(policy[6:-1])), 1)
    return int(policy)


MAX_MVS = 5
NOT_MOVABLE = "because its creating backfill contains a scan type that does not support"
BLOCKED = "because it is blocked by creating unreschedulable backfill jobs"


# ----------------------------------------------------------------------- the model
@dataclass
class MvSpec:
    query: str
    scan: str
    # upstream_only: the first log statement it sees is one of the ordinals cut[0]..cut[1].
    cut: tuple[int, float] | None = None


@dataclass
class State:
    """What the database must hold: rows of kv and log, MVs, each job's wanted policy."""

    kv: dict[int, tuple[int, int]] = field(default_factory=dict)
    log: dict[int, tuple[str, int]] = field(default_factory=dict)
    # The ordinal of the statement that wrote each log row (statements run one at a time).
    log_stmt: dict[int, int] = field(default_factory=dict)
    mvs: dict[str, MvSpec] = field(default_factory=dict)
    wanted: dict[str, str] = field(default_factory=lambda: {"kv": "adaptive", "log": "adaptive"})
    workers: dict[int, int] = field(default_factory=lambda: {1: 1, 2: 1})  # id -> slots


@dataclass
class Op:
    """One statement and its effect on the model (applied once it is acknowledged)."""

    kind: str
    sql: str
    apply: Callable[[State], None] = lambda s: None
    copy_rows: list[tuple[object, ...]] | None = None
    log_ordinal: int | None = None


class Failure(AssertionError):
    pass


def norm(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return round(value, 9)
    return value


def multiset(rows: list[tuple[object, ...]]) -> Counter[tuple[object, ...]]:
    return Counter(tuple(norm(v) for v in r) for r in rows)


# --------------------------------------------------------------------- the workload
class Worker(threading.Thread):
    """Runs statements on its own connection until stopped or the server goes away. The
    model learns of a statement's effect only once the statement returned."""

    def __init__(self, run: CrashRun, name: str, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.run_ = run
        self.rng = random.Random(seed)
        self.pending: Op | None = None
        self.error: BaseException | None = None
        self.statements = 0

    def next_op(self) -> Op | None:
        raise NotImplementedError

    def execute(self, conn: psycopg.Connection, op: Op) -> None:
        if op.copy_rows is not None:
            with conn.cursor().copy(op.sql) as cp:
                for row in op.copy_rows:
                    cp.write_row(row)
        else:
            conn.execute(op.sql)

    def run(self) -> None:
        try:
            conn = self.run_.server.connect()
        except psycopg.OperationalError:
            return  # killed before we got in
        try:
            while not self.run_.stop.is_set():
                op = self.next_op()
                if op is None:
                    time.sleep(0.02)
                    continue
                self.pending = op
                self.run_.started(op)
                try:
                    self.execute(conn, op)
                except psycopg.Error as exc:
                    if exc.diag.sqlstate is None or self.run_.killed.is_set():
                        return  # the server went away: ``pending`` may or may not be in
                    self.pending = None
                    self.on_error(op, exc)
                    continue
                with self.run_.lock:
                    op.apply(self.run_.state)
                    if op.log_ordinal is not None:
                        self.run_.log_acked = op.log_ordinal
                self.pending = None
                self.statements += 1
        except BaseException as exc:
            self.error = exc
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def on_error(self, op: Op, exc: psycopg.Error) -> None:
        """A statement failed with an error: it must have changed nothing."""
        raise Failure(f"{op.sql[:200]!r} failed: {exc.diag.sqlstate} {exc}")


class DmlWorker(Worker):
    """Writes the kv rows whose id has parity ``parity`` (two writers run at once and
    never touch each other's rows), and, if ``writes_log``, the log."""

    def __init__(self, run: CrashRun, name: str, seed: int, parity: int, writes_log: bool) -> None:
        super().__init__(run, name, seed)
        self.parity = parity
        self.writes_log = writes_log

    def new_key(self) -> int:
        return 2 * self.run_.new_id() + self.parity

    def next_op(self) -> Op | None:
        rng = self.rng
        w = self.parity
        with self.run_.lock:
            ids = [i for i in self.run_.state.kv if i % 2 == w]
        roll = rng.random()
        if not self.writes_log:
            roll *= 0.75  # kv only
        if roll < 0.18:
            rows = [
                (self.new_key(), rng.randrange(GROUPS), rng.randrange(1000))
                for _ in range(rng.randint(1, 30))
            ]
            return _insert_kv(rows)
        if roll < 0.26 and ids:
            # Existing keys: the new row overwrites the old one.
            rows = [
                (i, rng.randrange(GROUPS), rng.randrange(1000))
                for i in rng.sample(ids, min(len(ids), 5))
            ]
            return _insert_kv(rows)
        if roll < 0.31:
            lo = self.run_.new_id(200)
            rows = [(2 * i + w, i % GROUPS, (i * 7) % 1000) for i in range(lo, lo + 200)]
            sql = (
                f"INSERT INTO kv SELECT 2 * i + {w}, i % {GROUPS}, (i * 7) % 1000"
                f" FROM generate_series({lo}, {lo + 199}) AS g(i)"
            )
            return Op("insert", sql, _put_kv(rows))
        if roll < 0.36:
            # COPY into the table with a primary key: new keys and some existing ones.
            rows = [
                (self.new_key(), rng.randrange(GROUPS), rng.randrange(1000)) for _ in range(300)
            ]
            rows += [(i, rng.randrange(GROUPS), -1) for i in rng.sample(ids, min(len(ids), 20))]
            return Op("copy", "COPY kv FROM STDIN", _put_kv(rows), copy_rows=list(rows))
        if roll < 0.46:
            g, d = rng.randrange(GROUPS), rng.randint(1, 9)

            def update(s: State) -> None:
                for k, (grp, val) in list(s.kv.items()):
                    if grp == g and k % 2 == w:
                        s.kv[k] = (grp, val + d)

            sql = f"UPDATE kv SET val = val + {d} WHERE grp = {g} AND id % 2 = {w}"
            return Op("update", sql, update)
        if roll < 0.51:
            r = rng.randrange(7)

            def move(s: State) -> None:
                for k, (grp, val) in list(s.kv.items()):
                    if k % 14 == 2 * r + w:
                        s.kv[k] = ((grp + 1) % GROUPS, val)

            sql = f"UPDATE kv SET grp = (grp + 1) % {GROUPS} WHERE id % 14 = {2 * r + w}"
            return Op("update", sql, move)
        if roll < 0.58 and ids:
            victims = rng.sample(ids, min(len(ids), rng.randint(1, 20)))

            def delete(s: State) -> None:
                for k in victims:
                    s.kv.pop(k, None)

            listed = ", ".join(map(str, victims))
            return Op("delete", f"DELETE FROM kv WHERE id IN ({listed})", delete)
        if roll < 0.62:
            g, m = rng.randrange(GROUPS), rng.randint(2, 5)

            def delete_where(s: State) -> None:
                for k, (grp, val) in list(s.kv.items()):
                    if grp == g and val % m == 0 and k % 2 == w:
                        del s.kv[k]

            sql = f"DELETE FROM kv WHERE grp = {g} AND val % {m} = 0 AND id % 2 = {w}"
            return Op("delete", sql, delete_where)
        if roll < 0.75:
            return Op("flush", "FLUSH")
        if roll < 0.85:
            rows3 = self._log_rows(rng.randint(1, 20))
            values = ", ".join(f"({i}, '{t}', {n})" for i, t, n in rows3)
            return self._log_op(Op("insert", f"INSERT INTO log VALUES {values}"), rows3)
        rows3 = self._log_rows(rng.choice([10, 300, 3000]))
        return self._log_op(Op("copy", "COPY log (id, tag, n) FROM STDIN", copy_rows=rows3), rows3)

    def _log_op(self, op: Op, rows: list[tuple[int, str, int]]) -> Op:
        op.log_ordinal = ordinal = self.run_.new_log_ordinal()
        op.apply = _put_log(rows, ordinal)
        return op

    def _log_rows(self, n: int) -> list[tuple[int, str, int]]:
        rng = self.rng
        hi = 2 * max(self.run_.next_id, 1)  # n joins kv's ids
        return [(self.run_.new_id(), f"t{rng.randrange(4)}", rng.randrange(hi)) for _ in range(n)]

    def on_error(self, op: Op, exc: psycopg.Error) -> None:
        # Statements whose epoch a RECOVER cut short fail; they must have changed nothing.
        if exc.diag.sqlstate == "57P01" or "rebuilt by RECOVER" in str(exc):
            self.run_.rejected += 1
            return
        super().on_error(op, exc)


def _put_kv(rows: list[tuple[int, int, int]]) -> Callable[[State], None]:
    def apply(s: State) -> None:
        for i, g, v in rows:
            s.kv[i] = (g, v)

    return apply


def _insert_kv(rows: list[tuple[int, int, int]]) -> Op:
    # One id twice in a statement: the last row wins, as in the model.
    values = ", ".join(f"({i}, {g}, {v})" for i, g, v in rows)
    return Op("insert", f"INSERT INTO kv VALUES {values}", _put_kv(rows))


def _put_log(rows: list[tuple[int, str, int]], ordinal: int) -> Callable[[State], None]:
    def apply(s: State) -> None:
        for i, t, n in rows:
            assert i not in s.log
            s.log[i] = (t, n)
            s.log_stmt[i] = ordinal

    return apply


class ProgressMonitor(threading.Thread):
    """Watches SHOW JOBS while the workload runs: how far the backfill of each
    rate-limited creating MV had got before the kill."""

    def __init__(self, run: CrashRun) -> None:
        super().__init__(name="progress", daemon=True)
        self.run_ = run
        self.seen: dict[str, tuple[int, int]] = {}  # name -> (rows consumed, rate limit)

    def run(self) -> None:
        with contextlib.suppress(psycopg.Error), self.run_.server.connect() as conn:
            while not self.run_.stop.is_set():
                for name, rate, consumed, _total in show_jobs(conn):
                    if rate is not None:
                        self.seen[name] = (max(consumed, self.seen.get(name, (0, 0))[0]), rate)
                time.sleep(0.1)


def show_jobs(conn: psycopg.Connection) -> list[tuple[str, int | None, int, int]]:
    """SHOW JOBS as (MV name, its backfill rate limit, rows consumed, rows in all)."""
    out = []
    for _id, statement, _kind, progress in conn.execute("SHOW JOBS").fetchall():
        name = re.search(r"VIEW (\w+)", statement)
        rate = re.search(r"backfill_rate_limit = (\d+)", statement)
        consumed, total = re.search(r"\((\d+)/(\d+)\)", progress).groups()  # type: ignore[union-attr]
        assert name is not None
        out.append((name[1], int(rate[1]) if rate else None, int(consumed), int(total)))
    return out


class DdlWorker(Worker):
    def __init__(self, run: CrashRun, name: str, seed: int) -> None:
        super().__init__(run, name, seed)
        self.background: bool | None = None
        self.creating: MvSpec | None = None

    def execute(self, conn: psycopg.Connection, op: Op) -> None:
        if op.kind == "create":
            background = "background_ddl" in op.sql
            if background != self.background:
                conn.execute(f"SET background_ddl = {'true' if background else 'false'}")
                self.background = background
            spec = self.creating
            if spec is not None and spec.scan == "upstream_only":
                # Log statements acknowledged before the CREATE went out precede the MV;
                # those started after it returned follow it.
                spec.cut = (self.run_.log_acked + 1, float("inf"))
            conn.execute(op.sql.replace("/*background_ddl*/", ""))
            if spec is not None and spec.cut is not None:
                spec.cut = (spec.cut[0], self.run_.log_started + 1)
            return
        if op.kind in ("add_worker", "remove_worker"):
            method, path, body = json.loads(op.sql)
            self.run_.admin(method, path, body)
            return
        super().execute(conn, op)

    def next_op(self) -> Op | None:
        rng = self.rng
        run = self.run_
        if rng.random() < 0.4:
            time.sleep(rng.uniform(0.05, 0.3))
        with run.lock:
            mvs = dict(run.state.mvs)
        if run.watching_workers and rng.random() < 0.5:
            return self._worker_op(remove=run._watch == "remove_worker")  # a kill waits for one
        roll = rng.random()
        if roll < 0.30 and len(mvs) < MAX_MVS:
            name = f"mv{run.new_id()}"
            scan = rng.choice(SCAN_TYPES)
            key = rng.choice(UPSTREAM_ONLY_QUERIES if scan == "upstream_only" else list(QUERIES))
            background = rng.random() < 0.5
            options = [f"backfill_type = '{scan}'"]
            if background and rng.random() < 0.8:
                options.append(f"backfill_rate_limit = {rng.choice([300, 1000, 3000])}")
            spec = self.creating = MvSpec(QUERIES[key], scan)
            sql = f"CREATE MATERIALIZED VIEW {name} WITH ({', '.join(options)}) AS {spec.query}"
            if background:
                sql = "/*background_ddl*/" + sql

            def create(s: State) -> None:
                s.mvs[name] = spec
                s.wanted[name] = "adaptive"

            return Op("create", sql, create)
        if roll < 0.42 and mvs:
            name = rng.choice(sorted(mvs))

            def drop(s: State) -> None:
                s.mvs.pop(name, None)
                s.wanted.pop(name, None)

            return Op("drop", f"DROP MATERIALIZED VIEW {name}", drop)
        if roll < 0.88:
            jobs = [("MATERIALIZED VIEW", n) for n in sorted(mvs)] + [
                ("TABLE", "kv"),
                ("TABLE", "log"),
            ]
            kind, name = rng.choice(jobs)
            value = rng.choice(list(POLICIES))
            deferred = rng.random() < 0.4
            sql = f"ALTER {kind} {name} SET PARALLELISM = {value}" + (
                " DEFERRED" if deferred else ""
            )

            def alter(s: State) -> None:
                if name in s.wanted:
                    s.wanted[name] = POLICIES[value]

            return Op("alter", sql, alter)
        if roll < 0.93 and mvs:
            name = rng.choice(sorted(mvs))
            value = rng.choice(["1", "2", "DEFAULT"])
            return Op("alter", f"ALTER MATERIALIZED VIEW {name} SET BACKFILL_PARALLELISM = {value}")
        if roll < 0.96:
            return Op("recover", "RECOVER")
        if roll < 0.985:
            return self._worker_op()
        return Op("flush", "FLUSH")

    def _worker_op(self, remove: bool = False) -> Op:
        """Add a worker with one slot, or remove one (never the last): its actors move to
        the others online. Sent over the admin endpoint; ``sql`` holds the request."""
        with self.run_.lock:
            workers = dict(self.run_.state.workers)
        full = sum(workers.values()) >= MAX_SLOTS
        if len(workers) > 1 and (remove or full or self.rng.random() < 0.5):
            victim = self.rng.choice(sorted(workers))

            def remove(s: State) -> None:
                s.workers.pop(victim, None)

            request = ["DELETE", f"/workers/{victim}", None]
            return Op("remove_worker", json.dumps(request), remove)
        new_id = max(workers) + 1  # ids are never reused: the largest ever plus one

        def add(s: State) -> None:
            s.workers[new_id] = 1

        return Op("add_worker", json.dumps(["POST", "/workers", {"slots": 1}]), add)

    def on_error(self, op: Op, exc: psycopg.Error) -> None:
        text = str(exc)
        if (
            op.kind == "alter"
            and exc.diag.sqlstate == "55000"
            and (NOT_MOVABLE in text or BLOCKED in text)
        ):
            self.run_.refused += 1  # a backfill that cannot move: nothing changed
            return
        super().on_error(op, exc)


# ----------------------------------------------------------------------- the harness
class CrashRun:
    def __init__(self, tmp_path: Path, seed: int) -> None:
        self.tmp_path = tmp_path
        self.seed = seed
        self.rng = random.Random(seed)
        self.data_dir = tmp_path / "data"
        self.state = State()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.killed = threading.Event()
        self.next_id = 1
        self.log_ordinals = self.log_started = self.log_acked = 0
        self.kills = 0
        self.kills_in_recovery = 0
        self.resumed = 0
        self.restarts = 0
        self.rejected = 0
        self.refused = 0
        self.statements = 0
        self.mid_statement_kills: Counter[str] = Counter()
        self.worker_changes = 0
        self.admin_port = 0
        self._watch: str | None = None
        self._watch_hit = threading.Event()
        self.server = self._start()

    # ------------------------------------------------------------ helpers
    def new_id(self, n: int = 1) -> int:
        with self.lock:
            first = self.next_id
            self.next_id += n
            return first

    def new_log_ordinal(self) -> int:
        with self.lock:
            self.log_ordinals += 1
            return self.log_ordinals

    def started(self, op: Op) -> None:
        if op.log_ordinal is not None:
            self.log_started = op.log_ordinal
        if op.kind == self._watch:
            self._watch_hit.set()

    def _start(self) -> ServerProcess:
        self.restarts += 1
        self.admin_port = free_port()
        # The workers are given once; a restart finds them (and any added or removed
        # since) in the data directory.
        args = RUN_ARGS if self.restarts == 1 else ()
        return start_server(
            self.tmp_path / f"run{self.restarts}",
            data_dir=self.data_dir,
            args=(*args, "--admin-port", str(self.admin_port)),
        )

    @property
    def watching_workers(self) -> bool:
        """The kill waits for a worker to be added or removed."""
        return self._watch in ("add_worker", "remove_worker")

    def admin(self, method: str, path: str, body: object = None) -> object:
        """A request to the admin endpoint. A server that went away raises
        ``psycopg.OperationalError`` (as a statement would); an error answer fails."""
        # The server writes a new token into its data directory at every start.
        try:
            token = (Path(self.data_dir) / TOKEN_FILE_NAME).read_text().strip()
        except OSError as exc:
            raise psycopg.OperationalError(f"admin endpoint gone: {exc}") from None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise Failure(f"{method} {path} failed: {exc.code} {exc.read()!r}") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise psycopg.OperationalError(f"admin endpoint gone: {exc}") from None
        if method != "GET":
            self.worker_changes += 1
        return answer

    def fail(self, message: str) -> None:
        tail = self.server.output()[-4000:]
        raise Failure(
            f"seed {self.seed}, after kill {self.kills}: {message}\n--- server log ---\n{tail}"
        )

    # ------------------------------------------------------------ phases
    def setup(self) -> None:
        with self.server.connect() as c:
            c.execute("CREATE TABLE kv (id BIGINT PRIMARY KEY, grp INT, val BIGINT)")
            c.execute("CREATE TABLE log (id BIGINT, tag VARCHAR, n INT)")
            lo = self.new_id(2000)
            c.execute(
                f"INSERT INTO kv SELECT i, i % {GROUPS}, (i * 13) % 1000"
                f" FROM generate_series({lo}, {lo + 1999}) AS g(i)"
            )
            _put_kv([(i, i % GROUPS, (i * 13) % 1000) for i in range(lo, lo + 2000)])(self.state)

    def round(self, watch: str | None = None) -> None:
        """Run the workload, kill the server, restart it and check everything. ``watch``:
        kill just after a statement of that kind went out (else chosen at random)."""
        self.stop.clear()
        self.killed.clear()
        self._watch_hit.clear()
        workers: list[Worker] = [
            DmlWorker(self, "dml0", self.rng.randrange(1 << 30), 0, writes_log=True),
            DmlWorker(self, "dml1", self.rng.randrange(1 << 30), 1, writes_log=False),
            DdlWorker(self, "ddl", self.rng.randrange(1 << 30)),
        ]
        monitor = ProgressMonitor(self)
        monitor.start()
        mode = self.rng.random()
        if watch is None and mode < 0.5:
            self._watch = None
            delay = self.rng.uniform(0.2, 2.5)
        else:
            # Mid-statement: a few milliseconds after a statement of this kind went out.
            self._watch = watch or self.rng.choice(
                ["copy", "insert", "update", "delete", "create", "alter", "drop", "recover"]
                + ["remove_worker", "add_worker"]
            )
            delay = self.rng.uniform(0.0, 0.06)
            if self.watching_workers:
                # Anywhere in the move: stopping the actors, the commit of the new layout,
                # the rebuilt actors' first epochs.
                delay = self.rng.uniform(0.0, 0.4)
        for w in workers:
            w.start()
        if self._watch is None:
            time.sleep(delay)
        else:
            hit = self._watch_hit.wait(4.0)
            if hit:
                self.mid_statement_kills[self._watch] += 1
            time.sleep(delay)
        self.killed.set()
        self._kill()
        self.stop.set()
        for w in workers:
            w.join(30)
            if w.is_alive():
                self.fail(f"worker {w.name} hangs after the kill")
            if w.error is not None:
                raise w.error
            self.statements += w.statements
        monitor.join(30)
        self.server = self._start()
        if self.rng.random() < 0.25:
            # Killed again while it recovers (rebuilding jobs, resuming backfills).
            time.sleep(self.rng.uniform(0.0, 0.4))
            self._kill()
            self.kills_in_recovery += 1
            self.server = self._start()
        self.verify([w.pending for w in workers if w.pending is not None], monitor.seen)

    def _kill(self) -> None:
        os.kill(self.server.proc.pid, signal.SIGKILL)
        self.server.proc.wait(10)
        self.kills += 1
        self._check_log()

    def _check_log(self) -> None:
        errors = logged_errors(self.server)
        if errors:
            self.fail("the server logged errors:\n" + "\n".join(errors[:20]))

    def verify(self, pending: list[Op], progress: dict[str, tuple[int, int]] | None = None) -> None:
        with self.server.connect() as c:
            self._check_resumed(c, progress or {})
            self._check_rows(c, [p for p in pending if p.kind not in ("create", "drop", "alter")])
            self._check_workers(c, [p for p in pending if p.kind.endswith("_worker")])
            self._check_catalog(c, [p for p in pending if p.kind in ("create", "drop", "alter")])

    # ------------------------------------------------------------ checks
    def _check_resumed(self, c: psycopg.Connection, before: dict[str, tuple[int, int]]) -> None:
        """A creating backfill resumes from its committed per-vnode progress: the first
        progress the restarted server reports is not far below what was seen before the
        kill (at most the epochs read but not committed, a few seconds' worth)."""
        for name, (consumed, rate) in before.items():
            slack = 3 * rate * sum(self.state.workers.values()) + 100
            if consumed <= slack:
                continue
            deadline = time.monotonic() + 15
            while True:
                now = {n: (c_, t) for n, _, c_, t in show_jobs(c)}
                if name not in now:
                    break  # finished meanwhile, or its creation never committed
                if now[name][1] > 0:
                    if now[name][0] < consumed - slack:
                        self.fail(
                            f"the backfill of {name} started over: {now[name][0]} rows read"
                            f" after the restart, {consumed} before the kill"
                        )
                    self.resumed += 1
                    break
                if time.monotonic() > deadline:
                    self.fail(f"the backfill of {name} reports no progress after the restart")
                time.sleep(0.05)

    def _check_rows(self, c: psycopg.Connection, pending: list[Op]) -> None:
        kv = {i: (g, v) for i, g, v in c.execute("SELECT id, grp, val FROM kv").fetchall()}
        log_rows = c.execute("SELECT id, tag, n FROM log").fetchall()
        ids = Counter(r[0] for r in log_rows)
        twice = [i for i, n in ids.items() if n > 1]
        if twice:
            self.fail(f"log rows written twice: ids {sorted(twice)[:10]}")
        log = {i: (t, n) for i, t, n in log_rows}
        # Each statement in flight (one per writer, on disjoint rows) is in or out.
        for n in range(len(pending) + 1):
            for applied in itertools.combinations(pending, n):
                cand = copy.deepcopy(self.state)
                for op in applied:
                    op.apply(cand)
                if cand.kv == kv and cand.log == log:
                    self.state.kv, self.state.log = cand.kv, cand.log
                    self.state.log_stmt = cand.log_stmt
                    return
        want = self.state
        missing = sorted(set(want.log) - set(log))
        extra = sorted(set(log) - set(want.log))
        kv_diff = sorted(k for k in set(kv) | set(want.kv) if kv.get(k) != want.kv.get(k))
        self.fail(
            f"rows differ from every acceptable state (in flight: {[p.sql[:80] for p in pending]});"
            f" log missing {len(missing)} {missing[:10]}, log extra {len(extra)} {extra[:10]};"
            f" kv keys differing {len(kv_diff)}: "
            + ", ".join(f"{k}: want {want.kv.get(k)} got {kv.get(k)}" for k in kv_diff[:10])
        )

    def _check_workers(self, c: psycopg.Connection, pending: list[Op]) -> None:
        """The workers are those acknowledged, or those of the change in flight."""
        got = dict(c.execute("SELECT id, parallelism FROM rw_worker_nodes").fetchall())
        for op in pending:
            alt = copy.deepcopy(self.state)
            op.apply(alt)
            if alt.workers == got:
                self.state.workers = alt.workers
        if got != self.state.workers:
            self.fail(
                f"workers {got}, expected {self.state.workers}"
                f" (in flight: {[p.sql for p in pending]})"
            )

    def _jobs(self, c: psycopg.Connection) -> dict[str, tuple[str, str, str, str]]:
        rows = c.execute(
            "SELECT name, status, parallelism, target_parallelism, reconcile_status"
            " FROM rw_streaming_jobs"
        ).fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    def _check_catalog(self, c: psycopg.Connection, pending: list[Op]) -> None:
        state = self.state
        jobs = self._jobs(c)
        # MVs: the acknowledged ones, and the one in flight if it got committed.
        mvs = {n for n in jobs if n not in ("kv", "log")}
        for op in pending:
            if op.kind in ("create", "drop"):
                alt = copy.deepcopy(state)
                op.apply(alt)
                if set(alt.mvs) == mvs:
                    state.mvs, state.wanted = alt.mvs, alt.wanted
        if set(state.mvs) != mvs:
            self.fail(
                f"MVs {sorted(mvs)}, expected {sorted(state.mvs)} (in flight: {[p.sql for p in pending]})"
            )
        # Deferred targets are applied by the restart, except where a creating backfill that
        # cannot move blocks them (then at its completion, checked after WAIT).
        blocked = set()
        for name, (status, *_rest) in jobs.items():
            spec = state.mvs.get(name)
            if status == "CREATING" and spec is not None and spec.scan == "no_shuffle":
                blocked |= {name, *READS[_query_key(spec.query)]}
        for name, (_status, par, target, reconcile) in jobs.items():
            if name not in blocked and (par != target or reconcile != "in_sync"):
                self.fail(f"job {name} not reconciled at restart: {par} -> {target} ({reconcile})")
        self._wait_jobs(c)
        jobs = self._jobs(c)
        alters = [op for op in pending if op.kind == "alter"]
        for name, (status, par, target, reconcile) in jobs.items():
            if status != "CREATED" or par != target or reconcile != "in_sync":
                self.fail(f"job {name} after WAIT: {status} {par} -> {target} ({reconcile})")
            want = {state.wanted[name]}
            for op in alters:
                alt = copy.deepcopy(state)
                op.apply(alt)
                want.add(alt.wanted.get(name, ""))
            if par not in want:
                self.fail(f"job {name} runs at {par}, expected {sorted(want)}")
            state.wanted[name] = par
        # Every hash fragment runs as many actors as its job asks. A scan fragment chained
        # 1:1 to its upstream (no_shuffle, snapshot, upstream_only) mirrors the upstream
        # fragment while creating, and goes on doing so once created until the job is next
        # rebuilt (then it follows the job's policy).
        fragments = c.execute(
            "SELECT j.name, f.fragment_id, f.scan_type, f.parallelism, f.upstream_fragment_ids"
            " FROM rw_fragments f JOIN rw_streaming_jobs j ON f.table_id = j.id"
            " WHERE f.distribution_type = 'HASH'"
        ).fetchall()
        actors = {fid: n for _, fid, _, n, _ in fragments}
        for name, fid, scan, n, upstream in fragments:
            want_n = {actors_for(state.wanted[name], sum(state.workers.values()))}
            if scan in ("no_shuffle", "snapshot", "upstream_only"):
                want_n |= {actors.get(u) for u in upstream}
            if n not in want_n:
                self.fail(
                    f"job {name} ({state.wanted[name]}): fragment {fid} ({scan}) runs {n}"
                    f" actors, expected {want_n}; fragments: {fragments}"
                )
        self._check_mvs(c)

    def _wait_jobs(self, c: psycopg.Connection, stall: float = 45.0) -> None:
        """Every creating job finishes. A rate-limited backfill takes as long as its rows
        take at its rate (300 rows/s per actor over a log grown by 30 kills: minutes), so
        the wait is not a fixed time: it fails once no job has read a row or finished
        for ``stall`` seconds (a job read to its end must be marked CREATED in that time
        too)."""
        seen: dict[str, int] = {}
        moved = time.monotonic()
        while jobs := show_jobs(c):
            now = {name: consumed for name, _, consumed, _ in jobs}
            if set(now) != set(seen) or any(now[n] > seen[n] for n in now):
                seen, moved = now, time.monotonic()
            elif time.monotonic() - moved > stall:
                self.fail(
                    f"creating jobs stopped progressing for {stall:g} s:"
                    f" {c.execute('SHOW JOBS').fetchall()}"
                )
            time.sleep(0.1)
        c.execute("WAIT")
        creating = c.execute(
            "SELECT name FROM rw_streaming_jobs WHERE status <> 'CREATED'"
        ).fetchall()
        if creating:
            self.fail(f"jobs still creating after WAIT: {creating}")

    def _check_mvs(self, c: psycopg.Connection) -> None:
        c.execute("FLUSH")
        oracle = duckdb.connect()
        kv = self.state.kv
        oracle.register(
            "kv",
            pa.table(
                {
                    "id": pa.array(list(kv), pa.int64()),
                    "grp": pa.array([g for g, _ in kv.values()], pa.int32()),
                    "val": pa.array([v for _, v in kv.values()], pa.int64()),
                }
            ),
        )
        log = self.state.log
        oracle.register(
            "log_all",
            pa.table(
                {
                    "id": pa.array(list(log), pa.int64()),
                    "tag": pa.array([t for t, _ in log.values()], pa.string()),
                    "n": pa.array([n for _, n in log.values()], pa.int32()),
                }
            ),
        )
        oracle.execute("CREATE VIEW log AS SELECT * FROM log_all")
        for name, spec in self.state.mvs.items():
            got = multiset(c.execute(f"SELECT * FROM {name}").fetchall())
            if spec.cut is not None:
                self._check_upstream_only(oracle, name, spec, got)
                continue
            want = multiset(oracle.execute(spec.query).fetchall())
            batch = multiset(c.execute(spec.query).fetchall())
            if got != want or batch != want:
                self.fail(
                    f"MV {name} ({spec.scan}: {spec.query}) differs from the oracle:"
                    f" missing {list((want - got).items())[:5]},"
                    f" extra {list((got - want).items())[:5]}; batch SELECT differs by"
                    f" {sum(((want - batch) + (batch - want)).values())} rows"
                )
        oracle.close()

    def _check_upstream_only(
        self, oracle: duckdb.DuckDBPyConnection, name: str, spec: MvSpec, got: Counter
    ) -> None:
        """The MV equals its query over the log rows of the statements from one of the
        possible first ones on."""
        assert spec.cut is not None
        lo, hi = spec.cut
        stmt = self.state.log_stmt
        # ``ordinal >= k`` selects other rows only where k passes a statement that wrote some.
        firsts = sorted({lo, *(k + 1 for k in stmt.values() if lo <= k < hi)})
        ids = list(stmt)
        oracle.register(
            "log_stmt",
            pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array(list(stmt.values()))}),
        )
        tried = {}
        for k in firsts:
            sql = (
                "WITH log AS (SELECT l.* FROM log_all l JOIN log_stmt s ON l.id = s.id"
                f" WHERE s.k >= {k}) {spec.query}"
            )
            want = multiset(oracle.execute(sql).fetchall())
            if want == got:
                return
            tried[k] = want
        near = Counter(k for k in stmt.values() if lo - 2 <= k <= lo + 5)
        self.fail(
            f"MV {name} (upstream_only: {spec.query}, cut {spec.cut}) matches the log from"
            f" none of the statements {firsts[:5]}..{firsts[-5:]}: MV {sorted(got)[:8]};"
            + "; ".join(f"from {k}: {sorted(w)[:8]}" for k, w in list(tried.items())[:3])
            + f"; rows per statement near the cut: {sorted(near.items())}"
        )

    def close(self) -> None:
        if self.server.proc.poll() is None:
            with contextlib.suppress(AssertionError):
                self.server.stop(timeout=20)


def logged_errors(server: ServerProcess) -> list[str]:
    """Error lines in a server's log, but those RECOVER asks for."""
    return [
        line
        for line in server.output().splitlines()
        if ("ERROR" in line or "Traceback" in line) and "rebuilt by RECOVER" not in line
    ]


def _query_key(query: str) -> str:
    return next(k for k, q in QUERIES.items() if q == query)


def crash_run(tmp_path: Path, seed: int, rounds: int) -> CrashRun:
    run = CrashRun(tmp_path, seed)
    try:
        run.setup()
        run.verify([])
        for _ in range(rounds):
            run.round()
        # The last restart serves on: writes still work, the checks hold, and it stops
        # cleanly.
        with run.server.connect() as c:
            c.execute("INSERT INTO kv VALUES (0, 0, 0)")
            c.execute("FLUSH")
        run.state.kv[0] = (0, 0)
        run.verify([])
        assert run.server.stop(timeout=30) == 0, run.server.output()
        run._check_log()
    finally:
        run.close()
    assert run.kills >= rounds
    assert run.statements > 0
    print(
        f"seed {seed}: {run.kills} kills ({run.kills_in_recovery} while recovering),"
        f" {run.statements} statements acknowledged, mid-statement kills"
        f" {dict(run.mid_statement_kills)}, {run.refused} ALTERs refused,"
        f" {run.rejected} writes failed by RECOVER, {run.resumed} backfills resumed,"
        f" {run.worker_changes} workers added or removed"
    )
    return run


# Fixed seeds in CI: 3 x 7 rounds, at least 21 kills (more: some kill the recovery too).
CI_SEEDS = [11, 23, 47]
CI_ROUNDS = 7


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_kill_at_random_instants_loses_and_doubles_nothing(tmp_path: Path, seed: int) -> None:
    crash_run(tmp_path, seed, CI_ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", [101, 202, 303, 404, 505])
def test_kill_at_random_instants_long(tmp_path: Path, seed: int) -> None:
    crash_run(tmp_path, seed, 30)


def test_kill_during_worker_removal(tmp_path: Path) -> None:
    """Every round kills the server while a worker is being removed (its actors moving to
    the others under writes, MVs creating): on restart the worker is gone or still there,
    as a whole, and everything else holds."""
    run = CrashRun(tmp_path, 71)
    try:
        run.setup()
        for _ in range(4):
            run.round(watch="remove_worker")
        run.verify([])
    finally:
        run.close()
    assert run.mid_statement_kills["remove_worker"] >= 3, run.mid_statement_kills
    print(f"{run.kills} kills, {dict(run.mid_statement_kills)}, {run.worker_changes} changes")


# ------------------------------------------------------------------ source ingestion
DATAGEN_ROWS = 40_000
DATAGEN_SPLITS = 2


def _datagen_counts(c: psycopg.Connection, table: str) -> list[tuple[int, int, int, int, int]]:
    """Per split: (split, rows, distinct values, min, max) of the sequence column."""
    return c.execute(
        f"SELECT (v - 1) % {DATAGEN_SPLITS} AS s, count(*), count(DISTINCT v), min(v), max(v)"
        f" FROM {table} GROUP BY s ORDER BY s"
    ).fetchall()


def _check_exactly_once(c: psycopg.Connection, table: str) -> int:
    """Split ``s`` produces v = 1 + s + S * offset: its rows are a prefix of that sequence
    (no value twice, none skipped). Returns the row count."""
    total = 0
    for s, n, distinct, lo, hi in _datagen_counts(c, table):
        assert n == distinct, f"{table}: split {s} holds {n - distinct} duplicate rows"
        assert lo == 1 + s and hi == 1 + s + DATAGEN_SPLITS * (n - 1), (
            f"{table}: split {s} has a gap: {n} rows between {lo} and {hi}"
        )
        total += n
    return total


def _differences(c: psycopg.Connection, view: str, query: str) -> int:
    """Rows in which ``view`` and ``query`` differ, in one snapshot (the source writes on)."""
    mv = f"SELECT * FROM {view}"
    row = c.execute(
        f"SELECT count(*) FROM (({mv} EXCEPT ALL {query}) UNION ALL ({query} EXCEPT ALL {mv})) d"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_kill_during_source_ingestion_keeps_rows_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(5)
    data_dir = tmp_path / "data"
    views = {
        "buckets": "SELECT v % 7 AS b, count(*) AS n, sum(v) AS s FROM src GROUP BY v % 7",
        "evens": "SELECT v, r FROM src WHERE v % 2 = 0",
    }
    server = start_server(tmp_path / "s0", data_dir=data_dir, args=SERVER_ARGS)
    try:
        with server.connect() as c:
            c.execute(
                "CREATE TABLE src (v BIGINT, r INT) WITH (connector = 'datagen',"
                " fields.v.kind = 'sequence', fields.v.start = '1',"
                f" fields.v.end = '{DATAGEN_ROWS}', fields.r.min = '0', fields.r.max = '99',"
                f" datagen.rows.per.second = '8000', datagen.split.num = '{DATAGEN_SPLITS}')"
            )
            for name, sql in views.items():
                c.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        seen = 0
        for kill in range(4):
            time.sleep(rng.uniform(0.3, 1.5))
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait(10)
            assert not logged_errors(server), server.output()
            server = start_server(tmp_path / f"s{kill + 1}", data_dir=data_dir, args=SERVER_ARGS)
            with server.connect() as c:
                now = _check_exactly_once(c, "src")
                assert now >= seen, "committed source rows were lost"
                seen = now
                for name, sql in views.items():
                    assert _differences(c, name, sql) == 0, name
                if kill % 2 == 1:
                    c.execute(f"ALTER TABLE src SET PARALLELISM = {1 + kill % 2} DEFERRED")
        with server.connect() as c:
            deadline = time.monotonic() + 60
            while _check_exactly_once(c, "src") < DATAGEN_ROWS:
                assert time.monotonic() < deadline, "the source stopped before its end"
                time.sleep(0.2)
            c.execute("FLUSH")
            assert c.execute("SELECT count(*), min(v), max(v) FROM src").fetchone() == (
                DATAGEN_ROWS,
                1,
                DATAGEN_ROWS,
            )
            for name, sql in views.items():
                assert _differences(c, name, sql) == 0, name
            assert seen < DATAGEN_ROWS, "every kill came after the end: nothing was tested"
        assert server.stop(timeout=30) == 0
        assert not logged_errors(server), server.output()
    finally:
        if server.proc.poll() is None:
            server.stop(timeout=20)


# ---------------------------------------------------------------- backfill resumes
RESUME_ROWS = 20_000
RESUME_QUERY = "SELECT v, count(*) AS n, sum(id) AS s FROM t GROUP BY v"


def _progress(c: psycopg.Connection, name: str) -> tuple[int, int] | None:
    """(consumed, total) of a creating MV's backfill, None once it is not creating."""
    return next(((c_, t) for n, _, c_, t in show_jobs(c) if n == name), None)


def _wait_progress(
    c: psycopg.Connection, name: str, check: Callable[[int, int], bool], timeout: float = 30.0
) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        got = _progress(c, name)
        assert got is not None, f"{name} stopped creating"
        if check(*got):
            return got
        assert time.monotonic() < deadline, f"{name}: progress stuck at {got}"
        time.sleep(0.05)


@pytest.mark.parametrize("scan", ["arrangement", "snapshot", "no_shuffle"])
def test_killed_backfill_resumes_from_its_committed_progress(tmp_path: Path, scan: str) -> None:
    data_dir = tmp_path / "data"
    rate = 2000  # rows per second per scan actor
    server = start_server(tmp_path / "s0", data_dir=data_dir, args=SERVER_ARGS)
    try:
        with server.connect() as c:
            c.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)")
            c.execute(
                f"INSERT INTO t SELECT i, i % 97 FROM generate_series(1, {RESUME_ROWS}) AS g(i)"
            )
            c.execute("SET background_ddl = true")
            c.execute(
                f"CREATE MATERIALIZED VIEW m WITH (backfill_type = '{scan}',"
                f" backfill_rate_limit = {rate}) AS {RESUME_QUERY}"
            )
            _wait_progress(c, "m", lambda done, _: done >= 3000)
            # Paused, and everything read so far committed: the restart resumes exactly here.
            c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = 0")
            c.execute("FLUSH")
            c.execute("FLUSH")
            paused = _wait_progress(c, "m", lambda done, _: True)
            time.sleep(0.5)
            c.execute("FLUSH")
            assert _progress(c, "m") == paused
            c.execute("INSERT INTO t VALUES (-1, 1), (-2, 2)")  # writes go on meanwhile
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        server = start_server(tmp_path / "s1", data_dir=data_dir, args=SERVER_ARGS)
        with server.connect() as c:
            resumed = _wait_progress(c, "m", lambda _, total: total > 0)
            assert resumed[0] == paused[0], f"paused at {paused}, resumed at {resumed}"
            c.execute(f"ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = {rate}")
            before = _wait_progress(c, "m", lambda done, _: done >= paused[0] + 3000)[0]
            # Slower from here, so that the kill below finds it still reading however long
            # the DELETE takes on a loaded machine (at full rate it could finish first).
            c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = 200")
            c.execute("DELETE FROM t WHERE id % 10 = 0")
        # Killed while it reads: at most the epochs not yet committed are read again.
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        server = start_server(tmp_path / "s2", data_dir=data_dir, args=SERVER_ARGS)
        with server.connect() as c:
            again = _wait_progress(c, "m", lambda _, total: total > 0)
            # Never behind the committed pause point; at most a few epochs' reads behind.
            assert again[0] >= max(paused[0], before - (3 * rate * SLOTS + 100)), (before, again)
            c.execute("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT = DEFAULT")
            c.execute("WAIT")
            assert c.execute("SHOW JOBS").fetchall() == []
            c.execute("INSERT INTO t VALUES (-3, 3)")
            c.execute("FLUSH")
            got = multiset(c.execute("SELECT * FROM m").fetchall())
            assert got == multiset(c.execute(RESUME_QUERY).fetchall())
            assert (
                sum(n for (_, n, _), k in got.items() for _ in range(k))
                == c.execute("SELECT count(*) FROM t").fetchone()[0]
            )
        assert server.stop(timeout=30) == 0
        assert not logged_errors(server), server.output()
    finally:
        if server.proc.poll() is None:
            server.stop(timeout=20)
