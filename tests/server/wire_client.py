"""A minimal PostgreSQL wire client for tests where the protocol itself is under test:
reading a result of hundreds of millions of rows without keeping (or even decoding) it,
portals executed with a row limit, a client that vanishes mid-statement."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

_PROTOCOL_3 = 196608


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.encode() + b"\0"


def rss_mib(pid: int) -> float:
    """A process's resident set size now, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


class WireClient:
    """One connection, logged in (trust authentication)."""

    def __init__(self, host: str, port: int, user: str = "root", database: str = "dev") -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self._buf = bytearray()
        body = struct.pack("!i", _PROTOCOL_3) + cstring("user") + cstring(user)
        body += cstring("database") + cstring(database) + b"\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.pid = 0
        while True:
            kind, payload = self.read_message()
            if kind == b"K":
                self.pid = struct.unpack("!i", payload[:4])[0]
            elif kind == b"E":
                raise AssertionError(f"login failed: {payload!r}")
            elif kind == b"Z":
                break

    def send(self, *messages: bytes) -> None:
        self.sock.sendall(b"".join(messages))

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buf += chunk

    def read_message(self) -> tuple[bytes, bytes]:
        self._fill(5)
        kind = bytes(self._buf[:1])
        (length,) = struct.unpack("!i", self._buf[1:5])
        self._fill(1 + length)
        payload = bytes(self._buf[5 : 1 + length])
        del self._buf[: 1 + length]
        return kind, payload

    def read_until(self, kinds: bytes) -> list[tuple[bytes, bytes]]:
        """Messages up to and including the first whose type is in ``kinds``."""
        out = []
        while True:
            kind, payload = self.read_message()
            out.append((kind, payload))
            if kind in kinds:
                return out

    def extended(self, sql: str, *, binary: bool = False, max_rows: int = 0) -> None:
        """Parse, Bind (one result format), Execute (``max_rows``), and Flush."""
        formats = struct.pack("!hh", 1, 1) if binary else struct.pack("!h", 0)
        self.send(
            message(b"P", cstring("") + cstring(sql) + struct.pack("!h", 0)),
            message(b"B", cstring("") + cstring("") + struct.pack("!hh", 0, 0) + formats),
            message(b"E", cstring("") + struct.pack("!i", max_rows)),
            message(b"H"),
        )

    def count_fixed_rows(
        self, row_size: int, *, kind: bytes = b"D", pause_every: int = 0, pause: float = 0.0
    ) -> tuple[int, bytes, bytes]:
        """Read row messages (DataRow, or CopyData with ``kind=b"d"``) that are all
        ``row_size`` bytes long (columns of a fixed width) without decoding them, up to
        CommandComplete, PortalSuspended or an error: (rows, the final message's type,
        its body). ``pause_every`` bytes, sleep ``pause``: a slow reader."""
        rows = 0
        since_pause = 0
        while True:
            if self._buf and self._buf[0:1] != kind:
                other, payload = self.read_message()
                if other in (b"1", b"2", b"T", b"t", b"n", b"H", b"c"):
                    continue
                return rows, other, payload
            if len(self._buf) < row_size:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("server closed the connection")
                self._buf += chunk
                since_pause += len(chunk)
                if pause_every and since_pause >= pause_every:
                    since_pause = 0
                    time.sleep(pause)
                continue
            whole = len(self._buf) // row_size
            view = memoryview(self._buf)[: whole * row_size]
            # Only DataRows of this size in the block: every row_size-th byte is 'D'.
            marks = bytes(view[::row_size])
            view.release()
            n = len(marks) - len(marks.lstrip(kind))  # up to the first other message
            rows += n
            del self._buf[: n * row_size]

    def close(self) -> None:
        try:
            self.sock.sendall(message(b"X"))
        except OSError:
            pass
        self.sock.close()
