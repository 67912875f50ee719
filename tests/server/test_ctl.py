"""``rivulet ctl worker ...`` against a running server, over its admin endpoint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import free_port


def ctl(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rivulet", "ctl", "--admin", f"http://127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("compute", ["in-process", "processes"])
def test_workers_are_added_listed_and_removed(server_factory, compute: str) -> None:  # type: ignore[no-untyped-def]
    admin = free_port()
    srv = server_factory(
        args=("--workers", "1", "--slots", "2", "--admin-port", str(admin), "--compute", compute)
    )
    assert f"http://127.0.0.1:{admin}" in srv.wait_output("stop with")
    with srv.connect() as c:
        c.execute("CREATE TABLE t (k INT, v INT)")
        c.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS s FROM t GROUP BY k")
        c.execute("INSERT INTO t VALUES (1, 10), (2, 20), (1, 5)")

        out = ctl(admin, "worker", "add", "--slots", "3")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "worker 2 added" in out.stdout
        assert c.execute("SELECT id, parallelism FROM rw_worker_nodes ORDER BY id").fetchall() == [
            (1, 2),
            (2, 3),
        ]
        listed = ctl(admin, "worker", "list")
        assert listed.returncode == 0 and "│ 2 " in listed.stdout
        pids = dict(c.execute("SELECT id, pid FROM rw_worker_nodes").fetchall())
        assert all(alive(pid) for pid in pids.values())
        # Processes: the added worker is a process of its own, started by `add`.
        assert (len(set(pids.values())) == 2) == (compute == "processes")

        assert ctl(admin, "worker", "remove", "1").returncode == 0
        if compute == "processes":
            assert not alive(pids[1])  # drained, then stopped
        refused = ctl(admin, "worker", "remove", "2")
        assert refused.returncode == 1
        assert "55000: cannot remove worker 2: it is the last worker" in refused.stdout
        missing = ctl(admin, "worker", "remove", "7")
        assert missing.returncode == 1 and "worker 7 does not exist" in missing.stdout

        c.execute("INSERT INTO t VALUES (2, 1)")
        assert sorted(c.execute("SELECT * FROM m").fetchall()) == [(1, 15), (2, 21)]


def test_an_unreachable_server_is_a_clear_error() -> None:
    out = ctl(free_port(), "worker", "list")
    assert out.returncode == 1
    assert "cannot reach the admin endpoint" in out.stdout
