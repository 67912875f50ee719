"""Filter: keeps the rows whose predicate is true.

An UpdateDelete/UpdateInsert pair of which only one side passes becomes a lone Delete or
Insert (``StreamChunk.take``), so that downstream never sees half a pair.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.expression import ExprSet, evaluate_predicate
from rivulet.stream.message import Message


class FilterExecutor(Executor):
    def __init__(
        self, ctx: ActorContext, schema: Schema, input: Executor, condition: ExprSet
    ) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.condition = condition

    async def execute(self) -> AsyncIterator[Message]:
        async for msg in self.input.execute():
            if not isinstance(msg, StreamChunk):
                yield msg
                continue
            mask, errors = await self.ctx.run_blocking(
                lambda cur, m=msg: evaluate_predicate(cur, m.data, self.condition)
            )
            self.ctx.report_row_errors("Filter", errors)
            out = msg.take(mask)
            if out.num_rows:
                yield out
