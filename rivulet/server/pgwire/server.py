"""The PostgreSQL wire-protocol server: the listening sockets, admission (the
``max_connections`` and ``max_startup_connections`` limits), the registry that routes
CancelRequests to the right session, and an orderly shutdown."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable

import pyarrow as pa

from rivulet.common.errors import TOO_MANY_CONNECTIONS, Error, sql_error
from rivulet.engine import Engine, EngineOptions
from rivulet.server.pgwire.auth import ScramVerifier
from rivulet.server.pgwire.connection import Connection
from rivulet.server.pgwire.listener import Listener, listening_sockets

log = logging.getLogger("rivulet.server")

# How long shutdown waits for connections to wind down before moving on.
_SHUTDOWN_GRACE_SECONDS = 1.0
# How long a new client waits for a start-up slot (max_startup_connections) before it is
# refused: a burst of clients is served in turn, idle sockets do not block it for good.
_STARTUP_SLOT_WAIT_SECONDS = 5.0


class PgServer:
    """Serves one engine over pgwire. Each connection gets its own session."""

    def __init__(self, engine: Engine, password: str | None = None) -> None:
        self.engine = engine
        # Only the SCRAM verifier is kept, never the password.
        self.verifier = ScramVerifier.from_password(password) if password else None
        self._listener: Listener | None = None
        # Every admitted connection; those of them still starting up (not logged in).
        self._connections: set[Connection] = set()
        self._starting: set[Connection] = set()
        # Admitted clients waiting for a start-up slot, first come first served.
        self._slot_waiters: collections.deque[tuple[asyncio.Future[None], Connection]] = (
            collections.deque()
        )
        self._by_process_id: dict[int, Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self.closed = asyncio.Event()
        # The admin endpoint served next to it, if any (``rivulet ctl``).
        self.admin: object | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 4566) -> None:
        self._listener = Listener(listening_sockets(host, port), self._accepted)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound (useful with port 0)."""
        assert self._listener is not None and self._listener.sockets
        sockname = self._listener.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    def param(self, name: str) -> int:
        """An integer system parameter, as it stands now."""
        return int(self.engine.params.get(name))

    def _accepted(self, sock: socket.socket) -> None:
        if self._closing:
            sock.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve_socket(sock))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_socket(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
        except OSError:
            sock.close()
            return
        conn = Connection(self, reader, writer)
        try:
            conn.refusal = await self._admit(conn)
            if conn.refusal is not None:
                assert self._listener is not None
                self._listener.warnings.warning(
                    "admission", f"refused a client: {conn.refusal.detail}"
                )
            await conn.run()
        except asyncio.CancelledError:
            pass
        except Exception:  # never let one client take the accept loop down
            log.exception("connection handler failed")
        finally:
            self._connections.discard(conn)
            self._leave_startup(conn)

    async def _admit(self, conn: Connection) -> Error | None:
        """Count ``conn`` in (waiting for a start-up slot if they are all taken), or say
        why it cannot be served. A refused client still gets its start-up answered (and
        a CancelRequest served), then this error."""
        most = self.param("max_connections")
        if len(self._connections) >= most:
            return sql_error(
                TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
                detail=f"{len(self._connections)} connections are open (max_connections = {most}).",
                hint="Close idle connections, or raise the limit:"
                " ALTER SYSTEM SET max_connections = ...",
            )
        self._connections.add(conn)
        starting = self.param("max_startup_connections")
        if len(self._starting) >= starting or self._slot_waiters:
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append((waiter, conn))
            try:
                await asyncio.wait_for(waiter, _STARTUP_SLOT_WAIT_SECONDS)
                return None  # handed a slot by ``_leave_startup``
            except TimeoutError:
                self._connections.discard(conn)
                return sql_error(
                    TOO_MANY_CONNECTIONS,
                    "sorry, too many clients already",
                    detail=f"{len(self._starting)} connections are still starting up"
                    f" (max_startup_connections = {starting}).",
                    hint="Try again in a moment; clients that connect and do not log in hold"
                    " these slots for up to authentication_timeout.",
                )
        self._starting.add(conn)
        return None

    def _leave_startup(self, conn: Connection) -> None:
        """``conn`` logged in or left: its start-up slot goes to the next waiter."""
        if conn not in self._starting:
            return
        self._starting.discard(conn)
        while self._slot_waiters:
            waiter, waiting = self._slot_waiters.popleft()
            if not waiter.done():
                self._starting.add(waiting)  # now, so that no newcomer takes the slot
                waiter.set_result(None)
                return

    # ---------------------------------------------------------- cancel keys
    def register(self, conn: Connection) -> None:
        """``conn`` has logged in: its cancel key is live and it no longer counts as
        starting."""
        self._leave_startup(conn)
        self._by_process_id[conn.process_id] = conn

    def unregister(self, conn: Connection) -> None:
        if self._by_process_id.get(conn.process_id) is conn:
            del self._by_process_id[conn.process_id]

    def cancel(self, process_id: int, secret_key: int) -> None:
        """A CancelRequest: interrupt that session's statement if the key matches."""
        conn = self._by_process_id.get(process_id)
        if conn is None or conn.secret_key != secret_key:
            log.info("cancel request for unknown process %d ignored", process_id)
            return
        conn.cancel_running()

    # -------------------------------------------------------------- shutdown
    async def close(self, *, shutdown_engine: bool = True) -> None:
        """Stop accepting, end every connection, then shut the engine down."""
        if self._closing:
            await self.closed.wait()
            return
        self._closing = True
        if self._listener is not None:
            self._listener.close()
        for conn in list(self._connections):
            conn.closing = True
            conn.cancel_running()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_SECONDS)
        if shutdown_engine:
            try:
                await self.engine.shutdown()
            except Exception:
                log.exception("engine shutdown failed")
        self.closed.set()


