"""An actor: one parallel instance of a fragment, run as an asyncio task.

It pulls messages through its executor chain and hands them to its dispatchers. When a
barrier leaves the chain the actor applies the barrier's mutation to its outputs, sends
the barrier downstream and reports it collected; a StopActors mutation naming it ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rivulet.common.chunk import StreamChunk
from rivulet.stream.exchange import Dispatcher
from rivulet.stream.executor import ActorContext, Executor
from rivulet.stream.message import AddOutputs, Barrier, DispatcherSpec, StopActors

log = logging.getLogger(__name__)


class Actor:
    def __init__(
        self,
        ctx: ActorContext,
        root: Executor,
        dispatchers: list[Dispatcher],
        open_dispatcher: Callable[[DispatcherSpec], Dispatcher],
    ) -> None:
        self.ctx = ctx
        self.root = root
        self.dispatchers = dispatchers
        # Builds the dispatchers an AddOutputs names (their channels' ends here).
        self.open_dispatcher = open_dispatcher
        self.task: asyncio.Task[None] | None = None

    @property
    def id(self) -> int:
        return self.ctx.actor_id

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"actor-{self.id}")

    async def _run(self) -> None:
        try:
            async for msg in self.root.execute():
                if isinstance(msg, StreamChunk):
                    if msg.num_rows:
                        for d in self.dispatchers:
                            await d.dispatch_chunk(msg)
                    continue
                # New outputs get this barrier (their first message); outputs to actors
                # that stop get it too (their last), and are dropped after it.
                self._add_outputs(msg)
                for d in self.dispatchers:
                    await d.dispatch_barrier(msg)
                self._remove_outputs(msg)
                self.ctx.services.barrier_sink.collect(self.id, msg)
                if msg.stops(self.id):
                    return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.exception(
                "actor %d (fragment %d, job %d) failed", self.id, self.ctx.fragment_id,
                self.ctx.job_id,
            )  # fmt: skip
            self.ctx.services.barrier_sink.actor_failed(self.id, exc)

    def _add_outputs(self, barrier: Barrier) -> None:
        m = barrier.mutation
        if isinstance(m, AddOutputs):
            for spec in m.outputs.get(self.id, []):
                self.dispatchers.append(self.open_dispatcher(spec))

    def _remove_outputs(self, barrier: Barrier) -> None:
        m = barrier.mutation
        if isinstance(m, StopActors):
            for d in self.dispatchers:
                d.remove_actors(m.actors)
            self.dispatchers = [d for d in self.dispatchers if d.outputs]

    async def stop(self) -> None:
        await cancel_and_wait(self.task)


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel an actor's task and wait until it ended, whatever it raised."""
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
