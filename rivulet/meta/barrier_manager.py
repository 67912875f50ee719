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
tables' writes wait (for a domain) or no barrier is injected (for everything).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

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
from rivulet.stream.expression import error_kind
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


@dataclass(frozen=True)
class FailureDomain:
    """The jobs recovered together after one of them failed: everything connected to it
    by reads. ``actors``/``state_tables``: what of the running dataflow belongs to them."""

    jobs: frozenset[int]
    actors: frozenset[int]
    state_tables: frozenset[int]


class RecoveryPolicy(Protocol):
    """How the dataflow is rebuilt after a failure: the engine's, which knows jobs and
    plans. Both rebuilds drop the actors concerned and build their jobs again at once, so
    that writes find their new inboxes, and return what starts the rebuilt actors (maybe
    after a backoff)."""

    def rebuild_all(self, error: Error) -> Callable[[], None]:
        """Every job, from the last committed checkpoint."""
        ...

    def rebuild_domain(self, domain: FailureDomain) -> Callable[[], None]:
        """The jobs of one failure domain; the others go on."""
        ...

    def failure_domain(self, actor_id: int) -> FailureDomain | None:
        """The jobs recovered with the actor's (None: recover everything)."""
        ...

    def describe_actor(self, actor_id: int) -> ActorInfo | None:
        """Who an actor is, for the failure's log line and event."""
        ...


@dataclass
class _Waiter:
    future: asyncio.Future[int]
    # The jobs whose writes the waiter needs (None: the epoch as a whole).
    jobs: frozenset[int] | None = None


@dataclass(frozen=True)
class _Loss:
    """A recovery: the uncommitted writes of ``jobs`` (None: of every job), those of the
    epochs after ``committed``, were dropped, including rows still waiting in inboxes."""

    seq: int
    committed: int
    jobs: frozenset[int] | None
    error: Error


