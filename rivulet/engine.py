"""The engine: one Rivulet instance, assembled from its layers.

It owns the state store, the catalog, the stream runtime, the barrier manager and the
threads that run DuckDB work, and hands out sessions. The embedded API runs it on an
event loop in a background thread; the server runs it on the server's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog
from rivulet.meta.ddl_controller import DdlController
from rivulet.sql.context import FrontendContext
from rivulet.sql.session import Session
from rivulet.sql.system_catalog import SystemCatalog
from rivulet.storage.state_store import StateStore, StoreOptions
from rivulet.stream.runtime import StreamRuntime

T = TypeVar("T")


class Engine:
    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        options: StoreOptions | None = None,
        query_threads: int | None = None,
    ) -> None:
        self.path = path
        self.store = StateStore(path, options or StoreOptions())
        try:
            self.catalog = Catalog(self.store)
            self.system = SystemCatalog()
            self.store.run_setup(self.system.setup_sql())
            self.store.lock_configuration()
            self.runtime = StreamRuntime()
            self._commit_executor = ThreadPoolExecutor(1, thread_name_prefix="rivulet-commit")
            threads = query_threads or max(4, 2 * (os.cpu_count() or 2))
            self._query_executor = ThreadPoolExecutor(threads, thread_name_prefix="rivulet-query")
            self.barrier = BarrierManager(self.store, self.runtime, self._commit_executor)
            self.ddl = DdlController(self.catalog, self.runtime, self.barrier)
            self.ddl.start_existing()
            self.frontend = FrontendContext(
                store=self.store,
                catalog=self.catalog,
                system=self.system,
                runtime=self.runtime,
                barrier=self.barrier,
                ddl=self.ddl,
                query_executor=self._query_executor,
            )
        except BaseException:
            self.store.close()
            raise
        self.closed = False

    def new_session(self, user: str = "root", database: str = "dev") -> Session:
        return Session(self.frontend, user=user, database=database)

    async def shutdown(self) -> None:
        """Commit what is pending, then release everything."""
        if self.closed:
            return
        with contextlib.suppress(Exception):
            await self.barrier.flush()
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._query_executor.shutdown(wait=True, cancel_futures=True)
        self._commit_executor.shutdown(wait=True)
        with contextlib.suppress(Exception):
            if self.store.directory is not None:
                self.store.checkpoint()
        self.store.close()


class EngineThread:
    """Runs an engine's event loop in a daemon thread, for the synchronous API."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="rivulet-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.run(self.engine.shutdown(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.loop.close()
