"""The creating-jobs tracker: a job whose scans read history stays CREATING until every
scan actor's "done" is committed; then it is marked CREATED (and moved to its normal
parallelism, with the deferred targets it held). Statements wait on it here (a
foreground CREATE, WAIT), and SHOW JOBS / rw_ddl_progress read its progress.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rivulet.common.errors import QUERY_CANCELED, Error, sql_error
from rivulet.meta.catalog import CatalogChange
from rivulet.meta.ddl_progress import CreatingJobsProgress
from rivulet.meta.ddl_shared import DdlPart, DdlShared
from rivulet.meta.scale_controller import ScaleController

log = logging.getLogger(__name__)


class CreatingJobsTracker(DdlPart):
    def __init__(self, shared: DdlShared, scale: ScaleController) -> None:
        super().__init__(shared)
        self.scale = scale
        # Creating jobs' progress, as SHOW JOBS and rw_ddl_progress show it.
        self.progress = CreatingJobsProgress(shared.catalog, shared.backfill)

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
            if self.scale.drifted(job_id, str(fields.get("parallelism", table.parallelism))):
                fields["reconcile_note"] = None
                moves = True
            if self.scale.release_held(table, change):
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

            self.scale.finishing.add(job_id)
            try:
                await self.scale.rebuild_dataflow(change, finalize=mark_created)
            finally:
                self.scale.finishing.discard(job_id)
