"""A failing actor is recovered with its failure domain only: the jobs connected to its job
by reads (the table it reads and every MV over it). Writes to other tables go on while it
fails, recovers and backs off; the statements that wrote to the failed jobs in the lost
epochs fail and change nothing; afterwards every MV equals its query."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import POISON, Fault

import rivulet
from rivulet.meta.recovery import Backoff

MVS = {
    "m_filter": "SELECT id, k, v FROM t WHERE v >= 0",
    "m_agg": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
    "mu": "SELECT k, count(*) AS n, max(v) AS top FROM u GROUP BY k",
    "mu2": "SELECT u.id, u.v + w.v AS vv FROM u JOIN w ON u.id = w.id",
}


def assert_oracle(con: rivulet.Connection) -> None:
    for name, query in MVS.items():
        got = sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
        want = sorted(con.execute(query).fetchall(), key=repr)
        assert got == want, f"{name} differs from its query"


def job_ids(con: rivulet.Connection, *names: str) -> list[int]:
    rows = dict(con.execute("SELECT name, id FROM rw_streaming_jobs").fetchall())
    return sorted(rows[n] for n in names)


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    con = rivulet.connect(tmp_path / "db", workers=1, slots=2)
    try:
        for table in ("t", "u", "w"):
            con.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, k INT, v INT)")
            con.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s)", [(i, i % 7, i) for i in range(50)]
            )
        for name, query in MVS.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        yield tmp_path / "db"
    finally:
        con.close()


def faulty(path: Path, fault: Fault, monkeypatch: pytest.MonkeyPatch) -> rivulet.Connection:
    """A connection to ``path`` whose filter actors carry ``fault`` (rebuilt with it)."""
    fault.install(monkeypatch)
    con = rivulet.connect(path)
    con.execute("RECOVER")
    return con


def engine(con: rivulet.Connection):  # type: ignore[no-untyped-def]
    return con._thread.engine


class Writer(threading.Thread):
    """Inserts into ``u`` from its own connection until stopped; records every failure
    and each statement's latency."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.con = rivulet.connect(path)
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.latencies: list[float] = []
        self.written = 0

    def run(self) -> None:
        i = 10_000
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.con.execute("INSERT INTO u VALUES (%s, %s, %s)", [i, i % 5, i])
                self.written += 1
            except rivulet.Error as exc:
                self.failures.append(str(exc))
            self.latencies.append(time.monotonic() - started)
            i += 1

    def wait_for(self, written: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.written < written and not self.failures:
            assert time.monotonic() < deadline, "the writer is stuck"
            time.sleep(0.01)

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        self.con.close()


def test_a_failing_job_fails_no_write_outside_its_domain(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = Fault(times=3)
    con = faulty(path, fault, monkeypatch)
    writer = Writer(path)
    writer.start()
    try:
        writer.wait_for(3)
        for i in range(3):
            with pytest.raises(rivulet.Error, match='streaming job "m_filter" failed') as info:
                con.execute("INSERT INTO t VALUES (%s, 1, %s)", [1000 + i, POISON])
            assert str(POISON) not in info.value.message
        con.execute("INSERT INTO t VALUES (2000, 1, 1)")
        writer.wait_for(writer.written + 3)
    finally:
        writer.finish()
    assert writer.failures == []
    # ... and none of them waited for the recoveries (a whole rebuild would stall them).
    assert max(writer.latencies) < 2.0, max(writer.latencies)
    assert len(fault.hits) == 3
    # Nothing of the failed statements is left; everything else is, once.
    assert con.execute("SELECT count(*) FROM t WHERE v = %s", [POISON]).fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM u WHERE id >= 10000").fetchone() == (writer.written,)
    assert_oracle(con)
    # Each recovery rebuilt the domain of the failed job (t and the MVs over it), not u's.
    domain = job_ids(con, "t", "m_filter", "m_agg")
    scopes = con.execute(
        "SELECT scope FROM rw_recovery_events WHERE reason <> 'RECOVER' ORDER BY id"
    ).fetchall()
    assert scopes == [("jobs " + ", ".join(map(str, domain)),)] * 3
    con.close()


def test_a_backing_off_domain_holds_only_its_own_writes(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = faulty(path, Fault(times=2), monkeypatch)
    engine(con).barrier.backoff = Backoff(initial_s=1.5, max_s=1.5, reset_after_s=60)
    for i in range(2):
        with pytest.raises(rivulet.Error):
            con.execute("INSERT INTO t VALUES (%s, 1, %s)", [1000 + i, POISON])
    # The second rebuild waits 1.5 s: writes elsewhere do not wait for it...
    assert engine(con).barrier.recovering
    started = time.monotonic()
    con.execute("INSERT INTO u VALUES (5000, 1, 1)")
    con.execute("UPDATE w SET v = v + 1 WHERE id < 10")
    assert time.monotonic() - started < 0.75
    # ... while a write to the domain waits until its jobs run again, then lands.
    con.execute("INSERT INTO t VALUES (5000, 2, 7)")
    assert time.monotonic() - started >= 0.75
    assert con.execute("SELECT v FROM t WHERE id = 5000").fetchone() == (7,)
    assert_oracle(con)
    con.close()


def test_recover_and_reschedules_still_rebuild_everything(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A domain in its backoff is taken over by RECOVER (at once) and moved by an ALTER."""
    con = faulty(path, Fault(times=3), monkeypatch)
    engine(con).barrier.backoff = Backoff(initial_s=3.0, max_s=3.0, reset_after_s=60)
    for i in range(2):
        with pytest.raises(rivulet.Error):
            con.execute("INSERT INTO t VALUES (%s, 1, %s)", [1000 + i, POISON])
    started = time.monotonic()
    con.execute("RECOVER")
    con.execute("INSERT INTO t VALUES (3000, 1, 3)")
    assert time.monotonic() - started < 2
    with pytest.raises(rivulet.Error):
        con.execute("INSERT INTO t VALUES (1002, 1, %s)", [POISON])
    con.execute("ALTER MATERIALIZED VIEW mu SET PARALLELISM = 1")
    con.execute("INSERT INTO t VALUES (3001, 1, 3)")
    con.execute("INSERT INTO u VALUES (3001, 1, 3)")
    assert_oracle(con)
    reasons = [r[0] for r in con.execute("SELECT reason FROM rw_recovery_events ORDER BY id")]
    assert reasons == ["RECOVER", "RuntimeError", "RuntimeError", "RECOVER", "RuntimeError"]
    con.close()


@pytest.mark.parametrize("seed", [7, 21])
def test_random_failures_stay_in_their_domains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Seeded random DML on four tables, some of it poisoned (the filter MVs of ``a`` and
    ``b`` fail on it, every time), with RECOVER and reschedules in between, while a writer
    keeps inserting into ``d``: a poisoned statement fails and leaves nothing, every other
    statement succeeds (but a write to ``d`` under way when RECOVER rebuilds everything),
    and every MV equals its query after each step."""
    import random

    rng = random.Random(seed)
    mvs = {
        "a_f": "SELECT id, k, v FROM a WHERE v >= 0",
        "a_agg": "SELECT k, count(*) AS n, sum(v) AS s FROM a GROUP BY k",
        "a_f2": "SELECT k, max(v) AS top FROM a_f GROUP BY k",
        "b_f": "SELECT b.id, b.v, c.v AS cv FROM b JOIN c ON b.k = c.k WHERE b.v >= 0",
        "c_agg": "SELECT k, count(*) AS n FROM c GROUP BY k",
        "d_agg": "SELECT k, count(*) AS n, min(v) AS low FROM d GROUP BY k",
    }
    fault = Fault(times=None)
    fault.install(monkeypatch)
    path = tmp_path / "db"
    con = rivulet.connect(path, workers=1, slots=2)
    engine(con).barrier.backoff = Backoff(initial_s=0.01, max_s=0.05, reset_after_s=60)
    for table in "abcd":
        con.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, k INT, v INT)")
        con.executemany(
            f"INSERT INTO {table} VALUES (%s, %s, %s)", [(i, i % 5, i) for i in range(30)]
        )
    for name, query in mvs.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")

    stop = threading.Event()
    side_failures: list[str] = []
    side_written = [0]

    def write_d() -> None:
        side = rivulet.connect(path)
        i = 1000
        while not stop.is_set():
            try:
                side.execute("INSERT INTO d VALUES (%s, %s, %s)", [i, i % 5, i])
                side_written[0] += 1
            except rivulet.Error as exc:
                side_failures.append(str(exc))
            i += 1
        side.close()

    def check(*, writer_stopped: bool = False) -> None:
        # (while the writer runs, d changes between reading an MV and its query)
        for name, query in mvs.items():
            if name == "d_agg" and not writer_stopped:
                continue
            got = sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
            want = sorted(con.execute(query).fetchall(), key=repr)
            assert got == want, f"{name} differs from its query"

    writer = threading.Thread(target=write_d, daemon=True)
    writer.start()
    try:
        for step in range(40):
            roll = rng.random()
            table = rng.choice("abc")
            key = rng.randrange(60)
            if roll < 0.2 and table in "ab":
                with pytest.raises(rivulet.Error, match="failed and was recovered"):
                    con.execute(
                        f"INSERT INTO {table} VALUES (%s, %s, %s)", [100 + step, key % 5, POISON]
                    )
                assert con.execute(
                    f"SELECT count(*) FROM {table} WHERE v = %s", [POISON]
                ).fetchone() == (0,)
            elif roll < 0.5:
                con.execute(
                    f"INSERT INTO {table} VALUES (%s, %s, %s)", [key, rng.randrange(5), step]
                )
            elif roll < 0.7:
                con.execute(f"UPDATE {table} SET v = v + 1, k = %s WHERE id = %s", [step % 5, key])
            elif roll < 0.85:
                con.execute(f"DELETE FROM {table} WHERE id = %s", [key])
            elif roll < 0.92:
                con.execute("RECOVER")
            else:
                n = rng.choice([1, 2])
                con.execute(
                    f"ALTER MATERIALIZED VIEW {rng.choice(list(mvs))} SET PARALLELISM = {n}"
                )
            check()
    finally:
        stop.set()
        writer.join(30)
    # Only a RECOVER, which rebuilds every job, may fail a write to d that it caught.
    assert all("RECOVER" in f for f in side_failures), side_failures
    assert side_written[0] > 0
    assert fault.hits  # the poison did make actors fail
    check(writer_stopped=True)
    con.close()
