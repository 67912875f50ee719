"""The engine: one Rivulet instance, assembled from its layers.

It owns the state store, the catalog, the stream runtime, the barrier manager and the
threads that run DuckDB work, and hands out sessions. The embedded API runs it on an
event loop in a background thread; the server runs it on the server's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from rivulet.common.errors import Error
from rivulet.meta.barrier_manager import BarrierManager, FailureDomain, row_errors_writer
from rivulet.meta.catalog import Catalog, CatalogChange, TableCatalog
from rivulet.meta.cluster import Cluster
from rivulet.meta.compute_nodes import ComputeNodes
from rivulet.meta.ddl_controller import DdlController
from rivulet.meta.fragments import replace_graph
from rivulet.meta.recovery import ActorInfo
from rivulet.meta.system_params import SystemParams
from rivulet.sql.context import FrontendContext
from rivulet.sql.functions import (
    ACTOR_PID_FUNCTION,
    SIGNAL_BACKEND_FUNCTION,
    WORKER_PID_FUNCTION,
    WORKER_PORT_FUNCTION,
    WORKER_STATE_FUNCTION,
)
from rivulet.sql.handlers import STATEMENT_HANDLERS
from rivulet.sql.planner.table import table_plan
from rivulet.sql.query_pool import QueryPool
from rivulet.sql.session import Session
from rivulet.sql.system_catalog import SystemCatalog
from rivulet.storage.state_service import StateServiceThread
from rivulet.storage.state_store import StateStore, StoreOptions, damaged_error, duckdb_text
from rivulet.stream.backfill_tracker import BackfillProgress
from rivulet.stream.plan import MaterializeNode, PlanNode
from rivulet.stream.row_errors import RowErrorLog
from rivulet.stream.runtime import StreamRuntime
from rivulet.stream.wiring import ChannelEnds

T = TypeVar("T")


@dataclass(frozen=True)
class EngineOptions:
    """How an engine runs. ``workers``/``slots``: the compute layout (default: one worker
    with a slot per core). ``deterministic``: no timer barriers and no worker threads, so
    that a test's interleaving replays exactly."""

    store: StoreOptions = field(default_factory=StoreOptions)
    # Threads for the dataflow's DuckDB work (user statements have a pool of their own).
    stream_threads: int | None = None
    workers: int | None = None
    slots: int | None = None
    # None: the stored system parameter (default 1000); a number overrides it for this run.
    barrier_interval_ms: int | None = None
    deterministic: bool = False
    # "served": actors read committed state through the storage service over loopback,
    # the path of actors in other processes, instead of from the store's DuckDB.
    state_reads: str = "local"
    # "processes": every worker is a compute node process of its own, running the
    # actors placed on it (those fed by an inbox stay here); "in-process": all here.
    compute: str = "in-process"


class EngineServices:
    """What the stream runtime uses of the engine (``StreamServices``)."""

    def __init__(self, engine: Engine) -> None:
        self.store = engine.store
        self.barrier_sink = engine.barrier
        self.row_errors = engine.row_errors
        self.backfill = engine.backfill
        service = engine.state_service
        served = engine.options.state_reads == "served"
        self.committed_reader = service.client if service is not None and served else None
        self._engine = engine

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        return await self._engine.run_blocking(fn)

    async def wait_committed(self, epoch: int) -> int:
        return await self._engine.barrier.wait_committed(epoch)