@dataclass
class _Epoch:
    epoch: int
    expected: set[int]
    sealed: list[tuple[StateTable, MemTable]] = field(default_factory=list)
    changes: list[CatalogChange] = field(default_factory=list)
    mutation: Mutation | None = None
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

    def actor_failed(self, actor_id: int, error: BaseException) -> None:
        if actor_id not in self._actors:
            return  # an actor of a dataflow already torn down
        # The log has the traceback; what is recorded and shown names no data value.
        what = type(error).__name__
        if isinstance(error, duckdb.Error):
            what += f" ({error_kind(error)})"
        known = self.recovery.describe_actor(actor_id) if self.recovery is not None else None
        cause = FailureCause(
            what,
            actor_id,
            known.fragment_id if known else None,
            known.job_id if known else None,
            known.job_name if known else None,
            detail=f"{type(error).__name__}: {error}",
        )
        domain = self.recovery.failure_domain(actor_id) if self.recovery is not None else None
        if domain is not None and self.recover_domain(domain, cause):
            return
        self.recover(job_failure_error(cause), cause)

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
    @property
    def loss_count(self) -> int:
        """How many recoveries have run: taken when rows are placed in the dataflow and
        passed as ``since`` to the wait for their epoch."""
        return self._loss_count

    def _record_loss(self, jobs: frozenset[int] | None, error: Error) -> None:
        self._loss_count += 1
        self._losses.append(_Loss(self._loss_count, self._committed, jobs, error))

    def _lost_since(self, since: int, epoch: int, jobs: frozenset[int] | None) -> Error | None:
        """The error of a recovery after ``since`` that dropped writes of ``epoch`` (into
        ``jobs``), if one did."""
        if since >= self._loss_count:
            return None
        if not self._losses or self._losses[0].seq > since + 1:
            # Older than what is remembered: the writes may have been dropped.
            return self._losses[0].error if self._losses else None
        for loss in self._losses:
            if loss.seq <= since or loss.committed >= epoch:
                continue
            if loss.jobs is None or jobs is None or loss.jobs & jobs:
                return loss.error
        return None

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

    # --------------------------------------------------------------- failure
    def recover(self, error: Error, cause: FailureCause | None = None) -> None:
        """Something failed (an actor, a commit): every epoch not yet committed is lost.
        Statements waiting on them get ``error``; the engine rebuilds the dataflow from
        the last committed checkpoint (``RecoveryPolicy.rebuild_all``) and barriers go on from there.
        The rebuilt actors start at once, or after a backoff when failures repeat."""
        cause = cause or FailureCause(error.message)
        if self._committing:
            self._deferred_failure = self._deferred_failure or (error, cause)
            return
        self.failures += 1
        self.recoveries += 1
        self._record_loss(None, error)
        if cause.manual:
            attempt, delay = 1, 0.0
        else:
            attempt, delay = self.backoff.next(time.monotonic())
        event = self.recovery_log.record(cause, self._committed, attempt, delay)
        log.log(
            logging.INFO if cause.manual else logging.ERROR,
            "recovery %d: %s; rebuilding every job from the checkpoint of epoch %d%s",
            event.id,
            cause.describe(detailed=True),
            self._committed,
            f" in {delay:g} s (failure {attempt} in a row)" if delay else "",
        )
        lost = [e for e in self._waiters if e > self._committed]
        for epoch in lost:
            for waiter in self._waiters.pop(epoch):
                if not waiter.future.done():
                    waiter.future.set_exception(error)
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
        # Domains waiting for their backoff are rebuilt with everything else (their
        # recoveries are over when this one is).
        for handle, superseded in self._domain_restarts.values():
            handle.cancel()
            self.recovery_log.restarted(superseded)
        self._domain_restarts.clear()
        self._release_jobs(set(self._held_jobs))
        self._recovering = True
        self._resumed.clear()
        self._inject_on_resume = False
        self._actors.clear()
        self._inboxes.clear()
        start: Callable[[], None] | None = None
        try:
            start = self.recovery.rebuild_all(error) if self.recovery is not None else None
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

    def recover_domain(self, domain: FailureDomain, cause: FailureCause) -> bool:
        """Recover only ``domain`` (an actor of it failed): its part of every epoch not
        yet committed is dropped, the statements that wrote to it there fail, and its jobs
        are rebuilt from the last checkpoint while every other job goes on. False when
        that cannot be done safely (the caller recovers everything instead)."""
        if self._committing:
            # The running commit holds an epoch every actor collected: it is whole.
            if self._deferred_domain is None:
                self._deferred_domain = (domain, cause)
                return True
            return False
        if self._held or any(
            state.changes or state.mutation is not None for state in self._inflight.values()
        ):
            return False  # a catalog change or reschedule in flight: recover everything
        if self.recovery is None:
            return False
        error = job_failure_error(cause)
        policy = self.backoff
        backoff = self._domain_backoff.setdefault(
            domain.jobs, Backoff(policy.initial_s, policy.max_s, policy.reset_after_s)
        )
        attempt, delay = backoff.next(time.monotonic())
        event = self.recovery_log.record(cause, self._committed, attempt, delay, scope=domain.jobs)
        log.error(
            "recovery %d: %s; rebuilding job(s) %s from the checkpoint of epoch %d%s; the"
            " other jobs go on",
            event.id,
            cause.describe(detailed=True),
            ", ".join(map(str, sorted(domain.jobs))),
            self._committed,
            f" in {delay:g} s (failure {attempt} in a row)" if delay else "",
        )
        self.recoveries += 1
        self._record_loss(domain.jobs, error)
        for epoch in [e for e in self._waiters if e > self._committed]:
            keep = []
            for waiter in self._waiters[epoch]:
                if waiter.jobs is not None and waiter.jobs & domain.jobs:
                    if not waiter.future.done():
                        waiter.future.set_exception(error)
                else:
                    keep.append(waiter)
            self._waiters[epoch] = keep
        for state in self._inflight.values():
            state.expected -= domain.actors
            state.sealed = [
                (table, mem)
                for table, mem in state.sealed
                if table.schema.table_id not in domain.state_tables
            ]
            if not state.expected:
                state.collected.set()
        self._actors -= domain.actors
        for actor_id in domain.actors:
            self._inboxes.pop(actor_id, None)
        self._wake_commit()
        for job_id in domain.jobs:
            self._held_jobs.setdefault(job_id, asyncio.Event())
        start: Callable[[], None] | None = None
        try:
            start = self.recovery.rebuild_domain(domain)
        except Exception:
            log.exception("recovery %d could not rebuild the failed job(s)", event.id)

        def restart() -> None:
            self._domain_restarts.pop(domain.jobs, None)
            try:
                if start is not None:
                    start()
            except Exception:
                log.exception("recovery %d could not start the rebuilt actors", event.id)
            self.recovery_log.restarted(event)
            self._release_jobs(domain.jobs)

        if delay > 0:
            handle = asyncio.get_running_loop().call_later(delay, restart)
            self._domain_restarts[domain.jobs] = (handle, event)
        else:
            restart()
        return True

    def _release_jobs(self, jobs: set[int] | frozenset[int]) -> None:
        for job_id in jobs:
            event = self._held_jobs.pop(job_id, None)
            if event is not None:
                event.set()

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


def job_failure_error(cause: FailureCause) -> Error:
    """What a statement whose writes a job's failure lost is told: the job, never the
    values or internal state that made it fail (those go to the log)."""
    job = f'streaming job "{cause.job_name}"' if cause.job_name else "a streaming job"
    return sql_error(
        INTERNAL_ERROR,
        f"{job} failed and was recovered from the last checkpoint; the statement's writes"
        " were not applied",
        hint="Run the statement again. rw_recovery_events lists the recoveries and the"
        " server log has the cause.",
    )


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
