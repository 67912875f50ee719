"""The control connection between meta and a compute node.

Meta tells a node what to build, start and abort, and when an epoch is committed; the
node tells meta which barriers its actors collected (with the state they wrote in that
epoch), when an actor ended or failed, and how far its backfills are. Each message is a
frame::

    u32 header length | header (JSON) | u64 payload length | payload (pickle, or empty)

Headers name the operation (``op``) and carry small fields; what is larger or richer
(job graphs, sealed memtables of Arrow tables) goes in the payload. Both ends are
processes of one engine that trust each other (the node proved it knows the token meta
gave it), so pickle is safe here; it never reads bytes from anyone else.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import struct
from typing import Any

# The environment variable that gives a compute node the engine's token.
TOKEN_VARIABLE = "RIVULET_NODE_TOKEN"

_HEADER_LEN = struct.Struct("!I")
_PAYLOAD_LEN = struct.Struct("!Q")

Header = dict[str, Any]


class ControlConnection:
    """One side of a control connection: ``send`` never waits (frames are buffered in
    order), ``receive`` waits for the next frame (``asyncio.IncompleteReadError`` once
    the other side is gone)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def send(self, header: Header, payload: object = None) -> None:
        if self.writer.is_closing():
            return
        head = json.dumps(header).encode()
        body = b"" if payload is None else pickle.dumps(payload, protocol=5)
        self.writer.write(_HEADER_LEN.pack(len(head)) + head + _PAYLOAD_LEN.pack(len(body)))
        if body:
            self.writer.write(body)

    async def drain(self) -> None:
        await self.writer.drain()

    async def receive(self) -> tuple[Header, Any]:
        (n,) = _HEADER_LEN.unpack(await self.reader.readexactly(_HEADER_LEN.size))
        header = json.loads(await self.reader.readexactly(n))
        (m,) = _PAYLOAD_LEN.unpack(await self.reader.readexactly(_PAYLOAD_LEN.size))
        payload = pickle.loads(await self.reader.readexactly(m)) if m else None
        return header, payload

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass
