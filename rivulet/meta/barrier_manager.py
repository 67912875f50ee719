"""The barrier manager: cuts time into epochs and commits each as one checkpoint.

A checkpoint seals every writer's running epoch (taking each writer's lock, so that no
chunk is split across epochs), then commits the sealed writes and any catalog change in
one DuckDB transaction on the commit thread. Statements wait on ``flush`` for their
writes to become visible; concurrent statements share one commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial

import duckdb
import pyarrow as pa

from rivulet.common.errors import INTERNAL_ERROR, sql_error
from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_store import StateStore
from rivulet.stream.runtime import StreamRuntime

log = logging.getLogger(__name__)

# An epoch that wrote at least this many rows returns Arrow's freed memory after commit.
_RELEASE_AFTER_ROWS = 100_000


class BarrierManager:
    def __init__(
        self, store: StateStore, runtime: StreamRuntime, commit_executor: Executor
    ) -> None:
        self.store = store
        self.runtime = runtime
        self._executor = commit_executor
        self._lock = asyncio.Lock()
        self._last_epoch = store.committed_epoch
        # Bumped when a commit fails and uncommitted writes are discarded: a statement
        # that wrote before the bump must not report success.
        self.failures = 0

    @property
    def committed_epoch(self) -> int:
        return self.store.committed_epoch

    async def checkpoint(self, change: CatalogChange | None = None) -> int:
        """Commit everything written so far (and ``change``) as one epoch."""
        async with self._lock:
            epoch = self._last_epoch + 1
            sealed = []
            for writer in self.runtime.writers():
                async with writer.lock:
                    memtable = writer.state.seal(epoch)
                if memtable is not None:
                    sealed.append((writer.state, memtable))
            if not sealed and change is None:
                return self.store.committed_epoch
            writes: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
                partial(state.flush, memtable) for state, memtable in sealed
            ]
            if change is not None:
                writes.append(change.write)
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self.store.commit_epoch, epoch, writes)
            except Exception as exc:
                self.failures += 1
                self.runtime.discard_uncommitted()
                log.exception("checkpoint of epoch %d failed", epoch)
                if isinstance(exc, duckdb.Error) and change is not None:
                    raise
                raise sql_error(
                    INTERNAL_ERROR, f"checkpoint of epoch {epoch} failed: {exc}"
                ) from exc
            self._last_epoch = epoch
            for state, _ in sealed:
                state.committed(epoch)
            if sum(len(memtable) for _, memtable in sealed) >= _RELEASE_AFTER_ROWS:
                # Arrow's allocator keeps freed blocks; give a large epoch's back to the OS.
                pa.default_memory_pool().release_unused()
            if change is not None:
                change.committed()
            return epoch

    async def flush(self) -> int:
        """Return once every write made before the call is committed and visible."""
        failures = self.failures
        epoch = await self.checkpoint()
        if self.failures != failures:
            raise sql_error(
                INTERNAL_ERROR,
                "writes were discarded because a checkpoint failed",
                hint="Repeat the statement.",
            )
        return epoch
