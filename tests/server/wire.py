"""The PostgreSQL protocol by hand, for tests that speak it over raw sockets."""

from __future__ import annotations

import socket
import struct

READY_IDLE = b"Z\x00\x00\x00\x05I"


def startup_packet(user: str = "root", database: str = "dev", **params: str) -> bytes:
    pairs = {"user": user, "database": database, **params}
    body = struct.pack("!i", 196608) + b"".join(f"{k}\0{v}\0".encode() for k, v in pairs.items())
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def read_until(sock: socket.socket, marker: bytes, limit: float = 5.0) -> bytes:
    """What the server sends until ``marker`` (or until it closes, or ``limit`` passes
    without data)."""
    sock.settimeout(limit)
    data = b""
    while marker not in data:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return data


def drain_until_closed(sock: socket.socket, limit: float = 5.0) -> bytes:
    """Read until the server closes the connection (it must, promptly)."""
    sock.settimeout(limit)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def error_fields(reply: bytes) -> dict[str, str]:
    """The fields of the first ErrorResponse in ``reply`` ({} if there is none)."""
    at = reply.find(b"E")
    while at >= 0:
        if at + 5 <= len(reply):
            (length,) = struct.unpack_from("!i", reply, at + 1)
            body = reply[at + 5 : at + 1 + length]
            if body[:1] in (b"S", b"V") and body.endswith(b"\0\0"):
                fields = {}
                for part in body[:-1].split(b"\0"):
                    if part:
                        fields[chr(part[0])] = part[1:].decode()
                return fields
        at = reply.find(b"E", at + 1)
    return {}
