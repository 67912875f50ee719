"""Group commit: statements that arrive while an epoch is on its way share the next one.

Each statement still returns only once its rows are committed and visible (read your
writes), a client's statements apply in its order, and every MV equals its query."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import rivulet

CLIENTS = 12
STATEMENTS = 25


def test_concurrent_statements_share_epochs_and_each_sees_its_own_write(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with rivulet.connect(path, barrier_interval_ms=60_000) as con:
        con.execute("CREATE TABLE t (client INT, seq INT, v INT)")
        con.execute("CREATE TABLE latest (client INT PRIMARY KEY, seq INT)")
        con.execute(
            "CREATE MATERIALIZED VIEW per_client AS"
            " SELECT client, count(*) AS n, sum(v) AS s FROM t GROUP BY client"
        )
        barrier = con._thread.engine.barrier
        before = barrier.committed_epoch
        failures: list[str] = []
        start = threading.Barrier(CLIENTS)

        def client(c: int) -> None:
            with rivulet.connect(path) as mine:
                start.wait()
                for i in range(STATEMENTS):
                    mine.execute("INSERT INTO t VALUES (%s, %s, %s)", [c, i, c * i])
                    # The same key rewritten in order: the last write must win.
                    mine.execute("INSERT INTO latest VALUES (%s, %s)", [c, i])
                    seen = mine.execute(
                        "SELECT count(*) FROM t WHERE client = %s AND seq = %s", [c, i]
                    ).fetchone()
                    if seen != (1,):
                        failures.append(f"client {c} did not see its row {i}: {seen}")

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        epochs = barrier.committed_epoch - before
        statements = 2 * CLIENTS * STATEMENTS
        # One epoch per statement without group commit; shared, far fewer.
        assert epochs < statements / 2, (epochs, statements)
        assert con.execute("SELECT count(*) FROM t").fetchone() == (CLIENTS * STATEMENTS,)
        assert sorted(con.execute("SELECT * FROM latest").fetchall()) == [
            (c, STATEMENTS - 1) for c in range(CLIENTS)
        ]
        got = sorted(con.execute("SELECT * FROM per_client").fetchall())
        want = sorted(
            con.execute("SELECT client, count(*), sum(v) FROM t GROUP BY client").fetchall()
        )
        assert got == want


def test_a_lone_statement_does_not_wait_for_a_periodic_barrier(tmp_path: Path) -> None:
    """With nothing in flight a statement's barrier goes out at once (an hour-long
    barrier interval does not delay it)."""
    with rivulet.connect(tmp_path / "data", barrier_interval_ms=3_600_000) as con:
        con.execute("CREATE TABLE t (v INT)")
        barrier = con._thread.engine.barrier  # type: ignore[attr-defined]
        for i in range(20):
            epoch = barrier.committed_epoch
            started = time.monotonic()
            con.execute("INSERT INTO t VALUES (%s)", [i])
            # Returned at once (not after the hour-long interval: 5 s is room for a
            # loaded machine), committed by a barrier of its own, and visible.
            assert time.monotonic() - started < 5.0, f"INSERT {i} waited for a barrier"
            assert barrier.committed_epoch > epoch
            assert con.execute("SELECT count(*) FROM t").fetchone() == (i + 1,)
        assert con.execute("SELECT count(*), sum(v) FROM t").fetchone() == (20, 190)
