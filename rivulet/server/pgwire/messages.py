"""PostgreSQL v3 protocol framing: reading frontend messages, building backend messages.

Every backend message is a type byte, a big-endian int32 length that counts itself, and a
body. Outgoing messages are appended to a ``bytearray`` that the connection writes once
per round trip, so a reply of several messages costs one ``send``.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from rivulet.common.errors import PROTOCOL_VIOLATION, Error, sql_error

# Startup packets carry a request code instead of a type byte.
PROTOCOL_V3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# A startup packet is small (PostgreSQL: 10,000 bytes), and so is every message before
# login (SASL messages: 64 KiB, as PostgreSQL). After login the connection raises the
# bound to the system parameters ``max_message_bytes`` / ``max_copy_data_bytes``. A
# length over the bound is refused before anything of the body is read.
MAX_STARTUP_LENGTH = 10_000
MAX_STARTUP_MESSAGE_LENGTH = 1 << 16

# How much to ask the socket for at once.
_READ_SIZE = 1 << 16
# What a watch over an idle socket reads ahead at most (``watch_for_eof``).
_WATCH_BUFFER = 1 << 20

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_TYPE_LEN = struct.Struct("!ci")


class ProtocolError(Exception):
    """The client broke the protocol; the connection cannot go on."""

    def __init__(
        self, message: str, sqlstate: str = PROTOCOL_VIOLATION, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint


class ClientGone(Exception):
    """The client closed the connection (possibly in the middle of a message)."""


# What a Query or Parse message holds besides its statement (a name, parameter types).
_STATEMENT_OVERHEAD = 64 * 1024
# No statement is read past beyond this (PostgreSQL's bound on any message, too).
_MAX_STATEMENT_MESSAGE_LENGTH = 1 << 30


class OversizedStatement(Exception):
    """A Query or Parse message longer than the statement size cap (read past)."""

    def __init__(self, kind: bytes, size: int) -> None:
        super().__init__(f"{kind!r} message of {size} bytes")
        self.kind = kind
        self.size = size


class MessageReader:
    """Reads whole messages from a stream, buffering what arrives ahead of them so that
    a pipelined batch (Parse, Bind, Describe, Execute, Sync) costs one read."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._pos = 0
        # The largest message body accepted (CopyData apart), and where that bound is set.
        self.max_length = MAX_STARTUP_MESSAGE_LENGTH
        self.max_copy_length = MAX_STARTUP_MESSAGE_LENGTH
        self.limit_hint: str | None = None
        # Query and Parse messages are bounded by the statement size cap instead: one
        # over it is read past (never held) and refused as a statement, and the
        # connection goes on (None: before login, the bound above applies).
        self.max_statement_length: int | None = None

    async def _fill(self, need: int) -> None:
        """Make ``need`` bytes available after the read position."""
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        while len(self._buf) - self._pos < need:
            chunk = await self._stream.read(max(_READ_SIZE, need - (len(self._buf) - self._pos)))
            if not chunk:
                raise ClientGone()
            self._buf += chunk

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return out

    async def _skip(self, n: int) -> None:
        """Read past ``n`` bytes of a body without holding them."""
        held = min(n, len(self._buf) - self._pos)
        self._pos += held
        n -= held
        del self._buf[: self._pos]
        self._pos = 0
        while n > 0:
            chunk = await self._stream.read(min(n, _READ_SIZE * 16))
            if not chunk:
                raise ClientGone()
            n -= len(chunk)

    async def watch_for_eof(self) -> None:
        """Read ahead into the buffer until the client closes the connection, then
        return (raises if it was reset). For the time a statement runs, when nothing
        else reads: what the client sends meanwhile stays buffered, in order. Past
        ``_WATCH_BUFFER`` bytes it stops reading (and waits, until cancelled)."""
        while len(self._buf) - self._pos < _WATCH_BUFFER:
            chunk = await self._stream.read(_READ_SIZE)
            if not chunk:
                return
            self._buf += chunk
        await asyncio.get_running_loop().create_future()

    @property
    def position(self) -> int:
        """Where the next message starts in the buffer (for ``rewind``)."""
        return self._pos

    def rewind(self, position: int) -> None:
        """Read again from ``position`` (taken since the last wait for data)."""
        self._pos = position

    def next_buffered(self, kind: bytes) -> bytes | None:
        """The body of the next message if it is of ``kind`` and already whole in the
        buffer (a regular message within ``max_length``), without waiting; else None,
        with nothing consumed."""
        if len(self._buf) - self._pos < 5:
            return None
        got, length = _TYPE_LEN.unpack_from(self._buf, self._pos)
        if (
            got != kind
            or length < 4
            or length - 4 > self.max_length
            or len(self._buf) - self._pos < length + 1
        ):
            return None
        self._pos += 5
        return self._take(length - 4)

    def has_buffered(self) -> bool:
        """Whether a following message is already (at least partly) in the buffer."""
        return len(self._buf) > self._pos

    async def read_startup(self) -> tuple[int, bytes]:
        """A length-prefixed packet without a type byte: (request code, rest of body)."""
        await self._fill(4)
        (length,) = _I32.unpack_from(self._buf, self._pos)
        if length < 8 or length > MAX_STARTUP_LENGTH:
            raise ProtocolError("invalid length of startup packet")
        await self._fill(length)
        self._pos += 4
        (code,) = _I32.unpack_from(self._buf, self._pos)
        self._pos += 4
        return code, self._take(length - 8)

    async def read_message(self) -> tuple[bytes, bytes]:
        """A regular message: (type byte, body)."""
        if len(self._buf) - self._pos < 5:
            await self._fill(5)
        kind, length = _TYPE_LEN.unpack_from(self._buf, self._pos)
        if length < 4:
            raise ProtocolError(f"invalid message length {length} for message type {kind!r}")
        if kind in (b"Q", b"P") and self.max_statement_length is not None:
            if (
                _MAX_STATEMENT_MESSAGE_LENGTH
                >= length - 4
                > (self.max_statement_length + _STATEMENT_OVERHEAD)
            ):
                self._pos += 5
                await self._skip(length - 4)
                raise OversizedStatement(kind, length - 4)
            limit = max(self.max_length, self.max_statement_length + _STATEMENT_OVERHEAD)
        else:
            limit = self.max_copy_length if kind == b"d" else self.max_length
        if length - 4 > limit:
            raise ProtocolError(
                f"invalid message length: {length - 4} bytes for message type {kind!r},"
                f" over the limit of {limit} bytes",
                hint=self.limit_hint,
            )
        if len(self._buf) - self._pos < length + 1:
            await self._fill(length + 1)
        self._pos += 5
        return kind, self._take(length - 4)


