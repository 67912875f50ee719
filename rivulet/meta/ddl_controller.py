"""DDL: the job manager, the scale controller and the creating-jobs tracker, built
together over what they share (``ddl_shared``). Statements reach them as ``ddl.jobs``,
``ddl.scale`` and ``ddl.creating``; DDL statements run one at a time (the shared lock).
"""

from __future__ import annotations

from collections.abc import Callable

from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog, TableCatalog
from rivulet.meta.cluster import Cluster
from rivulet.meta.creating_jobs import CreatingJobsTracker
from rivulet.meta.ddl_shared import DdlShared
from rivulet.meta.job_manager import JobManager
from rivulet.meta.scale_controller import ScaleController
from rivulet.stream.backfill_tracker import BackfillProgress
from rivulet.stream.plan import PlanNode
from rivulet.stream.runtime import StreamRuntime


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
        shared = DdlShared(catalog, runtime, barrier, cluster, backfill)
        self.cluster = cluster
        self.scale = ScaleController(
            shared,
            lambda *args, **kwargs: self.jobs.start_existing(*args, **kwargs),
            automatic_parallelism,
        )
        self.creating = CreatingJobsTracker(shared, self.scale)
        self.jobs = JobManager(shared, plan_job, self.scale, self.creating)
