"""A session: one client's connection state and the entry point for its statements.

``execute`` parses a query string into statements and runs each through the handler for
its kind (``sql/handlers``, handed in as ``StatementHandlers`` by whoever opens sessions:
the handlers name the session, so the session does not import them). Both faces - the
embedded DB-API and the pgwire server - drive sessions the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import (
    ADMIN_SHUTDOWN,
    INTERNAL_ERROR,
    NAME_TOO_LONG,
    PROGRAM_LIMIT_EXCEEDED,
    QUERY_CANCELED,
    Error,
    sql_error,
    stack_depth_error,
)
from rivulet.sql.activity import Activity, now
from rivulet.sql.binder import BindContext, Binder, BoundQuery
from rivulet.sql.context import FrontendContext
from rivulet.sql.duckdb_errors import translate
from rivulet.sql.parser import Statement, check_identifiers, parse_statements
from rivulet.sql.result import Notice, RowStream, StatementResult
from rivulet.sql.session_config import VERSION_STRING, SessionConfig
from rivulet.sql.statement_cache import StatementCache

T = TypeVar("T")


def _reads_nothing(tree: exp.Expr) -> bool:
    """A write that reads no stored rows (an INSERT of VALUES without subqueries): in a
    pipeline it need not wait for the commit of the writes before it."""
    if not isinstance(tree, exp.Insert) or not isinstance(tree.expression, exp.Values):
        return False
    return tree.expression.find(exp.Select) is None


_PARSE_CACHE_SIZE = 256
# Of which long texts (``statement_cache.LONG_TEXT_CHARS``).
_LONG_CACHED = 4
# Statements at least this long are parsed and bound on a thread, so that the event loop
# serves other clients meanwhile (a 2 MB statement takes sqlglot seconds); shorter ones
# inline, where a thread hop would cost more than the work.
_OFF_LOOP_CHARS = 64 << 10
# pg_stat_activity shows this much of a statement (PostgreSQL's track_activity_query_size).
_ACTIVITY_QUERY_CHARS = 1024

# Why a running statement is interrupted, and what its client is told.
CANCEL_USER = "canceling statement due to user request"
CANCEL_TIMEOUT = "canceling statement due to statement timeout"
CANCEL_CLIENT_GONE = "canceling statement due to client disconnect"
TERMINATED = "terminating connection due to administrator command"


@dataclass(frozen=True)
class StatementHandlers:
    """What runs a parsed statement (``rivulet.sql.handlers.STATEMENT_HANDLERS``)."""

    dispatch: Callable[[Session, Statement, list[object]], Awaitable[StatementResult]]
    # The plan of an INSERT that may run for many parameter sets as one write, or None.
    batchable_insert: Callable[[Session, Statement], object | None]
    insert_parameter_sets: Callable[[Session, Statement, list[list[object]]], Awaitable[int | None]]


class Session:
    def __init__(
        self,
        ctx: FrontendContext,
        handlers: StatementHandlers,
        user: str = "root",
        database: str = "dev",
    ) -> None:
        self.ctx = ctx
        self.handlers = handlers
        self.id = next(ctx.session_ids)
        self.user = user
        self.database = database
        self.config = SessionConfig(user)
        self.in_transaction = False
        # Whether a write ran inside the open transaction block (ROLLBACK warns then).
        self.wrote_in_transaction = False
        # START TRANSACTION READ ONLY: writes are refused until the block ends.
        self.transaction_read_only = False
        # A statement failed inside the open transaction block (pgwire keeps this).
        self.transaction_failed = False
        # Set while an extended-protocol Execute runs: its writes commit at the next Sync
        # (``settle_writes``), as PostgreSQL commits the implicit transaction there, so
        # a pipeline of many Executes shares one epoch.
        self.defer_commits = False
        # The deferred writes as (epoch, jobs, the barrier's loss_count when placed).
        self._unsettled: list[tuple[int, frozenset[int], int]] = []
        # A pipeline's writes not handed to the dataflow yet (``holds_writes``).
        self._held: list[Callable[[], None]] = []
        self.closed = False
        self._parse_cache: StatementCache[list[Statement]] = StatementCache(
            _PARSE_CACHE_SIZE, _LONG_CACHED
        )
        # Bound queries and planned statements by ``_cache_key`` (its text second).
        self._bind_cache: StatementCache[object] = StatementCache(
            _PARSE_CACHE_SIZE, _LONG_CACHED, text_index=1
        )
        self._running_cursor: duckdb.DuckDBPyConnection | None = None
        self._cancel_requested = False
        self._cancel_message = CANCEL_USER
        # Waits of the running statement that a cancel ends (commit waits, admission).
        self._waits: set[asyncio.Future[object]] = set()
        # The loop the session's statements run on (cancels from other threads go there).
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
        self._depth = 0
        # Where notices raised while a statement runs go at once (pgwire sets it: a
        # foreground CREATE's progress); without one they are dropped.
        self.notice_sink: Callable[[Notice], None] | None = None
        # Ends the client's connection (pgwire sets it) for pg_terminate_backend; without
        # one the session is closed and its next statement fails.
        self.on_terminate: Callable[[], None] | None = None
        # What pg_stat_activity shows (the client's address: set by pgwire).
        self.client_addr: str | None = None
        self.client_port: int | None = None
        self.backend_start = now()
        self.state_change = self.backend_start
        self.query_start: object = None
        self.xact_start: object = None
        self.query = ""
        self.active = False

    # ---------------------------------------------------------------- parsing
    def parse(self, sql: str) -> list[Statement]:
        """Parse (with a small cache); each statement copies its tree when first rewritten."""
        cached = self._parse_cache.get(sql)
        if cached is None:
            self._check_length(sql)
            cached = _parse(sql)
            self._parse_cache.put(sql, cached)
        return [st.fresh() for st in cached]

    async def parse_async(self, sql: str) -> list[Statement]:
        """``parse``, on a thread when ``sql`` is long (the event loop goes on serving)."""
        if len(sql) < _OFF_LOOP_CHARS or sql in self._parse_cache:
            return self.parse(sql)
        self._check_length(sql)
        loop = asyncio.get_running_loop()
        parsed = await loop.run_in_executor(self.ctx.queries.executor, _parse, sql)
        self._parse_cache.put(sql, parsed)
        return [st.fresh() for st in parsed]

    def _check_length(self, sql: str) -> None:
        limit = int(self.ctx.params.get("max_statement_bytes"))
        # Characters first: a text can only be long in bytes if it has that many / 4.
        if len(sql) * 4 > limit and (size := len(sql.encode("utf-8", "surrogatepass"))) > limit:
            raise self.statement_too_long(size)

    def statement_too_long(self, size: int) -> Error:
        """The error for a statement of ``size`` bytes, over ``max_statement_bytes``."""
        limit = int(self.ctx.params.get("max_statement_bytes"))
        return sql_error(
            PROGRAM_LIMIT_EXCEEDED,
            f"statement is too long: {size} bytes, the limit is {limit} bytes",
            hint="Split it into several statements (COPY ... FROM STDIN loads many rows"
            " at once), or raise the limit with ALTER SYSTEM SET max_statement_bytes.",
        )

    def bind_query(self, stmt: Statement) -> BoundQuery:
        """Bind a query, reusing the binding of the same text while neither the catalog
        nor this session's variables changed (binding is a pure function of those)."""
        key = self._cache_key("query", stmt)
        bound = self._bind_cache.get(key)
        if bound is None:
            bound = Binder(self.bind_context()).bind_query(stmt.ast)
            if not bound.volatile:
                self._bind_cache.put(key, bound)
        return bound

    async def compile(self, stmt: Statement, fn: Callable[[Statement], T]) -> T:
        """Run ``fn(stmt)``, the binding or planning of a statement: on a thread when it
        is long, so that the event loop serves other clients meanwhile. The session's
        own state cannot change while its statement runs; the catalog can (a commit
        applies on the loop). If it changed meanwhile, ``fn`` runs again over the
        statement parsed afresh (``fn`` rewrote the tree it was given): on a thread once
        more, then, should the catalog keep changing, on the loop, where it cannot."""
        if len(stmt.text) < _OFF_LOOP_CHARS:
            return fn(stmt)
        loop = asyncio.get_running_loop()
        executor = self.ctx.queries.executor
        catalog = self.ctx.catalog
        attempt = stmt
        for _ in range(2):
            version = catalog.version
            try:
                result = await loop.run_in_executor(executor, fn, attempt)
            except Exception:
                if catalog.version == version:
                    raise
            else:
                if catalog.version == version:
                    return result
            attempt = (await loop.run_in_executor(executor, _parse, stmt.text))[0]
        return fn(attempt)

    async def bind_query_async(self, stmt: Statement) -> BoundQuery:
        """``bind_query``, on a thread when the statement is long."""
        if len(stmt.text) < _OFF_LOOP_CHARS:
            return self.bind_query(stmt)
        return await self.compile_cached(
            "query",
            stmt,
            lambda st: Binder(self.bind_context()).bind_query(st.ast),
            keep=lambda bound: not bound.volatile,
        )

    async def compile_cached(
        self, kind: str, stmt: Statement, fn: Callable[[Statement], T], keep: Callable[[T], bool]
    ) -> T:
        """``compile``, reusing the result for the same text (of the same ``kind`` of
        compilation) while neither the catalog nor the session's or the system's
        parameters changed; results ``keep`` refuses (volatile ones) are not kept."""
        hit = self.cached(kind, stmt)
        if hit is not None:
            return hit
        result = await self.compile(stmt, fn)
        if keep(result):
            self.cache(kind, stmt, result)
        return result

    def cached(self, kind: str, stmt: Statement) -> object | None:
        """What ``cache`` kept for this statement's text, if still valid."""
        return self._bind_cache.get(self._cache_key(kind, stmt))

    def cache(self, kind: str, stmt: Statement, value: object) -> None:
        self._bind_cache.put(self._cache_key(kind, stmt), value)

    def _cache_key(self, kind: str, stmt: Statement) -> tuple[object, ...]:
        # Binding and planning are pure functions of these.
        return (
            kind,
            stmt.text,
            self.ctx.catalog.version,
            self.config.version,
            self.ctx.params.version,
        )

    def bind_context(self) -> BindContext:
        return BindContext(
            catalog=self.ctx.catalog,
            system=self.ctx.system,
            user=self.user,
            database=self.database,
            search_path=self.config.search_path(),
            session_id=self.id,
            server_version=VERSION_STRING,
            setting=self.config.get,
            max_value_bytes=int(self.ctx.params.get("max_value_bytes")),
            activity=self.ctx.activity,
        )

    # -------------------------------------------------------------- executing
    async def execute(
        self, sql: str, params: Sequence[object] | None = None
    ) -> list[StatementResult]:
        """Run every statement in ``sql``; stops at the first error (which propagates).
        Results come back whole (a streamed result is read to its end here)."""
        results = []
        for st in await self.parse_async(sql):
            with self.running(st.text):
                result = await self.execute_statement(st, params)
                results.append(result)
                await self.read_all(result)
        return results

    async def execute_statement(
        self, stmt: Statement, params: Sequence[object] | None = None
    ) -> StatementResult:
        """Run one statement. A large query result comes back with a ``stream`` that
        holds DuckDB resources until it is read out or closed (``read_all``, ``pull``,
        ``StatementResult.close``)."""
        with self.running(stmt.text):
            try:
                if not (self.defer_commits and _reads_nothing(stmt.tree)):
                    # What it reads includes earlier writes (an UPDATE in a pipeline sees
                    # the INSERTs before it, as in PostgreSQL's implicit transaction).
                    await self.settle_writes()
                result = await self.handlers.dispatch(
                    self, stmt, list(params) if params is not None else []
                )
            except BaseException as exc:
                raise self.statement_error(exc, stmt.text) from None
        if stmt.notices:
            result.notices[:0] = [Notice(n, sqlstate=NAME_TOO_LONG) for n in stmt.notices]
        return result

    def batchable(self, stmt: Statement) -> bool:
        """Whether runs of ``stmt`` for many parameter sets may be written as one
        (``execute_batch``): a plain INSERT of parameters, outside a transaction block."""
        return not self.in_transaction and self.handlers.batchable_insert(self, stmt) is not None

    async def execute_batch(self, stmt: Statement, param_sets: list[list[object]]) -> int | None:
        """Run ``stmt`` (``batchable``) once per parameter set as one write, all its rows
        in one epoch; returns the row count, or None, having written nothing, when some
        set needs the statement's general path. An error writes nothing either."""
        with self.running(stmt.text):
            try:
                return await self.handlers.insert_parameter_sets(self, stmt, param_sets)
            except BaseException as exc:
                raise self.statement_error(exc, stmt.text) from None

    def statement_error(self, exc: BaseException, text: str | None = None) -> BaseException:
        """What a statement that raised ``exc`` reports: DuckDB's errors translated, a
        cancel named by its cause, a bug as an internal error (the session goes on)."""
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            return exc
        if isinstance(exc, RecursionError):
            return stack_depth_error()
        if self._cancel_requested and (
            isinstance(exc, duckdb.Error)
            or (isinstance(exc, Error) and exc.sqlstate == QUERY_CANCELED)
        ):
            error = self.cancel_error()
            if isinstance(exc, Error):
                error.detail = exc.detail
            return error
        if isinstance(exc, duckdb.Error):
            return translate(exc, text)
        if isinstance(exc, Error):
            return exc
        error = sql_error(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return error

    def running(self, text: str) -> _StatementSpan:
        """The span of one statement (the outermost of nested ones counts): what
        pg_stat_activity shows, its ``statement_timeout``, the cancel requests that
        interrupt it. pgwire opens it around a statement and the sending of its rows."""
        return _StatementSpan(self, text)

    def _begin(self, text: str) -> asyncio.TimerHandle | None:
        if self.closed:
            raise sql_error(ADMIN_SHUTDOWN, TERMINATED)
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._cancel_requested = False
        self._cancel_message = CANCEL_USER
        self._depth = 1
        self.query = text[:_ACTIVITY_QUERY_CHARS]
        self.query_start = self.state_change = now()
        self.active = True
        timeout_ms = int(self.config.get("statement_timeout") or 0)
        return loop.call_later(timeout_ms / 1000, self._time_out) if timeout_ms else None

    def _end(self) -> None:
        self._depth = 0
        self.active = False
        self.state_change = now()
        if not self.in_transaction:
            self.xact_start = None
        elif self.xact_start is None:  # this statement began the transaction block
            self.xact_start = self.query_start

    def activity(self) -> Activity:
        if self.active:
            state = "active"
        elif self.in_transaction:
            state = (
                "idle in transaction (aborted)"
                if self.transaction_failed
                else ("idle in transaction")
            )
        else:
            state = "idle"
        return Activity(
            pid=self.id,
            user=self.user,
            database=self.database,
            application_name=self.config.get("application_name") or "",
            client_addr=self.client_addr,
            client_port=self.client_port,
            backend_start=self.backend_start,
            # The transaction block's start, else the running statement's (its own).
            xact_start=(self.xact_start or self.query_start) if self.active else self.xact_start,  # type: ignore[arg-type]
            query_start=self.query_start,  # type: ignore[arg-type]
            state_change=self.state_change,
            state=state,
            query=self.query,
        )

    async def run_query(
        self, fn: Callable[[duckdb.DuckDBPyConnection], T], *, light: bool = False
    ) -> T:
        """Run ``fn(cursor)`` on a query thread with that thread's cursor, interruptible
        by ``cancel``. ``light``: work over constants or the system catalog, which never
        waits behind heavy statements (``sql.query_pool``)."""
        pool = self.ctx.queries
        store = self.ctx.store

        def work() -> T:
            cur = store.cursor()
            self._running_cursor = cur
            try:
                if self._cancel_requested:
                    raise self.cancel_error()
                return fn(cur)
            finally:
                self._running_cursor = None

        if not light and not pool.try_acquire():
            await self.interruptible(pool.acquire())
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool.executor, work)
        finally:
            if not light:
                pool.release()

    async def pull(self, stream: RowStream, fn: Callable[[], T]) -> T:
        """Run ``fn`` - reads of ``stream`` - on a query thread (a batch of a large
        result is computed as it is read), interruptible by ``cancel``."""
        pool = self.ctx.queries

        def work() -> T:
            self._running_cursor = stream.cursor  # type: ignore[assignment]
            try:
                if self._cancel_requested:
                    raise self.cancel_error()
                return fn()
            finally:
                self._running_cursor = None

        if not pool.try_acquire():
            await self.interruptible(pool.acquire())
        try:
            return await asyncio.get_running_loop().run_in_executor(pool.executor, work)
        except BaseException as exc:
            stream.close()
            raise self.statement_error(exc) from None
        finally:
            pool.release()

    async def read_all(self, result: StatementResult) -> None:
        """Read the rest of a streamed result into ``result.rows`` (the embedded API)."""
        stream = result.stream
        if stream is None:
            return
        try:
            rest = await self.pull(stream, lambda: list(iter(stream.read, None)))
        finally:
            stream.close()
        assert result.rows is not None
        result.rows = pa.Table.from_batches([*result.rows.to_batches(), *rest], result.rows.schema)
        result.tag = result.counted_tag(result.rows.num_rows)
        result.stream = None
        result.rowcount = result.rows.num_rows

    def defer_commit(self, epoch: int, since: int, jobs: frozenset[int]) -> None:
        """A write placed in ``epoch`` (when the barrier's ``loss_count`` was ``since``)
        that ``settle_writes`` waits for."""
        barrier = self.ctx.barrier
        # Writes committed with no recovery since they were placed need no wait (with
        # ``rw_implicit_flush`` off, writes gather until a FLUSH).
        self._unsettled = [
            w
            for w in self._unsettled
            if w[0] > barrier.committed_epoch or w[2] != barrier.loss_count
        ]
        if self._unsettled and self._unsettled[-1][1:] == (jobs, since):
            self._unsettled[-1] = (max(epoch, self._unsettled[-1][0]), jobs, since)
        else:
            self._unsettled.append((epoch, jobs, since))

    @property
    def holds_writes(self) -> bool:
        """Whether a write waits in the session for the protocol's Sync: the writes of a
        pipeline's implicit transaction go to the dataflow together, or not at all if
        one of its statements fails, as PostgreSQL commits or rolls it back (outside a
        transaction block, where each statement commits alone, and with
        ``rw_implicit_flush`` on)."""
        return self.defer_commits and self.implicit_flush and not self.in_transaction

    def hold_write(self, place: Callable[[], None]) -> None:
        """Keep a write (``place`` hands it to the dataflow) until ``settle_writes``."""
        self._held.append(place)

    def drop_held_writes(self) -> None:
        """Forget the held writes: their pipeline failed."""
        self._held = []

    @property
    def implicit_flush(self) -> bool:
        """``rw_implicit_flush``: whether a write returns only once committed (else once
        its rows are in the current epoch, as RisingWave's default; FLUSH waits)."""
        return self.config.get("rw_implicit_flush") != "false"

    async def settle_writes(self, *, force: bool = False) -> None:
        """Return once the deferred writes are committed (raises if a failure lost any).
        With ``rw_implicit_flush`` off only FLUSH (``force``) waits for them. Held writes
        are handed over first, together (one epoch)."""
        held, self._held = self._held, []
        for place in held:
            place()
        if not self._unsettled or not (force or self.implicit_flush):
            return
        # The latest epoch first: its barrier commits the earlier ones too.
        pending = sorted(self._unsettled, key=lambda write: write[0], reverse=True)
        self._unsettled = []
        for epoch, jobs, since in pending:
            await self.interruptible(self.ctx.barrier.commit_writes(epoch, jobs, since=since))

    async def interruptible(self, aw: Awaitable[T]) -> T:
        """Await ``aw`` unless the statement is cancelled first (cancel request,
        statement timeout, client gone): then ``aw`` is cancelled and 57014 raised."""
        task: asyncio.Future[T] = asyncio.ensure_future(aw)
        if self._cancel_requested:
            task.cancel()
            raise self.cancel_error()
        self._waits.add(task)  # type: ignore[arg-type]
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._cancel_requested and not (current is not None and current.cancelling()):
                raise self.cancel_error() from None
            raise
        finally:
            self._waits.discard(task)
            if not task.done():
                task.cancel()

    def notify(self, notice: Notice) -> None:
        """Send a notice now, while the statement still runs."""
        if self.notice_sink is not None:
            self.notice_sink(notice)

    @property
    def cancel_requested(self) -> bool:
        """Whether the running statement is to stop (long waits check)."""
        return self._cancel_requested

    def cancel_error(self) -> Error:
        error = sql_error(QUERY_CANCELED, self._cancel_message)
        if self._cancel_message == CANCEL_TIMEOUT:
            error.hint = (
                f"statement_timeout is {self.config.get('statement_timeout')} ms: SET"
                " statement_timeout to a longer time (0: none) to let it run."
            )
        return error

    def cancel(self, message: str = CANCEL_USER) -> None:
        """Interrupt the running statement (from any thread); ``message`` says why."""
        if self._depth == 0:
            return  # between statements: nothing to cancel (PostgreSQL's behaviour)
        self._cancel_message = message
        self._cancel_requested = True
        cur = self._running_cursor
        if cur is not None:
            self.ctx.store.interrupt(cur)
        loop = self._loop
        if loop is not None and self._waits:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(self._end_waits)

    def _end_waits(self) -> None:
        for task in list(self._waits):
            task.cancel()

    def _time_out(self) -> None:
        self.cancel(CANCEL_TIMEOUT)

    def terminate(self) -> None:
        """pg_terminate_backend (from any thread): stop the running statement and end
        the session (its client's connection)."""
        self.cancel(TERMINATED)
        loop, hook = self._loop, self.on_terminate
        if hook is None:
            self.close()
        elif loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(hook)

    def close(self) -> None:
        self.cancel()
        self.closed = True
        self.ctx.sessions.pop(self.id, None)


class _StatementSpan:
    """``Session.running``: a context manager cheap enough for every ``SELECT 1``."""

    __slots__ = ("nested", "session", "text", "timer")

    def __init__(self, session: Session, text: str) -> None:
        self.session = session
        self.text = text
        self.nested = False
        self.timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> None:
        session = self.session
        if session._depth:
            session._depth += 1
            self.nested = True
        else:
            self.timer = session._begin(self.text)

    def __exit__(self, *exc: object) -> None:
        if self.nested:
            self.session._depth -= 1
            return
        if self.timer is not None:
            self.timer.cancel()
        self.session._end()


def _parse(sql: str) -> list[Statement]:
    try:
        parsed = parse_statements(sql)
        for st in parsed:
            normalize_identifiers(st.names_tree, dialect="postgres")
            check_identifiers(st)
    except RecursionError:
        raise stack_depth_error() from None
    return parsed


def is_query(ast: exp.Expr) -> bool:
    return isinstance(ast, exp.Query)
