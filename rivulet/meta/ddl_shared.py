"""What the parts of DDL share: the catalog, the runtime, the barrier manager, the cluster,
the scan actors' backfill reports, and the lock by which DDL statements run one at a time.

DDL is three parts (``DdlController`` builds them): the job manager creates, starts,
cancels and drops jobs (``job_manager``); the scale controller changes where and how
widely they run (``scale_controller``); the creating-jobs tracker follows backfills to
their end (``creating_jobs``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog
from rivulet.meta.cluster import Cluster
from rivulet.stream.backfill_tracker import BackfillProgress
from rivulet.stream.runtime import StreamRuntime


@dataclass
class DdlShared:
    catalog: Catalog
    runtime: StreamRuntime
    barrier: BarrierManager
    cluster: Cluster
    # Scan actors' backfill reports and rate limits (the engine's).
    backfill: BackfillProgress
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DdlPart:
    """A part of DDL: the shared objects as attributes."""

    def __init__(self, shared: DdlShared) -> None:
        self.catalog = shared.catalog
        self.runtime = shared.runtime
        self.barrier = shared.barrier
        self.cluster = shared.cluster
        self.backfill = shared.backfill
        self.lock = shared.lock
