"""Compute nodes as processes (``compute="processes"``): every worker is an OS process
that runs the actors placed on it, reading committed state through the storage service
and sending its epochs' writes with the barriers. The MVs stay exact through DML,
backfill, reschedules, recovery and drops, and no process outlives the engine."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

import rivulet
from rivulet.engine import Engine, EngineOptions
from rivulet.meta.compute_nodes import ComputeNodes
from rivulet.stream.remote_actor import RemoteActor

VIEWS = {
    "per_k": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM a GROUP BY k",
    "joined": "SELECT a.id, a.v, b.name FROM a JOIN b ON a.k = b.k",
    "top": "SELECT id, v FROM a ORDER BY v DESC, id LIMIT 3",
    # An MV over an MV: its upstream actors run on nodes too.
    "over_mv": "SELECT n, count(*) AS groups FROM per_k GROUP BY n",
}
ORACLE = {
    "over_mv": f"SELECT n, count(*) FROM ({VIEWS['per_k']}) GROUP BY n",
}


def engine_of(con: rivulet.Connection) -> Engine:
    return con._thread.engine  # type: ignore[attr-defined,no-any-return]


def remote_actors(con: rivulet.Connection) -> dict[int, int]:
    """How many actors meta placed on each node."""
    counts: dict[int, int] = {}
    for job in engine_of(con).runtime.jobs.values():
        for actor in job.actors.values():
            if isinstance(actor, RemoteActor):
                counts[actor.node] = counts.get(actor.node, 0) + 1
    return counts


def processes(con: rivulet.Connection) -> tuple[dict[int, tuple[str, int]], set[int]]:
    """rw_worker_nodes' (state, pid) per worker, and the pids rw_actors shows."""
    workers = {
        r[0]: (r[1], r[2]) for r in con.execute("SELECT id, state, pid FROM rw_worker_nodes")
    }
    actors = {r[0] for r in con.execute("SELECT pid FROM rw_actors")}
    return workers, actors


def remote_channels(con: rivulet.Connection) -> int:
    """Ends of remote channels open in meta's process (over every exchange connection)."""
    nodes = engine_of(con).compute_nodes
    assert nodes is not None
    return sum(len(c.inbound) + len(c.outbound) for c in nodes.peers.connections.values())


def running_views(con: rivulet.Connection) -> ComputeNodes:
    """Every view created over written tables and checked; the compute nodes."""
    create_views(con)
    write(con, 1)
    check(con)
    nodes = engine_of(con).compute_nodes
    assert nodes is not None
    return nodes


def write_until_recovered(con: rivulet.Connection, deadline: float) -> None:
    """Write (and flush) until it succeeds: statements in an epoch lost to a failure
    fail, none hangs, and the dataflow goes on from the last checkpoint."""
    base = 5000
    while True:
        try:
            write(con, base)
            con.execute("FLUSH")
            return
        except rivulet.Error:
            assert time.monotonic() < deadline, "the dataflow did not recover"
            base += 1000
            time.sleep(0.2)


def check(con: rivulet.Connection, views: dict[str, str] = VIEWS) -> None:
    con.execute("FLUSH")
    for name, query in views.items():
        got = sorted(con.execute(f"SELECT * FROM {name}").fetchall())
        want = sorted(con.execute(ORACLE.get(name, query)).fetchall())
        assert got == want, name


def write(con: rivulet.Connection, base: int) -> None:
    con.execute(
        "INSERT INTO a SELECT i, i % 7, i * 7 % 11 FROM generate_series(%s, %s) t(i)",
        [base, base + 199],
    )
    con.execute("UPDATE a SET v = v + 100, k = (k + 1) % 7 WHERE id % 4 = 0")
    con.execute("DELETE FROM a WHERE id % 5 = 0")
    con.execute("UPDATE b SET name = name || '+' WHERE k % 2 = 0")


def create_views(con: rivulet.Connection) -> None:
    """The tables (b filled) and every view of ``VIEWS`` over them."""
    con.execute("CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)")
    con.execute("CREATE TABLE b (k INT PRIMARY KEY, name VARCHAR)")
    con.execute("INSERT INTO b SELECT i, 'n' || i FROM generate_series(0, 6) t(i)")
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")


@pytest.fixture
def con() -> Iterator[rivulet.Connection]:
    con = rivulet.connect(workers=2, slots=2, compute="processes")
    try:
        yield con
    finally:
        nodes = engine_of(con).compute_nodes
        con.close()
        # No orphans: every node process has exited.
        assert nodes is not None
        assert all(n.process.poll() is not None for n in nodes.nodes.values())


def test_mvs_run_on_compute_node_processes_and_stay_exact(con: rivulet.Connection) -> None:
    nodes = engine_of(con).compute_nodes
    assert nodes is not None and sorted(nodes.nodes) == [1, 2]
    assert all(n.pid not in (0, os.getpid()) for n in nodes.nodes.values())
    con.execute("CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)")
    con.execute("CREATE TABLE b (k INT PRIMARY KEY, name VARCHAR)")
    con.execute("INSERT INTO b SELECT i, 'n' || i FROM generate_series(0, 6) t(i)")
    write(con, 1)  # history the MVs backfill
    for name, query in VIEWS.items():
        con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    # The MVs' actors run on both nodes (the tables' stay with meta, fed by DML).
    assert sorted(remote_actors(con)) == [1, 2]
    check(con)
    write(con, 1000)
    check(con)
    # The catalog shows the processes: each worker's, and which one each actor runs in.
    workers, actor_pids = processes(con)
    assert workers == {n: ("RUNNING", nodes.nodes[n].pid) for n in (1, 2)}
    assert actor_pids == {os.getpid(), nodes.nodes[1].pid, nodes.nodes[2].pid}


