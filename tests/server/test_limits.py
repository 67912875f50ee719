"""What a client can make the server hold: message sizes before and after login, the
connections open and starting up at once, the start-up deadline, and running out of file
descriptors."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import ServerFactory, ServerProcess
from wire import (
    READY_IDLE,
    drain_until_closed,
    error_fields,
    message,
    read_until,
    startup_packet,
)

PASSWORD = "limits-pw"


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _open(server: ServerProcess) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=5)


def _logged_in(server: ServerProcess) -> socket.socket:
    sock = _open(server)
    sock.sendall(startup_packet())
    assert READY_IDLE in read_until(sock, READY_IDLE)
    return sock


def _send_until_refused(sock: socket.socket, total: int) -> int:
    """Send up to ``total`` bytes of filler; returns how many went before the server
    closed the connection."""
    chunk = b"x" * (1 << 20)
    sent = 0
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        while sent < total:
            sock.sendall(chunk)
            sent += len(chunk)
    return sent


@pytest.fixture(scope="module")
def secured(session_server_factory: ServerFactory) -> Iterator[ServerProcess]:
    srv = session_server_factory(password=PASSWORD)
    yield srv
    assert srv.stop() == 0


def test_a_huge_message_before_login_is_refused_unread(secured: ServerProcess) -> None:
    """A client that has not logged in announces a 1 GiB SASL message: the server answers
    with a FATAL error at once and closes, without buffering what follows."""
    before = _rss_bytes(secured.proc.pid)
    socks = []
    for _ in range(2):
        sock = _open(secured)
        sock.sendall(startup_packet())
        assert b"SCRAM-SHA-256" in read_until(sock, b"SCRAM-SHA-256\0")
        sock.sendall(b"p" + struct.pack("!i", 1 << 30) + b"SCRAM-SHA-256\0")
        reply = read_until(sock, b"\0\0")
        fields = error_fields(reply)
        assert fields.get("S") == "FATAL", reply
        assert fields["C"] == "08P01"
        assert "invalid message length" in fields["M"]
        socks.append(sock)
    for sock in socks:
        _send_until_refused(sock, 256 << 20)
        drain_until_closed(sock)
        sock.close()
    assert _rss_bytes(secured.proc.pid) - before < 64 << 20
    with psycopg.connect(secured.dsn(), autocommit=True) as c:
        assert c.execute("select 1").fetchone() == (1,)


def test_an_oversized_message_after_login_is_refused(server: ServerProcess) -> None:
    # (A Bind: an oversized Query or Parse is refused as a statement instead, and the
    # connection goes on, see test_statement_limits.py.)
    with _logged_in(server) as sock:
        sock.sendall(b"B" + struct.pack("!i", (16 << 20) + 5))
        reply = read_until(sock, b"\0\0")
        fields = error_fields(reply)
        assert fields.get("S") == "FATAL", reply
        assert fields["C"] == "08P01"
        assert "over the limit of 16777216 bytes" in fields["M"]
        assert "max_message_bytes" in fields["H"]
        _send_until_refused(sock, 64 << 20)
    # Large messages within the bound still work: a 2 MiB parameter.
    with server.connect() as c:
        value = "x" * (2 << 20)
        assert c.execute("select length(%s::text)", [value]).fetchone() == (len(value),)


def test_copy_data_has_its_own_bound(server: ServerProcess, table_name: str) -> None:
    """A CopyData message larger than max_message_bytes is fine (up to
    max_copy_data_bytes): a file may come in big pieces."""
    with server.connect() as c:
        c.execute(f"create table {table_name} (v int)")
    rows = 3_000_000
    data = b"7\n" * rows  # 6 MB
    data = data * 3  # 18 MB in one message
    with _logged_in(server) as sock:
        sock.sendall(message(b"Q", f"copy {table_name} from stdin\0".encode()))
        assert b"G" in read_until(sock, b"G")
        sock.sendall(message(b"d", data) + message(b"c", b""))
        reply = read_until(sock, READY_IDLE, limit=120)
        assert f"COPY {3 * rows}".encode() in reply, reply[:200]
    with server.connect() as c:
        assert c.execute(f"select count(*) from {table_name}").fetchone() == (3 * rows,)


def _too_many(srv: ServerProcess) -> dict[str, str]:
    """Connect by hand and return the error the server answers the startup packet with."""
    with _open(srv) as sock:
        sock.sendall(startup_packet())
        reply = read_until(sock, b"\0\0", limit=20)
    return error_fields(reply)


def _connect_eventually(srv: ServerProcess, limit: float = 10.0) -> psycopg.Connection:
    deadline = time.monotonic() + limit
    while True:
        try:
            return srv.connect()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_max_connections(server_factory: ServerFactory) -> None:
    srv = server_factory()
    with srv.connect() as c0:
        assert ("max_connections", "100", "true") in c0.execute("SHOW PARAMETERS").fetchall()
        c0.execute("ALTER SYSTEM SET max_connections = 4")
        c0.execute("CREATE TABLE t (v INT)")
        others = [srv.connect() for _ in range(3)]
        with pytest.raises(psycopg.OperationalError) as info:
            srv.connect()
        assert "sorry, too many clients already" in str(info.value)
        fields = _too_many(srv)
        assert fields["S"] == "FATAL" and fields["C"] == "53300"
        assert "max_connections = 4" in fields["D"]
        assert "ALTER SYSTEM SET max_connections" in fields["H"]
        # The sessions there keep working; a cancel request is still served.
        c0.execute("INSERT INTO t VALUES (1)")
        assert others[0].execute("SELECT count(*) FROM t").fetchone() == (1,)
        timer = threading.Timer(0.5, others[1].cancel_safe)
        timer.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            others[1].execute(
                "select count(*) from generate_series(1, 300000) a(x),"
                " generate_series(1, 300000) b(y) where x + y = 7"
            )
        timer.join()
        others.pop().close()
        with _connect_eventually(srv) as again:
            assert again.execute("SELECT count(*) FROM t").fetchone() == (1,)
        for other in others:
            other.close()


def test_idle_unauthenticated_sockets_cannot_take_every_slot(
    server_factory: ServerFactory,
) -> None:
    srv = server_factory()
    with srv.connect() as c0:
        c0.execute("ALTER SYSTEM SET max_startup_connections = 3")
        idle = [_open(srv) for _ in range(3)]
        time.sleep(0.5)
        # Refused once no slot frees for a while (5 s).
        started = time.monotonic()
        fields = _too_many(srv)
        assert fields["C"] == "53300", fields
        assert "max_startup_connections = 3" in fields["D"]
        assert 4 < time.monotonic() - started < 15
        assert c0.execute("SELECT 1").fetchone() == (1,)
        # A client that comes while they are all taken gets the first one to free up.
        timer = threading.Timer(1.0, idle.pop().close)
        timer.start()
        with srv.connect() as waited:
            assert waited.execute("SELECT 2").fetchone() == (2,)
        timer.join()
        for sock in idle:
            sock.close()
        with _connect_eventually(srv) as again:
            assert again.execute("SELECT 3").fetchone() == (3,)


def test_authentication_timeout(server_factory: ServerFactory) -> None:
    srv = server_factory()
    with srv.connect() as c0:
        assert ("authentication_timeout", "60", "true") in c0.execute("SHOW PARAMETERS")
        c0.execute("ALTER SYSTEM SET authentication_timeout = 1")
    with _open(srv) as sock:
        started = time.monotonic()
        drain_until_closed(sock, limit=10)
        assert 0.9 < time.monotonic() - started < 5


def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def test_out_of_file_descriptors(server_factory: ServerFactory) -> None:
    """A server near its open-file limit refuses new clients at once (no flood of log),
    the sessions it has keep working, and once clients leave new ones get in."""
    srv = server_factory(preexec_fn=_low_file_limit)
    fds = len(os.listdir(f"/proc/{srv.proc.pid}/fd"))
    with srv.connect() as c0:
        c0.execute("CREATE TABLE t (v INT)")
        clients: list[socket.socket] = []
        refused = 0
        for _ in range(200):
            sock = _open(srv)
            clients.append(sock)
            try:
                sock.sendall(startup_packet())
                reply = read_until(sock, READY_IDLE)
            except OSError:  # refused and closed before the startup packet went
                reply = b""
            if READY_IDLE not in reply:
                refused += 1
                if reply:
                    fields = error_fields(reply)
                    assert fields["C"] == "53000", reply
                    assert "out of file descriptors" in fields["M"]
        logged_in = len(clients) - refused
        # Some descriptors stay in reserve; the rest go to clients.
        assert refused > 50 and 128 - 64 - fds < logged_in < 128 - 16, (logged_in, refused)
        time.sleep(1)
        c0.execute("INSERT INTO t VALUES (1)")
        assert c0.execute("SELECT count(*) FROM t").fetchone() == (1,)
        # A session there can still start a statement that opens files.
        assert c0.execute("SELECT count(*) FROM generate_series(1, 100000)").fetchone() == (100000,)
        assert len(srv.output()) < 20_000, srv.output()[-2000:]
        assert "refusing connections: close to the open-file limit" in srv.output()
        for sock in clients:
            sock.close()
        with _connect_eventually(srv) as again:
            assert again.execute("SELECT count(*) FROM t").fetchone() == (1,)
    assert srv.stop() == 0
