"""Actors that run on a compute node, as the runtime of meta holds them.

The runtime places each actor on a node. An actor of this process is an ``Actor``; one
placed on another node is a ``RemoteActor``: the node builds and runs the real actor,
and meta keeps this stand-in, with the same surface, so that starting, stopping and
waiting for actors read the same wherever they run. Its task ends when the node reports
the actor ended; cancelling the task (a recovery) aborts the actor on its node.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from rivulet.stream.actor import cancel_and_wait
from rivulet.stream.exchange import Dispatcher
from rivulet.stream.executor import ActorContext
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import ChannelSpec, DispatcherSpec, Message
from rivulet.stream.plan import JobGraph

log = logging.getLogger(__name__)


class RemoteActorError(RuntimeError):
    """An actor failed on its compute node (the node's error text), or its node went."""


class ComputeNodeLost(RemoteActorError):
    """The actor's node went (exited, or stopped answering). The message names the node
    and why, never a data value, so it is recorded as the recovery's reason."""


# What a remote actor's end reports: nothing (it stopped), its error's text, or its node lost.
ActorEnd = str | ComputeNodeLost | None


class RemoteActorHost(Protocol):
    """The compute nodes, as the runtime asks them for actors (meta implements it)."""

    def build(
        self,
        node: int,
        graph: JobGraph,
        actor_ids: list[int],
        inputs: dict[int, list[ChannelSpec]],
        dispatchers: dict[int, list[DispatcherSpec]],
        rebuilt: bool,
    ) -> None:
        """Build these actors of ``graph`` on ``node`` (not started)."""
        ...

    def add_dispatchers(self, node: int, actor_id: int, specs: list[DispatcherSpec]) -> None:
        """Give a built actor that has not started more outputs (a restart's scans)."""
        ...

    def start(self, node: int, actor_id: int) -> asyncio.Future[ActorEnd]:
        """Start a built actor: resolves when it ended, with its error (None: it
        stopped at a barrier, or was aborted)."""
        ...

    def abort(self, node: int, actor_ids: list[int]) -> None:
        """Cancel these actors (built or running); their uncommitted state is dropped."""
        ...

    def node_for(self, node: int, actor_id: int) -> int:
        """Where to build an actor placed on ``node``: there while it runs, else on
        another node that runs (its actors come back to it at the next rebuild once it
        is replaced), else here (0)."""
        ...

    def deliver(self, node: int, actor_id: int, msg: Message) -> None:
        """Put ``msg`` in the inbox of actor ``actor_id`` on ``node`` (in order)."""
        ...


class RemoteInbox(Inbox):
    """The inbox of a source actor on a compute node, as meta's barrier manager fills
    it: what is put here is put, in order, in the actor's inbox on its node. Only
    barriers come this way (DML stays where its table's actors are)."""

    def __init__(self, host: RemoteActorHost, node: int, actor_id: int) -> None:
        super().__init__()
        self.host = host
        self.node = node
        self.actor_id = actor_id

    def put(self, msg: Message) -> None:
        self.host.deliver(self.node, self.actor_id, msg)

    def get_nowait(self) -> Message | None:
        return None  # nothing waits here: messages are on the node


class RemoteActor:
    """An actor running on compute node ``node``."""

    def __init__(self, ctx: ActorContext, host: RemoteActorHost, node: int) -> None:
        self.ctx = ctx
        self.host = host
        self.node = node
        self.dispatchers: list[Dispatcher] = []  # (its dispatchers live on its node)
        self.task: asyncio.Task[None] | None = None

    @property
    def id(self) -> int:
        return self.ctx.actor_id

    def start(self) -> None:
        ended = self.host.start(self.node, self.id)
        self.task = asyncio.get_running_loop().create_task(
            self._run(ended), name=f"actor-{self.id}@node-{self.node}"
        )

    def discard(self) -> None:
        """Abort the actor, started or not."""
        if self.task is not None:
            self.task.cancel()
        else:
            self.host.abort(self.node, [self.id])

    async def _run(self, ended: asyncio.Future[ActorEnd]) -> None:
        try:
            error = await ended
        except asyncio.CancelledError:
            self.host.abort(self.node, [self.id])
            raise
        if error is not None:
            log.error(
                "actor %d (fragment %d, job %d) failed on node %d: %s", self.id,
                self.ctx.fragment_id, self.ctx.job_id, self.node, error,
            )  # fmt: skip
            failure = error if isinstance(error, ComputeNodeLost) else RemoteActorError(error)
            self.ctx.services.barrier_sink.actor_failed(self.id, failure)

    async def stop(self) -> None:
        await cancel_and_wait(self.task)
