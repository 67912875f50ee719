"""The compute node processes of an engine, as meta starts, drives and stops them.

Each worker of the cluster is one process (``rivulet.stream.compute_node``), node id =
worker id; meta's own process is node 0. Meta starts a node, gives it the storage
service's address and the exchanges of the processes already there, and waits until it
is connected and ready. From then on it is the runtime's ``RemoteActorHost``: actors
placed on the node's worker are built, started and aborted there, and what the node
reports comes back into meta's services: barrier collections with the epoch's state
writes (into the barrier manager, which commits them), actors that ended or failed,
backfill progress and row errors. Every commit is announced to every node.

A node whose process exits or whose connection breaks fails the actors it ran (meta
then recovers the dataflow from the last checkpoint). So does a node that stops answering
(hung, or stopped by a signal): meta pings every node each ``heartbeat_interval_s`` and
kills one that sent nothing for ``heartbeat_timeout_s``. Missed pings are counted, not
timed, so a meta busy for a while does not mistake its own delay for theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from rivulet.meta.barrier_manager import BarrierManager
from rivulet.storage.state_service import StateServiceClient
from rivulet.storage.state_table import MemTable, StateTable, StateTableSchema
from rivulet.stream.backfill_tracker import BackfillProgress
from rivulet.stream.control import TOKEN_VARIABLE, ControlConnection, Header
from rivulet.stream.message import Barrier, ChannelSpec, DispatcherSpec, Message, StopActors
from rivulet.stream.plan import JobGraph
from rivulet.stream.remote_actor import ActorEnd, ComputeNodeLost
from rivulet.stream.remote_exchange import ExchangePeers
from rivulet.stream.row_errors import RowErrorLog

log = logging.getLogger(__name__)

# How long a node may take to start and connect.
START_TIMEOUT_S = 60.0
# How long a node may take to exit once told to.
STOP_TIMEOUT_S = 5.0
# Heartbeats: how often meta pings each node, and after how long without a word from it
# the node is taken for dead.
HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TIMEOUT_S = 10.0


@dataclass
class ComputeNodeProcess:
    """One compute node: its process and its control connection."""

    node_id: int
    process: subprocess.Popen[bytes]
    control: ControlConnection | None = None
    exchange_port: int = 0
    pid: int = 0
    state: str = "starting"  # starting, running, stopped, lost
    ready: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    jobs: set[int] = field(default_factory=set)
    # Pings sent since the node's last message, and why meta gave up on it.
    missed: int = 0
    lost_reason: str | None = None
    # Actors started on it and the futures that resolve when they end.
    ended: dict[int, asyncio.Future[ActorEnd]] = field(default_factory=dict)


class ComputeNodes:
    """Meta's compute nodes (the ``RemoteActorHost`` of its runtime)."""

    def __init__(
        self,
        barrier: BarrierManager,
        row_errors: RowErrorLog,
        backfill: BackfillProgress,
        state_reads: StateServiceClient,
        setup: list[str],
        memory_limit: str,
    ) -> None:
        self.barrier = barrier
        # What each node's DuckDB runs first, and its memory limit.
        self.setup = setup
        self.memory_limit = memory_limit
        self.row_errors = row_errors
        self.backfill = backfill
        self.state_reads = state_reads
        self.token = secrets.token_hex(16)
        self.peers = ExchangePeers(0, self.token)
        self.nodes: dict[int, ComputeNodeProcess] = {}
        self._server: asyncio.Server | None = None
        self._control_port = 0
        self._exchange_port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._joining = asyncio.Lock()
        self.replacements = 0  # nodes started in place of lost ones
        self.heartbeat_interval_s = HEARTBEAT_INTERVAL_S
        self.heartbeat_timeout_s = HEARTBEAT_TIMEOUT_S
        barrier.on_committed.append(self._announce_commit)

    # ------------------------------------------------------------- lifecycle
    async def launch(self, node_ids: list[int]) -> None:
        """Listen, then start these nodes (together)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._control_port = int(self._server.sockets[0].getsockname()[1])
        self._exchange_port = await self.peers.listen()
        heartbeats = asyncio.get_running_loop().create_task(self._heartbeats())
        self._tasks.add(heartbeats)
        await asyncio.gather(*(self.add(node_id) for node_id in node_ids))

    async def add(self, node_id: int) -> ComputeNodeProcess:
        """Start node ``node_id`` and wait until it is ready (connected to the storage
        service and to every process that is ready)."""
        env = dict(os.environ, **{TOKEN_VARIABLE: self.token})
        process = subprocess.Popen(
            [sys.executable, "-m", "rivulet.stream.compute_node",
             "--meta", f"127.0.0.1:{self._control_port}", "--node", str(node_id)],
            env=env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        node = self.nodes[node_id] = ComputeNodeProcess(node_id, process)
        try:
            await asyncio.wait_for(asyncio.shield(node.ready), START_TIMEOUT_S)
            await self.peers.wait_for({node_id})
        except BaseException:
            process.kill()
            self.nodes.pop(node_id, None)
            raise
        return node

    async def start_worker(self, worker_id: int) -> None:
        """A new worker's node (worker i is node i), ready for actors."""
        await self.add(worker_id)

    async def stop_worker(self, worker_id: int) -> None:
        """Stop a node no actor runs on any more (its worker was removed)."""
        node = self.nodes.pop(worker_id, None)
        if node is None:
            return
        await self._stop(node)
        self.peers.drop(worker_id)

    async def _stop(self, node: ComputeNodeProcess) -> None:
        """Tell a node to exit and wait until it did (killed if it does not)."""
        was, node.state = node.state, "stopped"
        if node.control is not None and was == "running":
            node.control.send({"op": "shutdown"})
            with contextlib.suppress(Exception):
                await node.control.drain()
        await _wait_exit(node.process)

    async def close(self) -> None:
        await asyncio.gather(*(self._stop(node) for node in self.nodes.values()))
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            self._server.close()
        await self.peers.close()

    # ------------------------------------------------------- RemoteActorHost
    def build(
        self,
        node: int,
        graph: JobGraph,
        actor_ids: list[int],
        inputs: dict[int, list[ChannelSpec]],
        dispatchers: dict[int, list[DispatcherSpec]],
        rebuilt: bool,
    ) -> None:
        target = self._running(node)
        target.jobs.add(graph.job_id)
        header = {"op": "build", "rates": {graph.job_id: self.backfill.rate_limit(graph.job_id)}}
        target.control.send(header, (graph, actor_ids, inputs, dispatchers, rebuilt))  # type: ignore[union-attr]

    def add_dispatchers(self, node: int, actor_id: int, specs: list[DispatcherSpec]) -> None:
        control = self._running(node).control
        assert control is not None
        control.send({"op": "add_dispatchers", "actor": actor_id}, specs)

    def start(self, node: int, actor_id: int) -> asyncio.Future[ActorEnd]:
        target = self.nodes[node]
        future: asyncio.Future[ActorEnd] = asyncio.get_running_loop().create_future()
        if target.state != "running" or target.control is None:
            future.set_result(f"compute node {node} is not running ({target.state})")
            return future
        target.ended[actor_id] = future
        target.control.send({"op": "start", "actor": actor_id})
        return future

    def abort(self, node: int, actor_ids: list[int]) -> None:
        target = self.nodes.get(node)
        if target is None or target.control is None or target.state != "running":
            return
        target.control.send({"op": "abort", "actors": actor_ids})

    def node_for(self, node: int, actor_id: int) -> int:
        target = self.nodes.get(node)
        if target is not None and target.state == "running":
            return node
        running = sorted(n.node_id for n in self.nodes.values() if n.state == "running")
        return running[actor_id % len(running)] if running else 0

    def status(self, node: int) -> tuple[str, int | None, int | None]:
        """A node's state (STARTING, RUNNING, LOST while it is replaced, STOPPED),
        process id and exchange port."""
        target = self.nodes.get(node)
        if target is None:
            return "STOPPED", None, None
        return target.state.upper(), target.process.pid, target.exchange_port or None

    def deliver(self, node: int, actor_id: int, msg: Message) -> None:
        target = self.nodes.get(node)
        if target is not None and target.control is not None and target.state == "running":
            target.control.send({"op": "inbox", "actor": actor_id}, msg)

    def _running(self, node: int) -> ComputeNodeProcess:
        target = self.nodes.get(node)
        if target is None or target.state != "running" or target.control is None:
            raise ConnectionError(f"compute node {node} is not running")
        return target

    # ------------------------------------------------------------ messages
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        control = ControlConnection(reader, writer)
        try:
            hello, _ = await control.receive()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        node = self.nodes.get(int(hello.get("node", -1)))
        if node is None or not secrets.compare_digest(str(hello.get("token")), self.token):
            log.warning("a compute node connection was refused (unknown node or token)")
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        node.control, node.pid = control, int(hello["pid"])
        host, port = self.state_reads.address
        try:
            # One node joins at a time: it connects to every node ready before it, and
            # those after it connect to it, so that every pair is connected.
            async with self._joining:
                peers = [[0, "127.0.0.1", self._exchange_port]] + [
                    [n.node_id, "127.0.0.1", n.exchange_port]
                    for n in self.nodes.values()
                    if n.state == "running"
                ]
                control.send(
                    {"op": "config", "state_host": host, "state_port": port,
                     "state_token": self.state_reads.token, "peers": peers,
                     "committed": self.barrier.committed_epoch, "setup": self.setup,
                     "memory_limit": self.memory_limit}
                )  # fmt: skip
                ready, _ = await control.receive()
                node.exchange_port = int(ready["exchange_port"])
                node.state = "running"
            node.ready.set_result(None)
            while True:
                header, payload = await control.receive()
                node.missed = 0
                self._on_message(node, header, payload)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if not node.ready.done():
                node.ready.set_exception(ConnectionError(f"compute node {node.node_id}: {exc}"))
        finally:
            self._tasks.discard(task)
            self._lost(node)

    def _on_message(self, node: ComputeNodeProcess, header: Header, payload: Any) -> None:
        op = header["op"]
        if op == "collected":
            epoch, actor_id = int(header["epoch"]), int(header["actor"])
            sealed: list[tuple[StateTableSchema, MemTable]] = payload or []
            for schema, memtable in sealed:
                # Meta flushes it by its layout; the node keeps the overlay until told.
                self.barrier.report_sealed(epoch, StateTable(schema), memtable)
            mutation = StopActors(frozenset({actor_id})) if header["stops"] else None
            self.barrier.collect(actor_id, Barrier(epoch, True, mutation))
        elif op == "ended":
            future = node.ended.pop(int(header["actor"]), None)
            if future is not None and not future.done():
                future.set_result(header["error"])
        elif op == "progress":
            self.backfill.report(
                header["job"], header["actor"], header["epoch"], header["consumed"],
                header["total"], header["done"],
            )  # fmt: skip
        elif op == "row_errors":
            self.row_errors.record(header["job"], header["fragment"], header["operator"], payload)
        elif op == "pong":
            pass  # its arrival counted
        else:
            log.warning("compute node %d: unknown message %r", node.node_id, op)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            for node in list(self.nodes.values()):
                if node.state != "running" or node.control is None:
                    continue
                node.missed += 1
                if node.missed * self.heartbeat_interval_s <= self.heartbeat_timeout_s:
                    node.control.send({"op": "ping"})
                elif node.lost_reason is None:
                    node.lost_reason = (
                        f"sent nothing for {self.heartbeat_timeout_s:g} s (missed heartbeats)"
                    )
                    log.error("compute node %d %s: killed", node.node_id, node.lost_reason)
                    node.process.kill()  # its connection closes: the node is lost

    def _announce_commit(self, epoch: int) -> None:
        for node in self.nodes.values():
            if node.control is not None and node.state == "running":
                rates = {job: self.backfill.rate_limit(job) for job in node.jobs}
                node.control.send({"op": "committed", "epoch": epoch, "rates": rates})

    def _lost(self, node: ComputeNodeProcess) -> None:
        """The node's connection is gone: its actors failed (unless it was stopping)."""
        was = node.state
        node.state = "stopped" if was == "stopped" else "lost"
        self.peers.drop(node.node_id)
        reason = f"compute node {node.node_id} (pid {node.pid}) was lost"
        if node.lost_reason is not None:
            reason += f": it {node.lost_reason}"
        for future in node.ended.values():
            if not future.done():
                future.set_result(None if was == "stopped" else ComputeNodeLost(reason))
        node.ended.clear()
        if was == "running":
            log.error("%s; the actors it ran failed, a new node %d starts", reason, node.node_id)
            self.replacements += 1
            task = asyncio.get_running_loop().create_task(self._replace(node))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _replace(self, lost: ComputeNodeProcess) -> None:
        """Start a node in place of one that was lost (its process is reaped first)."""
        if lost.process.poll() is None:
            lost.process.kill()
        await asyncio.get_running_loop().run_in_executor(None, lost.process.wait)
        if self.nodes.get(lost.node_id) is not lost or lost.state == "stopped":
            return
        try:
            await self.add(lost.node_id)
        except Exception:
            log.exception("compute node %d could not be replaced", lost.node_id)

    def kill(self) -> None:
        """End every node now (the engine closes without a shutdown)."""
        for node in self.nodes.values():
            node.state = "stopped"
            if node.process.poll() is None:
                node.process.kill()
                node.process.wait()


async def _wait_exit(process: subprocess.Popen[bytes]) -> None:
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, process.wait), STOP_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await loop.run_in_executor(None, process.wait)
