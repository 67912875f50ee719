"""The extended query protocol of one connection: Parse, Bind, Describe, Execute and
Close, prepared statements and portals, and the batching of a driver's executemany (the
Bind/Execute pairs of one plain INSERT written as one chunk in one epoch).

``ExtendedProtocol`` is the part of ``connection.Connection`` that serves these messages;
the message loop and the simple query protocol stay there, COPY and the rows' encoding
are in ``transfer.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from rivulet.common.errors import (
    DUPLICATE_PREPARED_STATEMENT,
    INVALID_CURSOR_NAME,
    INVALID_PREPARED_STATEMENT,
    PROTOCOL_VIOLATION,
    SYNTAX_ERROR,
    Error,
    sql_error,
)
from rivulet.common.types import arrow_type_of
from rivulet.server.pgwire import codec
from rivulet.server.pgwire import messages as m
from rivulet.server.pgwire.result_rows import ResultRows
from rivulet.sql import dialect
from rivulet.sql.handlers import describe
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, CopyInRequest, StatementResult

if TYPE_CHECKING:
    from rivulet.sql.session import Session

log = logging.getLogger("rivulet.server")

# Statements a Describe runs to know their columns (their Execute sends the kept rows).
_RUN_TO_DESCRIBE = (exp.Query, exp.Describe, dialect.ShowStatement, dialect.ExplainStatement)
_EXECUTE_UNNAMED_PORTAL = b"\x00\x00\x00\x00\x00"
_DESCRIBE_UNNAMED_PORTAL = b"P\x00"


@dataclass
class PreparedStatement:
    """A parsed statement (Parse message); ``stmt`` is None for an empty query."""

    sql: str
    stmt: Statement | None
    param_oids: list[int]
    described: bool = False
    columns: list[Column] | None = None
    # Types written as casts of parameters (``$1::uuid``), by 0-based parameter index.
    cast_oids: dict[int, int] = field(default_factory=dict)
    named: bool = False

    def fresh(self) -> Statement:
        """The statement for one run (it copies its tree only if a handler rewrites it)."""
        assert self.stmt is not None
        return self.stmt.fresh()


@dataclass(slots=True)
class Portal:
    """A bound statement (Bind message), possibly already run (Describe of a query runs it
    so that its columns are known; Execute then sends the kept rows)."""

    statement: PreparedStatement
    params: list[object]
    result_formats: list[int]
    result: StatementResult | None = None
    sent_side_messages: bool = False
    # Where its rows stand, once an Execute began sending them.
    rows: ResultRows | None = None
    done: bool = False
    columns: list[Column] | None = field(default=None)

    def close(self) -> None:
        """Release what an unfinished result holds (a stream's DuckDB cursor)."""
        if self.rows is not None:
            self.rows.close()
        elif self.result is not None:
            self.result.close()


def _cast_oids(stmt: Statement | None) -> dict[int, int]:
    """Type OIDs of parameters that the statement casts (``$1::uuid``, ``$2::text[]``):
    what a client is told when the binder infers nothing, and how text arrays are read."""
    out: dict[int, int] = {}
    if stmt is None:
        return out
    for cast in stmt.tree.find_all(exp.Cast):
        param = cast.this
        to = cast.args.get("to")
        if not isinstance(param, exp.Parameter) or not isinstance(to, exp.DataType):
            continue
        try:
            index = int(param.name) - 1
        except ValueError:
            continue
        oid = codec.oid_of_type_name(to.sql(dialect="postgres"))
        if oid is not None and index >= 0:
            out.setdefault(index, oid)
    return out


class ExtendedProtocol:
    """Parse/Bind/Describe/Execute/Close for ``Connection`` (which provides the message
    loop's state and the shared senders: ``_run_statement``, ``_send_rows``,
    ``_side_messages``, ``_row_description``, ``_copy_in``/``_copy_out``,
    ``_extended_error``, ``_drop_portal``)."""

    session: Session | None
    reader: m.MessageReader
    out: bytearray
    statements: dict[str, PreparedStatement]
    portals: dict[str, Portal]
    # Executes of one plain INSERT queued to run as one write (``_run_batch``).
    _batch: list[Portal]
    skip_until_sync: bool
    transaction_failed: bool
    process_id: int

    if TYPE_CHECKING:  # provided by ``Connection`` (and its ``Transfer`` part)

        def _check_not_aborted(self, stmt: Statement | None) -> None: ...
        async def _run_statement(
            self, stmt: Statement, params: list[object]
        ) -> StatementResult: ...
        async def _send_rows(
            self, rows: ResultRows, columns: list[Column], formats: list[int], limit: int | None
        ) -> int: ...
        def _side_messages(self, result: StatementResult) -> None: ...
        def _row_description(self, columns: list[Column], formats: list[int]) -> bytes: ...
        async def _copy_in(self, request: CopyInRequest) -> bool: ...
        async def _copy_out(self, result: StatementResult) -> None: ...
        def _extended_error(self, exc: Error) -> None: ...
        def _drop_portal(self, name: str) -> None: ...

    async def _parse(self, body: bytes) -> None:
        assert self.session is not None
        msg = m.parse_parse(body)
        log.debug("session %d: parse %r as %r", self.process_id, msg.query, msg.name)
        if msg.name and msg.name in self.statements:
            raise sql_error(
                DUPLICATE_PREPARED_STATEMENT, f'prepared statement "{msg.name}" already exists'
            )
        with self.session.running(msg.query):
            statements = await self.session.parse_async(msg.query)
        if len(statements) > 1:
            raise sql_error(
                SYNTAX_ERROR, "cannot insert multiple commands into a prepared statement"
            )
        stmt = statements[0] if statements else None
        self._check_not_aborted(stmt)
        self.statements[msg.name] = PreparedStatement(
            msg.query, stmt, msg.param_oids, cast_oids=_cast_oids(stmt), named=bool(msg.name)
        )
        self.out += m.PARSE_COMPLETE

    def _statement(self, name: str) -> PreparedStatement:
        ps = self.statements.get(name)
        if ps is None:
            raise sql_error(
                INVALID_PREPARED_STATEMENT, f'prepared statement "{name}" does not exist'
            )
        return ps

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise sql_error(INVALID_CURSOR_NAME, f'portal "{name}" does not exist')
        return portal

    async def _describe_statement(self, ps: PreparedStatement) -> None:
        """Fill in parameter types and result columns of a prepared statement."""
        assert self.session is not None
        if ps.described or ps.stmt is None:
            ps.described = True
            return
        given = [codec.type_of_oid(oid) for oid in ps.param_oids]
        types, columns = describe(self.session, ps.stmt, given)
        if columns is None and isinstance(ps.stmt.tree, _RUN_TO_DESCRIBE) and not types:
            with self.session.running(ps.sql):
                result = await self.session.execute_statement(ps.fresh(), [])
            result.close()
            columns = result.columns
        oids = list(ps.param_oids)
        for i, t in enumerate(types):
            inferred = (
                codec.wire_oid(t.oid) if t is not None else ps.cast_oids.get(i, codec.TEXT_OID)
            )
            if i >= len(oids):
                oids.append(inferred)
            elif oids[i] == 0:
                oids[i] = inferred
        ps.param_oids = oids
        ps.columns = columns
        ps.described = True

    async def _bind(self, body: bytes) -> None:
        msg = m.parse_bind(body)
        ps = self._statement(msg.statement)
        if msg.portal and msg.portal in self.portals:
            raise sql_error("42P03", f'cursor "{msg.portal}" already exists')
        values = self._bind_values(ps, msg)
        self._drop_portal(msg.portal)  # the unnamed portal is replaced
        self.portals[msg.portal] = Portal(ps, values, msg.result_formats)
        self.out += m.BIND_COMPLETE

    def _bind_values(self, ps: PreparedStatement, msg: m.BindMessage) -> list[object]:
        """A Bind's parameters, decoded."""
        nparams = len(msg.params)
        formats = msg.param_formats
        if len(formats) > 1 and len(formats) != nparams:
            raise sql_error(
                PROTOCOL_VIOLATION,
                f"bind message has {len(formats)} parameter formats but {nparams} parameters",
            )
        return [
            codec.decode_param(
                self._param_oid(ps, i),
                formats[0] if len(formats) == 1 else (formats[i] if formats else 0),
                raw,
            )
            for i, raw in enumerate(msg.params)
        ]

    def _drain_batch(self) -> None:
        """Queue the Bind/Execute pairs of the batched INSERT that are already buffered,
        without a trip through the message loop for each (an executemany sends one pair
        per row). Stops, leaving the rest to the loop, at anything else: another
        statement, a named portal, a row limit, a value that does not decode."""
        ps = self._batch[0].statement
        result = self._batch[0].result
        last_formats = self._batch[-1].result_formats
        reader = self.reader
        while True:
            start = reader.position
            bind = reader.next_buffered(b"B")
            describe = reader.position
            # psycopg describes each portal before executing it: Bind, Describe, Execute.
            described = bind is not None and reader.next_buffered(b"D") == _DESCRIBE_UNNAMED_PORTAL
            if bind is not None and not described:
                reader.rewind(describe)
            execute = reader.next_buffered(b"E") if bind is not None else None
            if bind is None or execute != _EXECUTE_UNNAMED_PORTAL:
                reader.rewind(start)
                return
            try:
                msg = m.parse_bind(bind)
                if msg.portal or self.statements.get(msg.statement) is not ps:
                    raise LookupError
                values = self._bind_values(ps, msg)
            except (Error, m.ProtocolError, LookupError):
                reader.rewind(start)  # the loop reads it again and answers as it does
                return
            self.out += m.BIND_COMPLETE
            if described:
                self.out += m.NO_DATA
            # Few objects per row (slots, one shared result): an executemany of 100,000
            # rows made ~600,000 that every garbage collection walked (a third of its time).
            formats = msg.result_formats
            if formats == last_formats:
                formats = last_formats
            queued = Portal(ps, values, formats)
            queued.result = result
            last_formats = formats
            self._batch.append(queued)

    def _describes_batch(self, kind: bytes, body: bytes) -> bool:
        """Whether a message is the Describe of a portal of the batched INSERT (answered
        NoData: a batched INSERT returns no rows), which leaves the batch open."""
        if kind != b"D" or body != _DESCRIBE_UNNAMED_PORTAL or not self._batch:
            return False
        portal = self.portals.get("")
        return portal is not None and portal.statement is self._batch[0].statement

    @staticmethod
    def _param_oid(ps: PreparedStatement, i: int) -> int:
        """The type a Bind value is read as: the client's, else an array cast's (text
        arrays need reading; other unknown values go to the engine as strings)."""
        oid = ps.param_oids[i] if i < len(ps.param_oids) else 0
        if oid == 0:
            cast = ps.cast_oids.get(i, 0)
            if cast in codec.ARRAY_ELEMENT_OID:
                return cast
        return oid

    async def _describe(self, body: bytes) -> None:
        b = m.Body(body)
        kind = b.byte()
        name = b.cstring()
        if kind == b"P" and self._describes_batch(b"D", body):
            self.out += m.NO_DATA
            return
        if kind == b"S":
            ps = self._statement(name)
            await self._describe_statement(ps)
            self.out += m.parameter_description(ps.param_oids)
            if ps.columns:
                self.out += self._row_description(ps.columns, [])
            else:
                self.out += m.NO_DATA
        elif kind == b"P":
            portal = self._portal(name)
            columns = await self._portal_columns(portal)
            if columns:
                self.out += self._row_description(columns, portal.result_formats)
            else:
                self.out += m.NO_DATA
        else:
            raise m.ProtocolError(f"invalid DESCRIBE message subtype {kind!r}")

    async def _portal_columns(self, portal: Portal) -> list[Column] | None:
        assert self.session is not None
        ps = portal.statement
        if portal.columns is not None or ps.stmt is None:
            return portal.columns
        if portal.result is None and isinstance(ps.stmt.tree, _RUN_TO_DESCRIBE):
            with self.session.running(ps.sql):
                portal.result = await self._run_statement(ps.fresh(), portal.params)
        if portal.result is not None:
            columns = portal.result.columns if portal.result.copy_out is None else None
        elif ps.described:
            columns = ps.columns
        else:
            given = [codec.type_of_oid(oid) for oid in ps.param_oids]
            _, columns = describe(self.session, ps.stmt, given)
        portal.columns = columns
        return columns

    async def _execute(self, body: bytes) -> None:
        b = m.Body(body)
        portal = self._portal(b.cstring())
        max_rows = b.int32()
        ps = portal.statement
        if self._batch and (self._batch[0].statement is not ps or portal.result is not None):
            await self._run_batch()
        if ps.stmt is None:
            self.out += m.EMPTY_QUERY
            return
        assert self.session is not None
        if (
            # (A statement already queued was batchable a moment ago; the batch checks again.)
            portal.result is None
            and not self.transaction_failed
            and (bool(self._batch) or self.session.batchable(ps.stmt))
        ):
            # A driver's executemany: the rows of its Executes go as one write.
            portal.result = StatementResult(tag="INSERT 0 1", rowcount=1)
            self._batch.append(portal)
            if max_rows == 0:
                self._drain_batch()
            return
        await self._execute_now(portal, max_rows)

    async def _execute_now(self, portal: Portal, max_rows: int) -> None:
        assert self.session is not None
        # Timed (statement_timeout) from here to the end of this Execute's rows.
        with self.session.running(portal.statement.sql):
            self.session.defer_commits = True
            try:
                await self._execute_portal(portal, max_rows)
            finally:
                self.session.defer_commits = False

    async def _run_batch(self) -> None:
        """Run the queued Executes of one INSERT as one write: one chunk, one epoch, one
        CommandComplete each (committed at Sync, as each Execute alone). An error writes
        none of them and skips to Sync, as PostgreSQL rolls back the implicit transaction
        of a pipeline. Where a parameter set needs the general path, each runs alone."""
        batch, self._batch = self._batch, []
        ps = batch[0].statement
        assert self.session is not None and ps.stmt is not None
        try:
            with self.session.running(ps.sql):
                self.session.defer_commits = True
                try:
                    count = await self.session.execute_batch(
                        ps.fresh(), [portal.params for portal in batch]
                    )
                finally:
                    self.session.defer_commits = False
        except Error as exc:
            self._extended_error(exc)
            return
        if count is None:
            for portal in batch:
                portal.result = None
                try:
                    await self._execute_now(portal, 0)
                except Error as exc:
                    self._extended_error(exc)
                    return
            return
        for portal in batch:
            portal.done = True
            self.out += m.command_complete("INSERT 0 1")

    async def _execute_portal(self, portal: Portal, max_rows: int) -> None:
        ps = portal.statement
        assert ps.stmt is not None
        if portal.result is None:
            portal.result = await self._run_statement(ps.fresh(), portal.params)
        result = portal.result
        if not portal.sent_side_messages:
            portal.sent_side_messages = True
            self._side_messages(result)
        if result.copy_in is not None:
            if not await self._copy_in(result.copy_in):
                self.skip_until_sync = True
            portal.done = True
            return
        if result.copy_out is not None:
            if not portal.done:
                await self._copy_out(result)
                portal.done = True
            return
        if not result.is_query:
            self.out += m.command_complete(result.tag)
            portal.done = True
            return
        assert result.columns is not None
        if portal.rows is None:
            columns, convert = self._conform(portal, result)
            portal.rows = ResultRows(self.session, result, convert)  # type: ignore[arg-type]
            portal.columns = columns
        rows = portal.rows
        columns = portal.columns or result.columns
        start = rows.sent
        limit = max_rows if max_rows > 0 else None
        try:
            sent = await self._send_rows(rows, columns, portal.result_formats, limit)
        except BaseException:
            portal.done = True
            rows.close()
            raise
        if not rows.done:
            self.out += m.PORTAL_SUSPENDED
            return
        portal.done = True
        rows.close()
        tag = result.counted_tag(sent) if start == 0 else f"SELECT {sent}"
        self.out += m.command_complete(tag)

    def _conform(
        self, portal: Portal, result: StatementResult
    ) -> tuple[list[Column], Callable[[pa.Table], pa.Table] | None]:
        """Rows must match the columns the client was told about (a Describe of the
        statement before the run): the columns sent, and the cast of each piece of rows
        where the run produced another type (the casts the first rows allow)."""
        assert result.columns is not None
        told = portal.statement.columns if portal.columns is None else portal.columns
        if not told or len(told) != len(result.columns) or result.rows is None:
            return result.columns, None
        if all(a.type.oid == b.type.oid for a, b in zip(told, result.columns)):
            return result.columns, None
        head = result.rows
        columns = list(result.columns)
        casts: list[tuple[int, pa.DataType]] = []
        for i, (want, have) in enumerate(zip(told, result.columns)):
            if want.type.oid == have.type.oid:
                continue
            try:
                target = arrow_type_of(want.type)
                head.column(i).cast(target)
            except (TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            casts.append((i, target))
            columns[i] = Column(have.name, want.type)
        if not casts:
            return columns, None

        def convert(table: pa.Table) -> pa.Table:
            for i, target in casts:
                table = table.set_column(i, table.field(i).name, table.column(i).cast(target))
            return table

        return columns, convert

    async def _close_message(self, body: bytes) -> None:
        b = m.Body(body)
        kind = b.byte()
        name = b.cstring()
        if kind == b"S":
            self.statements.pop(name, None)
        elif kind == b"P":
            self._drop_portal(name)
        else:
            raise m.ProtocolError(f"invalid CLOSE message subtype {kind!r}")
        self.out += m.CLOSE_COMPLETE

    # -------------------------------------------------------------- shutdown
