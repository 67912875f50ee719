"""The ``rivulet`` command line as users run it."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_playground() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rivulet", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "playground" in out.stdout


def test_banner_tells_how_to_connect(server) -> None:  # type: ignore[no-untyped-def]
    banner = server.wait_output("stop with")
    assert f"psql -h 127.0.0.1 -p {server.port} -U root -d dev" in banner
    assert "in memory" in banner


def test_workers_and_slots_shape_the_compute_layout(server_factory) -> None:  # type: ignore[no-untyped-def]
    srv = server_factory(args=("--workers", "2", "--slots", "3"))
    assert "2 worker(s) x 3 slot(s)" in srv.wait_output("stop with")
    with srv.connect() as c:
        workers = c.execute("SELECT id, parallelism FROM rw_worker_nodes ORDER BY id").fetchall()
        assert workers == [(1, 3), (2, 3)]
        c.execute("CREATE TABLE t (k INT, v INT)")
        c.execute("CREATE MATERIALIZED VIEW m AS SELECT k, sum(v) AS s FROM t GROUP BY k")
        # Adaptive parallelism: all 6 slots, spread evenly over both workers.
        per_worker = c.execute(
            "SELECT a.worker_id, count(*) FROM rw_actors a JOIN rw_fragments f"
            " ON a.fragment_id = f.fragment_id JOIN rw_materialized_views m"
            " ON f.table_id = m.id WHERE m.name = 'm' AND f.distribution_type = 'HASH'"
            " GROUP BY a.worker_id ORDER BY a.worker_id"
        ).fetchall()
        assert [n for _, n in per_worker] and all(n % 3 == 0 for _, n in per_worker)
        assert len(per_worker) == 2 and per_worker[0][1] == per_worker[1][1]


def test_bad_worker_count_is_refused() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rivulet", "playground", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "--workers" in out.stderr