def test_reschedules_recovery_and_drops_keep_them_exact(con: rivulet.Connection) -> None:
    create_views(con)
    write(con, 1)
    con.execute("ALTER MATERIALIZED VIEW per_k SET PARALLELISM = 1")
    write(con, 2000)
    check(con)
    con.execute("ALTER MATERIALIZED VIEW per_k SET PARALLELISM = 4")
    con.execute("ALTER MATERIALIZED VIEW joined SET PARALLELISM = 3")
    write(con, 3000)
    check(con)
    channels = remote_channels(con)
    assert channels > 0
    con.execute("RECOVER")
    write(con, 4000)
    check(con)
    # The rebuilt layout is the same: the old actors' remote channel ends were closed.
    assert remote_channels(con) == channels
    before = sum(remote_actors(con).values())
    con.execute("DROP MATERIALIZED VIEW top")
    assert sum(remote_actors(con).values()) < before
    nodes = engine_of(con).compute_nodes
    assert nodes is not None
    # Every actor a node reported ended is gone from its books.
    running = {a for job in engine_of(con).runtime.jobs.values() for a in job.actors}
    for node in nodes.nodes.values():
        assert set(node.ended) <= running
    check(con, {name: query for name, query in VIEWS.items() if name != "top"})
    for name in reversed(VIEWS):
        if name != "top":
            con.execute(f"DROP MATERIALIZED VIEW {name}")
    assert remote_channels(con) == 0  # only the tables are left, all in meta


def test_a_compute_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="compute"):
        Engine(None, EngineOptions(compute="threads"))


def test_a_killed_node_is_recovered_from_the_checkpoint_and_replaced(
    con: rivulet.Connection,
) -> None:
    nodes = running_views(con)
    victim = nodes.nodes[1]
    old_pid = victim.pid
    os.kill(old_pid, signal.SIGKILL)
    # Statements meanwhile may fail (their epoch was lost); none hangs, and the
    # dataflow goes on from the last checkpoint without the node.
    deadline = time.monotonic() + 60
    write_until_recovered(con, deadline)
    check(con)
    # The node is replaced (a new process), and the recovery says why.
    while not (nodes.nodes[1].state == "running" and nodes.nodes[1].pid != old_pid):
        assert time.monotonic() < deadline, "the node was not replaced"
        time.sleep(0.1)
    assert victim.process.poll() is not None  # the dead one was reaped
    workers, actor_pids = processes(con)
    assert workers[1] == ("RUNNING", nodes.nodes[1].pid) and old_pid not in actor_pids
    reasons = [r[0] for r in con.execute("SELECT reason FROM rw_recovery_events").fetchall()]
    # The reason names the node and its process.
    lost = f"ComputeNodeLost: compute node 1 (pid {old_pid}) was lost"
    assert any(lost in r for r in reasons), reasons
    # A reschedule puts actors on the new node again; the MVs stay exact.
    con.execute("ALTER MATERIALIZED VIEW per_k SET PARALLELISM = 4")
    assert 1 in remote_actors(con)
    write(con, 90000)
    check(con)


def test_workers_added_and_removed_are_processes_started_and_stopped(
    con: rivulet.Connection,
) -> None:
    create_views(con)
    write(con, 1)
    nodes = engine_of(con).compute_nodes
    assert nodes is not None
    third = con.add_worker(slots=2)
    added = nodes.nodes[third]
    assert added.process.poll() is None and added.pid not in (0, os.getpid())
    assert third in remote_actors(con)  # adaptive jobs spread onto it
    workers, _ = processes(con)
    assert workers[third] == ("RUNNING", added.pid)
    write(con, 1000)
    check(con)
    first = nodes.nodes[1]
    con.remove_worker(1)
    # Drained, then stopped: no actor runs on it and its process has exited.
    assert 1 not in remote_actors(con) and 1 not in nodes.nodes
    assert first.process.poll() is not None
    workers, actor_pids = processes(con)
    assert sorted(workers) == [2, third] and first.pid not in actor_pids
    write(con, 2000)
    check(con)


def test_a_node_that_stops_answering_is_taken_for_dead_and_replaced(
    con: rivulet.Connection,
) -> None:
    nodes = running_views(con)
    nodes.heartbeat_interval_s, nodes.heartbeat_timeout_s = 0.2, 2.0
    hung = nodes.nodes[2]
    os.kill(hung.pid, signal.SIGSTOP)  # alive, connected, silent
    try:
        deadline = time.monotonic() + 60
        while hung.process.poll() is None:
            assert time.monotonic() < deadline, "the silent node was not killed"
            time.sleep(0.1)
    finally:
        if hung.process.poll() is None:
            os.kill(hung.pid, signal.SIGKILL)
    write_until_recovered(con, deadline)
    check(con)
    while not (nodes.nodes[2].state == "running" and nodes.nodes[2].pid != hung.pid):
        assert time.monotonic() < deadline, "the node was not replaced"
        time.sleep(0.1)
    reasons = [r[0] for r in con.execute("SELECT reason FROM rw_recovery_events").fetchall()]
    assert any("sent nothing for 2 s (missed heartbeats)" in r for r in reasons), reasons
    write(con, 9000)
    check(con)