class EngineRecovery:
    """How the barrier manager rebuilds the dataflow (``RecoveryPolicy``): the engine's
    jobs and plans, reached once they exist (the manager is built before them)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def rebuild_all(self, error: Error) -> Callable[[], None]:
        return self._engine._rebuild_dataflow(error)

    def rebuild_domain(self, domain: FailureDomain) -> Callable[[], None]:
        return self._engine._rebuild_domain(domain)

    def failure_domain(self, actor_id: int) -> FailureDomain | None:
        return self._engine._failure_domain(actor_id)

    def describe_actor(self, actor_id: int) -> ActorInfo | None:
        return self._engine._describe_actor(actor_id)


class Engine:
    def __init__(
        self, path: str | os.PathLike[str] | None = None, options: EngineOptions | None = None
    ) -> None:
        self.path = path
        self.options = options = options or EngineOptions()
        if options.state_reads not in ("local", "served"):
            raise ValueError(
                f"state_reads must be 'local' or 'served', not {options.state_reads!r}"
            )
        if options.compute not in ("in-process", "processes"):
            raise ValueError(
                f"compute must be 'in-process' or 'processes', not {options.compute!r}"
            )
        if options.compute == "processes" and options.deterministic:
            raise ValueError("a deterministic engine runs every actor in its own process")
        opened = time.monotonic()
        self.store = StateStore(path, options.store)
        self.state_service: StateServiceThread | None = None
        # A store that committed before: starting is a recovery from its last checkpoint.
        self._restart_since = opened if self.store.committed_epoch > 0 else None
        try:
            self.catalog = Catalog(self.store)
            self.system = SystemCatalog()
            self._register_placement_functions()  # the system views call them
            self.store.run_setup(self.system.setup_sql())
            self.params = SystemParams(self.store)
            self.cluster = Cluster(self.store, workers=options.workers, slots=options.slots)
            self.store.lock_configuration()
            self._commit_executor = ThreadPoolExecutor(1, thread_name_prefix="rivulet-commit")
            # The dataflow's DuckDB work never queues behind a user's query: the two have
            # separate pools (and the commit its own thread).
            threads = options.stream_threads or max(4, 2 * (os.cpu_count() or 2))
            self._stream_executor = ThreadPoolExecutor(threads, thread_name_prefix="rivulet-stream")
            self.queries = QueryPool(int(self.params.get("max_concurrent_queries")))
            self.row_errors = RowErrorLog()
            self.barrier = BarrierManager(
                self.store,
                self._commit_executor,
                interval_ms=options.barrier_interval_ms
                or int(self.params.get("barrier_interval_ms")),
                periodic=not options.deterministic,
                recovery=EngineRecovery(self),
            )
            # Backfill progress reports and rate limits (before the runtime: its services).
            self.backfill = BackfillProgress()
            self.compute_nodes: ComputeNodes | None = None
            if options.state_reads == "served" or options.compute == "processes":
                self.state_service = StateServiceThread(self.store)
                reads = self.state_service.start()
                if options.compute == "processes":
                    self.compute_nodes = ComputeNodes(
                        self.barrier, self.row_errors, self.backfill, reads,
                        self.system.compute_setup_sql(), options.store.memory_limit,
                    )  # fmt: skip
            if self.compute_nodes is not None:
                self.runtime = StreamRuntime(
                    EngineServices(self),
                    ChannelEnds(0, self.compute_nodes.peers.connection_to),
                    remote=self.compute_nodes,
                    node_of_worker=lambda worker: worker,  # worker i is node i
                )
            else:
                self.runtime = StreamRuntime(EngineServices(self))
            self.ddl = DdlController(
                self.catalog,
                self.runtime,
                self.barrier,
                self.cluster,
                self.backfill,
                self._plan_job,
                automatic_parallelism=lambda: (
                    self.params.get("disable_automatic_parallelism_control") == "false"
                ),
            )
            self.ddl.scale.worker_processes = self.compute_nodes
            self.barrier.epoch_writers.append(row_errors_writer(self.row_errors))
            self.barrier.epoch_writers.append(self.ddl.creating.progress.writer)
            self.barrier.epoch_writers.append(self.barrier.recovery_log.writer)
            self.params.on_change.append(self._apply_system_param)
            self.frontend = FrontendContext(
                store=self.store,
                catalog=self.catalog,
                system=self.system,
                runtime=self.runtime,
                barrier=self.barrier,
                ddl=self.ddl,
                params=self.params,
                queries=self.queries,
            )
            self.store.register_function(
                SIGNAL_BACKEND_FUNCTION,
                self._signal_backends,
                ["INTEGER", "BOOLEAN"],
                "BOOLEAN",
            )
        except duckdb.Error as exc:
            self._close_store()
            if self.store.directory is None:
                raise
            # The store opened but its catalog cannot be read: damaged, never reset.
            raise damaged_error(self.store.path, duckdb_text(exc)) from None
        except BaseException:
            self._close_store()
            raise
        self.closed = False
        self.started = False
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the barrier manager and the jobs in the catalog (on the running loop)."""
        if self.started:
            return
        self.started = True
        if self._restart_since is not None:
            self.barrier.record_restart(self._restart_since)
        self.barrier.start()
        if self.compute_nodes is not None:
            await self.compute_nodes.launch([w.id for w in self.cluster.workers])
        self.ddl.creating.progress.restore()
        # Deferred parallelism targets are applied by this rebuild and recorded at once.
        change = CatalogChange()
        jobs = self.ddl.jobs.start_existing(change, self.ddl.scale.pinned_counts())
        replace_graph(jobs, change)
        self.store.run_setup(change.statements)
        change.committed()
        for job in jobs:
            self.runtime.start_job(job)
        self._watcher = asyncio.get_running_loop().create_task(
            self.ddl.creating.watch_backfills(), name="backfill-watch"
        )

    def _apply_system_param(self, name: str, value: str) -> None:
        if name == "barrier_interval_ms":
            self.barrier.interval_ms = int(value)
        elif name == "max_concurrent_queries":
            self.queries.set_limit(int(value))

    def _plan_job(self, table: TableCatalog) -> PlanNode:
        """A job's stream plan from its catalog entry: a table's from its columns, an
        MV's planned again from its definition (restart, recovery, reschedule)."""
        from rivulet.sql.handlers.ddl import plan_mv_statement

        if table.kind == "table":
            return table_plan(table)

        session = Session(self.frontend, STATEMENT_HANDLERS)  # internal: not a client's, not listed
        stmt = session.parse(table.definition)[0]
        root = plan_mv_statement(session, stmt, stmt.ast).root
        assert isinstance(root, MaterializeNode)
        root.table_id = table.id
        root.table_name = table.name
        root.state_schema = table.state_schema()
        return root

    def _register_placement_functions(self) -> None:
        """rw_worker_nodes and rw_actors show the processes as they are now."""
        columns: list[tuple[str, Callable[[int], object], str]] = [
            (WORKER_STATE_FUNCTION, lambda i: self._worker_status(i)[0], "VARCHAR"),
            (WORKER_PID_FUNCTION, lambda i: self._worker_status(i)[1], "INTEGER"),
            (WORKER_PORT_FUNCTION, lambda i: self._worker_status(i)[2], "INTEGER"),
            (ACTOR_PID_FUNCTION, self._actor_pid, "INTEGER"),
        ]
        for name, of_id, returns in columns:
            arrow_type = pa.string() if returns == "VARCHAR" else pa.int32()
            self.store.register_function(name, _per_id(of_id, arrow_type), ["INTEGER"], returns)

    def _worker_status(self, worker_id: int | None) -> tuple[str | None, int | None, int | None]:
        """A worker's state, process id and exchange port (called on a query thread).
        In-process workers run in this process, with no port of their own."""
        if worker_id is None:
            return None, None, None
        nodes = getattr(self, "compute_nodes", None)
        if nodes is None:
            return "RUNNING", os.getpid(), None
        return nodes.status(worker_id)

    def _actor_pid(self, actor_id: int | None) -> int | None:
        runtime: StreamRuntime | None = getattr(self, "runtime", None)
        if actor_id is None or runtime is None:
            return None
        node = runtime.node_of(actor_id)
        if node is None:
            return None
        if node == runtime.ends.node:
            return os.getpid()
        return self._worker_status(node)[1]  # worker i is node i

    def _signal_backends(self, pids: pa.Array, terminate: pa.Array) -> pa.Array:
        """pg_cancel_backend / pg_terminate_backend, over a batch of rows (called by
        DuckDB on a query thread)."""
        return pa.array(
            [
                None if pid is None else self.frontend.signal_backend(pid, bool(kill))
                for pid, kill in zip(pids.to_pylist(), terminate.to_pylist())
            ],
            pa.bool_(),
        )

    def _rebuild_dataflow(self, error: Error) -> Callable[[], None]:
        """After a failure: drop every actor and rebuild the jobs of the catalog from the
        last committed checkpoint. Synchronous, so no statement sees it half done: the
        rebuilt jobs take writes at once. Returns what starts their actors (the barrier
        manager calls it, after a backoff when failures repeat)."""
        return self._rebuild(None)

    def _failure_domain(self, actor_id: int) -> FailureDomain | None:
        """The running jobs connected to the job of ``actor_id`` by reads (a table and
        every MV over it, MVs over those...): what fails together. Jobs that share only a
        source do not share actors, so they do not share a domain."""
        failed = next((j for j in self.runtime.jobs.values() if actor_id in j.actors), None)
        if failed is None:
            return None
        tables = self.catalog.tables
        neighbours: dict[int, set[int]] = {}
        for t in tables.values():
            for dep in t.dependencies:
                if dep in self.runtime.jobs and t.id in self.runtime.jobs:
                    neighbours.setdefault(t.id, set()).add(dep)
                    neighbours.setdefault(dep, set()).add(t.id)
        domain = {failed.graph.job_id}
        frontier = [failed.graph.job_id]
        while frontier:
            for other in neighbours.get(frontier.pop(), ()):
                if other not in domain:
                    domain.add(other)
                    frontier.append(other)
        actors: set[int] = set()
        state_tables: set[int] = set()
        for job_id in domain:
            job = self.runtime.jobs[job_id]
            actors.update(job.actors)
            state_tables.add(job_id)
            for f in job.graph.fragments:
                state_tables.update(f.state_table_ids())
            if job_id in tables:
                state_tables.update(tables[job_id].internal_tables)
        return FailureDomain(frozenset(domain), frozenset(actors), frozenset(state_tables))

    def _rebuild_domain(self, domain: FailureDomain) -> Callable[[], None]:
        """After a failure in ``domain``: drop its actors and rebuild its jobs from the
        last committed checkpoint; the other jobs run on. Returns what starts them."""
        return self._rebuild(domain.jobs)

    def _rebuild(self, only: frozenset[int] | None) -> Callable[[], None]:
        """Drop the actors of ``only`` (None: of every job) and rebuild those jobs from
        the last committed checkpoint; returns what starts the rebuilt actors."""
        pinned = self.ddl.scale.pinned_counts()
        if only is None:
            self.runtime.abort_all()
        else:
            self.runtime.abort_jobs(only)
        change = CatalogChange()
        jobs = self.ddl.jobs.start_existing(change, pinned, only=only)
        replace_graph(jobs, change, only=only is not None)
        # Recovery runs when no commit is under way (the barrier manager defers it until
        # the running one ends): the rebuilt layout is written at once, outside any epoch.
        self.store.run_setup(change.statements)
        change.committed()

        def start() -> None:
            for job in jobs:
                if self.runtime.jobs.get(job.graph.job_id) is job:
                    self.runtime.start_job(job)

        return start

    def _describe_actor(self, actor_id: int) -> ActorInfo | None:
        """The fragment and job of a running actor (for a failure's log and event)."""
        for job in self.runtime.jobs.values():
            actor = job.actors.get(actor_id)
            if actor is not None:
                table = self.catalog.tables.get(job.graph.job_id)
                name = table.name if table is not None else None
                return ActorInfo(actor.ctx.fragment_id, job.graph.job_id, name)
        return None

    async def run_blocking(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """``fn(cursor)`` off the event loop with this thread's cursor (inline when
        deterministic)."""
        if self.options.deterministic:
            return fn(self.store.cursor())
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._stream_executor, lambda: fn(self.store.cursor()))

    def new_session(self, user: str = "root", database: str = "dev") -> Session:
        """A client's session (listed in pg_stat_activity until it is closed)."""
        session = Session(self.frontend, STATEMENT_HANDLERS, user=user, database=database)
        self.frontend.sessions[session.id] = session
        return session

    async def shutdown(self, timeout_s: float = 3.0) -> None:
        """Commit what is pending (for at most half of ``timeout_s``), stop the jobs, then
        release everything, in about ``timeout_s`` whatever runs: what is not committed
        by then is lost as in a crash (nothing committed is), and a restart recovers."""
        if self.closed:
            return
        deadline = time.monotonic() + timeout_s
        if self.started:
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._watcher
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.barrier.flush(), timeout_s / 2)
            await self.runtime.shutdown()
            if self.compute_nodes is not None:
                await self.compute_nodes.close()
            await self.barrier.stop()
        self.close(deadline)

    def close(self, deadline: float | None = None) -> None:
        """Release everything. With a ``deadline`` (``time.monotonic()``), whatever
        DuckDB still runs is interrupted and the write-ahead log is folded into the
        database file only if there is time left (a restart replays it otherwise)."""
        if self.closed:
            return
        self.closed = True
        if deadline is not None:
            self.store.interrupt_all()
        self.queries.shutdown()
        self._stream_executor.shutdown(wait=True, cancel_futures=True)
        self._commit_executor.shutdown(wait=True)
        with contextlib.suppress(Exception):
            if self.store.directory is not None and (
                deadline is None or deadline - time.monotonic() > 1.0
            ):
                self.store.checkpoint()
        self._close_store()

    def _close_store(self) -> None:
        if getattr(self, "compute_nodes", None) is not None:
            self.compute_nodes.kill()  # type: ignore[union-attr]
        if self.state_service is not None:
            self.state_service.close()
        self.store.close()


class EngineThread:
    """Runs an engine's event loop in a daemon thread, for the synchronous API."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="rivulet-engine", daemon=True)
        self._thread.start()
        try:
            self.run(engine.start())
        except BaseException:
            self.stop()  # release the data directory: the caller may fix it and retry
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.run(self.engine.shutdown(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.loop.close()


def _per_id(
    of_id: Callable[[int], object], arrow_type: pa.DataType
) -> Callable[[pa.Array], pa.Array]:
    """A DuckDB Arrow function of one id column: ``of_id`` of each id."""

    def over(ids: pa.Array) -> pa.Array:
        return pa.array([of_id(i) for i in ids.to_pylist()], arrow_type)

    return over
