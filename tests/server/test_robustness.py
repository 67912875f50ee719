"""Malformed protocol from raw sockets: each bad client costs only its own connection."""

from __future__ import annotations

import random
import socket
import struct

import pytest
from wire import drain_until_closed as _drain_until_closed
from wire import message as _message
from wire import read_until as _read_until
from wire import startup_packet as _startup_packet


def _open(server) -> socket.socket:  # type: ignore[no-untyped-def]
    return socket.create_connection((server.host, server.port), timeout=5)


def _logged_in(server) -> socket.socket:  # type: ignore[no-untyped-def]
    sock = _open(server)
    sock.sendall(_startup_packet())
    assert b"Z\x00\x00\x00\x05I" in _read_until(sock, b"Z\x00\x00\x00\x05I")
    return sock


def _assert_server_healthy(server) -> None:  # type: ignore[no-untyped-def]
    assert server.proc.poll() is None, server.output()
    with server.connect() as c:
        assert c.execute("select 1 + %s::int", [1]).fetchone() == (2,)


CASES = {
    "random bytes": lambda s: s.sendall(random.Random(7).randbytes(300)),
    "huge startup length": lambda s: s.sendall(struct.pack("!ii", 0x7FFFFFFF, 196608)),
    "tiny startup length": lambda s: s.sendall(struct.pack("!ii", 3, 196608)),
    "negative startup length": lambda s: s.sendall(struct.pack("!ii", -20, 196608)),
    "unknown protocol": lambda s: s.sendall(struct.pack("!ii", 8, 0x00090000)),
    "truncated startup": lambda s: s.sendall(_startup_packet()[:9]),
    "startup without terminator": lambda s: s.sendall(
        struct.pack("!ii", 16, 196608) + b"user\0roo"
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_startup(server, case: str) -> None:  # type: ignore[no-untyped-def]
    with _open(server) as sock:
        CASES[case](sock)
        if case == "truncated startup":
            sock.shutdown(socket.SHUT_WR)
        _drain_until_closed(sock)
    _assert_server_healthy(server)


AFTER_LOGIN = {
    "unknown message type": _message(b"\x01", b"junk"),
    "oversized length": b"Q" + struct.pack("!i", 0x7FFFFFF0) + b"select 1",
    "negative length": b"Q" + struct.pack("!i", -5),
    "length below four": b"Q" + struct.pack("!i", 2),
    "bind with missing bytes": _message(b"B", b"\0\0\0\x01\0\0\0\x01\0\0\0\x10ab"),
    "parse with negative count": _message(b"P", b"\0select 1\0\xff\xff"),
    "unterminated string": _message(b"Q", b"select 1"),
    "describe bad kind": _message(b"D", b"Xname\0"),
}


@pytest.mark.parametrize("case", list(AFTER_LOGIN))
def test_bad_message_after_login(server, case: str) -> None:  # type: ignore[no-untyped-def]
    with _logged_in(server) as sock:
        sock.sendall(AFTER_LOGIN[case])
        reply = _drain_until_closed(sock)
        if case not in ("oversized length",):
            assert reply.startswith(b"E"), reply  # a FATAL ErrorResponse, then close
            assert b"08P01" in reply
    _assert_server_healthy(server)


def test_invalid_utf8_query_is_an_error_not_a_crash(server) -> None:  # type: ignore[no-untyped-def]
    with _logged_in(server) as sock:
        sock.sendall(_message(b"Q", b"select '\xff\xfe'\0"))
        reply = _read_until(sock, b"Z\x00\x00\x00\x05I")
        assert reply.startswith(b"E") and b"22021" in reply
        sock.sendall(_message(b"Q", b"select 5\0"))
        assert b"D\x00\x00\x00\x0b\x00\x01\x00\x00\x00\x015" in _read_until(sock, b"Z\x00")
    _assert_server_healthy(server)


def test_disconnect_mid_message_and_mid_query(server) -> None:  # type: ignore[no-untyped-def]
    with _logged_in(server) as sock:
        sock.sendall(_message(b"Q", b"select 1\0")[:7])  # half a message, then gone
    with _logged_in(server) as sock:
        query = b"select count(*) from generate_series(1, 2000000)\0"
        sock.sendall(_message(b"Q", query))  # then gone before the answer
    _assert_server_healthy(server)


def test_errors_in_extended_protocol_keep_connection(server) -> None:  # type: ignore[no-untyped-def]
    with _logged_in(server) as sock:
        batch = (
            _message(b"B", b"\0nonexistent\0\0\0\0\0\0\0")  # unknown statement: an error
            + _message(b"E", b"\0\0\0\0\0")  # skipped until Sync
            + _message(b"S", b"")
            + _message(b"P", b"\0select 42\0\0\0")
            + _message(b"B", b"\0\0\0\0\0\0\0\0")
            + _message(b"E", b"\0\0\0\0\0")
            + _message(b"S", b"")
        )
        sock.sendall(batch)
        reply = _read_until(sock, b"C\x00\x00\x00\x0dSELECT 1\x00Z\x00\x00\x00\x05I")
        assert b"26000" in reply  # prepared statement does not exist
        assert b"42" in reply
        sock.sendall(_message(b"X", b""))
    _assert_server_healthy(server)


def test_ssl_and_gss_requests_are_declined(server) -> None:  # type: ignore[no-untyped-def]
    with _open(server) as sock:
        sock.sendall(struct.pack("!ii", 8, 80877103))
        assert sock.recv(1) == b"N"
        sock.sendall(struct.pack("!ii", 8, 80877104))
        assert sock.recv(1) == b"N"
        sock.sendall(_startup_packet())
        assert b"Z\x00\x00\x00\x05I" in _read_until(sock, b"Z\x00\x00\x00\x05I")


def test_many_garbage_clients_at_once(server) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(11)
    socks = [_open(server) for _ in range(40)]
    for s in socks:
        s.sendall(rng.randbytes(rng.randint(1, 64)))
    for s in socks:
        s.close()
    _assert_server_healthy(server)
