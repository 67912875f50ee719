"""A session: one client's connection state and the entry point for its statements.

``execute`` parses a query string into statements and runs each through the handler for
its kind (``sql/handlers``). Both faces - the embedded DB-API and the pgwire server - drive
sessions the same way.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence

import duckdb
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import NAME_TOO_LONG, QUERY_CANCELED, Error, sql_error
from rivulet.sql.binder import BindContext, Binder, BoundQuery
from rivulet.sql.context import FrontendContext
from rivulet.sql.duckdb_errors import translate
from rivulet.sql.parser import Statement, check_identifiers, parse_statements
from rivulet.sql.result import Notice, StatementResult
from rivulet.sql.session_config import VERSION_STRING, SessionConfig

_PARSE_CACHE_SIZE = 256


class Session:
    def __init__(self, ctx: FrontendContext, user: str = "root", database: str = "dev") -> None:
        self.ctx = ctx
        self.id = next(ctx.session_ids)
        self.user = user
        self.database = database
        self.config = SessionConfig(user)
        self.in_transaction = False
        # Whether a write ran inside the open transaction block (ROLLBACK warns then).
        self.wrote_in_transaction = False
        # START TRANSACTION READ ONLY: writes are refused until the block ends.
        self.transaction_read_only = False
        self.closed = False
        self._parse_cache: OrderedDict[str, list[Statement]] = OrderedDict()
        self._bind_cache: OrderedDict[tuple[str, int, int, int], BoundQuery] = OrderedDict()
        self._running_cursor: duckdb.DuckDBPyConnection | None = None
        self._cancel_requested = False
        self._running_task: asyncio.Task[object] | None = None
        # Where notices raised while a statement runs go at once (pgwire sets it: a
        # foreground CREATE's progress); without one they are dropped.
        self.notice_sink: Callable[[Notice], None] | None = None

    # ---------------------------------------------------------------- parsing
    def parse(self, sql: str) -> list[Statement]:
        """Parse (with a small cache); each statement copies its tree when first rewritten."""
        cached = self._parse_cache.get(sql)
        if cached is None:
            cached = parse_statements(sql)
            for st in cached:
                normalize_identifiers(st.ast, dialect="postgres")
                check_identifiers(st)
            self._parse_cache[sql] = cached
            if len(self._parse_cache) > _PARSE_CACHE_SIZE:
                self._parse_cache.popitem(last=False)
        else:
            self._parse_cache.move_to_end(sql)
        return [st.fresh() for st in cached]

    def bind_query(self, stmt: Statement) -> BoundQuery:
        """Bind a query, reusing the binding of the same text while neither the catalog
        nor this session's variables changed (binding is a pure function of those)."""
        key = (stmt.text, self.ctx.catalog.version, self.config.version, self.ctx.params.version)
        bound = self._bind_cache.get(key)
        if bound is None:
            bound = Binder(self.bind_context()).bind_query(stmt.ast)
            self._bind_cache[key] = bound
            if len(self._bind_cache) > _PARSE_CACHE_SIZE:
                self._bind_cache.popitem(last=False)
        else:
            self._bind_cache.move_to_end(key)
        return bound

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
        )

    # -------------------------------------------------------------- executing
    async def execute(
        self, sql: str, params: Sequence[object] | None = None
    ) -> list[StatementResult]:
        """Run every statement in ``sql``; stops at the first error (which propagates)."""
        results = []
        for st in self.parse(sql):
            results.append(await self.execute_statement(st, params))
        return results

    async def execute_statement(
        self, stmt: Statement, params: Sequence[object] | None = None
    ) -> StatementResult:
        from rivulet.sql.handlers import dispatch

        self._cancel_requested = False
        try:
            result = await dispatch(self, stmt, list(params) if params is not None else [])
            if stmt.notices:
                result.notices[:0] = [Notice(n, sqlstate=NAME_TOO_LONG) for n in stmt.notices]
            return result
        except duckdb.Error as exc:
            if self._cancel_requested:
                raise sql_error(QUERY_CANCELED, "canceling statement due to user request") from None
            raise translate(exc, stmt.text) from None
        except Error:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: report it, keep the session
            from rivulet.common.errors import INTERNAL_ERROR

            raise sql_error(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}") from exc

    async def run_query(self, fn):  # type: ignore[no-untyped-def]
        """Run ``fn(cursor)`` on a query thread, interruptible by ``cancel``."""

        def work(cur: duckdb.DuckDBPyConnection):  # type: ignore[no-untyped-def]
            self._running_cursor = cur
            try:
                if self._cancel_requested:
                    raise sql_error(QUERY_CANCELED, "canceling statement due to user request")
                return fn(cur)
            finally:
                self._running_cursor = None

        return await self.ctx.run_blocking(work)

    def notify(self, notice: Notice) -> None:
        """Send a notice now, while the statement still runs."""
        if self.notice_sink is not None:
            self.notice_sink(notice)

    @property
    def cancel_requested(self) -> bool:
        """Whether the client asked to cancel the running statement (long waits check)."""
        return self._cancel_requested

    def cancel(self) -> None:
        """Interrupt the running statement (from any thread)."""
        self._cancel_requested = True
        cur = self._running_cursor
        if cur is not None:
            self.ctx.store.interrupt(cur)

    def close(self) -> None:
        self.closed = True
        self.cancel()


def is_query(ast: exp.Expression) -> bool:
    return isinstance(ast, exp.Query)
