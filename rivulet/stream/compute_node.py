"""A compute node: an OS process that runs the actors meta places on it.

Started by meta (``python -m rivulet.stream.compute_node --meta HOST:PORT --node N``, the
engine's token in ``RIVULET_NODE_TOKEN``), it connects back to meta's control port, learns
where the storage service and the other processes' exchanges are, connects to them and
says it is ready. Then it builds, starts and aborts actors as meta says, on an event loop
and threads of its own: the executors are the ones meta's process runs.

What an actor needs of the engine comes from ``NodeServices``:

* committed state through the storage service (``StateServiceClient``); the node's own
  DuckDB, in memory and set up as the store (settings, macros meta sends), only
  computes (it holds no state);
* at each barrier, the state the node's actors wrote in that epoch goes to meta with the
  barrier's collection (``NodeBarrierSink.collect``); meta commits it with the epoch and
  says so (``committed``), which frees the node's sealed overlays and wakes the actors
  that wait for a commit;
* backfill progress and row errors are forwarded to meta; rate limits come from it.

The node ends when meta closes the control connection (or dies): no node outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import duckdb

from rivulet.storage.state_service import StateServiceClient
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.storage.state_table import MemTable, StateTable
from rivulet.stream.actor import Actor
from rivulet.stream.control import TOKEN_VARIABLE, ControlConnection, Header
from rivulet.stream.expression import RowErrors
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Barrier, DispatcherSpec
from rivulet.stream.remote_exchange import ExchangePeers
from rivulet.stream.row_errors import RowErrorLog
from rivulet.stream.runtime import StreamRuntime
from rivulet.stream.wiring import ChannelEnds

log = logging.getLogger(__name__)

T = TypeVar("T")

# Threads for the actors' DuckDB work on this node.
NODE_THREADS = 4


def shipped(table: StateTable, memtable: MemTable) -> MemTable:
    """A sealed memtable as it travels to the commit: consolidated here (each key once),
    so that meta receives, and flushes, one batch."""
    batch = memtable.consolidated(table.schema.key_names)
    return MemTable([batch], memtable.overwrites, memtable.unique or memtable.overwrites)


class NodeBarrierSink:
    """Barrier collection on a node: reported to meta with the epoch's state writes."""

    def __init__(self, control: ControlConnection) -> None:
        self.control = control
        # Sealed writes not yet sent, and tables whose sealed overlays wait for the
        # commit, by epoch.
        self._unsent: dict[int, list[tuple[StateTable, MemTable]]] = {}
        self._uncommitted: dict[int, list[StateTable]] = {}
        self.failures: dict[int, str] = {}

    @property
    def write_epoch(self) -> int:
        raise RuntimeError("DML is written where the tables' inboxes are, not on a node")

    def register_actor(self, actor_id: int, inbox: Inbox | None = None) -> None:
        pass  # meta registers the actors it placed

    def unregister_actor(self, actor_id: int) -> None:
        pass

    def report_sealed(self, epoch: int, table: StateTable, memtable: MemTable) -> None:
        self._unsent.setdefault(epoch, []).append((table, memtable))
        self._uncommitted.setdefault(epoch, []).append(table)

    def collect(self, actor_id: int, barrier: Barrier) -> None:
        # Every seal of an actor comes before its collection: what is sealed in this
        # epoch so far goes with it (another actor's, too, which is as good).
        sealed = [(t.schema, shipped(t, m)) for t, m in self._unsent.pop(barrier.epoch, [])]
        header = {
            "op": "collected",
            "actor": actor_id,
            "epoch": barrier.epoch,
            "stops": barrier.stops(actor_id),
        }
        self.control.send(header, sealed or None)

    def actor_failed(self, actor_id: int, error: BaseException) -> None:
        self.failures[actor_id] = f"{type(error).__name__}: {error}"

    def committed(self, epoch: int) -> None:
        for e in [e for e in self._uncommitted if e <= epoch]:
            for table in self._uncommitted.pop(e):
                table.committed(e)
        for e in [e for e in self._unsent if e <= epoch]:
            del self._unsent[e]  # written by actors aborted before they collected


