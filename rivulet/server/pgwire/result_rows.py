"""A result's rows on their way to the client, a piece at a time.

A small result is whole in memory and encoded on the event loop (a thread hop would cost
more than ``SELECT 1`` itself). A streamed one (``StatementResult.stream``) is read from
DuckDB and encoded on a query thread, about ``PIECE_BYTES`` at a time, and the next piece
is only read once the socket took the last one (the connection flushes and drains in
between): the server holds a piece and DuckDB's own small buffer, whatever the result's
size. A portal executed with a row limit keeps its ``ResultRows`` between Executes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from rivulet.sql.result import StatementResult

if TYPE_CHECKING:
    from rivulet.sql.session import Session

# Encoded bytes per piece of a streamed result (the connection flushes past 1 MiB too).
PIECE_BYTES = 1 << 20
# Rows encoded per call on the event loop, for results held whole.
_SLICE_ROWS = 65_536

Encode = Callable[[pa.Table], bytes]


class ResultRows:
    def __init__(
        self,
        session: Session,
        result: StatementResult,
        convert: Callable[[pa.Table], pa.Table] | None = None,
    ) -> None:
        self.session = session
        self.result = result
        self._pending: pa.Table | None = result.rows if result.rows is not None else None
        self._convert = convert
        self.sent = 0

    @property
    def done(self) -> bool:
        """Whether every row was handed out (a stream counts once it read its end)."""
        pending = self._pending is not None and self._pending.num_rows > 0
        stream = self.result.stream
        return not pending and (stream is None or stream.closed)

    async def next_piece(self, limit: int | None, encode: Encode) -> tuple[bytes, int]:
        """Encoded rows (at most ``limit``) and how many; (b"", 0) once none are left."""
        stream = self.result.stream
        if stream is None:
            piece = self._take(min(_SLICE_ROWS, limit) if limit is not None else _SLICE_ROWS)
            if piece is None:
                return b"", 0
            self.sent += piece.num_rows
            return encode(self._converted(piece)), piece.num_rows
        data, n = await self.session.pull(stream, lambda: self._encode_piece(limit, encode))
        self.sent += n
        return data, n

    def _encode_piece(self, limit: int | None, encode: Encode) -> tuple[bytes, int]:
        """(On a query thread.) Rows from what is pending, then from the stream."""
        stream = self.result.stream
        assert stream is not None
        out = bytearray()
        n = 0
        while len(out) < PIECE_BYTES and (limit is None or n < limit):
            piece = self._take(limit - n if limit is not None else None)
            if piece is None:
                batch = stream.read()
                if batch is None:
                    break
                self._pending = pa.Table.from_batches([batch])
                continue
            out += encode(self._converted(piece))
            n += piece.num_rows
        return bytes(out), n

    def _take(self, limit: int | None) -> pa.Table | None:
        pending = self._pending
        if pending is None or pending.num_rows == 0:
            return None
        if limit is None or pending.num_rows <= limit:
            self._pending = None
            return pending
        self._pending = pending.slice(limit)
        return pending.slice(0, limit)

    def _converted(self, table: pa.Table) -> pa.Table:
        return self._convert(table) if self._convert is not None else table

    def close(self) -> None:
        """Release what is left (the stream's DuckDB cursor)."""
        self._pending = None
        self.result.close()
