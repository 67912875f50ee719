"""Recoveries: what each one was (``rw_catalog.rw_recovery_events``) and how long the
next one waits.

A recovery rebuilds every job from the last committed checkpoint (an actor failed, a
checkpoint failed, a reschedule timed out, a user ran RECOVER, or the process
restarted). Each is recorded as a ``RecoveryEvent``: kept in memory (the last
``KEEP_EVENTS``), written to ``meta.recovery_events`` at once (a failure that repeats
before any epoch commits must still be visible), and completed with its duration at the
first checkpoint the rebuilt dataflow commits.

Failures that repeat back off: the first one after a healthy period rebuilds at once,
each further one waits twice as long as the one before (``initial_s`` doubling up to
``max_s``), so that a job failing on every chunk does not spin.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import duckdb

from rivulet.storage.state_store import META_SCHEMA, StateStore

log = logging.getLogger(__name__)

# Events kept in memory and in the meta table (older ones are dropped).
KEEP_EVENTS = 1000

RECOVERY_EVENTS_DDL = f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.recovery_events (
    id BIGINT PRIMARY KEY, started_at TIMESTAMPTZ NOT NULL, reason VARCHAR NOT NULL,
    actor_id INTEGER, fragment_id INTEGER, job_id INTEGER, job_name VARCHAR,
    recovered_epoch BIGINT NOT NULL, attempt INTEGER NOT NULL, backoff_ms BIGINT NOT NULL,
    duration_ms BIGINT, scope VARCHAR)"""
# Stores made before recoveries could be scoped to the failed jobs.
RECOVERY_EVENTS_MIGRATION = (
    f"ALTER TABLE {META_SCHEMA}.recovery_events ADD COLUMN IF NOT EXISTS scope VARCHAR"
)

_COLUMNS = (
    "id, started_at, reason, actor_id, fragment_id, job_id, job_name, recovered_epoch,"
    " attempt, backoff_ms, duration_ms, scope"
)


class ActorInfo(NamedTuple):
    """Where a running actor sits: its fragment and job."""

    fragment_id: int
    job_id: int
    job_name: str | None


@dataclass(frozen=True, slots=True)
class FailureCause:
    """What made a recovery necessary: a reason (for an actor, the exception it raised),
    and the actor it hit if one did."""

    reason: str
    actor_id: int | None = None
    fragment_id: int | None = None
    job_id: int | None = None
    job_name: str | None = None
    # RECOVER run by a user: never delayed, and not a failure of the dataflow.
    manual: bool = False
    # The whole exception text, for the server log only: it may hold data values, which
    # the recorded ``reason`` never does.
    detail: str | None = None

    def describe(self, *, detailed: bool = False) -> str:
        """``actor 7 (fragment 3) of job 1002 "m1" failed: <reason>``, or the reason when
        no actor is known (``detailed``: with the exception's text, for the log)."""
        reason = self.detail if detailed and self.detail else self.reason
        if self.actor_id is None:
            return reason
        text = f"actor {self.actor_id}"
        if self.fragment_id is not None:
            text += f" (fragment {self.fragment_id})"
        if self.job_id is not None:
            text += f" of job {self.job_id}"
            if self.job_name:
                text += f' "{self.job_name}"'
        return f"{text} failed: {reason}"


@dataclass(slots=True)
class RecoveryEvent:
    id: int
    started_at: dt.datetime
    cause: FailureCause
    recovered_epoch: int  # the committed epoch the dataflow was rebuilt from
    attempt: int  # 1 for the first failure after a healthy period, then 2, 3...
    backoff_ms: int  # how long the rebuilt dataflow waited before it started
    duration_ms: int | None = None  # failure -> first checkpoint committed after it
    started_mono: float = 0.0
    # The jobs rebuilt (None: every job).
    scope: frozenset[int] | None = None

    def row(self) -> list[object]:
        c = self.cause
        return [
            self.id, self.started_at, c.reason, c.actor_id, c.fragment_id, c.job_id,
            c.job_name, self.recovered_epoch, self.attempt, self.backoff_ms, self.duration_ms,
            "all jobs" if self.scope is None else
            "jobs " + ", ".join(str(j) for j in sorted(self.scope)),
        ]  # fmt: skip


