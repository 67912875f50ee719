"""Project: computes expressions over each chunk (ops pass through unchanged)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.expression import ExprSet, column_refs, evaluate, select_columns
from rivulet.stream.message import Message


class ProjectExecutor(Executor):
    def __init__(self, ctx: ActorContext, schema: Schema, input: Executor, exprs: ExprSet) -> None:
        super().__init__(ctx, schema)
        self.input = input
        self.exprs = exprs
        self._arrow = schema.arrow()
        self._refs = column_refs(exprs)

    async def execute(self) -> AsyncIterator[Message]:
        async for msg in self.input.execute():
            if not isinstance(msg, StreamChunk):
                yield msg
                continue
            if self._refs is not None:  # columns selected: no DuckDB, no thread hop
                out, errors = select_columns(msg.data, self._refs), None
            else:
                out, errors = await self.ctx.run_blocking(
                    lambda cur, m=msg: evaluate(cur, m.data, self.exprs)
                )
            self.ctx.report_row_errors("Project", errors)
            if out.num_columns:  # casting a table without columns would lose its rows
                out = out.rename_columns(self.schema.names).cast(self._arrow)
            yield StreamChunk(out, msg.ops)
