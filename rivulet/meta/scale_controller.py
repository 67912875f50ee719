"""The scale controller: where and how widely jobs run, changed online.

ALTER ... SET PARALLELISM / BACKFILL_PARALLELISM / BACKFILL_RATE_LIMIT, EXPLAIN of a
reschedule, workers joining and leaving. A change of layout rebuilds the dataflow through
one barrier that stops every actor (``rebuild_dataflow``); the jobs are built again from
the catalog by the job manager. Jobs tied to a creating backfill that cannot move are
pinned at their actor count until it completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import numpy as np

from rivulet.common.errors import (
    INTERNAL_ERROR,
    OBJECT_NOT_IN_PREREQUISITE_STATE,
    QUERY_CANCELED,
    UNDEFINED_TABLE,
    sql_error,
)
from rivulet.meta.catalog import CatalogChange, TableCatalog
from rivulet.meta.ddl_shared import DdlPart, DdlShared
from rivulet.meta.fragments import replace_graph
from rivulet.storage.state_store import META_SCHEMA
from rivulet.stream.exchange import even_mapping
from rivulet.stream.message import StopActors
from rivulet.stream.plan import StreamScanNode
from rivulet.stream.runtime import RunningJob, wait_finished

# Builds every job (or ``only`` these) from the catalog, not started (the job manager's).
StartExisting = Callable[..., list[RunningJob]]


class WorkerProcesses(Protocol):
    """Where workers are processes: started before actors go to a new worker, stopped
    once a removed worker's actors moved away."""

    async def start_worker(self, worker_id: int) -> None: ...
    async def stop_worker(self, worker_id: int) -> None: ...


