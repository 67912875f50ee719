"""The admin endpoint: a small HTTP/JSON interface on 127.0.0.1 for operating a running
server (``rivulet ctl``). Workers: ``GET /workers``, ``POST /workers`` with
``{"slots": n}``, ``DELETE /workers/<id>``. Errors come back as
``{"error": message, "sqlstate": ..., "hint": ...}`` with a 4xx status.

Every request must carry the server's admin token (``Authorization: Bearer <token>``),
written at start to a file only its owner can read: ``admin.token`` in the data directory,
or ``admin-<port>.token`` in a private per-user directory for an in-memory server
(``runtime_token_path``). Requests whose ``Host`` is not a loopback name of this endpoint,
or that carry an ``Origin`` (a web page), are refused before the token is looked at, so a
page in a local browser can neither use it nor probe it.

The handler is written by hand on asyncio streams rather than on an ASGI server: the API
is three routes for one client, and every limit it needs (a deadline for the request head
and one for the body, sizes of both, connections at once, one request per connection) is
a line here, where an ASGI server has no deadline for a request head and takes over the
process's signal handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import tempfile
from http import HTTPStatus
from pathlib import Path

from rivulet.common.errors import Error
from rivulet.common.vnode import VNODE_COUNT
from rivulet.engine import Engine

log = logging.getLogger(__name__)

TOKEN_FILE_NAME = "admin.token"
# What a worker may offer (as the cluster checks it): one slot per vnode at most.
MAX_WORKER_SLOTS = VNODE_COUNT

_HEAD_LIMIT = 8 << 10
_BODY_LIMIT = 16 << 10
_HEAD_TIMEOUT_SECONDS = 10.0
_BODY_TIMEOUT_SECONDS = 10.0
_WRITE_TIMEOUT_SECONDS = 10.0
_MAX_CONNECTIONS = 16
_TOKEN_CHARS = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_WORKER_ID = re.compile(r"[0-9]{1,9}")
_LENGTH = re.compile(r"[0-9]{1,18}")


def runtime_token_path(port: int) -> Path:
    """Where an in-memory server on admin ``port`` keeps its token: a directory of the
    user's own under ``$XDG_RUNTIME_DIR`` (else the temp directory)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"rivulet-{os.getuid()}" / f"admin-{port}.token"


def token_path(data_dir: str | os.PathLike[str] | None, port: int) -> Path:
    """The token file of a server with this data directory (None: in memory) and port."""
    if data_dir is not None:
        return Path(data_dir) / TOKEN_FILE_NAME
    return runtime_token_path(port)