async def serve(
    engine: Engine, host: str = "127.0.0.1", port: int = 4566, password: str | None = None
) -> PgServer:
    """Start serving ``engine`` on ``host:port``; returns the running server."""
    await engine.start()
    server = PgServer(engine, password)
    await server.start(host, port)
    return server


def run_playground(
    data_dir: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 4566,
    password: str | None = None,
    *,
    on_ready: Callable[[PgServer], None] | None = None,
    options: EngineOptions | None = None,
    admin_port: int | None = None,
) -> None:
    """Run an engine with a pgwire server until SIGINT/SIGTERM, then shut down cleanly.

    In memory when ``data_dir`` is None. ``on_ready`` is called once the socket listens.
    Everything the process creates is private to its user (umask 077): the data
    directory's files, DuckDB's temporary files, the admin token.
    """
    os.umask(0o077)
    engine = Engine(data_dir, options)
    try:
        asyncio.run(_playground(engine, host, port, password, on_ready, admin_port, data_dir))
    finally:
        engine.close()


async def _playground(
    engine: Engine,
    host: str,
    port: int,
    password: str | None,
    on_ready: Callable[[PgServer], None] | None,
    admin_port: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> None:
    await engine.start()
    # The admin endpoint first: its token file is written before clients can connect.
    admin = None
    if admin_port is not None:
        from rivulet.server.admin import AdminServer

        admin = AdminServer(engine, data_dir)
        try:
            await admin.start(admin_port)
        except OSError as exc:  # the database still serves; only `rivulet ctl` is off
            log.warning("admin endpoint not started on 127.0.0.1:%d: %s", admin_port, exc)
            admin = None
    server = PgServer(engine, password)
    try:
        await server.start(host, port)
    except BaseException:
        if admin is not None:
            await admin.close()
        raise
    server.admin = admin
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The server owns SIGINT/SIGTERM: a shutdown must end statements as 57P01 in order,
    # not let Arrow's own handlers cancel a COPY's CSV read mid-chunk.
    pa.enable_signal_handlers(False)
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(server)
    try:
        await stop.wait()
    finally:
        if admin is not None:
            await admin.close()
        await server.close()
