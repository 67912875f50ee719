"""Exchanges: the channels between actors and the dispatchers that fill them.

A dispatcher sends an actor's output to downstream actors: by vnode of a distribution key
(hash), to all (broadcast), or to the one downstream actor (simple / no-shuffle). Chunks
are split with vectorized takes; an UpdateDelete/UpdateInsert pair whose two rows go to
different actors becomes Delete + Insert, as each actor must see whole pairs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import StreamChunk
from rivulet.common.vnode import VNODE_COUNT, compute_vnodes
from rivulet.stream.message import Barrier, Message

# Rows an exchange buffers before the sender waits (backpressure): about two source
# chunks. Bounded by rows, not chunks, so that a barrier queued behind the buffer is never
# more than that much work away from the actor, whatever the chunks' sizes.
CHANNEL_ROWS = 131_072


class Channel:
    """A FIFO of messages from one upstream actor to one downstream actor, bounded by the
    rows it holds. A chunk waits while the rows queued ahead of it and its own would
    exceed the capacity, unless none are queued (a larger chunk still goes, alone).
    Barriers never wait: they carry no rows, and an actor aligning its inputs needs them."""

    def __init__(self, capacity_rows: int = CHANNEL_ROWS) -> None:
        self.capacity_rows = capacity_rows
        self._items: deque[Message] = deque()
        self._rows = 0
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        # Set too when a message arrives: a merge waiting on several channels at once.
        self.listener: asyncio.Event | None = None

    async def send(self, msg: Message) -> None:
        if isinstance(msg, StreamChunk):
            rows = msg.num_rows
            while self._rows and self._rows + rows > self.capacity_rows:
                self._writable.clear()
                await self._writable.wait()
        self._enqueue(msg)

    def _enqueue(self, msg: Message) -> None:
        """Queue ``msg`` now (its rows counted) and wake the reader."""
        if isinstance(msg, StreamChunk):
            self._rows += msg.num_rows
        self._items.append(msg)
        self._readable.set()
        if self.listener is not None:
            self.listener.set()

    async def recv(self) -> Message:
        # Cancelled while waiting, it has taken nothing: no message is lost.
        while (msg := self.try_recv()) is None:
            self._readable.clear()
            await self._readable.wait()
        return msg

    def try_recv(self) -> Message | None:
        """The next message, or None if there is none yet (never waits)."""
        if not self._items:
            return None
        msg = self._items.popleft()
        if isinstance(msg, StreamChunk):
            self._rows -= msg.num_rows
            self._writable.set()
        return msg

    def qsize(self) -> int:
        return len(self._items)


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
    # An update whose old and new rows land on different actors becomes delete + insert.
    pairs = chunk.update_pairs()
    chunk = chunk.unpair(pairs[target[pairs] != target[pairs + 1]])
    ops = chunk.ops
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