class NodeBackfill:
    """Backfill progress, reported to meta; rate limits, as meta last sent them."""

    def __init__(self, control: ControlConnection) -> None:
        self.control = control
        self.rates: dict[int, int | None] = {}

    def report(
        self, job_id: int, actor_id: int, epoch: int, consumed: int, total: int, done: bool
    ) -> None:
        self.control.send(
            {"op": "progress", "job": job_id, "actor": actor_id, "epoch": epoch,
             "consumed": consumed, "total": total, "done": done}
        )  # fmt: skip

    def rate_limit(self, job_id: int) -> int | None:
        return self.rates.get(job_id)

    def track(self, job_id: int, actor_ids: Collection[int]) -> None:
        pass  # meta tracks the jobs it placed


class NodeRowErrors(RowErrorLog):
    """Row errors of the node's actors, counted by meta (rw_stream_errors)."""

    def __init__(self, control: ControlConnection) -> None:
        super().__init__()
        self.control = control

    def record(self, job_id: int, fragment_id: int, operator: str, errors: RowErrors) -> None:
        if errors.rows > 0:
            header = {
                "op": "row_errors",
                "job": job_id,
                "fragment": fragment_id,
                "operator": operator,
            }
            self.control.send(header, errors)


class NodeServices:
    """``StreamServices`` of a compute node."""

    def __init__(
        self,
        control: ControlConnection,
        reader: StateServiceClient,
        committed: int,
        setup: list[str],
        memory_limit: str,
    ) -> None:
        self.barrier_sink = NodeBarrierSink(control)
        self.row_errors = NodeRowErrors(control)
        self.backfill = NodeBackfill(control)
        self.committed_reader = reader
        self.committed_epoch = committed
        self._db = StateStore.compute_database(StoreOptions(memory_limit=memory_limit))
        for statement in setup:
            self._db.execute(statement)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(NODE_THREADS, thread_name_prefix="node-stream")
        self._waiters: dict[int, list[asyncio.Future[int]]] = {}

    @property
    def store(self) -> None:
        return None  # the store is meta's: committed state comes through the reader

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(self._cursor()))

    async def wait_committed(self, epoch: int) -> int:
        if epoch <= self.committed_epoch:
            return self.committed_epoch
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(epoch, []).append(future)
        return await future

    def committed(self, epoch: int) -> None:
        self.committed_epoch = max(self.committed_epoch, epoch)
        self.barrier_sink.committed(epoch)
        for e in [e for e in self._waiters if e <= epoch]:
            for future in self._waiters.pop(e):
                if not future.done():
                    future.set_result(self.committed_epoch)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._db.cursor()
        return cur

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.committed_reader.close()


