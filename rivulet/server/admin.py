"""The admin endpoint: a small HTTP/JSON interface on 127.0.0.1 for operating a running
server (``rivulet ctl``). Workers: ``GET /workers``, ``POST /workers`` with
``{"slots": n}``, ``DELETE /workers/<id>``. Errors come back as
``{"error": message, "sqlstate": ..., "hint": ...}`` with a 4xx status."""

from __future__ import annotations

import asyncio
import json
import logging

from rivulet.common.errors import Error
from rivulet.engine import Engine

log = logging.getLogger(__name__)

_REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 409: "Conflict"}


class AdminServer:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._server: asyncio.base_events.Server | None = None

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        self._server = await asyncio.start_server(self._handle, host, port)

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            status, payload = await self._route(method, path, body)
        except Exception as exc:  # a malformed request: answer it, never crash
            status, payload = 400, {"error": f"bad request: {exc}"}
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        writer.close()

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, object]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        try:
            if parts == ["workers"] and method == "GET":
                return 200, self._workers()
            if parts == ["workers"] and method == "POST":
                slots = json.loads(body or b"{}").get("slots")
                if not isinstance(slots, int):
                    return 400, {"error": 'expected {"slots": <number>}'}
                worker_id = await self.engine.ddl.add_worker(slots)
                return 201, {"id": worker_id, "workers": self._workers()}
            if len(parts) == 2 and parts[0] == "workers" and method == "DELETE":
                await self.engine.ddl.remove_worker(int(parts[1]))
                return 200, {"workers": self._workers()}
        except Error as exc:
            status = 404 if exc.sqlstate == "42704" else 409 if exc.sqlstate == "55000" else 400
            return status, {"error": exc.message, "sqlstate": exc.sqlstate, "hint": exc.hint}
        return 404, {"error": f"no such endpoint: {method} {path}"}

    def _workers(self) -> list[dict[str, object]]:
        actors: dict[int, int] = {}
        for job in self.engine.runtime.jobs.values():
            for worker in job.workers.values():
                actors[worker] = actors.get(worker, 0) + 1
        return [
            {"id": w.id, "host": w.host, "slots": w.slots, "actors": actors.get(w.id, 0)}
            for w in self.engine.cluster.workers
        ]
