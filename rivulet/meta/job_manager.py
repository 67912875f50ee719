"""The job manager: creating, starting, cancelling and dropping streaming jobs (tables,
materialized views), atomically with an epoch.

Creating a job: allocate ids, cut its plan into fragments, build its actors, and commit
its catalog rows, fragments and state tables with the barrier that starts the actors (and,
for an MV, attaches them to its upstream actors). Dropping: one barrier stops the job's
actors (and those of the MVs dropped with CASCADE), and its commit removes their catalog
rows and state tables. The in-memory catalog changes only once the commit succeeded.
Starting: at start, after a failure and for a reschedule, every job is built again from
its catalog entry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import duckdb

from rivulet.common.errors import (
    DEPENDENT_OBJECTS_STILL_EXIST,
    DUPLICATE_TABLE,
    INVALID_TABLE_DEFINITION,
    UNDEFINED_OBJECT,
    UNDEFINED_TABLE,
    sql_error,
)
from rivulet.meta.catalog import CatalogChange, TableCatalog
from rivulet.meta.creating_jobs import CreatingJobsTracker
from rivulet.meta.ddl_shared import DdlPart, DdlShared
from rivulet.meta.fragmenter import fragment_job
from rivulet.meta.fragments import delete_graph, persist_graph
from rivulet.meta.scale_controller import UNMOVABLE_SCANS, ScaleController
from rivulet.storage.state_store import META_SCHEMA, duckdb_text
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.message import StopActors
from rivulet.stream.plan import MaterializeNode, PlanNode
from rivulet.stream.runtime import RunningJob, wait_finished
from rivulet.stream.state_layouts import apply_scan_type


@dataclass
class PlannedMaterializedView:
    """What the planner hands over: the catalog entry (id 0) and the stream plan, whose
    root is the MV's MaterializeNode."""

    table: TableCatalog
    root: PlanNode


class JobManager(DdlPart):
    def __init__(
        self,
        shared: DdlShared,
        plan_job: Callable[[TableCatalog], PlanNode],
        scale: ScaleController,
        creating: CreatingJobsTracker,
    ) -> None:
        super().__init__(shared)
        # A job's stream plan from its catalog entry (the engine's: planning is SQL's): a
        # table's at creation, every job's when it is built again.
        self.plan_job = plan_job
        self.scale = scale
        self.creating = creating
        # Each job's fragment ids, in plan order: stable for the job's life.
        self.fragment_ids: dict[int, list[int]] = {}
        for job_id, fragment_id in (
            shared.catalog.store.cursor()
            .execute(f"SELECT job_id, fragment_id FROM {META_SCHEMA}.fragments ORDER BY 2")
            .fetchall()
        ):
            self.fragment_ids.setdefault(int(job_id), []).append(int(fragment_id))

    def _name_taken(self, table: TableCatalog, if_not_exists: bool) -> bool:
        """Whether ``table``'s name is taken and ``IF NOT EXISTS`` lets the statement do
        nothing; raises 42P07 if it is taken otherwise."""
        if not self.catalog.name_taken(table.schema, table.name):
            return False
        if if_not_exists:
            return True
        raise sql_error(DUPLICATE_TABLE, f'relation "{table.name}" already exists')

    async def create_table(self, table: TableCatalog, *, if_not_exists: bool = False) -> bool:
        """Create a table (``table.id`` is allocated here). False when it existed and
        ``if_not_exists`` was given."""
        async with self.lock:
            if self._name_taken(table, if_not_exists):
                return False
            change = CatalogChange()
            table = replace(table, id=self.catalog.allocate_id(change))
            await self._create_job(table, self.plan_job(table), change)
            return True

    async def create_source(self, source: TableCatalog, *, if_not_exists: bool = False) -> bool:
        """Create a source: a catalog entry only. No job runs for it; every job that reads
        it runs source actors of its own."""
        async with self.lock:
            if self._name_taken(source, if_not_exists):
                return False
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
            if self._name_taken(table, if_not_exists):
                return False
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
                await self.creating.wait_created(table.id, cancelled, progress)
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
        running, mutation = self.runtime.build_job(job.graph, workers=job.workers)
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
                self.scale.note_pin(table, pinned.get(table.id), applied)
            policy = str(pinned[table.id]) if table.id in pinned else table.running_policy
            root = self.plan_job(table)
            if table.kind != "table":
                # Scans go on as they were created: a backfill resumes from its persisted
                # per-vnode progress (once that says done, the scan only forwards); a job
                # older than scan types only forwards.
                apply_scan_type(
                    root, table.backfill_type or "arrangement",
                    created=backfill_finished(table),
                )  # fmt: skip
            job = fragment_job(
                root, table.id, self.cluster.parallelism(policy), self.catalog,
                self.cluster, self.runtime, applied if applied is not None else CatalogChange(),
                reuse_internal=table.internal_tables,
                fragment_ids=self.fragment_ids.get(table.id),
            )  # fmt: skip
            self.fragment_ids[table.id] = [f.fragment_id for f in job.graph.fragments]
            running, _ = self.runtime.build_job(job.graph, attach_now=True, workers=job.workers)
            self.runtime.add_job(running)
            jobs.append(running)
        return jobs

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
                moves |= self.scale.release_held(victim, released)
        if moves:  # (it changes the catalog only for jobs that move)
            await self.scale.rebuild_dataflow(released)

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


def backfill_finished(table: TableCatalog) -> bool:
    """Whether a rebuilt job's scans only forward changes (``none``): a created job's
    (or one older than scan types); a creating job's resume from their progress."""
    return not table.backfill_type or not table.creating