def _private_directory(path: Path) -> None:
    """Make ``path`` a directory only this user can enter, or refuse one that another
    user could have planted or can read."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory of this user's")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)


def write_token(path: Path, token: str, *, private_parent: bool) -> None:
    """Write ``token`` to ``path``, readable by its owner only."""
    if private_parent:
        _private_directory(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode("ascii") + b"\n")
    finally:
        os.close(fd)


class HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        hint: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.hint = hint
        self.headers = headers or {}


class Request:
    """The head of one request, checked for form."""

    def __init__(self, head: bytes) -> None:
        try:
            text = head.decode("ascii")
        except UnicodeDecodeError:
            raise HttpError(400, "the request head is not ASCII") from None
        lines = text[:-4].split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
            raise HttpError(400, "malformed request line")
        self.method, self.target, _ = parts
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN_CHARS.fullmatch(name):
                raise HttpError(400, "malformed header line")
            name = name.lower()
            if name in self.headers:
                raise HttpError(400, f"repeated header {name}")
            self.headers[name] = value.strip(" \t")


def _json_object(body: bytes) -> dict[str, object]:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("repeated key")
        return dict(pairs)

    def no_constants(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    try:
        value = json.loads(
            body.decode("utf-8"), object_pairs_hook=no_duplicates, parse_constant=no_constants
        )
    except ValueError as exc:  # also UnicodeDecodeError, and integers too long to read
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HttpError(400, "the body must be a JSON object")
    return value


def _slots(body: bytes) -> int:
    request = _json_object(body)
    unknown = sorted(set(request) - {"slots"})
    if unknown:
        raise HttpError(400, f"unknown key(s): {', '.join(unknown)}", hint='Send {"slots": n}.')
    slots = request.get("slots")
    if type(slots) is not int or not 1 <= slots <= MAX_WORKER_SLOTS:
        raise HttpError(
            400,
            f'"slots" must be an integer from 1 to {MAX_WORKER_SLOTS}, not {json.dumps(slots)}',
        )
    return slots


class AdminServer:
    def __init__(self, engine: Engine, data_dir: str | os.PathLike[str] | None = None) -> None:
        self.engine = engine
        self.data_dir = data_dir
        self.token = secrets.token_urlsafe(32)
        self.token_path: Path | None = None
        self._server: asyncio.base_events.Server | None = None
        self._hosts: set[str] = set()
        self._active = 0

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        """Listen, then write the token file (its name may depend on the bound port).
        Raises OSError when either fails; nothing is left listening then."""
        self._server = await asyncio.start_server(self._handle, host, port, limit=_HEAD_LIMIT)
        bound = self.address[1]
        self._hosts = {f"127.0.0.1:{bound}", f"localhost:{bound}", f"[::1]:{bound}"}
        path = token_path(self.data_dir, bound)
        try:
            write_token(path, self.token, private_parent=self.data_dir is None)
        except OSError:
            await self.close()
            raise
        self.token_path = path

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self.token_path is not None:
            with contextlib.suppress(OSError):
                self.token_path.unlink()
            self.token_path = None

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._active >= _MAX_CONNECTIONS:
                status, payload, headers = 503, {"error": "too many admin connections"}, {}
            else:
                self._active += 1
                try:
                    status, payload, headers = await self._answer(reader)
                finally:
                    self._active -= 1
            if status == 0:
                return  # the client went away
            data = json.dumps(payload).encode()
            extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
                "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                f"{extra}Connection: close\r\n\r\n".encode()
                + data
            )
            await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_SECONDS)
            await self._linger(reader, writer)
        except (OSError, TimeoutError):
            log.debug("admin client left before its answer was sent", exc_info=True)
        finally:
            writer.close()

    @staticmethod
    async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then read what the client still sends (a body that was refused
        unread) until it closes: closing with unread bytes would reset the connection and
        the client could lose the answer. Bounded in bytes and time."""
        writer.write_eof()
        left = _BODY_LIMIT
        async with asyncio.timeout(1.0):
            while left > 0 and (chunk := await reader.read(left)):
                left -= len(chunk)

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, object, dict[str, str]]:
        """(status, JSON payload, extra headers) for one request; status 0: no answer."""
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_SECONDS)
            except asyncio.LimitOverrunError:
                raise HttpError(431, f"the request head is over {_HEAD_LIMIT} bytes") from None
            except asyncio.IncompleteReadError:
                return 0, None, {}
            except TimeoutError:
                raise HttpError(408, "the request head did not arrive in time") from None
            request = Request(head)
            self._check_caller(request)
            body = await self._body(reader, request)
            return await self._route(request, body)
        except HttpError as exc:
            payload: dict[str, object] = {"error": exc.message}
            if exc.hint:
                payload["hint"] = exc.hint
            return exc.status, payload, exc.headers
        except Exception:
            # A bug, not the caller's mistake: logged with its traceback, answered without
            # internals.
            log.exception("admin request failed")
            return 500, {"error": "internal error; the server log has the details"}, {}

    def _check_caller(self, request: Request) -> None:
        """Refuse what a web page could send, then anything without the token."""
        host = request.headers.get("host", "").lower()
        if host not in self._hosts:
            raise HttpError(421, "the Host header must name this endpoint on a loopback address")
        if "origin" in request.headers:
            raise HttpError(403, "requests from web pages (with an Origin header) are refused")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), self.token.encode("ascii")
        ):
            raise HttpError(
                401,
                "the admin endpoint requires the server's admin token",
                hint=f"Send 'Authorization: Bearer <token>' with the token in {self.token_path}"
                " (rivulet ctl reads it there; see --token-file).",
                headers={"WWW-Authenticate": 'Bearer realm="rivulet"'},
            )

    async def _body(self, reader: asyncio.StreamReader, request: Request) -> bytes:
        if "transfer-encoding" in request.headers:
            raise HttpError(400, "Transfer-Encoding is not accepted; send Content-Length")
        length_text = request.headers.get("content-length")
        if request.method != "POST":
            if length_text not in (None, "0"):
                raise HttpError(400, f"{request.method} takes no body")
            return b""
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            raise HttpError(415, "the body must be JSON (Content-Type: application/json)")
        if length_text is None:
            raise HttpError(411, "a POST needs a Content-Length")
        if not _LENGTH.fullmatch(length_text):
            raise HttpError(400, "malformed Content-Length")
        length = int(length_text)
        if length > _BODY_LIMIT:
            raise HttpError(413, f"the body is over {_BODY_LIMIT} bytes")
        try:
            return await asyncio.wait_for(reader.readexactly(length), _BODY_TIMEOUT_SECONDS)
        except asyncio.IncompleteReadError:
            raise HttpError(400, "the body is shorter than its Content-Length") from None
        except TimeoutError:
            raise HttpError(408, "the body did not arrive in time") from None

    async def _route(self, request: Request, body: bytes) -> tuple[int, object, dict[str, str]]:
        method = request.method
        parts = request.target.split("/")
        if parts[:2] != ["", "workers"] or len(parts) > 3:
            raise HttpError(404, f"no such endpoint: {request.target[:100]}")
        try:
            if len(parts) == 2 or parts[2] == "":
                if method == "GET":
                    return 200, self._workers(), {}
                if method == "POST":
                    worker_id = await self.engine.ddl.scale.add_worker(_slots(body))
                    return 201, {"id": worker_id, "workers": self._workers()}, {}
                raise HttpError(
                    405,
                    f"method {method} is not allowed on /workers",
                    headers={"Allow": "GET, POST"},
                )
            if not _WORKER_ID.fullmatch(parts[2]):
                raise HttpError(404, "a worker id is a number: /workers/<id>")
            if method == "DELETE":
                await self.engine.ddl.scale.remove_worker(int(parts[2]))
                return 200, {"workers": self._workers()}, {}
            raise HttpError(
                405, f"method {method} is not allowed on /workers/<id>", headers={"Allow": "DELETE"}
            )
        except Error as exc:
            status = 404 if exc.sqlstate == "42704" else 409 if exc.sqlstate == "55000" else 400
            return status, {"error": exc.message, "sqlstate": exc.sqlstate, "hint": exc.hint}, {}

    def _workers(self) -> list[dict[str, object]]:
        actors: dict[int, int] = {}
        for job in self.engine.runtime.jobs.values():
            for worker in job.workers.values():
                actors[worker] = actors.get(worker, 0) + 1
        return [
            {"id": w.id, "host": w.host, "slots": w.slots, "actors": actors.get(w.id, 0)}
            for w in self.engine.cluster.workers
        ]
