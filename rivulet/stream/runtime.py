"""The stream runtime of this process: builds, starts and stops the actors of jobs.

``build_job`` turns a job graph into actors wired by channels: one channel per pair of
upstream and downstream actors an exchange connects, a dispatcher per downstream fragment
on every upstream actor. A job that reads another job's output (an MV on a table) is
attached to the upstream's running actors by an ``AddOutputs`` mutation, applied by the
barrier that starts the job. DML reaches a table's actors through their inboxes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

import numpy as np

from rivulet.common.chunk import StreamChunk
from rivulet.common.vnode import VNODE_COUNT
from rivulet.stream.actor import Actor
from rivulet.stream.builder import LeafInputs, build_executor
from rivulet.stream.exchange import split_by_vnode
from rivulet.stream.executor import ActorContext, StreamServices
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import AddOutputs, ChannelSpec, DispatcherSpec
from rivulet.stream.plan import (
    DmlNode,
    ExchangeKind,
    Fragment,
    JobGraph,
    SourceNode,
    StreamScanNode,
)
from rivulet.stream.remote_actor import RemoteActor, RemoteActorHost, RemoteInbox
from rivulet.stream.wiring import ChannelEnds


@dataclass
class RunningJob:
    graph: JobGraph
    actors: dict[int, Actor | RemoteActor] = field(default_factory=dict)
    # Inboxes of the actors at the job's sources (DML or connector), by actor id.
    inboxes: dict[int, Inbox] = field(default_factory=dict)
    # The worker each actor runs on.
    workers: dict[int, int] = field(default_factory=dict)
    # The job's channels (those to its scans from upstream jobs included).
    channel_ids: set[int] = field(default_factory=set)

    def actors_of(self, fragment: Fragment) -> list[Actor | RemoteActor]:
        return [self.actors[a] for a in fragment.actor_ids]


@dataclass
class _JobWiring:
    """A job's channels and dispatchers as specs, before any end is built."""

    # The channels each downstream actor reads, in order.
    inputs: dict[int, list[ChannelSpec]] = field(default_factory=dict)
    # The dispatchers of the job's actors, and of upstream jobs' actors (AddOutputs).
    dispatchers: dict[int, list[DispatcherSpec]] = field(default_factory=dict)
    upstream_outputs: dict[int, list[DispatcherSpec]] = field(default_factory=dict)
    channel_ids: set[int] = field(default_factory=set)


