"""Exchanges: the channels between actors and the dispatchers that fill them.

A dispatcher sends an actor's output to downstream actors: by vnode of a distribution key
(hash), to all (broadcast), or to the one downstream actor (simple / no-shuffle). Chunks
are split with vectorized takes; an UpdateDelete/UpdateInsert pair whose two rows go to
different actors becomes Delete + Insert, as each actor must see whole pairs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import Op, StreamChunk
from rivulet.common.vnode import VNODE_COUNT, compute_vnodes
from rivulet.stream.message import Barrier, Message

# Chunks an exchange buffers before the sender waits (backpressure).
CHANNEL_CAPACITY = 16


class Channel:
    """A bounded FIFO of messages from one upstream actor to one downstream actor."""

    def __init__(self, capacity: int = CHANNEL_CAPACITY) -> None:
        self._queue: asyncio.Queue[Message] = asyncio.Queue(capacity)

    async def send(self, msg: Message) -> None:
        await self._queue.put(msg)

    async def recv(self) -> Message:
        return await self._queue.get()

    def qsize(self) -> int:
        return self._queue.qsize()


@dataclass
class Output:
    """One downstream actor of a dispatcher."""

    actor_id: int
    channel: Channel


class Dispatcher:
    """Sends an actor's messages to its downstream actors."""

    def __init__(self, dispatcher_id: int, outputs: list[Output]) -> None:
        self.id = dispatcher_id
        self.outputs = outputs

    async def dispatch_chunk(self, chunk: StreamChunk) -> None:
        raise NotImplementedError

    async def dispatch_barrier(self, barrier: Barrier) -> None:
        for out in self.outputs:
            await out.channel.send(barrier)

    def remove_actors(self, actors: frozenset[int]) -> None:
        self.outputs = [o for o in self.outputs if o.actor_id not in actors]

    @property
    def downstream(self) -> list[int]:
        return [o.actor_id for o in self.outputs]


class SimpleDispatcher(Dispatcher):
    """To the single downstream actor (also no-shuffle: 1:1 between equal fragments)."""

    async def dispatch_chunk(self, chunk: StreamChunk) -> None:
        for out in self.outputs:
            await out.channel.send(chunk)


class BroadcastDispatcher(SimpleDispatcher):
    """To every downstream actor."""


class HashDispatcher(Dispatcher):
    """By vnode of the distribution key: ``mapping[vnode]`` is the index of the output."""

    def __init__(
        self, dispatcher_id: int, outputs: list[Output], key: list[int], mapping: np.ndarray
    ) -> None:
        super().__init__(dispatcher_id, outputs)
        self.key = key
        self.mapping = mapping

    async def dispatch_chunk(self, chunk: StreamChunk) -> None:
        if len(self.outputs) == 1:
            await self.outputs[0].channel.send(chunk)
            return
        for i, part in enumerate(split_by_vnode(chunk, self.key, self.mapping, len(self.outputs))):
            if part is not None:
                await self.outputs[i].channel.send(part)


def split_by_vnode(
    chunk: StreamChunk, key: list[int], mapping: np.ndarray, parts: int
) -> list[StreamChunk | None]:
    """Split a chunk by the output its rows' vnodes map to (None where no row goes)."""
    vnodes = compute_vnodes([chunk.data.column(i) for i in key])
    target = mapping[vnodes]
    ops = chunk.ops
    # An update whose old and new rows land on different actors becomes delete + insert.
    pairs = np.flatnonzero(ops[:-1] == Op.UPDATE_DELETE) if len(ops) > 1 else np.array([], int)
    if len(pairs):
        moved = pairs[target[pairs] != target[pairs + 1]]
        if len(moved):
            ops = ops.copy()
            ops[moved] = Op.DELETE
            ops[moved + 1] = Op.INSERT
    out: list[StreamChunk | None] = []
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(parts + 1))
    for i in range(parts):
        idx = order[bounds[i] : bounds[i + 1]]
        if len(idx) == 0:
            out.append(None)
        elif len(idx) == chunk.num_rows:
            out.append(StreamChunk(chunk.data, ops))
        else:
            out.append(StreamChunk(chunk.data.take(pa.array(idx)), ops[idx]))
    return out


def even_mapping(parts: int) -> np.ndarray:
    """Vnode -> part index: contiguous, balanced ranges (vnode v goes to v * parts // 256)."""
    return (np.arange(VNODE_COUNT, dtype=np.int64) * parts // VNODE_COUNT).astype(np.int32)


def vnodes_of(mapping: np.ndarray, part: int) -> np.ndarray:
    """The vnodes a part owns under a mapping (a bitmap of 256 booleans)."""
    return mapping == part