class ScaleController(DdlPart):
    def __init__(
        self,
        shared: DdlShared,
        start_existing: StartExisting,
        automatic_parallelism: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(shared)
        self.start_existing = start_existing
        # Whether worker changes reschedule adaptive jobs (a system parameter's).
        self.automatic_parallelism = automatic_parallelism
        # How long a reschedule may wait for its stop barrier before giving up.
        self.reschedule_timeout_s = 60.0
        # Jobs whose backfill is done and that are being rebuilt at their normal policy.
        self.finishing: set[int] = set()
        # The workers' processes (None: workers run in this process).
        self.worker_processes: WorkerProcesses | None = None

    async def alter_parallelism(self, table: TableCatalog, policy: str, *, deferred: bool) -> None:
        """Set a job's parallelism policy. Online: its actors are rebuilt at the new
        parallelism through one checkpoint barrier, and this returns once the new layout
        is committed. ``deferred``: stored, applied at the next rebuild (recovery,
        restart, or another job's reschedule)."""
        async with self.lock:
            current = self.catalog.tables.get(table.id)
            if current is None:
                raise sql_error(UNDEFINED_TABLE, f'relation "{table.name}" does not exist')
            change = CatalogChange()
            blockers = self._blockers(current)
            if deferred:
                target = None if policy == current.parallelism and not blockers else policy
                if target == current.target_parallelism:
                    return
                note = _blocked_note(current, blockers) if target is not None else None
                self.catalog.update_job(
                    current, change, target_parallelism=target, reconcile_note=note
                )
                await self.barrier.checkpoint(change)
                return
            self._refuse_if_blocked(current, blockers)
            running = self.runtime.jobs.get(table.id)
            live = running is not None and all(
                len(f.actor_ids) == self.cluster.parallelism(policy)
                for f in running.graph.fragments
                if f.mapping is not None and not mirrors_upstream(f)
            )
            if (
                policy == current.parallelism
                and current.target_parallelism is None
                and live
                and not (current.creating and current.backfill_parallelism is not None)
            ):
                return  # a no-op: no barrier at all
            self.catalog.set_parallelism(current, policy, change)
            await self.rebuild_dataflow(change)

    def explain_reschedule(self, table: TableCatalog, policy: str) -> list[str]:
        """EXPLAIN ALTER ... SET PARALLELISM: the layout the job would get, per fragment
        and worker (placement is deterministic), without changing anything."""
        n = self.cluster.parallelism(policy)
        lines = [f"Job {table.id} ({table.name}): policy {table.parallelism} -> {policy}"]
        blockers = self._blockers(table)
        if blockers:
            lines.append(
                f"Refused online: tied to creating job {blockers[0].id}, whose backfill"
                " cannot move (DEFERRED applies it when that backfill completes)"
            )
        running = self.runtime.jobs.get(table.id)
        fragments = running.graph.fragments if running is not None else []
        movable = [f for f in fragments if f.mapping is not None and not mirrors_upstream(f)]
        if movable and all(len(f.actor_ids) == n for f in movable):
            lines.append("No change: every fragment already runs this many actors (no barrier)")
        mapping = even_mapping(n)
        workers = self.cluster.place(n)
        for f in fragments:
            if f.mapping is None:
                lines.append(f"Fragment {f.fragment_id}: single actor, unchanged")
                continue
            if mirrors_upstream(f):
                lines.append(f"Fragment {f.fragment_id}: follows its upstream (no-shuffle)")
                continue
            lines.append(f"Fragment {f.fragment_id}: {len(f.actor_ids)} -> {n} actors")
            for worker in sorted(set(workers)):
                mine = [i for i, w in enumerate(workers) if w == worker]
                vnodes = np.flatnonzero(np.isin(mapping, mine))
                lines.append(
                    f"  worker {worker}: {len(mine)} actor(s), {len(vnodes)} vnodes"
                    f" [{_ranges(vnodes)}]"
                )
        return lines

    async def alter_backfill_parallelism(
        self, table: TableCatalog, policy: str | None, *, deferred: bool
    ) -> None:
        """The parallelism a creating job runs at until its backfill completes (None:
        its normal policy). Online for a creating job whose scans can move."""
        async with self.lock:
            current = self.catalog.tables.get(table.id)
            if current is None:
                raise sql_error(UNDEFINED_TABLE, f'relation "{table.name}" does not exist')
            blockers = self._blockers(current)
            if not deferred:
                self._refuse_if_blocked(current, blockers)
            change = CatalogChange()
            self.catalog.update_job(current, change, backfill_parallelism=policy)
            if current.creating and not deferred:
                await self.rebuild_dataflow(change)
            else:
                await self.barrier.checkpoint(change)

    async def alter_backfill_rate_limit(self, table: TableCatalog, limit: int | None) -> None:
        """Rows per second per scan actor (0 pauses, None: unlimited); applies at once."""
        async with self.lock:
            current = self.catalog.tables.get(table.id)
            if current is None:
                raise sql_error(UNDEFINED_TABLE, f'relation "{table.name}" does not exist')
            change = CatalogChange()
            self.catalog.update_job(current, change, backfill_rate_limit=limit)
            await self.barrier.checkpoint(change)
            self.backfill.set_rate_limit(current.id, limit)

    def _blockers(self, table: TableCatalog) -> list[TableCatalog]:
        """Creating jobs whose backfill cannot move online and that tie ``table``: the
        job itself, or jobs reading it (their scans are chained to its actors)."""
        return [
            j
            for j in self.catalog.all_tables()
            if j.creating
            and j.backfill_type in UNMOVABLE_SCANS
            and (j.id == table.id or table.id in j.dependencies)
        ]

    def _refuse_if_blocked(self, table: TableCatalog, blockers: list[TableCatalog]) -> None:
        if any(b.id == table.id for b in blockers):
            raise sql_error(
                OBJECT_NOT_IN_PREREQUISITE_STATE,
                f"Cannot alter the job {table.id} because its creating backfill contains a"
                " scan type that does not support online rescheduling",
                hint="Watch SHOW JOBS and wait for the backfill to finish; or repeat the"
                " statement with DEFERRED to apply it when the backfill completes; or"
                " recreate the materialized view after SET streaming_parallelism.",
            )
        if blockers:
            names = ", ".join(f"{b.id} ({b.name})" for b in blockers)
            raise sql_error(
                OBJECT_NOT_IN_PREREQUISITE_STATE,
                f"Cannot alter the job {table.id} because it is blocked by creating"
                " unreschedulable backfill jobs",
                hint=f"Blocked by job {names}. Wait for it (SHOW JOBS), or repeat the"
                " statement with DEFERRED to apply it when that backfill completes.",
            )

    def pinned_counts(self) -> dict[int, int]:
        """Actor counts that a rebuild must keep: every job tied to a creating backfill
        that cannot move."""
        pinned: dict[int, int] = {}
        for j in self.catalog.all_tables():
            if j.creating and j.backfill_type in UNMOVABLE_SCANS and j.id not in self.finishing:
                for jid in (j.id, *j.dependencies):
                    count = self._live_count(jid)
                    if count:
                        pinned[jid] = count
        return pinned

    def note_pin(self, table: TableCatalog, count: int | None, applied: CatalogChange) -> None:
        """A job kept at ``count`` actors by a creating backfill that cannot move, while
        its policy asks for another count, shows why (``blocked by job <id>``) until that
        backfill completes; a note whose pin is gone (and no target waits) goes."""
        note = None
        if count is not None and table.target_parallelism is None:
            if count != self.cluster.parallelism(table.running_policy):
                note = _blocked_note(table, self._blockers(table))
        elif table.target_parallelism is not None:
            return  # the deferred target's note stands
        if note != table.reconcile_note:
            self.catalog.update_job(table, applied, reconcile_note=note)

    def drifted(self, job_id: int, policy: str) -> bool:
        """Whether a running job has another actor count than ``policy`` asks for (it was
        pinned by a creating backfill that cannot move)."""
        live = self._live_count(job_id) if job_id in self.runtime.jobs else 0
        return live != 0 and live != self.cluster.parallelism(policy)

    def _live_count(self, job_id: int) -> int:
        """Actors per (non-mirrored) hash fragment of a job as it runs or, before it runs
        (a restart), as stored."""
        running = self.runtime.jobs.get(job_id)
        if running is not None:
            counts = [
                len(f.actor_ids)
                for f in running.graph.fragments
                if f.mapping is not None and not mirrors_upstream(f)
            ]
            return max(counts, default=0)
        row = (
            self.catalog.store.cursor()
            .execute(
                f"SELECT max(n) FROM (SELECT count(*) AS n FROM {META_SCHEMA}.actors a"
                f" JOIN {META_SCHEMA}.fragments f ON a.fragment_id = f.fragment_id"
                " WHERE f.job_id = ? AND f.distribution_type = 'HASH'"
                " AND NOT list_contains(f.flags, 'STREAM_SCAN') GROUP BY f.fragment_id)",
                [job_id],
            )
            .fetchall()  # never leave this thread's cursor with an unfinished result
        )
        return int(row[0][0]) if row and row[0][0] is not None else 0

    def release_held(self, blocker: TableCatalog, change: CatalogChange) -> bool:
        """``blocker``'s backfill no longer holds anything (it completed, or was dropped
        or cancelled): the jobs it read get their deferred targets, and those it kept at
        their actor count go back to their policy, unless another creating backfill still
        holds them. Returns whether any job must be rebuilt."""
        moves = False
        for dep_id in blocker.dependencies:
            dep = self.catalog.tables.get(dep_id)
            if dep is None or [b for b in self._blockers(dep) if b.id != blocker.id]:
                continue
            if dep.target_parallelism is not None:
                self.catalog.update_job(
                    dep, change, parallelism=dep.target_parallelism,
                    target_parallelism=None, reconcile_note=None,
                )  # fmt: skip
                moves = True
            elif self.drifted(dep_id, dep.parallelism):
                if dep.reconcile_note is not None:
                    self.catalog.update_job(dep, change, reconcile_note=None)
                moves = True
        return moves

    async def add_worker(self, slots: int) -> int:
        """A new worker; jobs whose policy depends on the slots are rescheduled to use it
        (unless automatic parallelism control is off). Returns its id."""
        async with self.lock:
            change = CatalogChange()
            worker = self.cluster.prepare_add(slots, change)
            processes = self.worker_processes
            if processes is not None:
                await self._start_process(processes, worker.id)
            try:
                if self.automatic_parallelism():
                    await self.rebuild_dataflow(change)
                else:
                    await self.barrier.checkpoint(change)
            except BaseException:
                if processes is not None and worker not in self.cluster.workers:
                    await processes.stop_worker(worker.id)
                raise
            return worker.id

    async def _start_process(self, processes: WorkerProcesses, worker_id: int) -> None:
        try:
            await processes.start_worker(worker_id)
        except (OSError, TimeoutError) as exc:
            raise sql_error(
                INTERNAL_ERROR,
                f"the compute node of worker {worker_id} did not start: {exc or type(exc).__name__}",
                hint="The server log says why; nothing changed, retry the statement.",
            ) from exc

    async def remove_worker(self, worker_id: int) -> None:
        """Take a worker away; its actors move to the others online."""
        async with self.lock:
            change = CatalogChange()
            self.cluster.prepare_remove(worker_id, change)
            await self.rebuild_dataflow(change)
            if self.worker_processes is not None:
                await self.worker_processes.stop_worker(worker_id)  # drained: no actor left

    async def rebuild_dataflow(
        self, change: CatalogChange, finalize: Callable[[CatalogChange], None] | None = None
    ) -> None:
        """Rebuild every job's actors from the catalog through one barrier: the barrier
        carrying ``change`` stops every actor; once it is committed (all state written up
        to it), the jobs are built again as the catalog now says and started, and the
        writes that arrived meanwhile go to the new actors. No barrier is injected in
        between, so nothing is lost or doubled. Returns once the new layout is committed.
        The caller holds ``self.lock``."""
        # A recovery in its backoff has built actors that have not started: wait until
        # they run, so that the stop barrier reaches them.
        await self.barrier.wait_recovered()
        actors = frozenset(a for job in self.runtime.jobs.values() for a in job.actors)
        stopping = self.runtime.actor_tasks()
        losses = self.barrier.loss_count
        self.barrier.pause()
        try:
            epoch = self.barrier.inject(mutation=StopActors(actors), change=change)
            try:
                await asyncio.wait_for(
                    self.barrier.wait_committed(epoch), self.reschedule_timeout_s
                )
            except TimeoutError:
                # Never hang: an actor that does not reach the barrier is recovered from
                # the last checkpoint, where ``change`` did not happen.
                error = sql_error(
                    QUERY_CANCELED,
                    f"the reschedule did not complete within {self.reschedule_timeout_s:g} s;"
                    " the dataflow was recovered from the last checkpoint and nothing changed",
                    hint="Look for a stuck or overloaded job (SHOW JOBS, rw_fragments) and"
                    " retry the statement.",
                )
                self.barrier.recover(error)
                raise error from None
            await wait_finished(stopping)
            if self.barrier.loss_count != losses:
                # A recovery came after the stop's commit and rebuilt every job from the
                # catalog, ``change`` included: the rebuild is done (by it), and the actors
                # now running are the recovery's, never stopped by this barrier.
                return
            # After the commit: ``change`` (e.g. a backfill marked done) is in the catalog.
            pinned = self.pinned_counts()
            pending = self.runtime.take_stopped()
            applied = CatalogChange()
            jobs = self.start_existing(applied, pinned)
            replace_graph(jobs, applied)
            if finalize is not None:
                finalize(applied)
            for job in jobs:
                self.runtime.start_job(job)
            for table_id, chunk in pending:
                self.runtime.write_dml(
                    table_id, chunk, list(self.catalog.tables[table_id].dist_key)
                )
        finally:
            self.barrier.resume()
        await self.barrier.checkpoint(applied)


def mirrors_upstream(fragment: object) -> bool:
    """A scan fragment chained 1:1 to its upstream: its actors follow the upstream's, not
    its own job's policy (an arrangement scan's follow the job's)."""
    return any(
        isinstance(n, StreamScanNode) and n.mirrors_upstream
        for n in fragment.leaves()  # type: ignore[attr-defined]
    )


# Scan types whose creating backfill cannot be rescheduled online (RisingWave's rule for
# no_shuffle; Rivulet's snapshot scan resumes like arrangement, so it may move).
UNMOVABLE_SCANS = frozenset({"no_shuffle"})


def _blocked_note(table: TableCatalog, blockers: list[TableCatalog]) -> str | None:
    others = [b for b in blockers if b.id != table.id]
    if others:
        return f"blocked by job {others[0].id}"
    return "pending" if blockers else None


def _ranges(values: np.ndarray) -> str:
    """Sorted integers as compact ranges: 0-3, 8, 10-12."""
    runs: list[list[int]] = []
    for v in (int(x) for x in values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
