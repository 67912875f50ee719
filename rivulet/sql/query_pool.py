"""The threads that run the DuckDB work of user statements, and their admission.

DuckDB releases the GIL while it runs, so a thread blocked in a long query costs no
Python time; what must not happen is a cheap statement waiting for a thread behind long
ones. Work that reads stored rows (tables, materialized views, table functions, CTEs) is
*heavy*: at most ``limit`` such calls run at once (the system parameter
``max_concurrent_queries``), the others wait their turn in arrival order. Work over
constants and the system catalog (``SELECT 1``, ``SET``, ``SHOW``, a driver's catalog
queries, an ``INSERT ... VALUES``) is *light*: it never waits for admission. The dataflow
and the commit have threads of their own (``engine``), so neither ever waits for a user's
query.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor

# Threads are started as work needs them (and stay): this only caps a runaway.
_MAX_THREADS = 256


class QueryPool:
    def __init__(self, limit: int, *, max_threads: int = _MAX_THREADS) -> None:
        self.executor = ThreadPoolExecutor(max_threads, thread_name_prefix="rivulet-query")
        self.limit = limit
        # Heavy calls admitted and not finished (read and written on the event loop).
        self.running = 0
        self._queue: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._queue if not f.done())

    def try_acquire(self) -> bool:
        """Admit a heavy call now if there is room and nobody waits before it."""
        if self.running < self.limit and not self._queue:
            self.running += 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a heavy call's turn (cancellable: the turn then goes to the next)."""
        if self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # admitted just as it was cancelled: pass the turn on
            else:
                try:
                    self._queue.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        self.running -= 1
        self._admit_waiting()

    def set_limit(self, limit: int) -> None:
        self.limit = limit
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self._queue and self.running < self.limit:
            fut = self._queue.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(None)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
