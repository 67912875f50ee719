"""The barrier manager: cuts time into epochs and commits each as one checkpoint.

Every ``barrier_interval_ms`` (and at once when a statement asks, e.g. a DML statement or
FLUSH waiting for its writes) it injects a barrier into every source actor's inbox. The
barrier flows through the dataflow; each actor reports it collected once it has passed it
and sealed its state. When every actor has collected epoch ``e``, the sealed writes of ``e``
and any catalog change attached to ``e`` are committed in one DuckDB transaction on the
commit thread, epochs strictly in order. Actors go on with ``e + 1`` meanwhile.

When something fails (an actor, a commit) every epoch not yet committed is lost and the
dataflow is rebuilt from the last checkpoint (``recover``). Failures that repeat back off
(``meta.recovery``): the rebuilt actors wait before they start, and meanwhile no barrier
is injected, so statements wait for them instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial

import duckdb
import pyarrow as pa

from rivulet.common.errors import INTERNAL_ERROR, Error, sql_error
from rivulet.meta.catalog import CatalogChange
from rivulet.meta.recovery import (
    ActorInfo,
    Backoff,
    FailureCause,
    RecoveryEvent,
    RecoveryLog,
)
from rivulet.storage.state_store import META_SCHEMA, StateStore
from rivulet.storage.state_table import MemTable, StateTable, flush_sealed
from rivulet.stream.executors.dml import Inbox
from rivulet.stream.message import Barrier, Mutation
from rivulet.stream.row_errors import RowErrorLog

log = logging.getLogger(__name__)

# An epoch that wrote at least this many rows returns Arrow's freed memory after commit.
_RELEASE_AFTER_ROWS = 100_000


@dataclass
class _Epoch:
    epoch: int
    expected: set[int]
    sealed: list[tuple[StateTable, MemTable]] = field(default_factory=list)
    changes: list[CatalogChange] = field(default_factory=list)
    collected: asyncio.Event = field(default_factory=asyncio.Event)
    committed: asyncio.Future[int] | None = None


class BarrierManager:
    def __init__(
        self,
        store: StateStore,
        commit_executor: Executor,
        *,
        interval_ms: int = 1000,
        periodic: bool = True,
    ) -> None:
        self.store = store
        self._executor = commit_executor
        self.interval_ms = interval_ms
        self.periodic = periodic
        self._inboxes: dict[int, Inbox] = {}
        self._actors: set[int] = set()
        self._inflight: dict[int, _Epoch] = {}
        self._last_injected = store.committed_epoch
        self._committed = store.committed_epoch
        self._waiters: dict[int, list[asyncio.Future[int]]] = {}
        # The next epoch to commit (epochs lost to a failure are skipped, never reused).
        self._commit_next = store.committed_epoch + 1
        self._tasks: list[asyncio.Task[None]] = []
        # Rebuilds the dataflow from the last committed checkpoint (set by the engine):
        # drops every actor and builds the jobs again at once, so that writes find their
        # new inboxes, and returns what starts the rebuilt actors (maybe after a backoff).
        self.on_failure: Callable[[Error], Callable[[], None]] | None = None
        # Who an actor is, for the failure's log line and event (set by the engine).
        self.describe_actor: Callable[[int], ActorInfo | None] | None = None
        self.recovery_log = RecoveryLog(store)
        self.backoff = Backoff()
        self.recoveries = 0
        # Between a recovery and the start of its rebuilt actors (the backoff delay), no
        # barrier is injected: what statements write waits in the new actors' inboxes.
        self._recovering = False
        self._restart_handle: asyncio.TimerHandle | None = None
        self._restart_event: RecoveryEvent | None = None
        self._commit_wakeup: asyncio.Event | None = None
        # Bumped when a commit fails: a statement that wrote before must not succeed.
        self.failures = 0
        # A failure reported while a commit runs waits for it: rebuilding from the last
        # checkpoint must not read state that the running commit is about to change.
        self._committing = False
        self._deferred_failure: tuple[Error, FailureCause] | None = None
        # While the dataflow is being rebuilt (a reschedule), no barrier may be injected:
        # writes wait in the stopped actors' inboxes for the new actors.
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._inject_on_resume = False
        # Called at each commit on the loop: each returns what to write with the epoch
        # (e.g. backfill progress for rw_ddl_progress), or None.
        self.epoch_writers: list[
            Callable[[], Callable[[duckdb.DuckDBPyConnection], None] | None]
        ] = []

    # ----------------------------------------------------------- lifecycle
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._commit_wakeup = asyncio.Event()
        self._tasks.append(loop.create_task(self._commit_loop(), name="barrier-commit"))
        if self.periodic:
            self._tasks.append(loop.create_task(self._tick_loop(), name="barrier-tick"))

    async def stop(self) -> None:
        if self._restart_handle is not None:
            self._restart_handle.cancel()
            self._restart_handle = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            if self._actors and not self._held:
                self.inject()

    # -------------------------------------------------------------- actors
    @property
    def committed_epoch(self) -> int:
        return self._committed

    @property
    def write_epoch(self) -> int:
        """The epoch that a write placed in an inbox now belongs to."""
        return self._last_injected + 1

    def register_actor(self, actor_id: int, inbox: Inbox | None = None) -> None:
        """An actor that will collect every barrier from the next one on; source actors
        (no upstream actor) also get barriers put in their inbox."""
        self._actors.add(actor_id)
        if inbox is not None:
            self._inboxes[actor_id] = inbox

    def unregister_actor(self, actor_id: int) -> None:
        self._actors.discard(actor_id)
        self._inboxes.pop(actor_id, None)

    # ------------------------------------------------------------- barriers
    def inject(
        self, *, mutation: Mutation | None = None, change: CatalogChange | None = None
    ) -> int:
        """Send a checkpoint barrier now; returns its epoch."""
        epoch = self._last_injected + 1
        self._last_injected = epoch
        state = _Epoch(epoch, set(self._actors))
        state.committed = asyncio.get_running_loop().create_future()
        if change is not None:
            state.changes.append(change)
        self._inflight[epoch] = state
        barrier = Barrier(epoch, True, mutation)
        for inbox in self._inboxes.values():
            inbox.put(barrier)
        if not state.expected:
            state.collected.set()
            self._wake_commit()
        return epoch

    def collect(self, actor_id: int, barrier: Barrier) -> None:
        state = self._inflight.get(barrier.epoch)
        if state is None:
            return
        state.expected.discard(actor_id)
        if barrier.stops(actor_id):
            self.unregister_actor(actor_id)
            # Barriers injected after this one while it travelled will never reach it.
            for later in self._inflight.values():
                if later.epoch > barrier.epoch and actor_id in later.expected:
                    later.expected.discard(actor_id)
                    if not later.expected:
                        later.collected.set()
        if not state.expected:
            state.collected.set()
            self._wake_commit()

    def report_sealed(self, epoch: int, table: StateTable, memtable: MemTable) -> None:
        state = self._inflight.get(epoch)
        if state is not None:
            state.sealed.append((table, memtable))

    def actor_failed(self, actor_id: int, error: BaseException) -> None:
        if actor_id not in self._actors:
            return  # an actor of a dataflow already torn down
        what = f"{type(error).__name__}: {error}"
        known = self.describe_actor(actor_id) if self.describe_actor is not None else None
        cause = FailureCause(
            what,
            actor_id,
            known.fragment_id if known else None,
            known.job_id if known else None,
            known.job_name if known else None,
        )
        failure = sql_error(
            INTERNAL_ERROR,
            cause.describe(),
            hint="The streaming jobs were recovered from the last checkpoint and the"
            " statement's writes were not applied; run it again. rw_recovery_events lists"
            " the recoveries.",
        )
        self.recover(failure, cause)

    # --------------------------------------------------------------- commits
    def _wake_commit(self) -> None:
        if self._commit_wakeup is not None:
            self._commit_wakeup.set()

    async def _commit_loop(self) -> None:
        assert self._commit_wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            nxt = self._inflight.get(self._commit_next)
            if nxt is None or not nxt.collected.is_set():
                self._commit_wakeup.clear()
                await self._commit_wakeup.wait()
                continue
            self._committing = True
            try:
                await self._commit(nxt, loop)
            except Exception as exc:
                log.exception("checkpoint of epoch %d failed", nxt.epoch)
                reason = f"checkpoint of epoch {nxt.epoch} failed: {exc}"
                self._deferred_failure = self._deferred_failure or (
                    sql_error(INTERNAL_ERROR, reason),
                    FailureCause(reason),
                )
            finally:
                self._committing = False
            if self._deferred_failure is not None:
                (error, cause), self._deferred_failure = self._deferred_failure, None
                self.recover(error, cause)

    async def _commit(self, state: _Epoch, loop: asyncio.AbstractEventLoop) -> None:
        # Catalog changes create their state tables first and drop them last.
        writes: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
            c.write_setup for c in state.changes
        ]
        if state.sealed:
            writes.append(partial(flush_sealed, state.sealed))
        writes += [c.write for c in state.changes]
        for writer in self.epoch_writers:
            if (write := writer()) is not None:
                writes.append(write)
        if writes:
            await loop.run_in_executor(self._executor, self.store.commit_epoch, state.epoch, writes)
        for table, _ in state.sealed:
            table.committed(state.epoch)
        for change in state.changes:
            change.committed()
        self._committed = state.epoch
        self._commit_next = state.epoch + 1
        del self._inflight[state.epoch]
        if sum(len(m) for _, m in state.sealed) >= _RELEASE_AFTER_ROWS:
            # Arrow's allocator keeps freed blocks; give a large epoch's back to the OS.
            pa.default_memory_pool().release_unused()
        assert state.committed is not None
        state.committed.set_result(state.epoch)
        for epoch in [e for e in self._waiters if e <= state.epoch]:
            for fut in self._waiters.pop(epoch):
                if not fut.done():
                    fut.set_result(state.epoch)

    # --------------------------------------------------------------- waiting
    async def wait_committed(self, epoch: int) -> int:
        """Return once epoch ``epoch`` is committed (raises if it was lost to a failure)."""
        if epoch <= self._committed:
            return self._committed
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(epoch, []).append(fut)
        return await fut

    async def commit_writes(self, epoch: int) -> int:
        """Make writes placed in ``epoch`` visible now: inject its barrier unless it is
        on its way, then wait for its commit."""
        if self._last_injected < epoch:
            if self._held:
                self._inject_on_resume = True
            else:
                self.inject()
        return await self.wait_committed(epoch)

    async def flush(self) -> int:
        """Return once every write made before the call is committed and visible."""
        return await self.commit_writes(self.write_epoch)

    async def checkpoint(
        self, change: CatalogChange | None = None, mutation: Mutation | None = None
    ) -> int:
        """Commit ``change`` (and apply ``mutation``) with a barrier of its own."""
        while self._held:
            await self._resumed.wait()
        epoch = self.inject(mutation=mutation, change=change)
        return await self.wait_committed(epoch)

    # -------------------------------------------------------------- pausing
    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def recovering(self) -> bool:
        """A recovery's rebuilt actors wait for their backoff to end."""
        return self._recovering

    @property
    def _held(self) -> bool:
        return self._paused or self._recovering

    async def wait_recovered(self) -> None:
        """Return once no recovery is waiting to start its rebuilt actors."""
        while self._recovering:
            await self._resumed.wait()

    def pause(self) -> None:
        """Inject no barrier until ``resume`` (the caller injects its own)."""
        self._paused = True
        self._resumed.clear()

    def resume(self) -> None:
        """Barriers flow again; one that a write asked for meanwhile goes out now."""
        if not self._paused:
            return
        self._paused = False
        self._release()

    def _release(self) -> None:
        if self._held:
            return
        self._resumed.set()
        if self._inject_on_resume:
            self._inject_on_resume = False
            self.inject()

    # --------------------------------------------------------------- failure
    def recover(self, error: Error, cause: FailureCause | None = None) -> None:
        """Something failed (an actor, a commit): every epoch not yet committed is lost.
        Statements waiting on them get ``error``; the engine rebuilds the dataflow from
        the last committed checkpoint (``on_failure``) and barriers go on from there.
        The rebuilt actors start at once, or after a backoff when failures repeat."""
        cause = cause or FailureCause(error.message)
        if self._committing:
            self._deferred_failure = self._deferred_failure or (error, cause)
            return
        self.failures += 1
        self.recoveries += 1
        if cause.manual:
            attempt, delay = 1, 0.0
        else:
            attempt, delay = self.backoff.next(time.monotonic())
        event = self.recovery_log.record(cause, self._committed, attempt, delay)
        log.log(
            logging.INFO if cause.manual else logging.ERROR,
            "recovery %d: %s; rebuilding every job from the checkpoint of epoch %d%s",
            event.id,
            cause.describe(),
            self._committed,
            f" in {delay:g} s (failure {attempt} in a row)" if delay else "",
        )
        lost = [e for e in self._waiters if e > self._committed]
        for epoch in lost:
            for fut in self._waiters.pop(epoch):
                if not fut.done():
                    fut.set_exception(error)
        for state in self._inflight.values():
            if state.committed is not None and not state.committed.done():
                state.committed.set_exception(error)
                state.committed.exception()  # retrieved: nobody may be waiting on it
        self._inflight.clear()
        self._commit_next = self._last_injected + 1
        # A rebuild that was under way is superseded by the recovery's, and so are the
        # rebuilt actors of an earlier recovery still waiting for their backoff.
        self._paused = False
        if self._restart_handle is not None:
            self._restart_handle.cancel()
            self._restart_handle = None
            if self._restart_event is not None:  # over when this recovery's is
                self.recovery_log.restarted(self._restart_event)
        self._recovering = True
        self._resumed.clear()
        self._inject_on_resume = False
        self._actors.clear()
        self._inboxes.clear()
        start: Callable[[], None] | None = None
        try:
            start = self.on_failure(error) if self.on_failure is not None else None
        except Exception:
            # Barriers must flow again whatever happened: a statement waiting on a
            # recovery that never ends would hang.
            log.exception("recovery %d could not rebuild the dataflow", event.id)
        if delay > 0:
            self._restart_event = event
            self._restart_handle = asyncio.get_running_loop().call_later(
                delay, self._restart, start, event
            )
        else:
            self._restart(start, event)

    def record_restart(self, since: float) -> None:
        """The process started on a store with committed epochs (it stopped or was
        killed): its jobs are rebuilt from the last checkpoint like after any failure,
        and this is listed with the recoveries (reason ``restart``), its duration from
        ``since`` (the store opening, ``time.monotonic()``) to the first checkpoint."""
        cause = FailureCause("restart", manual=True)
        event = self.recovery_log.record(cause, self._committed, 1, 0.0, started_mono=since)
        log.info(
            "recovery %d: restart; rebuilding every job from the checkpoint of epoch %d",
            event.id,
            self._committed,
        )
        self.recovery_log.restarted(event)

    def _restart(self, start: Callable[[], None] | None, event: RecoveryEvent) -> None:
        """The backoff is over: the rebuilt actors start, and barriers flow again."""
        self._restart_handle = None
        self._restart_event = None
        self._recovering = False
        try:
            if start is not None:
                start()
        except Exception:
            log.exception("recovery %d could not start the rebuilt actors", event.id)
        self.recovery_log.restarted(event)
        self._release()


def row_errors_writer(
    log: RowErrorLog,
) -> Callable[[], Callable[[duckdb.DuckDBPyConnection], None] | None]:
    """An epoch writer (``BarrierManager.epoch_writers``) saving the row-error counts
    made since the last commit."""

    def writer() -> Callable[[duckdb.DuckDBPyConnection], None] | None:
        counted = log.take_unsaved()
        return partial(_save_row_errors, counted) if counted else None

    return writer


def _save_row_errors(
    counted: list[tuple[int, int, str, int]], cur: duckdb.DuckDBPyConnection
) -> None:
    cur.executemany(
        f"INSERT INTO {META_SCHEMA}.row_errors VALUES (?, ?, ?, ?, now()) "
        "ON CONFLICT (job_id, fragment_id, operator) DO UPDATE SET "
        "count = count + excluded.count, last_seen = excluded.last_seen",
        [list(row) for row in counted],
    )
