"""The barrier manager: cuts time into epochs and commits each as one checkpoint.

Every ``barrier_interval_ms`` (and at once when a statement asks, e.g. a DML statement or
FLUSH waiting for its writes) it injects a barrier into every source actor's inbox. The
barrier flows through the dataflow; each actor reports it collected once it has passed it
and sealed its state. When every actor has collected epoch ``e``, the sealed writes of ``e``
and any catalog change attached to ``e`` are committed in one DuckDB transaction on the
commit thread, epochs strictly in order. Actors go on with ``e + 1`` meanwhile.

When an actor fails, only its failure domain is recovered (``recover_domain``): the
jobs connected to its job (the tables it reads, the MVs that read them), whose writes of
the epochs not yet committed are dropped from those epochs while the other jobs' go on
and commit; the domain's jobs are rebuilt from the last checkpoint and join at the next
barrier. Statements that wrote to the domain in the lost epochs fail; writes elsewhere
are not touched. When that cannot be done safely (a commit failed, a catalog change or a
reschedule is in flight, RECOVER) every epoch not yet committed is lost and the whole
dataflow is rebuilt from the last checkpoint (``recover``). Failures that repeat back off
(``meta.recovery``): the rebuilt actors wait before they start, and meanwhile their
tables' writes wait (for a domain) or no barrier is injected (for everything). The
recoveries are in ``meta.barrier_recovery``, the records of epochs in ``meta.epochs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial

import duckdb
import pyarrow as pa

from rivulet.common.errors import INTERNAL_ERROR, Error, sql_error
from rivulet.meta.barrier_recovery import (
    BarrierRecovery,
    FailureDomain,
    RecoveryPolicy,
    _Loss,
    job_failure_error,
)
from rivulet.meta.catalog import CatalogChange
from rivulet.meta.epochs import _Epoch, _Waiter
from rivulet.meta.recovery import Backoff, FailureCause, RecoveryEvent, RecoveryLog
from rivulet.storage.state_store import META_SCHEMA, StateStore
from rivulet.storage.state_table import MemTable, StateTable, flush_sealed
from rivulet.stream.inbox import Inbox
from rivulet.stream.message import Barrier, Mutation
from rivulet.stream.row_errors import RowErrorLog

log = logging.getLogger(__name__)

# An epoch that wrote at least this many rows or bytes returns Arrow's freed memory after
# its commit (its allocator keeps freed blocks: a few large values stayed resident).
_RELEASE_AFTER_ROWS = 100_000
_RELEASE_AFTER_BYTES = 16 << 20
# Group commit: a barrier that writers ask for waits while this many epochs are in
# flight (so that the writes arriving meanwhile share it): the cost of an epoch is mostly
# fixed, so fuller epochs are more writes per second (16 clients, one MV: ~295 rows/s with
# two epochs in flight, ~420-445 with one).
_MAX_UNCOMMITTED_EPOCHS = 1
# Recoveries remembered for the writes placed before them (``_Loss``).
_LOSSES_KEPT = 4096


class BarrierManager(BarrierRecovery):
    def __init__(
        self,
        store: StateStore,
        commit_executor: Executor,
        *,
        interval_ms: int = 1000,
        periodic: bool = True,
        recovery: RecoveryPolicy | None = None,
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
        self._waiters: dict[int, list[_Waiter]] = {}
        # Called with each epoch once it is committed (compute nodes are told).
        self.on_committed: list[Callable[[int], None]] = []
        # The next epoch to commit (epochs lost to a failure are skipped, never reused).
        self._commit_next = store.committed_epoch + 1
        self._tasks: list[asyncio.Task[None]] = []
        # How the dataflow is rebuilt after a failure (the engine's; None: nothing to
        # rebuild, as in a manager that runs no jobs).
        self.recovery = recovery
        # Domains whose rebuilt jobs wait for their backoff: writes to them wait too.
        self._held_jobs: dict[int, asyncio.Event] = {}
        self._domain_backoff: dict[frozenset[int], Backoff] = {}
        self._domain_restarts: dict[frozenset[int], tuple[asyncio.TimerHandle, RecoveryEvent]] = {}
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
        # Every recovery, for writes placed before it whose waiter came later (the
        # statement awaits after placing its rows): ``wait_committed(since=...)``.
        self._losses: deque[_Loss] = deque(maxlen=_LOSSES_KEPT)
        self._loss_count = 0
        # A failure reported while a commit runs waits for it: rebuilding from the last
        # checkpoint must not read state that the running commit is about to change.
        self._committing = False
        self._deferred_failure: tuple[Error, FailureCause] | None = None
        self._deferred_domain: tuple[FailureDomain, FailureCause] | None = None
        # While the dataflow is being rebuilt (a reschedule), no barrier may be injected:
        # writes wait in the stopped actors' inboxes for the new actors.
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._inject_on_resume = False
        # Writers wait for the epoch after the last injected one; its barrier waits while
        # the dataflow is busy with an earlier one (``_request_barrier``).
        self._barrier_wanted = False
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
        for handle, _ in self._domain_restarts.values():
            handle.cancel()
        self._domain_restarts.clear()
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
        self._barrier_wanted = False
        state = _Epoch(epoch, set(self._actors), mutation=mutation)
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

    # --------------------------------------------------------------- commits
    def _wake_commit(self) -> None:
        if self._commit_wakeup is not None:
            self._commit_wakeup.set()

    async def _commit_loop(self) -> None:
        assert self._commit_wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            if self._barrier_wanted and not self._dataflow_busy() and not self._held:
                self.inject()
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
            if self._deferred_domain is not None:
                (domain, cause), self._deferred_domain = self._deferred_domain, None
                if self._deferred_failure is None and not self.recover_domain(domain, cause):
                    self.recover(job_failure_error(cause), cause)
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
        nbytes = sum(m.nbytes for _, m in state.sealed)
        if writes:
            # What the in-memory fold counts: rows that replace or delete others.
            replacing = sum(m.nbytes for _, m in state.sealed if m.overwrites)
            await loop.run_in_executor(
                self._executor, self.store.commit_epoch, state.epoch, writes, replacing
            )
        for table, _ in state.sealed:
            table.committed(state.epoch)
        for change in state.changes:
            change.committed()
        self._committed = state.epoch
        self._commit_next = state.epoch + 1
        for notify in self.on_committed:
            notify(state.epoch)
        del self._inflight[state.epoch]
        large = (
            sum(len(m) for _, m in state.sealed) >= _RELEASE_AFTER_ROWS
            or nbytes >= _RELEASE_AFTER_BYTES
        )
        state.sealed = []  # freed before the release below, not after it
        if large:
            pa.default_memory_pool().release_unused()
        assert state.committed is not None
        state.committed.set_result(state.epoch)
        for epoch in [e for e in self._waiters if e <= state.epoch]:
            for waiter in self._waiters.pop(epoch):
                if not waiter.future.done():
                    waiter.future.set_result(state.epoch)

    # --------------------------------------------------------------- waiting

    async def wait_committed(
        self, epoch: int, jobs: frozenset[int] | None = None, *, since: int | None = None
    ) -> int:
        """Return once epoch ``epoch`` is committed (raises if it was lost to a failure,
        or, with ``jobs``, if a failure of those jobs' domain dropped their part of it).
        ``since``: the ``loss_count`` when the writes were placed; a recovery that
        dropped them before this call raises too."""
        if since is not None and (error := self._lost_since(since, epoch, jobs)) is not None:
            raise error
        if epoch <= self._committed:
            return self._committed
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(epoch, []).append(_Waiter(fut, jobs))
        return await fut

    async def commit_writes(
        self, epoch: int, jobs: frozenset[int] | None = None, *, since: int | None = None
    ) -> int:
        """Make writes placed in ``epoch`` (into ``jobs``, if given; when ``loss_count``
        was ``since``) visible now: inject its barrier unless it is on its way, then wait
        for its commit."""
        if since is not None and (error := self._lost_since(since, epoch, jobs)) is not None:
            raise error
        if self._last_injected < epoch:
            self._request_barrier()
        return await self.wait_committed(epoch, jobs, since=since)

    def _request_barrier(self) -> None:
        """Writers wait for the next epoch: inject its barrier now if the dataflow is
        free, else as soon as it is (the commit loop does, woken by each collection and
        commit). Every write placed meanwhile joins that epoch: many statements, one
        barrier and one DuckDB transaction (group commit)."""
        if self._held:
            self._inject_on_resume = True
        elif self._dataflow_busy():
            self._barrier_wanted = True
            self._wake_commit()  # it injects the barrier once the dataflow is free
        else:
            self.inject()

    def _dataflow_busy(self) -> bool:
        """Whether a barrier is still travelling through the actors, or commits lag
        behind the dataflow by ``_MAX_UNCOMMITTED_EPOCHS``."""
        if len(self._inflight) >= _MAX_UNCOMMITTED_EPOCHS:
            return True
        return any(not state.collected.is_set() for state in self._inflight.values())

    async def wait_jobs_ready(self, jobs: frozenset[int]) -> None:
        """Return once none of ``jobs`` waits for its domain's backoff (writes to a job
        being rebuilt wait, so that they land in an epoch its actors take part in)."""
        while True:
            held = [self._held_jobs[j] for j in jobs if j in self._held_jobs]
            if not held:
                return
            await held[0].wait()

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
        """A recovery's rebuilt actors (of every job, or of a failure domain) wait for
        their backoff to end."""
        return self._recovering or bool(self._held_jobs)

    @property
    def _held(self) -> bool:
        return self._paused or self._recovering

    async def wait_recovered(self) -> None:
        """Return once no recovery is waiting to start its rebuilt actors."""
        while self._recovering or self._held_jobs:
            if self._recovering:
                await self._resumed.wait()
            else:
                await self.wait_jobs_ready(frozenset(self._held_jobs))

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
        # A barrier writers asked for while the dataflow was busy, then held: the commit
        # loop injects it (nothing else may wake it: no timer barriers in tests).
        self._wake_commit()


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
    counted: list[tuple[int, int, str, str, str, int]], cur: duckdb.DuckDBPyConnection
) -> None:
    cur.executemany(
        f"INSERT INTO {META_SCHEMA}.stream_errors VALUES (?, ?, ?, ?, ?, ?, now()) "
        "ON CONFLICT (job_id, fragment_id, operator, error_type, expression) DO UPDATE SET "
        "count = count + excluded.count, last_seen = excluded.last_seen",
        [list(row) for row in counted],
    )
