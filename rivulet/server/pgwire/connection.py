"""One client connection: start-up, authentication, and the simple and extended query
protocols on top of a ``Session`` (the extended protocol's messages are served by
``extended.ExtendedProtocol``, rows and COPY data by ``transfer.ResultTransfer``).

The connection is a small state machine. Errors in a statement become an ErrorResponse and
the connection goes on (after an error in the extended protocol, messages are skipped until
Sync); only a broken protocol or a vanished client ends it, and then only this one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shlex
from typing import TYPE_CHECKING, Protocol

from sqlglot import exp

from rivulet.common.errors import (
    ADMIN_SHUTDOWN,
    FEATURE_NOT_SUPPORTED,
    IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
    INVALID_AUTHORIZATION,
    INVALID_CATALOG_NAME,
    INVALID_PASSWORD,
    INVALID_PREPARED_STATEMENT,
    Error,
    sql_error,
)
from rivulet.meta.catalog import DEFAULT_DATABASE
from rivulet.server.pgwire import messages as m
from rivulet.server.pgwire.auth import MECHANISM, AuthFailed, ScramExchange, ScramVerifier
from rivulet.server.pgwire.extended import ExtendedProtocol, Portal, PreparedStatement
from rivulet.server.pgwire.result_rows import ResultRows
from rivulet.server.pgwire.transfer import ResultTransfer, _internal
from rivulet.sql import dialect
from rivulet.sql.parser import Statement
from rivulet.sql.result import Notice, StatementResult, command
from rivulet.sql.session import CANCEL_CLIENT_GONE
from rivulet.sql.session_config import VARIABLES

if TYPE_CHECKING:
    from rivulet.engine import Engine
    from rivulet.sql.session import Session

log = logging.getLogger("rivulet.server")

# A refused client (too many connections) gets this long to send its startup packet.
_REFUSAL_TIMEOUT_SECONDS = 5.0
# A statement running this long gets a watch on its client's socket: a client that went
# away has its statement interrupted (quicker ones finish before a watch would pay off).
_WATCH_AFTER_SECONDS = 0.05

# client_min_messages levels, least severe first: a notice is sent when at or above it.
_MESSAGE_LEVELS = ["debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice", "warning"]


def _is_transaction_end(stmt: Statement | None) -> bool:
    ast = stmt.tree if stmt is not None else None
    return isinstance(ast, dialect.TransactionStatement) and ast.args.get("this") in (
        "commit",
        "rollback",
    )


class ConnectionHost(Protocol):
    """What a connection needs of the server that accepted it (``server.PgServer``)."""

    engine: Engine
    verifier: ScramVerifier | None

    def param(self, name: str) -> int: ...

    def register(self, conn: Connection) -> None: ...

    def unregister(self, conn: Connection) -> None: ...

    def cancel(self, process_id: int, secret_key: int) -> None: ...


class Connection(ExtendedProtocol, ResultTransfer):
    def __init__(
        self,
        server: ConnectionHost,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        refusal: Error | None = None,
    ) -> None:
        self.server = server
        # Set when the server cannot take this client: it is told so after its startup
        # packet (so that its SSL negotiation and a CancelRequest still work).
        self.refusal = refusal
        self.reader = m.MessageReader(reader)
        self.writer = writer
        self.out = bytearray()
        self.session: Session | None = None
        self.process_id = 0
        self.secret_key = 0
        self.user = ""
        self.statements: dict[str, PreparedStatement] = {}
        self.portals: dict[str, Portal] = {}
        self.skip_until_sync = False
        self._transaction_failed = False
        self.closing = False
        # Whether the client went away while a statement ran (its socket hit EOF).
        self.client_gone = False
        self._task: asyncio.Task[None] | None = None
        # Executes of one plain INSERT queued to run as one write (``_run_batch``).
        self._batch: list[Portal] = []

    @property
    def transaction_failed(self) -> bool:
        """A statement failed inside the open transaction block (pg_stat_activity shows
        the session as ``idle in transaction (aborted)``)."""
        return self._transaction_failed

    @transaction_failed.setter
    def transaction_failed(self, failed: bool) -> None:
        self._transaction_failed = failed
        if self.session is not None:
            self.session.transaction_failed = failed

    # ------------------------------------------------------------- plumbing
    async def flush(self) -> None:
        if self.out:
            data, self.out = self.out, bytearray()
            self.writer.write(data)
            await self.writer.drain()

    def _status(self) -> bytes:
        if self.transaction_failed:
            return b"E"
        return b"T" if self.session is not None and self.session.in_transaction else b"I"

    def _send_error(self, exc: Error) -> None:
        self.out += m.error_from(exc)
        if self.session is not None and self.session.in_transaction:
            self.transaction_failed = True

    def _fatal(self, sqlstate: str, text: str, hint: str | None = None) -> None:
        self.out += m.error_response(sqlstate, text, severity="FATAL", hint=hint)

    # ------------------------------------------------------------- lifecycle
    async def run(self) -> None:
        """Serve the client until it leaves; never raises (except cancellation)."""
        self._task = asyncio.current_task()
        timeout = (
            _REFUSAL_TIMEOUT_SECONDS
            if self.refusal is not None
            else float(self.server.param("authentication_timeout"))
        )
        try:
            if await asyncio.wait_for(self._startup(), timeout):
                await self._serve()
        except TimeoutError:
            log.info("client did not finish start-up within %gs", timeout)
        except (m.ClientGone, ConnectionError, asyncio.IncompleteReadError):
            pass
        except m.ProtocolError as exc:
            self.out += m.error_response(exc.sqlstate, exc.message, severity="FATAL", hint=exc.hint)
        except Error as exc:  # during start-up: the connection cannot go on
            self.out += m.error_from(exc, severity="FATAL")
        except asyncio.CancelledError:
            if self.closing:
                self.out += m.error_response(
                    ADMIN_SHUTDOWN,
                    "terminating connection due to administrator command",
                    severity="FATAL",
                )
            else:
                raise
        except Exception:
            log.exception("connection %s failed", self.process_id or "(starting)")
        finally:
            await self._close()

    async def _close(self) -> None:
        self.server.unregister(self)
        self._clear_portals()
        if self.session is not None:
            self.session.close()
        try:
            if self.out and not self.writer.is_closing():
                self.writer.write(bytes(self.out))
            self.out.clear()
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (Exception, asyncio.CancelledError):
            pass

    # --------------------------------------------------------------- startup
    async def _startup(self) -> bool:
        while True:
            code, body = await self.reader.read_startup()
            if code in (m.SSL_REQUEST, m.GSSENC_REQUEST):
                self.writer.write(b"N")  # no TLS/GSS: the client goes on in plain text
                await self.writer.drain()
                continue
            if code == m.CANCEL_REQUEST:
                if len(body) >= 8:
                    pid = int.from_bytes(body[0:4], "big", signed=True)
                    key = int.from_bytes(body[4:8], "big", signed=True)
                    self.server.cancel(pid, key)
                return False
            if code >> 16 == 3:
                break
            raise m.ProtocolError(
                f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0"
            )
        if self.refusal is not None:
            self.out += m.error_from(self.refusal, severity="FATAL")
            return False
        params = m.parse_startup_params(body)
        unsupported = [k for k in params if k.startswith("_pq_.")]
        if code & 0xFFFF or unsupported:
            self.out += m.negotiate_protocol_version(0, unsupported)
        self.user = params.get("user") or ""
        if not self.user:
            self._fatal(
                INVALID_AUTHORIZATION, "no PostgreSQL user name specified in startup packet"
            )
            return False
        database = params.get("database") or self.user
        if not await self._authenticate():
            return False
        if database != DEFAULT_DATABASE:
            self._fatal(INVALID_CATALOG_NAME, f'database "{database}" does not exist')
            return False
        session = self.server.engine.new_session(user=self.user, database=database)
        self.session = session
        session.notice_sink = self._send_notice_now
        session.on_terminate = self.terminate
        peer = self.writer.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            session.client_addr, session.client_port = str(peer[0]), int(peer[1])
        try:
            self._apply_startup_settings(params)
        except Error as exc:
            self.out += m.error_from(exc, severity="FATAL")
            return False
        self.process_id = session.id
        self.secret_key = secrets.randbits(31)
        self.server.register(self)
        # Logged in: messages may now be as large as the system parameters allow.
        self.reader.max_length = self.server.param("max_message_bytes")
        self.reader.max_copy_length = self.server.param("max_copy_data_bytes")
        self.reader.max_statement_length = self.server.param("max_statement_bytes")
        self.reader.limit_hint = (
            "The limits are the system parameters max_message_bytes and, for CopyData,"
            " max_copy_data_bytes (ALTER SYSTEM SET)."
        )
        self.out += m.AUTH_OK
        for name, value in session.config.reported():
            self.out += m.parameter_status(name, value)
        self.out += m.backend_key_data(self.process_id, self.secret_key)
        self.out += m.READY[b"I"]
        await self.flush()
        return True

    def _apply_startup_settings(self, params: dict[str, str]) -> None:
        """Startup parameters and ``options=-c name=value`` become session settings."""
        assert self.session is not None
        settings: list[tuple[str, str]] = []
        for name, value in params.items():
            if name in ("user", "database", "options", "replication") or name.startswith("_pq_"):
                continue
            settings.append((name, value))
        options = params.get("options", "")
        if options:
            words = shlex.split(options.replace("\\ ", "\0"))
            i = 0
            while i < len(words):
                word = words[i].replace("\0", " ")
                setting = None
                if word == "-c" and i + 1 < len(words):
                    setting = words[i + 1].replace("\0", " ")
                    i += 1
                elif word.startswith(("-c", "--")):
                    setting = word[2:]
                if setting and "=" in setting:
                    name, _, value = setting.partition("=")
                    settings.append((name.replace("-", "_"), value))
                i += 1
        for name, value in settings:
            key = self.session.config.canonical(name)
            var = VARIABLES.get(key)
            if var is None or var.read_only:
                continue  # unknown settings are ignored
            self.session.config.set(key, value)

    async def _authenticate(self) -> bool:
        verifier = self.server.verifier
        if verifier is None:
            return True  # trust
        self.out += m.auth_sasl([MECHANISM])
        await self.flush()
        exchange = ScramExchange(verifier)
        try:
            kind, body = await self.reader.read_message()
            if kind != b"p":
                raise m.ProtocolError(f"expected SASL response, got message type {kind!r}")
            mechanism, _, initial = body.partition(b"\0")
            if mechanism != MECHANISM.encode():
                # Never echoed: a client that sent a cleartext password sent it here.
                log.info("authentication of user %r failed: not a SASL response", self.user)
                self._fatal(
                    INVALID_AUTHORIZATION,
                    "client selected an invalid SASL authentication mechanism",
                    hint=f"The server offers {MECHANISM} only.",
                )
                await self._auth_delay()
                return False
            b = m.Body(initial)
            length = b.int32()
            first = b.bytes(length) if length >= 0 else b""
            self.out += m.auth_sasl_continue(exchange.first(first))
            await self.flush()
            kind, body = await self.reader.read_message()
            if kind != b"p":
                raise m.ProtocolError(f"expected SASL response, got message type {kind!r}")
            self.out += m.auth_sasl_final(exchange.final(body))
            return True
        except AuthFailed as exc:
            log.info("authentication of user %r failed: %s", self.user, exc)
            self._fatal(INVALID_PASSWORD, f'password authentication failed for user "{self.user}"')
            await self._auth_delay()
            return False

    async def _auth_delay(self) -> None:
        """Wait before a failed login's error (PostgreSQL's auth_delay), on the loop, so
        that password guessing is slow and other clients go on meanwhile."""
        delay = self.server.param("auth_delay_ms")
        if delay:
            await asyncio.sleep(delay / 1000)

    # ------------------------------------------------------------ main loop
    async def _serve(self) -> None:
        handlers = {
            b"Q": self._simple_query,
            b"P": self._parse,
            b"B": self._bind,
            b"D": self._describe,
            b"E": self._execute,
            b"C": self._close_message,
        }
        while True:
            if self._batch and not self.reader.has_buffered():
                await self._run_batch()  # the client waits for its results
            if self.out and not self.reader.has_buffered():
                await self.flush()
            try:
                kind, body = await self._next_message()
            except m.OversizedStatement as exc:
                assert self.session is not None
                if self._batch:
                    await self._run_batch()
                # (a Query's body is its text and a NUL)
                error = self.session.statement_too_long(exc.size - (exc.kind == b"Q"))
                if exc.kind == b"Q":
                    self._send_error(error)
                    self.out += m.READY[self._status()]
                elif not self.skip_until_sync:
                    self._extended_error(error)
                continue
            if kind == b"X":
                return  # a queued batch is dropped with its implicit transaction
            if self._batch and kind not in (b"B", b"E") and not self._describes_batch(kind, body):
                await self._run_batch()
            if kind == b"S":
                await self._settle_writes()
                self._sync()
                await self.flush()
                continue
            if kind == b"H":
                await self.flush()
                continue
            if self.skip_until_sync:
                continue
            handler = handlers.get(kind)
            if handler is None:
                if kind in (b"d", b"c", b"f"):
                    continue  # COPY messages outside COPY are ignored, as PostgreSQL does
                if kind == b"F":
                    self._extended_error(
                        sql_error(FEATURE_NOT_SUPPORTED, "function call messages are not supported")
                    )
                    continue
                raise m.ProtocolError(f"invalid frontend message type {kind!r}")
            try:
                await handler(body)
            except Error as exc:
                if kind == b"Q":
                    self._send_error(exc)
                    self.out += m.READY[self._status()]
                else:
                    if self._batch:  # the Executes before this message answer first
                        await self._run_batch()
                    if not self.skip_until_sync:
                        self._extended_error(exc)
            except (m.ProtocolError, m.ClientGone, ConnectionError, asyncio.CancelledError):
                raise
            except Exception as exc:
                log.exception("unexpected error in connection %s", self.process_id)
                if kind == b"Q":
                    self._send_error(_internal(exc))
                    self.out += m.READY[self._status()]
                else:
                    self._extended_error(_internal(exc))

    def _extended_error(self, exc: Error) -> None:
        self._send_error(exc)
        self.skip_until_sync = True

    async def _next_message(self) -> tuple[bytes, bytes]:
        """The next message; a session idle inside a transaction block longer than its
        ``idle_in_transaction_session_timeout`` is ended (FATAL 25P03), as PostgreSQL."""
        session = self.session
        if session is None or not session.in_transaction or self.reader.has_buffered():
            return await self.reader.read_message()
        idle_ms = int(session.config.get("idle_in_transaction_session_timeout") or 0)
        if not idle_ms:
            return await self.reader.read_message()
        try:
            return await asyncio.wait_for(self.reader.read_message(), idle_ms / 1000)
        except TimeoutError:
            self._fatal(
                IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                "terminating connection due to idle-in-transaction timeout",
            )
            raise m.ClientGone() from None

    async def _settle_writes(self) -> None:
        """At Sync: the writes of the Executes since the last one are committed before
        ReadyForQuery, as PostgreSQL commits its implicit transaction there."""
        if self.session is None:
            return
        if self.skip_until_sync:  # a statement failed: the implicit transaction is void
            self.session.drop_held_writes()
        try:
            await self.session.settle_writes()
        except Error as exc:
            if not self.skip_until_sync:
                self._send_error(exc)

    def _sync(self) -> None:
        self.skip_until_sync = False
        if self.session is not None and not self.session.in_transaction:
            self._clear_portals()  # the implicit transaction ends: its portals go
            self.transaction_failed = False
        self.out += m.READY[self._status()]

    def _clear_portals(self) -> None:
        for portal in self.portals.values():
            portal.close()
        self.portals.clear()

    def _drop_portal(self, name: str) -> None:
        portal = self.portals.pop(name, None)
        if portal is not None:
            portal.close()

    # --------------------------------------------------------- simple query
    async def _simple_query(self, body: bytes) -> None:
        assert self.session is not None
        sql = m.Body(body).cstring()
        log.debug("session %d: query %r", self.process_id, sql[:1000])
        # Executes with no Sync before this Query: their writes go ahead of its own.
        await self._settle_writes()
        self._drop_portal("")
        statements = await self.session.parse_async(sql)
        if not statements:
            self.out += m.EMPTY_QUERY
        for stmt in statements:
            # Each statement is timed and shown on its own, its rows' sending included.
            with self.session.running(stmt.text):
                ok = await self._run_simple(stmt)
            if not ok:
                break
        self.out += m.READY[self._status()]

    def _deallocate(self, name: exp.Identifier | None) -> StatementResult:
        """DEALLOCATE: the prepared statements are this connection's (the name as an
        identifier: folded to lower case unless quoted)."""
        if name is None:
            self.statements.clear()
            return command("DEALLOCATE ALL")
        key = name.name if name.quoted else name.name.lower()
        if self.statements.pop(key, None) is None:
            raise sql_error(
                INVALID_PREPARED_STATEMENT, f'prepared statement "{key}" does not exist'
            )
        return command("DEALLOCATE")

    def _check_not_aborted(self, stmt: Statement | None) -> None:
        if self.transaction_failed and not _is_transaction_end(stmt):
            raise sql_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            )

    async def _run_statement(self, stmt: Statement, params: list[object]) -> StatementResult:
        assert self.session is not None
        self._check_not_aborted(stmt)
        if isinstance(stmt.tree, dialect.DeallocateStatement):
            return self._deallocate(stmt.tree.this)
        was_failed = self.transaction_failed
        # While a statement runs nothing reads the socket: past a moment, watch it, so
        # that a client that went away has its statement interrupted (its DuckDB query
        # stops and its thread is free). What the client sends meanwhile stays buffered.
        watch: list[asyncio.Task[None]] = []
        timer = asyncio.get_running_loop().call_later(
            _WATCH_AFTER_SECONDS, self._watch_client, watch
        )
        try:
            result = await self.session.execute_statement(stmt, params)
        finally:
            timer.cancel()
            if watch:
                await self._unwatch_client(watch[0])
        if not self.session.in_transaction:
            self.transaction_failed = False
            if was_failed and result.tag == "COMMIT":
                result.tag = "ROLLBACK"  # a failed transaction block can only roll back
        if isinstance(stmt.tree, dialect.DiscardStatement) and result.tag == "DISCARD ALL":
            self.statements.clear()
            self._clear_portals()
        return result

    def _watch_client(self, watch: list[asyncio.Task[None]]) -> None:
        task = asyncio.get_running_loop().create_task(self.reader.watch_for_eof())
        task.add_done_callback(self._client_gone)
        watch.append(task)

    def _client_gone(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            self.client_gone = True
            if self.session is not None:
                self.session.cancel(CANCEL_CLIENT_GONE)

    async def _unwatch_client(self, task: asyncio.Task[None]) -> None:
        task.remove_done_callback(self._client_gone)
        task.cancel()
        # Stopped before anything reads the socket again (its read is pending).
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved (a reset connection): nothing to report

    async def _run_simple(self, stmt: Statement) -> bool:
        """Run one statement of a simple query; False when it failed (the rest is skipped)."""
        result: StatementResult | None = None
        try:
            result = await self._run_statement(stmt, [])
            self._side_messages(result)
            if result.copy_in is not None:
                return await self._copy_in(result.copy_in)
            if result.copy_out is not None:
                await self._copy_out(result)
            elif result.is_query:
                assert result.columns is not None
                self.out += self._row_description(result.columns, [])
                rows = ResultRows(self.session, result)  # type: ignore[arg-type]
                sent = await self._send_rows(rows, result.columns, [], None)
                self.out += m.command_complete(result.counted_tag(sent))
            else:
                self.out += m.command_complete(result.tag)
            return True
        except Error as exc:
            self._send_error(exc)
            return False
        except (m.ProtocolError, m.ClientGone, ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("unexpected error in connection %s", self.process_id)
            self._send_error(_internal(exc))
            return False
        finally:
            if result is not None:
                result.close()

    def _side_messages(self, result: StatementResult) -> None:
        """Notices and ParameterStatus changes that go with a result."""
        for notice in result.notices:
            self._queue_notice(notice)
        for name, value in result.parameter_status:
            self.out += m.parameter_status(name, value)

    def _queue_notice(self, notice: Notice) -> None:
        """A notice, unless the session's ``client_min_messages`` filters it out."""
        assert self.session is not None
        minimum = (self.session.config.get("client_min_messages") or "notice").lower()
        floor = _MESSAGE_LEVELS.index(minimum) if minimum in _MESSAGE_LEVELS else 99
        level = notice.severity.lower()
        rank = _MESSAGE_LEVELS.index(level) if level in _MESSAGE_LEVELS else 99
        if level == "warning" or rank >= floor:
            self.out += m.notice_response(
                notice.severity, notice.sqlstate, notice.message, notice.hint
            )

    def _send_notice_now(self, notice: Notice) -> None:
        """A notice raised while a statement runs (backfill progress) goes out at once,
        with whatever was queued before it."""
        self._queue_notice(notice)
        if self.out and not self.writer.is_closing():
            data, self.out = self.out, bytearray()
            self.writer.write(data)

    # ------------------------------------------------- cancel and terminate
    def cancel_running(self) -> None:
        """Interrupt the running statement (a CancelRequest from another connection)."""
        if self.session is not None:
            self.session.cancel()

    def terminate(self) -> None:
        """pg_terminate_backend: end the connection (FATAL 57P01), now."""
        self.closing = True
        if self._task is not None:
            self._task.cancel()