@dataclass
class Backoff:
    """Delays between rebuilds when failures repeat (seconds)."""

    initial_s: float = 0.1
    max_s: float = 5.0
    # A failure this long after the previous one starts a new run (attempt 1, no delay).
    reset_after_s: float = 30.0
    _attempt: int = field(default=0, init=False, repr=False)
    _last_failure: float | None = field(default=None, init=False, repr=False)

    def next(self, now: float) -> tuple[int, float]:
        """The attempt number of a failure at ``now`` and how long its rebuild waits."""
        if self._last_failure is None or now - self._last_failure >= self.reset_after_s:
            self._attempt = 0
        self._last_failure = now
        self._attempt += 1
        if self._attempt == 1:
            return 1, 0.0
        return self._attempt, min(self.initial_s * 2 ** (self._attempt - 2), self.max_s)


class RecoveryLog:
    """The recovery events of this store: in memory and in ``meta.recovery_events``."""

    def __init__(self, store: StateStore) -> None:
        """``store`` holds ``meta.recovery_events`` already (the catalog creates it)."""
        self.store = store
        # fetchall: a result left unfinished would hold this thread's cursor in an old
        # snapshot.
        rows = store.cursor().execute(f"SELECT max(id) FROM {META_SCHEMA}.recovery_events")
        last = rows.fetchall()[0][0]
        self._next_id = int(last) + 1 if last is not None else 1
        self.events: deque[RecoveryEvent] = deque(maxlen=KEEP_EVENTS)
        # Restarted events whose duration is not saved yet.
        self._unsaved: list[RecoveryEvent] = []

    def record(
        self,
        cause: FailureCause,
        recovered_epoch: int,
        attempt: int,
        backoff_s: float,
        started_mono: float | None = None,
        scope: frozenset[int] | None = None,
    ) -> RecoveryEvent:
        """A recovery begins (or began at ``started_mono``): remember it and write it at
        once. The caller makes sure no checkpoint is being committed (recoveries wait for
        a running commit)."""
        event = RecoveryEvent(
            id=self._next_id,
            started_at=dt.datetime.now(dt.UTC),
            cause=cause,
            recovered_epoch=recovered_epoch,
            attempt=attempt,
            backoff_ms=round(backoff_s * 1000),
            started_mono=time.monotonic() if started_mono is None else started_mono,
            scope=scope,
        )
        self._next_id += 1
        self.events.append(event)
        try:
            self.store.run_setup(
                [
                    (f"INSERT INTO {META_SCHEMA}.recovery_events ({_COLUMNS}) VALUES"
                     " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", event.row()),
                    (f"DELETE FROM {META_SCHEMA}.recovery_events WHERE id <= ?",
                     [event.id - KEEP_EVENTS]),
                ]
            )  # fmt: skip
        except duckdb.Error:
            # The recovery matters more than its record (the store may be what failed).
            log.warning("recovery event %d could not be saved", event.id, exc_info=True)
        return event

    def restarted(self, event: RecoveryEvent) -> None:
        """The rebuilt dataflow runs (or a later recovery took over ``event``'s): the next
        committed checkpoint completes ``event``."""
        self._unsaved.append(event)

    def writer(self) -> Callable[[duckdb.DuckDBPyConnection], None] | None:
        """An epoch writer (``BarrierManager.epoch_writers``): the epoch being committed
        was collected by every rebuilt actor, so the recoveries before it are over."""
        if not self._unsaved:
            return None
        now = time.monotonic()
        done, self._unsaved = self._unsaved, []
        for event in done:
            event.duration_ms = round((now - event.started_mono) * 1000)
        return partial(_save_durations, [(e.duration_ms, e.id) for e in done])


def _save_durations(rows: list[tuple[int | None, int]], cur: duckdb.DuckDBPyConnection) -> None:
    cur.executemany(
        f"UPDATE {META_SCHEMA}.recovery_events SET duration_ms = ? WHERE id = ?",
        [list(r) for r in rows],
    )
