"""Filter: keeps the rows whose predicate is true.

An UpdateDelete/UpdateInsert pair of which only one side passes becomes a lone Delete or
Insert, so that downstream never sees half a pair.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import Op, StreamChunk
from rivulet.stream.executor import ActorContext, Executor, Schema
from rivulet.stream.expression import ExprSet, evaluate_predicate
from rivulet.stream.message import Message


def filter_chunk(chunk: StreamChunk, mask: np.ndarray) -> StreamChunk:
    """The rows of ``chunk`` where ``mask`` holds, with split update pairs repaired."""
    ops = chunk.ops
    pairs = np.flatnonzero(ops[:-1] == Op.UPDATE_DELETE) if len(ops) > 1 else np.array([], int)
    if len(pairs):
        old_only = pairs[mask[pairs] & ~mask[pairs + 1]]
        new_only = pairs[~mask[pairs] & mask[pairs + 1]]
        if len(old_only) or len(new_only):
            ops = ops.copy()
            ops[old_only] = Op.DELETE
            ops[new_only + 1] = Op.INSERT
    if mask.all():
        return StreamChunk(chunk.data, ops)
    idx = np.flatnonzero(mask)
    return StreamChunk(chunk.data.take(pa.array(idx)), ops[idx])


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
            out = filter_chunk(msg, mask)
            if out.num_rows:
                yield out
