"""DDL: creating and dropping streaming jobs (tables, materialized views), atomically with
an epoch.

Creating a job: allocate ids, cut its plan into fragments, build its actors, and commit
its catalog rows, fragments and state tables with the barrier that starts the actors (and,
for an MV, attaches them to its upstream actors). Dropping: one barrier stops the job's
actors (and those of the MVs dropped with CASCADE), and its commit removes their catalog
rows and state tables. The in-memory catalog changes only once the commit succeeded. DDL
statements run one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import duckdb
import numpy as np

from rivulet.common.errors import (
    DEPENDENT_OBJECTS_STILL_EXIST,
    DUPLICATE_TABLE,
    INVALID_TABLE_DEFINITION,
    OBJECT_NOT_IN_PREREQUISITE_STATE,
    QUERY_CANCELED,
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    Error,
    sql_error,
)
from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog, CatalogChange, TableCatalog
from rivulet.meta.cluster import Cluster
from rivulet.meta.ddl_progress import CreatingJobsProgress
from rivulet.meta.fragmenter import fragment_job
from rivulet.meta.fragments import delete_graph, persist_graph, replace_graph
from rivulet.storage.state_store import META_SCHEMA, duckdb_text
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.backfill_tracker import BackfillProgress
from rivulet.stream.exchange import even_mapping
from rivulet.stream.message import StopActors
from rivulet.stream.plan import (
    MaterializeNode,
    PlanNode,
    StreamScanNode,
)
from rivulet.stream.runtime import RunningJob, StreamRuntime, wait_finished
from rivulet.stream.state_layouts import apply_scan_type


@dataclass
class PlannedMaterializedView:
    """What the planner hands over: the catalog entry (id 0) and the stream plan, whose
    root is the MV's MaterializeNode."""

    table: TableCatalog
    root: PlanNode


log = logging.getLogger(__name__)


