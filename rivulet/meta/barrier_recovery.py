"""The barrier manager's recoveries: after a failure, recover only the failed actor's
failure domain (``recover_domain``) or everything (``recover``), fail the statements
whose writes that dropped (``_Loss``, ``loss_count``, ``wait_committed(since=...)``),
and start the rebuilt actors after the backoff. A mixin of ``BarrierManager`` (its
state is the manager's, set up there): recovery is a concern of its own, apart from
injecting barriers and committing epochs, as in RisingWave's meta.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import duckdb

from rivulet.common.errors import INTERNAL_ERROR, Error, sql_error
from rivulet.meta.epochs import _Epoch, _Waiter
from rivulet.meta.recovery import (
    ActorInfo,
    Backoff,
    FailureCause,
    RecoveryEvent,
    RecoveryLog,
)
from rivulet.stream.expression import error_kind
from rivulet.stream.inbox import Inbox
from rivulet.stream.remote_actor import ComputeNodeLost

# The barrier manager's logger: what recoveries log is named as before the split.
log = logging.getLogger("rivulet.meta.barrier_manager")


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


@dataclass(frozen=True)
class _Loss:
    """A recovery: the uncommitted writes of ``jobs`` (None: of every job), those of the
    epochs after ``committed``, were dropped, including rows still waiting in inboxes."""

    seq: int
    committed: int
    jobs: frozenset[int] | None
    error: Error


class BarrierRecovery:
    """Recovery of ``BarrierManager``, whose ``__init__`` sets the state below."""

    if TYPE_CHECKING:
        recovery: RecoveryPolicy | None
        recovery_log: RecoveryLog
        backoff: Backoff
        recoveries: int
        failures: int
        _actors: set[int]
        _inboxes: dict[int, Inbox]
        _inflight: dict[int, _Epoch]
        _waiters: dict[int, list[_Waiter]]
        _last_injected: int
        _committed: int
        _commit_next: int
        _committing: bool
        _deferred_failure: tuple[Error, FailureCause] | None
        _deferred_domain: tuple[FailureDomain, FailureCause] | None
        _losses: deque[_Loss]
        _loss_count: int
        _held_jobs: dict[int, asyncio.Event]
        _domain_backoff: dict[frozenset[int], Backoff]
        _domain_restarts: dict[frozenset[int], tuple[asyncio.TimerHandle, RecoveryEvent]]
        _recovering: bool
        _restart_handle: asyncio.TimerHandle | None
        _restart_event: RecoveryEvent | None
        _paused: bool
        _resumed: asyncio.Event
        _inject_on_resume: bool

        @property
        def _held(self) -> bool: ...

        def _wake_commit(self) -> None: ...

        def _release(self) -> None: ...

    # --------------------------------------------------------------- failure
    def actor_failed(self, actor_id: int, error: BaseException) -> None:
        if actor_id not in self._actors:
            return  # an actor of a dataflow already torn down
        # The log has the traceback; what is recorded and shown names no data value.
        what = type(error).__name__
        if isinstance(error, duckdb.Error):
            what += f" ({error_kind(error)})"
        elif isinstance(error, ComputeNodeLost):
            what += f": {error}"  # which node, and why: no data value
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

    # ---------------------------------------------------------------- losses
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

    # -------------------------------------------------------------- recovery
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
            self._start_rebuilt(start, event)
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
        self._start_rebuilt(start, event)
        self._release()

    def _start_rebuilt(self, start: Callable[[], None] | None, event: RecoveryEvent) -> None:
        """Start a recovery's rebuilt actors; the recovery is over either way (a failure to
        start is logged: the next failure recovers again)."""
        try:
            if start is not None:
                start()
        except Exception:
            log.exception("recovery %d could not start the rebuilt actors", event.id)
        self.recovery_log.restarted(event)


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
