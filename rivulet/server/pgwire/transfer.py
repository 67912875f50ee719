"""A result's data on the wire: its RowDescription and DataRows, and COPY's streams (COPY
FROM STDIN's CopyData read and loaded, COPY TO STDOUT's rows sent as CopyData).

``ResultTransfer`` is the part of ``connection.Connection`` that moves this data for both
query protocols, apart from the message loop and the protocols' state. ``_internal`` (an
unexpected exception as an internal error) is here for COPY; the connection imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from rivulet.common.errors import (
    INTERNAL_ERROR,
    PROTOCOL_VIOLATION,
    QUERY_CANCELED,
    Error,
    sql_error,
)
from rivulet.server.pgwire import codec
from rivulet.server.pgwire import messages as m
from rivulet.server.pgwire.result_rows import ResultRows
from rivulet.sql.handlers.copy import CopyLoader
from rivulet.sql.result import Column, CopyInRequest, StatementResult

if TYPE_CHECKING:
    from rivulet.sql.session import Session

log = logging.getLogger("rivulet.server")

# Output is flushed to the socket past this many bytes.
_FLUSH_BYTES = 1 << 20


def _internal(exc: BaseException) -> Error:
    return sql_error(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")


class ResultTransfer:
    """Rows and COPY data for ``Connection`` (which provides the session, the reader, the
    output buffer and ``flush``/``_send_error``)."""

    session: Session | None
    reader: m.MessageReader
    out: bytearray
    flush: Callable[[], Awaitable[None]]
    _send_error: Callable[[Error], None]

    @property
    def timezone(self) -> str:
        assert self.session is not None
        return self.session.config.get("timezone") or "UTC"

    # --------------------------------------------------------------- results
    @staticmethod
    def _format_of(formats: list[int], i: int) -> int:
        if not formats:
            return 0
        return formats[0] if len(formats) == 1 else formats[i]

    def _row_description(self, columns: list[Column], formats: list[int]) -> bytes:
        if len(formats) > 1 and len(formats) != len(columns):
            raise sql_error(
                PROTOCOL_VIOLATION,
                f"bind message has {len(formats)} result formats but query has {len(columns)} columns",
            )
        return m.row_description(
            [
                (
                    c.name,
                    codec.wire_oid(c.type.oid),
                    c.type.typlen,
                    c.type.typmod,
                    self._format_of(formats, i),
                )
                for i, c in enumerate(columns)
            ]
        )

    async def _send_rows(
        self, rows: ResultRows, columns: list[Column], formats: list[int], limit: int | None
    ) -> int:
        """DataRows for the next rows (at most ``limit``); returns how many were sent.
        Output is flushed (and the socket drained) as it grows: a streamed result is
        read no faster than the client takes it."""
        if len(formats) > 1 and len(formats) != len(columns):
            raise sql_error(
                PROTOCOL_VIOLATION,
                f"bind message has {len(formats)} result formats but query has {len(columns)} columns",
            )
        types = [c.type for c in columns]
        timezone = self.timezone

        def encode(table: pa.Table) -> bytes:
            return codec.encode_rows(table, types, formats, timezone)

        sent = 0
        while limit is None or sent < limit:
            data, n = await rows.next_piece(None if limit is None else limit - sent, encode)
            if not n:
                break
            self.out += data
            sent += n
            if len(self.out) >= _FLUSH_BYTES:
                await self.flush()
        return sent

    # ------------------------------------------------------------------ COPY
    async def _copy_in(self, request: CopyInRequest) -> bool:
        """Receive COPY FROM STDIN data; True when it was loaded."""
        assert self.session is not None
        loader = CopyLoader(self.session, request)
        self.out += m.copy_in_response(len(request.column_names), binary=request.format == "binary")
        await self.flush()
        failure: Error | None = None
        while True:
            kind, body = await self.reader.read_message()
            if failure is None and self.session.cancel_requested:
                # statement_timeout (or a cancel): the rest of the data is read and dropped.
                failure = self.session.cancel_error()
            if kind == b"d":
                if failure is None:
                    try:
                        await loader.feed(body)
                    except Error as exc:
                        failure = self.session.statement_error(exc)  # type: ignore[assignment]
                    except Exception as exc:
                        log.exception("COPY data failed")
                        failure = _internal(exc)
            elif kind == b"c":
                break
            elif kind == b"f":
                reason = m.Body(body).cstring() if body else ""
                failure = sql_error(QUERY_CANCELED, f"COPY from stdin failed: {reason}")
                break
            elif kind in (b"H", b"S"):
                continue
            elif kind == b"X":
                raise m.ClientGone()
            else:
                failure = sql_error(
                    PROTOCOL_VIOLATION,
                    f"unexpected message type {kind!r} during COPY from stdin",
                )
                break
        if failure is None:
            try:
                count = await loader.finish()
            except Error as exc:
                failure = self.session.statement_error(exc)  # type: ignore[assignment]
            except Exception as exc:
                log.exception("COPY failed")
                failure = _internal(exc)
        if failure is not None:
            self._send_error(failure)
            return False
        self.out += m.command_complete(f"COPY {count}")
        return True

    async def _copy_out(self, result: StatementResult) -> None:
        """COPY ... TO STDOUT: one CopyData per row, read as the client takes them."""
        assert result.copy_out is not None and result.columns is not None
        assert self.session is not None
        options = result.copy_out
        columns = result.columns
        self.out += m.copy_out_response(len(columns))
        delimiter = str(
            options.get("delimiter") or ("," if options.get("format") == "csv" else "\t")
        )
        if options.get("header"):
            if options.get("format") == "csv":
                header = codec.csv_header([c.name for c in columns], delimiter)
            else:
                header = delimiter.join(c.name for c in columns) + "\n"
            self.out += m.message(b"d", header.encode("utf-8"))
        rows = ResultRows(self.session, result)
        types = [c.type for c in columns]
        timezone = self.timezone

        def encode(table: pa.Table) -> bytes:
            return codec.frame_messages(b"d", codec.copy_text_rows(table, types, options, timezone))

        count = 0
        while columns:
            data, n = await rows.next_piece(None, encode)
            if not n:
                break
            self.out += data
            count += n
            if len(self.out) >= _FLUSH_BYTES:
                await self.flush()
        self.out += m.COPY_DONE
        self.out += m.command_complete(result.counted_tag(count))
