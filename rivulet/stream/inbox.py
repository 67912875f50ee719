"""An actor's inbox: where statements' chunks and the barrier manager's barriers meet.

Statements and the barrier manager both append without awaiting in between, so every part
of a statement lands in the same epoch in every actor of the table (or every split of a
source)."""

from __future__ import annotations

import asyncio

from rivulet.stream.message import Message


class Inbox:
    """Unbounded: a writer never waits, so a statement's parts are placed atomically."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Message] = asyncio.Queue()

    def put(self, msg: Message) -> None:
        self._queue.put_nowait(msg)

    async def get(self) -> Message:
        return await self._queue.get()

    def get_nowait(self) -> Message | None:
        """The next message if one is waiting (a source checks between chunks)."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None