class StreamRuntime:
    """The actors of this process's jobs. With ``remote`` (compute nodes), an actor goes
    to the node of its worker (``node_of_worker``) and is held here as a
    ``RemoteActor`` (a source actor's barriers go to it through a ``RemoteInbox``);
    actors whose inbox statements fill (a table's DML) stay in this process."""

    def __init__(
        self,
        services: StreamServices,
        ends: ChannelEnds | None = None,
        remote: RemoteActorHost | None = None,
        node_of_worker: Callable[[int], int] | None = None,
    ) -> None:
        self.services = services
        self.jobs: dict[int, RunningJob] = {}
        self.ends = ends or ChannelEnds()
        self.remote = remote
        self._node_of_worker = node_of_worker
        # The node of every actor built (this process's node for its own).
        self._nodes: dict[int, int] = {}
        self._dispatcher_ids = itertools.count(1)
        self._channel_ids = itertools.count(1)

    # ------------------------------------------------------------- building
    def build_job(
        self,
        graph: JobGraph,
        *,
        attach_now: bool = False,
        workers: dict[int, int] | None = None,
    ) -> tuple[RunningJob, AddOutputs | None]:
        """Actors for ``graph`` (not started) and the mutation attaching them upstream.
        ``attach_now``: the upstream actors are not running yet either (a restart): give
        them their new outputs directly instead of by mutation. ``workers``: the worker
        of each actor (where it runs, with compute nodes)."""
        job = RunningJob(graph, workers=dict(workers or {}))
        for fragment in graph.fragments:
            for actor_id in fragment.actor_ids:
                self._nodes[actor_id] = self._place(fragment, actor_id, job.workers.get(actor_id))
        wiring = self._plan_wiring(graph)
        job.channel_ids = wiring.channel_ids
        here = [a for f in graph.fragments for a in f.actor_ids if self._nodes[a] == self.ends.node]
        job.actors.update(
            self.build_actors(
                graph, wiring.inputs, wiring.dispatchers, here, attach_now, job.inboxes
            )
        )
        by_node: dict[int, list[int]] = {}
        for fragment in graph.fragments:
            for actor_id in fragment.actor_ids:
                if self._nodes[actor_id] != self.ends.node:
                    by_node.setdefault(self._nodes[actor_id], []).append(actor_id)
        for node, actor_ids in by_node.items():
            assert self.remote is not None
            inputs = {a: wiring.inputs.get(a, []) for a in actor_ids}
            dispatchers = {a: wiring.dispatchers[a] for a in actor_ids}
            self.remote.build(node, graph, actor_ids, inputs, dispatchers, attach_now)
            for fragment in graph.fragments:
                has_inbox = any(isinstance(n, SourceNode) for n in fragment.leaves())
                for index, actor_id in enumerate(fragment.actor_ids):
                    if actor_id in inputs:
                        ctx = self._context(graph, fragment, index, actor_id)
                        job.actors[actor_id] = RemoteActor(ctx, self.remote, node)
                        if has_inbox:
                            job.inboxes[actor_id] = RemoteInbox(self.remote, node, actor_id)
        # Backfill progress is summed over these actors once they all reported.
        self.services.backfill.track(
            graph.job_id,
            [
                a
                for f in graph.fragments
                if any(isinstance(n, StreamScanNode) for n in f.leaves())
                for a in f.actor_ids
            ],
        )
        if attach_now:
            for actor_id, specs in wiring.upstream_outputs.items():
                actor = self._actor(actor_id)
                if isinstance(actor, RemoteActor):
                    assert self.remote is not None
                    self.remote.add_dispatchers(actor.node, actor_id, specs)
                else:
                    actor.dispatchers.extend(self.ends.dispatcher(d) for d in specs)
            return job, None
        outputs = wiring.upstream_outputs
        return job, (AddOutputs(outputs) if outputs else None)

    def build_actors(
        self,
        graph: JobGraph,
        inputs: dict[int, list[ChannelSpec]],
        dispatchers: dict[int, list[DispatcherSpec]],
        actor_ids: Collection[int],
        rebuilt: bool,
        inboxes: dict[int, Inbox] | None = None,
    ) -> dict[int, Actor]:
        """These actors of ``graph``, built here with their channels' ends (from the
        specs): what a compute node builds of the jobs meta places on it. Actors fed by
        an inbox get one (in ``inboxes``)."""
        wanted = set(actor_ids)
        actors: dict[int, Actor] = {}
        for fragment in graph.fragments:
            has_inbox = any(isinstance(n, DmlNode | SourceNode) for n in fragment.leaves())
            for index, actor_id in enumerate(fragment.actor_ids):
                if actor_id not in wanted:
                    continue
                self._nodes[actor_id] = self.ends.node
                ctx = self._context(graph, fragment, index, actor_id)
                leaf = LeafInputs(wait_committed=self._wait_committed, rebuilt=rebuilt)
                for spec in inputs.get(actor_id, []):
                    channel = self.ends.receiver(spec)
                    leaf.channels.setdefault(spec.upstream_fragment, []).append(channel)
                if has_inbox:
                    assert inboxes is not None, "an inbox fragment runs where DML arrives"
                    leaf.inbox = inboxes[actor_id] = Inbox()
                root = build_executor(fragment.root, ctx, leaf)
                outputs = [self.ends.dispatcher(d) for d in dispatchers.get(actor_id, [])]
                actors[actor_id] = Actor(ctx, root, outputs, self.ends.dispatcher)
        return actors

    def _context(
        self, graph: JobGraph, fragment: Fragment, index: int, actor_id: int
    ) -> ActorContext:
        return ActorContext(
            actor_id=actor_id,
            fragment_id=fragment.fragment_id,
            job_id=graph.job_id,
            vnodes=_owned(fragment, index),
            services=self.services,
        )

    def _place(self, fragment: Fragment, actor_id: int, worker: int | None) -> int:
        """The node actor ``actor_id`` of ``fragment``, on ``worker``, runs on."""
        if self.remote is None or self._node_of_worker is None or worker is None:
            return self.ends.node
        if any(isinstance(n, DmlNode) for n in fragment.leaves()):
            return self.ends.node  # statements fill its inbox here
        return self.remote.node_for(self._node_of_worker(worker), actor_id)

    def _plan_wiring(self, graph: JobGraph) -> _JobWiring:
        wiring = _JobWiring()
        for fragment in graph.fragments:
            for actor_id in fragment.actor_ids:
                wiring.dispatchers[actor_id] = []
        for fragment in graph.fragments:
            for upstream_id, kind, key in fragment.upstreams:
                self._wire(graph.fragment(upstream_id), fragment, kind, key, wiring)
            for node in fragment.leaves():
                if isinstance(node, StreamScanNode):
                    self._attach_scan(node, fragment, wiring)
        return wiring

    def _actor(self, actor_id: int) -> Actor | RemoteActor:
        for job in self.jobs.values():
            if actor_id in job.actors:
                return job.actors[actor_id]
        raise KeyError(f"actor {actor_id} is not running")

    def _channel(self, upstream: Fragment, up: int, down: int, wiring: _JobWiring) -> ChannelSpec:
        spec = ChannelSpec(
            next(self._channel_ids), up, down, upstream.fragment_id,
            self._nodes.get(up, self.ends.node), self._nodes.get(down, self.ends.node),
        )  # fmt: skip
        wiring.inputs.setdefault(down, []).append(spec)
        wiring.channel_ids.add(spec.channel_id)
        return spec

    def _wire(
        self,
        upstream: Fragment,
        downstream: Fragment,
        kind: ExchangeKind,
        key: list[int],
        wiring: _JobWiring,
    ) -> None:
        """Channels and dispatchers of one exchange inside a job."""
        for i, up in enumerate(upstream.actor_ids):
            if kind is ExchangeKind.NO_SHUFFLE:
                targets = [downstream.actor_ids[i]]
            elif kind is ExchangeKind.SIMPLE:
                targets = downstream.actor_ids[:1]
            else:
                targets = list(downstream.actor_ids)
            outputs = tuple(self._channel(upstream, up, down, wiring) for down in targets)
            wiring.dispatchers[up].append(self._dispatcher(kind, outputs, key, downstream))

    def _dispatcher(
        self,
        kind: ExchangeKind,
        outputs: tuple[ChannelSpec, ...],
        key: list[int],
        downstream: Fragment,
    ) -> DispatcherSpec:
        did = next(self._dispatcher_ids)
        if kind is ExchangeKind.HASH:
            assert downstream.mapping is not None
            mapping = tuple(int(m) for m in downstream.mapping)
            return DispatcherSpec(did, "hash", outputs, tuple(key), mapping)
        if kind is ExchangeKind.BROADCAST:
            return DispatcherSpec(did, "broadcast", outputs)
        return DispatcherSpec(did, "simple", outputs)

    def _attach_scan(self, node: StreamScanNode, fragment: Fragment, wiring: _JobWiring) -> None:
        """A scan reads its upstream job's materialize fragment: 1:1 when it mirrors it
        (or happens to share its vnode mapping), else through a hash exchange by the
        upstream's distribution key (an arrangement backfill at the job's parallelism)."""
        upstream = self._fragment(node.upstream_fragment_id)
        same_mapping = len(upstream.actor_ids) == len(fragment.actor_ids) and (
            node.mirrors_upstream
            or (
                upstream.mapping is not None
                and fragment.mapping is not None
                and np.array_equal(upstream.mapping, fragment.mapping)
            )
        )
        if not same_mapping:
            if node.mirrors_upstream or fragment.mapping is None:
                raise ValueError("a scan fragment must mirror its upstream fragment's actors")
            assert node.state_schema is not None
            key = list(node.state_schema.dist_key)
            for up in upstream.actor_ids:
                outputs = tuple(
                    self._channel(upstream, up, down, wiring) for down in fragment.actor_ids
                )
                wiring.upstream_outputs.setdefault(up, []).append(
                    self._dispatcher(ExchangeKind.HASH, outputs, key, fragment)
                )
            return
        for up, down in zip(upstream.actor_ids, fragment.actor_ids):
            outputs = (self._channel(upstream, up, down, wiring),)
            wiring.upstream_outputs.setdefault(up, []).append(
                self._dispatcher(ExchangeKind.SIMPLE, outputs, [], fragment)
            )

    def _fragment(self, fragment_id: int) -> Fragment:
        for job in self.jobs.values():
            for f in job.graph.fragments:
                if f.fragment_id == fragment_id:
                    return f
        raise KeyError(f"fragment {fragment_id} is not running")

    async def _wait_committed(self, epoch: int) -> int:
        return await self.services.wait_committed(epoch)

    # ------------------------------------------------------------ lifecycle
    def add_job(self, job: RunningJob) -> None:
        """Make a job known (jobs built after it may read it) without starting it."""
        self.jobs[job.graph.job_id] = job

    def start_job(self, job: RunningJob) -> None:
        """Register the job's actors for the next barrier and start them."""
        self.jobs[job.graph.job_id] = job
        sink = self.services.barrier_sink
        for actor_id, actor in job.actors.items():
            sink.register_actor(actor_id, job.inboxes.get(actor_id))
            actor.start()

    def forget_job(self, job_id: int) -> None:
        """Drop a job whose actors have stopped (after its StopActors barrier)."""
        job = self.jobs.pop(job_id, None)
        if job is not None:
            self._release(job)
            for actor_id in job.actors:
                self.services.barrier_sink.unregister_actor(actor_id)

    def _release(self, job: RunningJob) -> None:
        self.ends.forget(job.channel_ids)
        for actor_id in job.actors:
            self._nodes.pop(actor_id, None)

    def node_of(self, actor_id: int) -> int | None:
        """The node an actor runs on (None: it is not built)."""
        return self._nodes.get(actor_id)

    def actor_tasks(self, job_ids: Iterable[int] | None = None) -> list[asyncio.Task[None]]:
        """The tasks of these jobs' actors (every job's by default), taken before a stop
        barrier so that the wait for them is not confused by actors started later."""
        jobs = (
            self.jobs.values()
            if job_ids is None
            else [self.jobs[j] for j in job_ids if j in self.jobs]
        )
        return [a.task for job in jobs for a in job.actors.values() if a.task is not None]

    def take_stopped(self) -> list[tuple[int, StreamChunk]]:
        """Forget every job, whose actors all stopped at a barrier, and return the DML
        chunks that arrived after it, as (table id, chunk) in arrival order per actor:
        they belong to the next epoch, to be written again to the new actors."""
        pending: list[tuple[int, StreamChunk]] = []
        for job in self.jobs.values():
            for actor in job.actors.values():
                assert actor.task is None or actor.task.done(), "an actor is still running"
            for inbox in job.inboxes.values():
                while (msg := inbox.get_nowait()) is not None:
                    assert isinstance(msg, StreamChunk), "no barrier follows a stop"
                    pending.append((job.graph.job_id, msg))
            self._release(job)
        self.jobs.clear()
        return pending

    def abort_all(self) -> None:
        """Cancel every actor at once (recovery): their uncommitted state is dropped."""
        self.abort_jobs(set(self.jobs))

    def abort_jobs(self, job_ids: set[int] | frozenset[int]) -> None:
        """Cancel the actors of these jobs at once (the recovery of their failure
        domain) and forget the jobs: their uncommitted state is dropped."""
        for job_id in job_ids:
            job = self.jobs.pop(job_id, None)
            if job is None:
                continue
            self._release(job)
            for actor in job.actors.values():
                if isinstance(actor, RemoteActor):
                    actor.discard()
                elif actor.task is not None:
                    actor.task.cancel()

    async def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            for actor in job.actors.values():
                await actor.stop()
        self.jobs.clear()

    # ------------------------------------------------------------------ DML
    def write_dml(self, table_id: int, chunk: StreamChunk, dist_key: list[int]) -> int:
        """Place a statement's rows in the table's inboxes; returns their epoch. Never
        awaits: all parts of a statement land in the same epoch in every actor."""
        job = self.jobs[table_id]
        fragment = next(
            f for f in job.graph.fragments if any(isinstance(n, DmlNode) for n in f.leaves())
        )
        inboxes = [job.inboxes[a] for a in fragment.actor_ids]
        if len(inboxes) == 1:
            inboxes[0].put(chunk)
        else:
            assert fragment.mapping is not None
            parts = split_by_vnode(chunk, dist_key, fragment.mapping, len(inboxes))
            for inbox, part in zip(inboxes, parts):
                if part is not None:
                    inbox.put(part)
        return self.services.barrier_sink.write_epoch


def _owned(fragment: Fragment, index: int) -> np.ndarray:
    if fragment.mapping is None:
        return np.ones(VNODE_COUNT, dtype=bool)
    return fragment.mapping == index


async def wait_finished(tasks: list[asyncio.Task[None]], timeout: float | None = None) -> bool:
    """Wait until every task has ended (returned, failed or been cancelled by a recovery),
    without raising what they raised: a stop waits for actors, it does not judge them.
    False if ``timeout`` came first."""
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    return not pending