class ComputeNode:
    """Serves meta's control messages until meta goes."""

    def __init__(
        self,
        node_id: int,
        control: ControlConnection,
        peers: ExchangePeers,
        services: NodeServices,
    ) -> None:
        self.node_id = node_id
        self.control = control
        self.peers = peers
        self.services = services
        self.runtime = StreamRuntime(services, ChannelEnds(node_id, peers.connection_to))
        self.actors: dict[int, Actor] = {}
        # Inboxes of the node's source actors: meta puts their barriers in.
        self.inboxes: dict[int, Inbox] = {}
        # The channels each actor here reads or sends to (closed when it goes).
        self.channels: dict[int, set[int]] = {}

    async def serve(self) -> None:
        try:
            while True:
                try:
                    header, payload = await self.control.receive()
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if header["op"] == "shutdown":
                    return
                await self._handle(header, payload)
                await self.control.drain()
        finally:
            await self._abort(list(self.actors))

    async def _handle(self, header: Header, payload: Any) -> None:
        op = header["op"]
        if op == "build":
            graph, actor_ids, inputs, dispatchers, rebuilt = payload
            await self.peers.wait_for(_nodes_of(inputs, dispatchers))
            for actor_id in actor_ids:
                self.channels[actor_id] = {c.channel_id for c in inputs.get(actor_id, [])} | {
                    c.channel_id for d in dispatchers.get(actor_id, []) for c in d.outputs
                }
            self.actors.update(
                self.runtime.build_actors(
                    graph, inputs, dispatchers, actor_ids, rebuilt, self.inboxes
                )
            )
            self._rates(header)
        elif op == "add_dispatchers":
            specs: list[DispatcherSpec] = payload
            await self.peers.wait_for(_nodes_of({}, {0: specs}))
            actor = self.actors[header["actor"]]
            actor.dispatchers.extend(self.runtime.ends.dispatcher(s) for s in specs)
            self.channels.setdefault(actor.id, set()).update(
                c.channel_id for d in specs for c in d.outputs
            )
        elif op == "start":
            actor = self.actors[header["actor"]]
            actor.start()
            assert actor.task is not None
            actor.task.add_done_callback(partial(self._ended, actor.id))
        elif op == "inbox":
            inbox = self.inboxes.get(header["actor"])
            if inbox is not None:
                inbox.put(payload)
        elif op == "abort":
            await self._abort(header["actors"])
        elif op == "committed":
            self.services.committed(header["epoch"])
            self._rates(header)
        elif op == "ping":
            self.control.send({"op": "pong"})
        else:
            log.warning("node %d: unknown control message %r", self.node_id, op)

    def _rates(self, header: Header) -> None:
        for job, rate in header.get("rates", {}).items():
            self.services.backfill.rates[int(job)] = rate

    async def _abort(self, actor_ids: list[int]) -> None:
        tasks = []
        for actor_id in actor_ids:
            actor = self.actors.get(actor_id)
            if actor is None:
                continue
            if actor.task is None:  # built, never started: nothing to report
                del self.actors[actor_id]
                self.inboxes.pop(actor_id, None)
                self.runtime.ends.forget(self.channels.pop(actor_id, ()))
            else:
                actor.task.cancel()
                tasks.append(actor.task)
        if tasks:
            await asyncio.wait(tasks)

    def _ended(self, actor_id: int, _task: object) -> None:
        self.actors.pop(actor_id, None)
        self.inboxes.pop(actor_id, None)
        self.runtime.ends.forget(self.channels.pop(actor_id, ()))
        error = self.services.barrier_sink.failures.pop(actor_id, None)
        self.control.send({"op": "ended", "actor": actor_id, "error": error})


def _nodes_of(
    inputs: dict[int, list[Any]], dispatchers: dict[int, list[DispatcherSpec]]
) -> set[int]:
    """The nodes at the other ends of these channels."""
    nodes = {c.upstream_node for specs in inputs.values() for c in specs}
    for specs in dispatchers.values():
        nodes |= {c.downstream_node for d in specs for c in d.outputs}
    return nodes


async def run(meta_host: str, meta_port: int, node_id: int, token: str) -> None:
    reader, writer = await asyncio.open_connection(meta_host, meta_port)
    control = ControlConnection(reader, writer)
    control.send({"op": "hello", "node": node_id, "token": token, "pid": os.getpid()})
    await control.drain()
    config, _ = await control.receive()
    reads = StateServiceClient(config["state_host"], config["state_port"], config["state_token"])
    peers = ExchangePeers(node_id, token)
    port = await peers.listen()
    for peer, host, peer_port in config["peers"]:
        await peers.connect(peer, host, peer_port)
    services = NodeServices(
        control, reads, config["committed"], config["setup"], config["memory_limit"]
    )
    control.send({"op": "ready", "exchange_port": port})
    node = ComputeNode(node_id, control, peers, services)
    try:
        await node.serve()
    finally:
        with contextlib.suppress(Exception):
            await peers.close()
        services.close()
        await control.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rivulet-compute-node")
    parser.add_argument("--meta", required=True, help="meta's control address, HOST:PORT")
    parser.add_argument("--node", required=True, type=int, help="this node's id")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_VARIABLE)
    if not token:
        print(f"{TOKEN_VARIABLE} is not set", file=sys.stderr)
        return 2
    host, _, port = args.meta.rpartition(":")
    logging.basicConfig(level=logging.WARNING, format=f"node {args.node}: %(message)s")
    asyncio.run(run(host, int(port), args.node, token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
