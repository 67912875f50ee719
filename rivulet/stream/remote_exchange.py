"""Exchange between processes: the channels of actors that run on different compute nodes.

One connection (a socket) between two nodes carries every channel from the actors of one
to the actors of the other, told apart by a channel id. Each message is a frame::

    kind (1 byte) | channel id (u32) | payload length (u64) | payload

- ``CHUNK``: the rows as an Arrow IPC stream (the row columns, then ``__op``);
- ``BARRIER``: the barrier as JSON (epoch, checkpoint, mutation);
- ``CREDIT``: the receiving actor took that many rows off the channel (a u64).

Back-pressure is the in-process channel's (``exchange.Channel``): a sender keeps at most
the channel's capacity in rows that the receiving actor has not taken yet (a larger chunk
goes alone, when none are outstanding) and waits for credit beyond it. The receiving
side never stops reading the socket, so one slow channel does not hold up the others on
the same connection: what it buffers is bounded by its sender's credit. Barriers carry no
rows and never wait. The frames of a channel arrive in the order they were sent (one
socket, written by one event loop).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import OP_COLUMN, StreamChunk
from rivulet.common.columns import from_ipc, to_ipc
from rivulet.stream.exchange import CHANNEL_ROWS, Channel
from rivulet.stream.message import (
    AddOutputs,
    Barrier,
    DispatcherSpec,
    Message,
    Mutation,
    StopActors,
)

log = logging.getLogger(__name__)

CHUNK = 1
BARRIER = 2
CREDIT = 3

_HEADER = struct.Struct("!BIQ")
_COUNT = struct.Struct("!Q")


# ------------------------------------------------------------------ encoding
def encode_chunk(chunk: StreamChunk) -> pa.Buffer:
    """A chunk as one Arrow IPC stream: its columns and the ops as ``__op``."""
    return to_ipc(chunk.data.append_column(OP_COLUMN, pa.array(chunk.ops, pa.int8())))


def decode_chunk(payload: bytes | pa.Buffer) -> StreamChunk:
    table = from_ipc(payload)
    index = table.schema.get_field_index(OP_COLUMN)
    ops = table.column(index).to_numpy().astype(np.int8, copy=False)
    return StreamChunk(table.remove_column(index), ops)


def encode_barrier(barrier: Barrier) -> bytes:
    return json.dumps(
        {
            "epoch": barrier.epoch,
            "checkpoint": barrier.checkpoint,
            "mutation": _encode_mutation(barrier.mutation),
        }
    ).encode()


def decode_barrier(payload: bytes) -> Barrier:
    doc = json.loads(payload)
    return Barrier(doc["epoch"], doc["checkpoint"], _decode_mutation(doc["mutation"]))


def _encode_mutation(mutation: Mutation | None) -> object:
    if mutation is None:
        return None
    if isinstance(mutation, StopActors):
        return {"stop": sorted(mutation.actors)}
    if isinstance(mutation, AddOutputs):
        # Specs, not dispatchers: each node builds its actors' dispatchers from them.
        return {
            "add": [
                [actor, [d.to_json() for d in specs]] for actor, specs in mutation.outputs.items()
            ]
        }
    raise TypeError(f"{type(mutation).__name__} cannot cross processes in a barrier")


def _decode_mutation(doc: object) -> Mutation | None:
    if doc is None:
        return None
    assert isinstance(doc, dict), f"unknown mutation {doc!r}"
    if "add" in doc:
        return AddOutputs(
            {int(a): [DispatcherSpec.from_json(d) for d in specs] for a, specs in doc["add"]}
        )
    assert "stop" in doc, f"unknown mutation {doc!r}"
    return StopActors(frozenset(doc["stop"]))


# ---------------------------------------------------------------- channels
class InboundChannel(Channel):
    """The receiving end of a remote channel: what the downstream actor reads, filled by
    the connection (never waiting: the sender's credit bounds it). Each chunk the actor
    takes returns its rows to the sender as credit. Once the connection is lost, reading
    past what arrived raises: the actor fails instead of waiting for good."""

    def __init__(self, channel_id: int, return_credit: Callable[[int, int], None]) -> None:
        super().__init__(capacity_rows=CHANNEL_ROWS)
        self.channel_id = channel_id
        self._return_credit = return_credit
        self.failure: BaseException | None = None

    def deliver(self, msg: Message) -> None:
        self._enqueue(msg)

    def fail(self, error: BaseException) -> None:
        self.failure = error
        self._readable.set()
        if self.listener is not None:
            self.listener.set()

    def try_recv(self) -> Message | None:
        msg = super().try_recv()
        if msg is None and self.failure is not None:
            raise ConnectionError(
                f"exchange channel {self.channel_id}: the connection was lost"
            ) from self.failure
        if isinstance(msg, StreamChunk) and msg.num_rows:
            self._return_credit(self.channel_id, msg.num_rows)
        return msg


class OutboundChannel:
    """The sending end of a remote channel, used by a dispatcher like a ``Channel``."""

    def __init__(
        self, connection: ExchangeConnection, channel_id: int, capacity_rows: int = CHANNEL_ROWS
    ) -> None:
        self.connection = connection
        self.channel_id = channel_id
        self.capacity_rows = capacity_rows
        self.outstanding = 0  # rows sent and not yet taken by the receiving actor
        self._credit = asyncio.Event()
        self.listener: asyncio.Event | None = None

    async def send(self, msg: Message) -> None:
        if isinstance(msg, StreamChunk):
            rows = msg.num_rows
            while self.outstanding and self.outstanding + rows > self.capacity_rows:
                self._credit.clear()
                await self._credit.wait()
                self.connection.check_open()
            self.outstanding += rows
            await self.connection.send_frame(CHUNK, self.channel_id, encode_chunk(msg))
        else:
            await self.connection.send_frame(BARRIER, self.channel_id, encode_barrier(msg))

    def credited(self, rows: int) -> None:
        self.outstanding -= rows
        self._credit.set()

    def wake(self) -> None:
        self._credit.set()


class ExchangeConnection:
    """One socket between two compute nodes and the channels multiplexed over it. Either
    side may open channels of either direction; a channel id names one direction's
    channel, chosen by whoever places the actors (so both sides agree)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.inbound: dict[int, InboundChannel] = {}
        self.outbound: dict[int, OutboundChannel] = {}
        # Messages for channels not opened here yet (the sender may start first).
        self._early: dict[int, list[Message]] = {}
        self.error: BaseException | None = None
        self._closed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def open_inbound(self, channel_id: int) -> InboundChannel:
        channel = InboundChannel(channel_id, self._send_credit)
        self.inbound[channel_id] = channel
        for msg in self._early.pop(channel_id, []):
            channel.deliver(msg)
        if self.error is not None:
            channel.fail(self.error)
        return channel

    def open_outbound(self, channel_id: int, capacity_rows: int = CHANNEL_ROWS) -> OutboundChannel:
        channel = OutboundChannel(self, channel_id, capacity_rows)
        self.outbound[channel_id] = channel
        return channel

    def close_channel(self, channel_id: int) -> None:
        self.inbound.pop(channel_id, None)
        self.outbound.pop(channel_id, None)
        self._early.pop(channel_id, None)

    def check_open(self) -> None:
        if self.error is not None:
            raise ConnectionError("the exchange connection was lost") from self.error

    async def send_frame(self, kind: int, channel_id: int, payload: bytes | pa.Buffer) -> None:
        self.check_open()
        self.writer.write(_HEADER.pack(kind, channel_id, len(payload)))
        self.writer.write(memoryview(payload))
        await self.writer.drain()

    def _send_credit(self, channel_id: int, rows: int) -> None:
        if self.error is not None or self.writer.is_closing():
            return
        self.writer.write(_HEADER.pack(CREDIT, channel_id, _COUNT.size))
        self.writer.write(_COUNT.pack(rows))

    async def _read_loop(self) -> None:
        try:
            while True:
                header = await self.reader.readexactly(_HEADER.size)
                kind, channel_id, length = _HEADER.unpack(header)
                payload = await self.reader.readexactly(length)
                if kind == CREDIT:
                    out = self.outbound.get(channel_id)
                    if out is not None:
                        out.credited(_COUNT.unpack(payload)[0])
                    continue
                msg: Message = decode_chunk(payload) if kind == CHUNK else decode_barrier(payload)
                channel = self.inbound.get(channel_id)
                if channel is None:
                    self._early.setdefault(channel_id, []).append(msg)
                else:
                    channel.deliver(msg)
        except asyncio.IncompleteReadError as exc:
            self.error = exc
        except (OSError, ValueError, pa.ArrowException) as exc:
            log.warning("exchange connection failed: %s", exc)
            self.error = exc
        finally:
            if self.error is None:
                self.error = ConnectionError("the exchange connection was closed")
            for out in self.outbound.values():
                out.wake()
            for inbound in self.inbound.values():
                inbound.fail(self.error)
            self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._task.cancel()
        self.writer.close()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


# ------------------------------------------------------------------ the mesh
_HELLO = struct.Struct("!I32s")


class ExchangePeers:
    """This process's exchange connections, one per other process of the engine (meta is
    node 0), by node id. Each process listens (``listen``); a process that joins connects
    to those there before it (``connect``) and presents its node id and the engine's
    token, so that only the engine's processes exchange rows."""

    def __init__(self, node: int, token: str) -> None:
        self.node = node
        self._token = token.encode().ljust(32, b"\0")[:32]
        self.connections: dict[int, ExchangeConnection] = {}
        self._joined: dict[int, asyncio.Event] = {}
        self._server: asyncio.Server | None = None

    async def listen(self, host: str = "127.0.0.1") -> int:
        self._server = await asyncio.start_server(self._accept, host, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def connect(self, node: int, host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(_HELLO.pack(self.node, self._token))
        await writer.drain()
        self._add(node, ExchangeConnection(reader, writer))

    def connection_to(self, node: int) -> ExchangeConnection:
        connection = self.connections.get(node)
        if connection is None:
            raise ConnectionError(f"no exchange connection to node {node}")
        return connection

    async def wait_for(self, nodes: set[int], timeout: float = 30) -> None:
        """Until this process is connected to every node of ``nodes`` (a node that just
        joined may be connected a moment after meta heard of it)."""
        for node in nodes - {self.node}:
            event = self._joined.setdefault(node, asyncio.Event())
            await asyncio.wait_for(event.wait(), timeout)

    def drop(self, node: int) -> None:
        self.connections.pop(node, None)
        self._joined.pop(node, None)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections.values()):
            await connection.close()
        self.connections.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            node, token = _HELLO.unpack(await reader.readexactly(_HELLO.size))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        if token != self._token:
            log.warning("exchange connection refused: wrong token")
            writer.close()
            return
        self._add(node, ExchangeConnection(reader, writer))

    def _add(self, node: int, connection: ExchangeConnection) -> None:
        self.connections[node] = connection
        self._joined.setdefault(node, asyncio.Event()).set()