class Body:
    """A cursor over a message body, raising a protocol error when the body is short."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("message is shorter than its contents")

    def int16(self) -> int:
        self._need(2)
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(v)

    def int16s(self, n: int) -> list[int]:
        """``n`` int16 values in a row (format codes: a client may send one per column)."""
        self._need(2 * n)
        values = list(struct.unpack_from(f">{n}h", self.data, self.pos))
        self.pos += 2 * n
        return values

    def int32(self) -> int:
        self._need(4)
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def byte(self) -> bytes:
        self._need(1)
        v = self.data[self.pos : self.pos + 1]
        self.pos += 1
        return v

    def bytes(self, n: int) -> bytes:
        self._need(n)
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return v

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string in message")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            # The message is whole, only its text is bad: an error, not a broken protocol.
            raise sql_error("22021", 'invalid byte sequence for encoding "UTF8"') from None

    def rest(self) -> bytes:
        v = self.data[self.pos :]
        self.pos = len(self.data)
        return v


# ------------------------------------------------------------------ frontend
@dataclass(slots=True)
class ParseMessage:
    name: str
    query: str
    param_oids: list[int]


@dataclass(slots=True)
class BindMessage:
    portal: str
    statement: str
    param_formats: list[int]
    params: list[bytes | None]
    result_formats: list[int]


def parse_startup_params(body: bytes) -> dict[str, str]:
    """The name/value pairs of a StartupMessage."""
    reader = Body(body)
    params: dict[str, str] = {}
    while reader.pos < len(body):
        name = reader.cstring()
        if not name:
            break
        params[name] = reader.cstring()
    return params


def parse_parse(body: bytes) -> ParseMessage:
    b = Body(body)
    name = b.cstring()
    query = b.cstring()
    n = b.int16()
    if n < 0:
        raise ProtocolError("negative parameter count")
    return ParseMessage(name, query, [b.int32() for _ in range(n)])


def parse_bind(body: bytes) -> BindMessage:
    b = Body(body)
    portal = b.cstring()
    statement = b.cstring()
    nfmt = b.int16()
    if nfmt < 0:
        raise ProtocolError("negative format count")
    formats = b.int16s(nfmt)
    nparams = b.int16()
    if nparams < 0:
        raise ProtocolError("negative parameter count")
    # Read inline: an executemany binds every row, so this loop is a hot path.
    params: list[bytes | None] = []
    data, pos, size = b.data, b.pos, len(b.data)
    for _ in range(nparams):
        if pos + 4 > size:
            raise ProtocolError("message is shorter than its contents")
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length == -1:
            params.append(None)
        elif length < 0:
            raise ProtocolError("invalid parameter length")
        elif pos + length > size:
            raise ProtocolError("message is shorter than its contents")
        else:
            params.append(data[pos : pos + length])
            pos += length
    b.pos = pos
    nres = b.int16()
    if nres < 0:
        raise ProtocolError("negative format count")
    result_formats = b.int16s(nres)
    for codes in (formats, result_formats):
        for f in codes:
            if f != 0 and f != 1:
                raise ProtocolError(f"unsupported format code: {f}")
    return BindMessage(portal, statement, formats, params, result_formats)


# ------------------------------------------------------------------- backend
def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + _I32.pack(len(body) + 4) + body


def cstr(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\0", b"") + b"\0"


AUTH_OK = message(b"R", _I32.pack(0))
PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
EMPTY_QUERY = message(b"I")
PORTAL_SUSPENDED = message(b"s")
COPY_DONE = message(b"c")
READY = {status: message(b"Z", status) for status in (b"I", b"T", b"E")}


def auth_sasl(mechanisms: list[str]) -> bytes:
    return message(b"R", _I32.pack(10) + b"".join(cstr(m) for m in mechanisms) + b"\0")


def auth_sasl_continue(data: bytes) -> bytes:
    return message(b"R", _I32.pack(11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return message(b"R", _I32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key_data(process_id: int, secret_key: int) -> bytes:
    return message(b"K", _I32.pack(process_id) + _I32.pack(secret_key))


def negotiate_protocol_version(newest_minor: int, unrecognized: list[str]) -> bytes:
    body = _I32.pack(newest_minor) + _I32.pack(len(unrecognized))
    return message(b"v", body + b"".join(cstr(o) for o in unrecognized))


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def parameter_description(oids: list[int]) -> bytes:
    return message(b"t", _I16.pack(len(oids)) + b"".join(_I32.pack(o) for o in oids))


_FIELD = struct.Struct("!ihihih")


def row_description(fields: list[tuple[str, int, int, int, int]]) -> bytes:
    """``fields``: (name, type oid, typlen, typmod, format code) per column."""
    parts = [_I16.pack(len(fields))]
    for name, oid, typlen, typmod, fmt in fields:
        parts.append(cstr(name))
        parts.append(_FIELD.pack(0, 0, oid, typlen, typmod, fmt))
    return message(b"T", b"".join(parts))


def copy_in_response(ncols: int, *, binary: bool = False) -> bytes:
    fmt = 1 if binary else 0
    return message(b"G", bytes([fmt]) + _I16.pack(ncols) + _I16.pack(fmt) * ncols)


def copy_out_response(ncols: int) -> bytes:
    return message(b"H", b"\0" + _I16.pack(ncols) + _I16.pack(0) * ncols)


def _fields(fields: list[tuple[bytes, str | None]]) -> bytes:
    body = b"".join(code + cstr(value) for code, value in fields if value is not None)
    return body + b"\0"


def error_response(
    sqlstate: str,
    message_text: str,
    *,
    severity: str = "ERROR",
    detail: str | None = None,
    hint: str | None = None,
    position: int | None = None,
    context: str | None = None,
) -> bytes:
    return message(
        b"E",
        _fields(
            [
                (b"S", severity),
                (b"V", severity),
                (b"C", sqlstate),
                (b"M", message_text),
                (b"D", detail),
                (b"H", hint),
                (b"P", str(position) if position is not None else None),
                (b"W", context),
            ]
        ),
    )


def error_from(exc: Error, severity: str = "ERROR") -> bytes:
    """An ErrorResponse carrying every field a Rivulet error has."""
    return error_response(
        exc.sqlstate,
        exc.message,
        severity=severity,
        detail=exc.detail,
        hint=exc.hint,
        position=exc.position,
        context=exc.context,
    )


def notice_response(
    severity: str, sqlstate: str, message_text: str, hint: str | None = None
) -> bytes:
    return message(
        b"N",
        _fields(
            [
                (b"S", severity),
                (b"V", severity),
                (b"C", sqlstate),
                (b"M", message_text),
                (b"H", hint),
            ]
        ),
    )


def protocol_error(text: str) -> Error:
    return sql_error(PROTOCOL_VIOLATION, text)
