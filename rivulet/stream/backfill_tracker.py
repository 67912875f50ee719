"""Backfill progress of creating jobs, as their scan actors report it, and their rate limits.

Every scan actor reports at every barrier how many snapshot rows it has read for the
vnodes it owns (per-vnode counters persisted with its progress, so they travel with the
vnodes) and how many there are. A job's progress is the sum over its current actors.
When the job is rebuilt (reschedule, recovery, restart) the runtime names the new actors
(``track``); the old actors' last reports stand until every new one has reported, so the
sum never counts a vnode twice or not at all, and a reschedule never sets it back (the new
actors start from the counters committed with the barrier that stopped the old ones).
Only a failure can: the rows read in epochs that never committed are read again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BackfillReport:
    epoch: int
    consumed: int
    total: int
    done: bool


@dataclass
class _JobProgress:
    actors: frozenset[int] = frozenset()
    reports: dict[int, BackfillReport] = field(default_factory=dict)
    # The last sum over a complete set of actors: (consumed, total, done).
    last: tuple[int, int, bool] | None = None


class BackfillProgress:
    """The engine's ``BackfillTracker``: latest report per (job, actor), rate limits."""

    def __init__(self) -> None:
        self._jobs: dict[int, _JobProgress] = {}
        self._rate_limits: dict[int, int | None] = {}
        # The limit of jobs without one of their own (None: unlimited).
        self.default_rate_limit: int | None = None

    # ------------------------------------------------------------- the protocol
    def report(
        self, job_id: int, actor_id: int, epoch: int, consumed: int, total: int, done: bool
    ) -> None:
        job = self._jobs.setdefault(job_id, _JobProgress())
        job.reports[actor_id] = BackfillReport(epoch, consumed, total, done)

    def rate_limit(self, job_id: int) -> int | None:
        return self._rate_limits.get(job_id, self.default_rate_limit)

    def track(self, job_id: int, actor_ids: Collection[int]) -> None:
        job = self._jobs.setdefault(job_id, _JobProgress())
        job.actors = frozenset(actor_ids)

    def restore(self, job_id: int, consumed: int, total: int) -> None:
        """At start: the progress a job's backfill had at the last checkpoint stands
        until its rebuilt actors report (so SHOW JOBS does not go back to 0)."""
        job = self._jobs.setdefault(job_id, _JobProgress())
        if job.last is None:
            job.last = (consumed, total, False)

    # ---------------------------------------------------------------- control
    def set_rate_limit(self, job_id: int, rows_per_second: int | None) -> None:
        """Rows per second per actor (None: unlimited, 0: paused); applies live."""
        self._rate_limits[job_id] = rows_per_second

    def clear_rate_limit(self, job_id: int) -> None:
        """The job follows ``default_rate_limit`` again."""
        self._rate_limits.pop(job_id, None)

    def forget(self, job_id: int) -> None:
        """A dropped (or cancelled) job."""
        self._jobs.pop(job_id, None)
        self._rate_limits.pop(job_id, None)

    # ---------------------------------------------------------------- reading
    def progress(self, job_id: int) -> tuple[int, int, bool]:
        """(consumed, total, all done) of a job's backfill. A job never built reports
        (0, 0, False); a job without scans is done at once."""
        job = self._jobs.get(job_id)
        if job is None:
            return (0, 0, False)
        if all(a in job.reports for a in job.actors):
            current = [job.reports[a] for a in job.actors]
            consumed = sum(r.consumed for r in current)
            total = sum(r.total for r in current)
            done = all(r.done for r in current)
            job.last = (consumed, max(total, consumed), done)
            # Reports of actors that are gone no longer matter.
            for stale in [a for a in job.reports if a not in job.actors]:
                del job.reports[stale]
        if job.last is None:
            return (0, 0, False)
        return job.last

    def done_epoch(self, job_id: int) -> int | None:
        """The epoch by which every current actor of the job reported its backfill done
        (None: not all have). Reports of replaced actors do not count: a done reported
        in an epoch that a failure lost is reported again, later, by the rebuilt actor."""
        job = self._jobs.get(job_id)
        if job is None or not job.actors:
            return None
        current = [job.reports.get(a) for a in job.actors]
        if any(r is None or not r.done for r in current):
            return None
        return max(r.epoch for r in current if r is not None)

    def reports(self, job_id: int) -> dict[int, BackfillReport]:
        """The latest report of each actor of a job (current and not yet replaced)."""
        job = self._jobs.get(job_id)
        return dict(job.reports) if job is not None else {}
