"""HashAgg: GROUP BY, maintained incrementally (also DISTINCT, as a group-by without
aggregates).

Each chunk is folded into the groups' state (``aggregate.core.AggCore``: one polars group-by
per chunk, groups cached in memory in front of the state tables); the output changes are
emitted once per epoch, at the barrier, for the groups the epoch changed: Insert for a new
group, an UpdateDelete/UpdateInsert pair for a changed one, Delete for a group whose last
row went, nothing for a group whose outputs ended where they began. Emitting per epoch
rather than per chunk sends each changed group downstream once, however many chunks
touched it.

State is written at the barrier too, then sealed. A new job's state tables are empty, so
it never reads them; a job rebuilt after recovery (or moved) finds its groups there and
loads each group the first time a chunk touches it, once the epoch before its first
barrier is committed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor
from rivulet.stream.executors.aggregate.core import AggCore
from rivulet.stream.message import Message
from rivulet.stream.plan import HashAggNode


class HashAggExecutor(Executor):
    always_present = False

    def __init__(
        self,
        ctx: ActorContext,
        node: HashAggNode,
        input: Executor,
        wait_committed: Callable[[int], Awaitable[int]] | None,
    ) -> None:
        super().__init__(ctx, node.schema)
        self.input = input
        self.wait_committed = wait_committed
        self.state_tables = [ctx.state_table(s) for s in node.state_tables]
        upstream = node.inputs[0]
        self.core = AggCore(
            upstream.schema,
            node.schema,
            list(node.group_key),
            list(node.aggs),
            self.state_tables,
            append_only=upstream.append_only,
            always_present=self.always_present,
        )
        self._started = False

    async def _start(self) -> bool:
        """Before the first message: does the state exist already (a rebuilt actor), or
        is this a new job (nothing stored, nothing to read)?"""
        self._started = True
        exists = await self.ctx.run_blocking(self.state_tables[0].exists)
        self.core.may_have_state = exists
        if not exists and self.always_present:
            self.core.ensure_global_row(None)
        return exists

    async def execute(self) -> AsyncIterator[Message]:
        core = self.core
        async for msg in self.input.execute():
            if isinstance(msg, StreamChunk):
                if not self._started and await self._start() and self.always_present:
                    await self.ctx.run_blocking(core.ensure_global_row)
                if msg.num_rows:
                    await self.ctx.run_blocking(lambda cur, m=msg: core.apply(m.data, m.ops, cur))
                continue
            resume = not self._started and await self._start()
            out = await self.ctx.run_blocking(lambda _cur: core.flush())
            if out.data is not None and out.ops is not None:
                yield StreamChunk(out.data, out.ops)
            self.seal(msg)
            yield msg
            if resume:
                # A rebuilt actor reads state only once the epoch that its first barrier
                # ends is committed: the previous owner's last writes are in it.
                if self.wait_committed is not None:
                    await self.wait_committed(msg.epoch)
                if self.always_present:
                    await self.ctx.run_blocking(core.ensure_global_row)