class DdlController:
    def __init__(
        self,
        catalog: Catalog,
        runtime: StreamRuntime,
        barrier: BarrierManager,
        cluster: Cluster,
        backfill: BackfillProgress,
        plan_job: Callable[[TableCatalog], PlanNode],
        automatic_parallelism: Callable[[], bool] = lambda: True,
    ) -> None:
        self.catalog = catalog
        self.runtime = runtime
        self.barrier = barrier
        self.cluster = cluster
        self.lock = asyncio.Lock()
        # A job's stream plan from its catalog entry (the engine's: planning is SQL's): a
        # table's at creation, every job's when it is built again.
        self.plan_job = plan_job
        # Whether worker changes reschedule adaptive jobs (a system parameter's).
        self.automatic_parallelism = automatic_parallelism
        # Scan actors' backfill reports and rate limits (the engine's).
        self.backfill = backfill
        # Creating jobs' progress, as SHOW JOBS and rw_ddl_progress show it.
        self.progress = CreatingJobsProgress(catalog, self.backfill)
        # How long a reschedule may wait for its stop barrier before giving up.
        self.reschedule_timeout_s = 60.0
        # Jobs whose backfill is done and that are being rebuilt at their normal policy.
        self._finishing: set[int] = set()
        # Each job's fragment ids, in plan order: stable for the job's life.
        self.fragment_ids: dict[int, list[int]] = {}
        for job_id, fragment_id in (
            catalog.store.cursor()
            .execute(f"SELECT job_id, fragment_id FROM {META_SCHEMA}.fragments ORDER BY 2")
            .fetchall()
        ):
            self.fragment_ids.setdefault(int(job_id), []).append(int(fragment_id))

    # ---------------------------------------------------------------- create
    async def create_table(self, table: TableCatalog, *, if_not_exists: bool = False) -> bool:
        """Create a table (``table.id`` is allocated here). False when it existed and
        ``if_not_exists`` was given."""
        async with self.lock:
            if self.catalog.name_taken(table.schema, table.name):
                if if_not_exists:
                    return False
                raise sql_error(DUPLICATE_TABLE, f'relation "{table.name}" already exists')
            change = CatalogChange()
            table = replace(table, id=self.catalog.allocate_id(change))
            await self._create_job(table, self.plan_job(table), change)
            return True

    async def create_source(self, source: TableCatalog, *, if_not_exists: bool = False) -> bool:
        """Create a source: a catalog entry only. No job runs for it; every job that reads
        it runs source actors of its own."""
        async with self.lock:
            if self.catalog.name_taken(source.schema, source.name):
                if if_not_exists:
                    return False
                raise sql_error(DUPLICATE_TABLE, f'relation "{source.name}" already exists')
            change = CatalogChange()
            source = replace(source, id=self.catalog.allocate_id(change))
            self.catalog.add_table(source, change)
            await self.barrier.checkpoint(change)
            return True

    async def create_materialized_view(
        self,
        planned: PlannedMaterializedView,
        *,
        if_not_exists: bool = False,
        background: bool = False,
        rate_limit: int | None = None,
        backfill_parallelism: str | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        progress: Callable[[str], None] | None = None,
    ) -> bool:
        """Create an MV. One whose scans read history stays CREATING until every scan
        actor has read its part (``watch_backfills`` marks it CREATED); a foreground
        CREATE waits for that, reporting its progress through ``progress`` about once a
        second; a background one returns at once."""
        async with self.lock:
            table = planned.table
            if self.catalog.name_taken(table.schema, table.name):
                if if_not_exists:
                    return False
                raise sql_error(DUPLICATE_TABLE, f'relation "{table.name}" already exists')
            change = CatalogChange()
            creating = table.backfill_type not in ("", "upstream_only")
            table = replace(
                table,
                id=self.catalog.allocate_id(change),
                status="creating" if creating else "created",
                background=background,
                backfill_parallelism=backfill_parallelism if creating else None,
                backfill_rate_limit=rate_limit,
            )
            if rate_limit is not None:
                self.backfill.set_rate_limit(table.id, rate_limit)
            root = planned.root
            assert isinstance(root, MaterializeNode)
            root.table_id = table.id
            root.table_name = table.name
            root.state_schema = table.state_schema()
            since = self.barrier.loss_count
            epoch = await self._create_job(table, root, change)
            # The MV's scans emit their snapshot in the epoch after the one that started
            # them: once that epoch is committed, the MV holds its history (unless a
            # recovery dropped it, also one run before this wait began).
            try:
                await self.barrier.commit_writes(epoch + 1, frozenset({table.id}), since=since)
            except Exception:
                # Its history never committed (an actor failed reading it; recovery rebuilt
                # the job without a snapshot): a failed creation leaves no trace.
                created = self.catalog.tables.get(table.id)
                if created is not None:
                    with contextlib.suppress(Exception):
                        await self._drop_locked(self._with_dependents(created))
                raise
        if creating and not background:
            try:
                await self.wait_created(table.id, cancelled, progress)
            except BaseException:
                # The client gave up (cancel request, disconnect): the job goes too.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.cancel_job(table.id, missing_ok=True))
                raise
        return True

    async def _create_job(self, table: TableCatalog, root: PlanNode, change: CatalogChange) -> int:
        parallelism = self.cluster.parallelism(table.running_policy)
        job = fragment_job(
            root, table.id, parallelism, self.catalog, self.cluster, self.runtime, change
        )
        table = replace(table, internal_tables=tuple(t.table_id for t in job.internal_tables))
        change.setup.append((table.state_schema().create_sql(), []))
        for internal in job.internal_tables:
            change.setup.append((internal.create_sql(), []))
        self.catalog.add_table(table, change)
        persist_graph(job.graph, job.workers, change)
        # The job's state tables are made in a transaction that is rolled back first: a
        # definition the store refuses fails this statement, not the checkpoint it would
        # share with every other job's writes.
        try:
            self.catalog.store.check_setup(change.setup)
        except duckdb.Error as exc:
            raise sql_error(
                INVALID_TABLE_DEFINITION,
                f'cannot create {table.kind} "{table.name}": {duckdb_text(exc)}',
            ) from None
        running, mutation = self.runtime.build_job(job.graph)
        self.fragment_ids[table.id] = [f.fragment_id for f in job.graph.fragments]
        self.runtime.start_job(running)
        try:
            return await self.barrier.checkpoint(change, mutation=mutation)
        except BaseException:
            await self._abandon(running)
            raise

    async def _abandon(self, running: RunningJob) -> None:
        for actor in running.actors.values():
            await actor.stop()
        self.runtime.forget_job(running.graph.job_id)

    def start_existing(
        self,
        applied: CatalogChange | None = None,
        pinned: dict[int, int] | None = None,
        only: frozenset[int] | None = None,
    ) -> list[RunningJob]:
        """At start, after a failure and for a reschedule: rebuild the job of every table
        and MV in the catalog (``only``: of these) from its definition (the caller starts
        them). Their state is what the last checkpoint committed; scans take no snapshot
        (the MVs hold their past already). A job with a deferred parallelism target is
        built with it; ``applied`` gets the catalog change that records so, and the ids
        the rebuilt actors took (for the caller to commit). Jobs in ``pinned`` keep that
        many actors (jobs tied to a creating backfill that cannot move), and their
        targets wait. Fragments keep their ids."""
        pinned = pinned or {}
        jobs = []
        for table in self.catalog.all_tables():  # by id: upstream jobs before dependents
            if not table.is_streaming_job or (only is not None and table.id not in only):
                continue
            if table.creating and table.backfill_rate_limit is not None:
                self.backfill.set_rate_limit(table.id, table.backfill_rate_limit)
            if table.target_parallelism is not None and table.id not in pinned:
                if applied is not None:
                    self.catalog.update_job(
                        table, applied, parallelism=table.target_parallelism,
                        target_parallelism=None, reconcile_note=None,
                    )  # fmt: skip
                table = replace(table, parallelism=table.target_parallelism)
            if applied is not None:
                self._note_pin(table, pinned.get(table.id), applied)
            policy = str(pinned[table.id]) if table.id in pinned else table.running_policy
            root = self.plan_job(table)
            if table.kind != "table":
                # Scans go on as they were created: a backfill resumes from its persisted
                # per-vnode progress (once that says done, the scan only forwards); a job
                # older than scan types only forwards.
                apply_scan_type(
                    root, table.backfill_type or "arrangement",
                    created=self._backfill_finished(table),
                )  # fmt: skip
            job = fragment_job(
                root, table.id, self.cluster.parallelism(policy), self.catalog,
                self.cluster, self.runtime, applied if applied is not None else CatalogChange(),
                reuse_internal=table.internal_tables,
                fragment_ids=self.fragment_ids.get(table.id),
            )  # fmt: skip
            self.fragment_ids[table.id] = [f.fragment_id for f in job.graph.fragments]
            running, _ = self.runtime.build_job(job.graph, attach_now=True)
            running.workers = job.workers
            self.runtime.add_job(running)
            jobs.append(running)
        return jobs

    def _note_pin(self, table: TableCatalog, count: int | None, applied: CatalogChange) -> None:
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

    def _backfill_finished(self, table: TableCatalog) -> bool:
        """Whether a rebuilt job's scans only forward changes (``none``): a created job's
        (or one older than scan types); a creating job's resume from their progress."""
        return not table.backfill_type or not table.creating

    # ----------------------------------------------------------- reschedule
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
                if f.mapping is not None and not _mirrors_upstream(f)
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
        movable = [f for f in fragments if f.mapping is not None and not _mirrors_upstream(f)]
        if movable and all(len(f.actor_ids) == n for f in movable):
            lines.append("No change: every fragment already runs this many actors (no barrier)")
        mapping = even_mapping(n)
        workers = self.cluster.place(n)
        for f in fragments:
            if f.mapping is None:
                lines.append(f"Fragment {f.fragment_id}: single actor, unchanged")
                continue
            if _mirrors_upstream(f):
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

    # ------------------------------------------------------- creating jobs
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
            if j.creating and j.backfill_type in UNMOVABLE_SCANS and j.id not in self._finishing:
                for jid in (j.id, *j.dependencies):
                    count = self._live_count(jid)
                    if count:
                        pinned[jid] = count
        return pinned

    def _drifted(self, job_id: int, policy: str) -> bool:
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
                if f.mapping is not None and not _mirrors_upstream(f)
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

    async def wait_created(
        self,
        job_id: int,
        cancelled: Callable[[], bool] = lambda: False,
        progress: Callable[[str], None] | None = None,
        progress_interval_s: float = 1.0,
    ) -> None:
        """Return once a job is CREATED (raises 57014 if it was cancelled meanwhile, or
        ``cancelled()`` says the client gave up). ``progress`` gets the backfill's
        progress every ``progress_interval_s`` while it moves."""
        loop = asyncio.get_running_loop()
        next_report = loop.time() + progress_interval_s
        last_text = ""
        while True:
            if cancelled():
                raise sql_error(QUERY_CANCELED, "canceling statement due to user request")
            table = self.catalog.tables.get(job_id)
            if table is None:
                raise sql_error(QUERY_CANCELED, f"creating job {job_id} was cancelled")
            if not table.creating:
                return
            if progress is not None and loop.time() >= next_report:
                next_report = loop.time() + progress_interval_s
                text = self.progress.text(job_id)
                if text != last_text:
                    last_text = text
                    progress(f'materialized view "{table.name}" backfill: {text}')
            await asyncio.sleep(0.02)

    async def wait_all_created(self, cancelled: Callable[[], bool] = lambda: False) -> None:
        """WAIT: until no job is creating."""
        while any(t.creating for t in self.catalog.all_tables()):
            if cancelled():
                raise sql_error(QUERY_CANCELED, "canceling statement due to user request")
            await asyncio.sleep(0.02)

    async def cancel_job(self, job_id: int, *, missing_ok: bool = False) -> None:
        """CANCEL JOBS: a creating job goes, with whatever reads it; no trace is left."""
        async with self.lock:
            table = self.catalog.tables.get(job_id)
            if table is None or not table.creating:
                if missing_ok:
                    return
                raise sql_error(
                    UNDEFINED_OBJECT,
                    f"no creating job with id {job_id}",
                    hint="SHOW JOBS lists the jobs that can be cancelled.",
                )
            await self._drop_locked(self._with_dependents(table))
            self.backfill.forget(job_id)

    async def watch_backfills(self) -> None:
        """Marks creating jobs CREATED once every scan actor's "done" is committed, and
        then applies what waited for it: the switch from backfill parallelism to the
        normal policy, and deferred targets it blocked. Runs for the engine's life."""
        while True:
            try:
                await asyncio.sleep(0.05)
                for table in [t for t in self.catalog.all_tables() if t.creating]:
                    epoch = self.backfill.done_epoch(table.id)
                    if epoch is None:
                        continue
                    await self.barrier.wait_committed(epoch, frozenset({table.id}))
                    await self._finish_backfill(table.id, epoch)
            except asyncio.CancelledError:
                raise
            except Error:  # a recovery meanwhile lost the epoch waited for: look again
                log.debug("backfill watch interrupted", exc_info=True)
            except Exception:
                # A bug: the watch goes on (jobs would stay CREATING without it), and says so.
                log.exception("backfill watch failed; watching on")

    async def _finish_backfill(self, job_id: int, epoch: int) -> None:
        async with self.lock:
            table = self.catalog.tables.get(job_id)
            done = self.backfill.done_epoch(job_id)
            if table is None or not table.creating or done is None:
                return  # cancelled, finished, or rebuilt by a recovery meanwhile
            # The current actors' "done" must be committed (raises if a failure lost it:
            # the watcher looks again once the rebuilt actors report).
            await self.barrier.wait_committed(max(done, epoch), frozenset({table.id}))
            change = CatalogChange()
            fields: dict[str, object] = {}
            moves = table.backfill_parallelism is not None and self.cluster.parallelism(
                table.backfill_parallelism
            ) != self.cluster.parallelism(table.parallelism)
            if table.target_parallelism is not None:
                fields.update(
                    parallelism=table.target_parallelism,
                    target_parallelism=None,
                    reconcile_note=None,
                )
                moves = True
            # Pinned while it backfilled (workers came or went, or a restart found it
            # pinned after its policy changed): it now runs at its policy.
            if self._drifted(job_id, str(fields.get("parallelism", table.parallelism))):
                fields["reconcile_note"] = None
                moves = True
            if self._release_held(table, change):
                moves = True
            if not moves:
                self.catalog.update_job(table, change, status="created", **fields)
                await self.barrier.checkpoint(change)
                return
            # Rebuilt at its normal policy first; CREATED is committed with the new layout,
            # so that whoever sees CREATED sees that layout too.
            self.catalog.update_job(table, change, backfill_parallelism=None, **fields)

            def mark_created(applied: CatalogChange) -> None:
                self.catalog.update_job(self.catalog.tables[job_id], applied, status="created")

            self._finishing.add(job_id)
            try:
                await self.rebuild_dataflow(change, finalize=mark_created)
            finally:
                self._finishing.discard(job_id)

    def _release_held(self, blocker: TableCatalog, change: CatalogChange) -> bool:
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
            elif self._drifted(dep_id, dep.parallelism):
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
            if self.automatic_parallelism():
                await self.rebuild_dataflow(change)
            else:
                await self.barrier.checkpoint(change)
            return worker.id

    async def remove_worker(self, worker_id: int) -> None:
        """Take a worker away; its actors move to the others online."""
        async with self.lock:
            change = CatalogChange()
            self.cluster.prepare_remove(worker_id, change)
            await self.rebuild_dataflow(change)

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

    # ------------------------------------------------------------------ drop
    async def drop(self, table: TableCatalog, *, cascade: bool = False) -> list[TableCatalog]:
        """Drop a table or MV (and, with ``cascade``, everything reading it). Returns what
        was dropped."""
        async with self.lock:
            if table.id not in self.catalog.tables:
                raise sql_error(UNDEFINED_TABLE, f'relation "{table.name}" does not exist')
            victims = self._with_dependents(table)
            if len(victims) > 1 and not cascade:
                names = ", ".join(f"{v.kind} {v.name}" for v in victims if v.id != table.id)
                raise sql_error(
                    DEPENDENT_OBJECTS_STILL_EXIST,
                    f'cannot drop {table.kind} "{table.name}" because other objects depend on it',
                    detail=f"{names} depends on {table.kind} {table.name}",
                    hint="Use DROP ... CASCADE to drop the dependent objects too.",
                )
            await self._drop_locked(victims)
            return victims

    async def _drop_locked(self, victims: list[TableCatalog]) -> None:
        """Stop the victims' actors and remove them (the caller holds the DDL lock)."""
        change = CatalogChange()
        actors: set[int] = set()
        for victim in victims:
            job = self.runtime.jobs.get(victim.id)
            if job is not None:
                actors.update(job.actors)
                delete_graph(job.graph, change)
                for f in job.graph.fragments:
                    for tid in f.state_table_ids():
                        if tid != victim.id:
                            change.statements.append(
                                (StateTableSchema(tid, (), (), ()).drop_sql(), [])
                            )
            change.statements.append((victim.state_schema().drop_sql(), []))
            change.statements.append(
                (f"DELETE FROM {META_SCHEMA}.stream_errors WHERE job_id = ?", [victim.id])
            )
            self.catalog.remove_table(victim, change)
        stopping = self.runtime.actor_tasks(v.id for v in victims)
        await self.barrier.checkpoint(change, mutation=StopActors(frozenset(actors)))
        await wait_finished(stopping, timeout=5)
        for victim in victims:
            self.runtime.forget_job(victim.id)
            self.fragment_ids.pop(victim.id, None)
        # A creating backfill that could not move held the jobs it read: they go to their
        # policy (and deferred targets apply) now, not at some later rebuild.
        released = CatalogChange()
        moves = False
        for victim in victims:
            if victim.creating and victim.backfill_type in UNMOVABLE_SCANS:
                moves |= self._release_held(victim, released)
        if moves:  # (it changes the catalog only for jobs that move)
            await self.rebuild_dataflow(released)

    def _with_dependents(self, table: TableCatalog) -> list[TableCatalog]:
        """``table`` and everything that reads it, directly or not, dependents first."""
        out: list[TableCatalog] = []
        seen: set[int] = set()

        def visit(t: TableCatalog) -> None:
            if t.id in seen:
                return
            seen.add(t.id)
            for d in self.catalog.dependents(t.id):
                visit(d)
            out.append(t)

        visit(table)
        return out


def _mirrors_upstream(fragment: object) -> bool:
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
    parts: list[str] = []
    start = prev = None
    for v in (int(x) for x in values):
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = v
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ", ".join(parts)
