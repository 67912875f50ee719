"""The listening sockets and their accept loop.

asyncio's own accept loop logs a traceback for every failed ``accept()`` when the process
is out of file descriptors, and lets client sockets take the last descriptors, so that the
sessions already connected fail as soon as they need one (DuckDB, an import). This loop
keeps a reserve of descriptors: a socket accepted into it is refused at once with an
ErrorResponse. If ``accept()`` itself fails for lack of resources, accepting pauses and
backs off; each kind of trouble is logged once per interval, with a count.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import time
from collections.abc import Callable

from rivulet.common.errors import INSUFFICIENT_RESOURCES
from rivulet.server.pgwire import messages as m

log = logging.getLogger("rivulet.server")

_BACKLOG = 512
# Sockets accepted per readiness event, so that a flood cannot starve the loop.
_ACCEPT_BATCH = 64
# After a failed accept() for lack of resources: the first pause, doubling up to the last.
_FIRST_PAUSE_SECONDS = 0.05
_LONGEST_PAUSE_SECONDS = 1.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_FD_REFUSAL = m.error_response(
    INSUFFICIENT_RESOURCES,
    "sorry, the server is out of file descriptors",
    severity="FATAL",
    hint="Close idle connections, or raise the server's open-file limit (ulimit -n).",
)


class RateLimitedLog:
    """Logs a kind of warning at most once per ``interval`` seconds, saying how many times
    it happened meanwhile."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def warning(self, kind: str, text: str) -> None:
        self._count[kind] = self._count.get(kind, 0) + 1
        now = time.monotonic()
        if now - self._last.get(kind, -self.interval) < self.interval:
            return
        count = self._count.pop(kind)
        self._last[kind] = now
        more = f" ({count} times since the last report)" if count > 1 else ""
        log.warning("%s%s", text, more)


def descriptor_ceiling() -> int:
    """The lowest descriptor number a client socket may not have: the open-file limit less
    a reserve for what the engine itself opens (descriptors are allocated lowest first, so
    a socket numbered past it means that fewer than the reserve are left)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return soft - min(64, max(16, soft // 4))


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of ``host``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Listener:
    """Accepts connections on ``sockets`` and hands each to ``on_socket`` (a task per
    connection is the caller's business)."""

    def __init__(
        self, sockets: list[socket.socket], on_socket: Callable[[socket.socket], None]
    ) -> None:
        self.sockets = sockets
        self._on_socket = on_socket
        self._loop = asyncio.get_running_loop()
        self._ceiling = descriptor_ceiling()
        self._pause = _FIRST_PAUSE_SECONDS
        self._resume: asyncio.TimerHandle | None = None
        self._closed = False
        self.warnings = RateLimitedLog()
        self._watch()

    def _watch(self) -> None:
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _unwatch(self) -> None:
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._back_off(exc)
                else:
                    self.warnings.warning("accept", f"accepting a connection failed: {exc}")
                return
            if conn.fileno() >= self._ceiling:
                self._refuse(conn)
                continue
            conn.setblocking(False)
            self._on_socket(conn)
        self._pause = _FIRST_PAUSE_SECONDS

    def _refuse(self, conn: socket.socket) -> None:
        """Answer a socket accepted into the descriptor reserve and close it at once."""
        try:
            conn.setblocking(False)
            conn.send(_FD_REFUSAL)
        except OSError:
            pass
        conn.close()
        self.warnings.warning(
            "descriptors",
            "refusing connections: close to the open-file limit"
            f" ({resource.getrlimit(resource.RLIMIT_NOFILE)[0]} descriptors)",
        )

    def _back_off(self, exc: OSError) -> None:
        """Stop watching the sockets for a while (they stay readable, so the loop would
        spin), then try again, waiting longer each time in a row it fails."""
        self._unwatch()
        self.warnings.warning(
            "resources",
            f"cannot accept connections: {exc.strerror or exc};"
            f" pausing for up to {_LONGEST_PAUSE_SECONDS:g} s at a time",
        )
        self._resume = self._loop.call_later(self._pause, self._resume_watching)
        self._pause = min(self._pause * 2, _LONGEST_PAUSE_SECONDS)

    def _resume_watching(self) -> None:
        self._resume = None
        if not self._closed:
            self._watch()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
        else:
            self._unwatch()
        for sock in self.sockets:
            sock.close()
