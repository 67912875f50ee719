"""The storage service: the store's committed state, read by actors of other processes.

The store (one DuckDB database, one writer) stays with meta. An actor on a compute node
reads the committed rows of its state tables through this service, the shape in which
``StateTable`` reads them itself in one process: a batch of probe keys in (Arrow), the
matching rows out (Arrow). The actor lays its epochs' overlays on top as it always does.
Writes do not come this way: an epoch's writes travel with its barrier to the commit.

Wire (one request at a time per connection; a client keeps one connection per thread)::

    request:  u32 header length | header (JSON) | u64 probe length | probe (Arrow IPC)
    response: u8 status | u64 length | payload (Arrow IPC when OK, else the error text)

The first request of a connection presents the service's token: only processes that
were given it (the compute nodes meta started) read state. The server answers each
request on a thread of its own small pool, with that thread's cursor of the store, so
that reads neither block the event loop nor take the threads of user queries.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import secrets
import socket
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from rivulet.common.columns import from_ipc, to_ipc
from rivulet.storage.state_store import StateStore
from rivulet.storage.state_table import (
    PositionedScan,
    StateTableSchema,
    committed_joined_sql,
    committed_matching_sql,
    registered,
    table_exists,
)

log = logging.getLogger(__name__)

_HEADER_LEN = struct.Struct("!I")
_PAYLOAD_LEN = struct.Struct("!Q")
_STATUS = struct.Struct("!BQ")
OK = 0
FAILED = 1
# Threads answering reads: a compute node's actors read a few batches at a time.
SERVICE_THREADS = 4


class StateServiceError(RuntimeError):
    """The service could not answer a read (the store's error, or a refused token)."""


def _ipc(table: pa.Table | None) -> bytes | pa.Buffer:
    return b"" if table is None else to_ipc(table)


def _table(payload: bytes) -> pa.Table | None:
    return from_ipc(payload) if payload else None


# ------------------------------------------------------------------ the reads
class StoreReader:
    """The committed reads, answered from the store in this process: what the service
    answers for other processes, and what an actor here uses where it reads through a
    ``CommittedReader``. Blocking; each thread reads with its own cursor of the store."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        # Open read transactions by handle: a cursor each, and a lock held while it reads
        # (one statement at a time on a cursor).
        self._snapshots: dict[int, tuple[duckdb.DuckDBPyConnection, threading.Lock]] = {}
        self._handles = itertools.count(1)
        self._lock = threading.Lock()

    def matching(
        self,
        schema: StateTableSchema,
        probe: pa.Table | None,
        on: Sequence[str],
        nulls_equal: bool,
    ) -> pa.Table:
        cur = self.store.cursor()
        with registered(cur, *([] if probe is None else [probe])) as names:
            name = names[0] if names else None
            sql = committed_matching_sql(schema.physical_name, name, on, nulls_equal=nulls_equal)
            return cur.sql(sql).to_arrow_table()

    def joined(
        self,
        schema: StateTableSchema,
        probe: pa.Table,
        on: Sequence[str],
        columns: Sequence[str] | None,
    ) -> pa.Table:
        cur = self.store.cursor()
        with registered(cur, probe) as (name,):
            return cur.sql(
                committed_joined_sql(schema.physical_name, name, on, columns)
            ).to_arrow_table()

    def exists(self, schema: StateTableSchema) -> bool:
        return table_exists(self.store.cursor(), schema.table_id)

    def scan(
        self,
        scan: PositionedScan,
        positions: pa.Table,
        limit: int | None,
        snapshot: int | None = None,
    ) -> pa.Table:
        if snapshot is None:
            return scan.run(self.store.cursor(), positions, limit)
        with self._lock:
            entry = self._snapshots.get(snapshot)
        if entry is None:
            raise KeyError(f"no open snapshot {snapshot}")
        cur, lock = entry
        with lock:
            return scan.run(cur, positions, limit)

    def open_snapshot(self) -> int:
        cur = self.store.new_cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
        except BaseException:
            cur.close()
            raise
        with self._lock:
            handle = next(self._handles)
            self._snapshots[handle] = (cur, threading.Lock())
        return handle

    def close_snapshot(self, snapshot: int) -> None:
        with self._lock:
            entry = self._snapshots.pop(snapshot, None)
        if entry is None:
            return
        cur, lock = entry
        with lock:
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")
            cur.close()

    @property
    def open_snapshots(self) -> int:
        """Read transactions open now (each holds the store's old versions for it)."""
        with self._lock:
            return len(self._snapshots)


# ------------------------------------------------------------------ server
class StateService:
    """Serves the committed state of ``store`` on a loopback port (``start``)."""

    def __init__(self, store: StateStore, token: str | None = None) -> None:
        self.reads = StoreReader(store)
        self.token = token or secrets.token_hex(16)
        self._pool = ThreadPoolExecutor(SERVICE_THREADS, thread_name_prefix="state-service")
        self._server: asyncio.Server | None = None
        self.requests = 0
        self.requests_by_op: collections.Counter[str] = collections.Counter()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port)
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        authenticated = False
        # Snapshots opened through this connection: closed with it (a compute node that
        # dies leaves no read transaction behind).
        opened: set[int] = set()
        try:
            while True:
                (n,) = _HEADER_LEN.unpack(await reader.readexactly(_HEADER_LEN.size))
                header = json.loads(await reader.readexactly(n))
                (m,) = _PAYLOAD_LEN.unpack(await reader.readexactly(_PAYLOAD_LEN.size))
                payload = await reader.readexactly(m) if m else b""
                if not authenticated:
                    if not secrets.compare_digest(str(header.get("token", "")), self.token):
                        writer.write(_STATUS.pack(FAILED, 13) + b"invalid token")
                        await writer.drain()
                        return
                    authenticated = True
                    writer.write(_STATUS.pack(OK, 0))
                    await writer.drain()
                    continue
                try:
                    answer = await loop.run_in_executor(
                        self._pool, self._answer, header, payload, opened
                    )
                except (duckdb.Error, KeyError, ValueError, pa.ArrowException) as exc:
                    text = str(exc).encode()
                    writer.write(_STATUS.pack(FAILED, len(text)) + text)
                else:
                    writer.write(_STATUS.pack(OK, len(answer)))
                    writer.write(memoryview(answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            for handle in opened:
                await loop.run_in_executor(self._pool, self.reads.close_snapshot, handle)

    def _answer(
        self, header: dict[str, object], payload: bytes, opened: set[int]
    ) -> bytes | pa.Buffer:
        """One read, on a service thread."""
        self.requests += 1
        op = str(header["op"])
        self.requests_by_op[op] += 1
        if op == "open_snapshot":
            handle = self.reads.open_snapshot()
            opened.add(handle)
            return json.dumps(handle).encode()
        if op == "close_snapshot":
            handle = int(str(header["snapshot"]))
            opened.discard(handle)
            self.reads.close_snapshot(handle)
            return b""
        probe = _table(payload)
        if op == "scan":
            scan = header["scan"]
            limit, snapshot = header["limit"], header["snapshot"]
            assert isinstance(scan, dict) and probe is not None
            assert limit is None or isinstance(limit, int)
            assert snapshot is None or isinstance(snapshot, int)
            positioned = PositionedScan.from_json(scan)
            return _ipc(self.reads.scan(positioned, probe, limit, snapshot))
        table_id = header["table_id"]
        assert isinstance(table_id, int)
        schema = _schema_of(table_id)
        if op == "exists":
            return json.dumps(self.reads.exists(schema)).encode()
        on = header["on"]
        assert isinstance(on, list)
        if op == "matching":
            return _ipc(self.reads.matching(schema, probe, on, bool(header["nulls_equal"])))
        if op == "joined" and probe is not None:
            columns = header["columns"]
            assert columns is None or isinstance(columns, list)
            return _ipc(self.reads.joined(schema, probe, on, columns))
        raise ValueError(f"unknown state read {op!r}")


def _schema_of(table_id: int) -> StateTableSchema:
    """A layout that names table ``table_id``: the reads need its name only."""
    return StateTableSchema(table_id, (), (), ())


# ------------------------------------------------------------------ client
class StateServiceClient:
    """A ``CommittedReader`` served by a ``StateService``: blocking, one connection per
    thread that reads (actors read on query threads)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.address = (host, port)
        self.token = token
        self._local = threading.local()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def matching(
        self,
        schema: StateTableSchema,
        probe: pa.Table | None,
        on: Sequence[str],
        nulls_equal: bool,
    ) -> pa.Table:
        header = {
            "op": "matching",
            "table_id": schema.table_id,
            "on": list(on),
            "nulls_equal": nulls_equal,
        }
        return self._read(header, probe)

    def joined(
        self,
        schema: StateTableSchema,
        probe: pa.Table,
        on: Sequence[str],
        columns: Sequence[str] | None,
    ) -> pa.Table:
        header = {
            "op": "joined",
            "table_id": schema.table_id,
            "on": list(on),
            "columns": None if columns is None else list(columns),
        }
        return self._read(header, probe)

    def exists(self, schema: StateTableSchema) -> bool:
        return bool(json.loads(self._call({"op": "exists", "table_id": schema.table_id}, None)))

    def scan(
        self,
        scan: PositionedScan,
        positions: pa.Table,
        limit: int | None,
        snapshot: int | None = None,
    ) -> pa.Table:
        header: dict[str, object] = {
            "op": "scan",
            "scan": scan.to_json(),
            "limit": limit,
            "snapshot": snapshot,
        }
        return self._read(header, positions)

    def open_snapshot(self) -> int:
        return int(json.loads(self._call({"op": "open_snapshot"}, None)))

    def close_snapshot(self, snapshot: int) -> None:
        self._call({"op": "close_snapshot", "snapshot": snapshot}, None)

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def _read(self, header: dict[str, object], probe: pa.Table | None) -> pa.Table:
        table = _table(self._call(header, probe))
        assert table is not None
        return table

    def _call(self, header: dict[str, object], probe: pa.Table | None) -> bytes:
        sock = getattr(self._local, "socket", None)
        if sock is None:
            sock = socket.create_connection(self.address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._exchange(sock, {"token": self.token}, None)
            self._local.socket = sock
            with self._lock:
                self._sockets.append(sock)
        return self._exchange(sock, header, probe)

    @staticmethod
    def _exchange(sock: socket.socket, header: dict[str, object], probe: pa.Table | None) -> bytes:
        head = json.dumps(header).encode()
        body = _ipc(probe)
        sock.sendall(_HEADER_LEN.pack(len(head)) + head + _PAYLOAD_LEN.pack(len(body)))
        if len(body):
            sock.sendall(memoryview(body))
        status, n = _STATUS.unpack(_recv_exactly(sock, _STATUS.size))
        payload = _recv_exactly(sock, n)
        if status != OK:
            raise StateServiceError(payload.decode(errors="replace"))
        return payload


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the state service closed the connection")
        got += k
    return bytes(buf)


class StateServiceThread:
    """A ``StateService`` run by a thread and event loop of its own: reads are answered
    even while the loop of the process that asks is busy with the work waiting for them
    (a deterministic engine runs its DuckDB work on its loop)."""

    def __init__(self, store: StateStore) -> None:
        self.service = StateService(store)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="state-service-loop", daemon=True
        )
        self.client: StateServiceClient | None = None

    def start(self) -> StateServiceClient:
        """Serve on a loopback port; a client of the service (closed by ``close``)."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self.service.start(), self._loop)
        host, port = future.result(10)
        self.client = StateServiceClient(host, port, self.service.token)
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.service.close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()
