"""COPY ... FROM STDIN (text, CSV and binary formats) and COPY ... TO STDOUT (text, CSV).

COPY FROM STDIN returns a ``CopyInRequest``; the pgwire layer then streams the data into a
``CopyLoader``, which parses it with Arrow's CSV reader (vectorized: no per-row Python),
casts it with DuckDB (PostgreSQL's text input rules), and writes it as one statement.
Binary data is read by ``copy_binary``.
Files on the server are never read or written.
"""

from __future__ import annotations

import io
import itertools
import re
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlglot import exp

from rivulet.common.errors import (
    BAD_COPY_FILE_FORMAT,
    CHARACTER_NOT_IN_REPERTOIRE,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_PRIVILEGE,
    SYNTAX_ERROR,
    sql_error,
)
from rivulet.common.types import arrow_type_of
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binder import Binder
from rivulet.sql.duckdb_errors import translate
from rivulet.sql.handlers.copy_binary import BinaryCopyReader, check_binary_types
from rivulet.sql.handlers.dml import (
    _target_columns,
    insert_rows,
    resolve_target,
    shape_rows,
    typed_rows,
)
from rivulet.sql.handlers.query import query_result, start_query
from rivulet.sql.parser import Statement, position_of
from rivulet.sql.result import CopyInRequest, StatementResult

if TYPE_CHECKING:
    from rivulet.sql.session import Session

# Parse the incoming text format in pieces of about this size (at line boundaries).
_BATCH_BYTES = 8 << 20
_names = itertools.count()


def _options(ast: exp.Copy) -> dict[str, object]:
    opts: dict[str, object] = {"format": "text"}
    for p in ast.args.get("params") or []:
        key = p.this.name.lower() if p.this is not None else ""
        value = p.args.get("expression")
        if key == "csv":
            opts["format"] = "csv"
            if value is not None and value.name.lower() == "header":
                opts["header"] = True
            continue
        if key == "binary":
            opts["format"] = "binary"
            continue
        text = None
        if isinstance(value, exp.Boolean):
            text = "true" if value.this else "false"
        elif value is not None:
            text = value.name
        if key == "format":
            opts["format"] = (text or "").lower()
        elif key == "header":
            opts["header"] = (text or "true").lower() in ("true", "on", "1", "match")
        elif key in ("delimiter", "null", "quote", "escape", "encoding"):
            opts[key] = text
        else:
            raise sql_error(SYNTAX_ERROR, f'option "{key}" not recognized')
    if opts["format"] not in ("text", "csv", "binary"):
        raise sql_error(FEATURE_NOT_SUPPORTED, f"COPY format {opts['format']} is not supported")
    if opts["format"] == "binary":
        for key in ("delimiter", "null"):
            if key in opts:
                raise sql_error(SYNTAX_ERROR, f"cannot specify {key.upper()} in BINARY mode")
        if "header" in opts:
            raise sql_error(FEATURE_NOT_SUPPORTED, "cannot specify HEADER in BINARY mode")
        for key in ("quote", "escape"):
            if key in opts:
                raise sql_error(FEATURE_NOT_SUPPORTED, f"COPY {key} available only in CSV mode")
    return opts


async def handle_copy(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Copy)
    files = ast.args.get("files") or []
    endpoint = files[0].name.upper() if files and isinstance(files[0], exp.Identifier) else None
    from_stdin = bool(ast.args.get("kind"))
    if endpoint not in ("STDIN", "STDOUT") or (from_stdin and endpoint != "STDIN"):
        raise sql_error(
            INSUFFICIENT_PRIVILEGE,
            "COPY to or from a file is not allowed",
            hint="Use COPY ... FROM STDIN or TO STDOUT (psql's \\copy reads and writes"
            " files on the client).",
        )
    opts = _options(ast)
    if not from_stdin:
        if opts["format"] == "binary":
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                "COPY TO in binary format is not supported",
                hint="Use COPY's text or CSV format.",
            )
        return await _copy_out(session, ast, opts)
    binder = Binder(session.bind_context())
    target = ast.this
    ref = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(ref, exp.Table):
        raise sql_error(SYNTAX_ERROR, "COPY FROM needs a table", position=position_of(target))
    table = resolve_target(session, binder, ref)
    names = _target_columns(table, target)
    by_name = {c.name: c.type for c in table.columns}
    csv = opts["format"] == "csv"
    if opts["format"] == "binary":
        check_binary_types(names, [by_name[n] for n in names])
    delimiter = str(opts.get("delimiter") or ("," if csv else "\t"))
    if len(delimiter) != 1:
        raise sql_error(FEATURE_NOT_SUPPORTED, "COPY delimiter must be a single one-byte character")
    null = opts.get("null")
    return StatementResult(
        tag="COPY",
        copy_in=CopyInRequest(
            table_id=table.id,
            column_names=names,
            column_types=[by_name[n] for n in names],
            format=str(opts["format"]),
            delimiter=delimiter,
            null=str(null) if null is not None else ("" if csv else "\\N"),
            header=bool(opts.get("header")),
            quote=str(opts.get("quote") or '"'),
            escape=str(opts.get("escape") or opts.get("quote") or '"'),
        ),
    )


class CopyLoader:
    """Receives COPY data, parses it batch by batch, and writes it at the end."""

    def __init__(self, session: Session, request: CopyInRequest) -> None:
        self.session = session
        self.request = request
        table = session.ctx.catalog.tables.get(request.table_id)
        if table is None:
            raise sql_error("42P01", "the table of this COPY was dropped")
        self.table: TableCatalog = table
        self._buffer = bytearray()
        self._batches: list[pa.Table] = []
        self._first = True
        self._line = 0
        # Lines of the input parsed so far: errors name the line, as PostgreSQL does.
        self._lines = 0
        self._binary = (
            BinaryCopyReader(table.name, request.column_names, request.column_types)
            if request.format == "binary"
            else None
        )

    async def feed(self, data: bytes) -> None:
        self._buffer += data
        if self._binary is not None:
            if len(self._buffer) >= _BATCH_BYTES:
                await self._read_binary(final=False)
            return
        if self.request.format == "text" and len(self._buffer) >= _BATCH_BYTES:
            cut = self._buffer.rfind(b"\n")
            if cut >= 0:
                piece = bytes(self._buffer[: cut + 1])
                del self._buffer[: cut + 1]
                await self._parse(piece)

    async def finish(self) -> int:
        """Parse what is left, write every row, wait for the commit. Returns the count."""
        if self._binary is not None:
            await self._read_binary(final=True)
        elif self._buffer:
            piece = bytes(self._buffer)
            self._buffer.clear()
            await self._parse(piece)
        if not self._batches:
            return 0
        rows = pa.concat_tables(self._batches) if len(self._batches) > 1 else self._batches[0]
        self._batches.clear()
        return await insert_rows(self.session, self.table, rows)

    async def _read_binary(self, *, final: bool) -> None:
        """Decode the complete rows of the binary data received (``copy_binary``)."""
        assert self._binary is not None
        data = bytes(self._buffer)
        raw, used = self._binary.read(data, final=final)
        del self._buffer[:used]
        if raw is None:
            return
        names = self.request.column_names
        rows = typed_rows(self.table, names, raw.rename_columns(names))
        if rows is None:
            rows = await self.session.run_query(
                lambda cur: shape_rows(cur, self.table, names, raw), light=True
            )
        self._batches.append(rows)

    async def _parse(self, data: bytes) -> None:
        req = self.request
        if data.endswith(b"\\.\n") and (len(data) == 3 or data[-4:-3] == b"\n"):
            data = data[:-3]  # the old end-of-data marker
        if not data.strip():
            return
        self._check_encoding(data)
        lines = data.count(b"\n")
        original = data
        csv = req.format == "csv"
        if csv:
            self._check_quotes(data)
        else:
            if b"\\\n" in data:
                # A backslash before a newline escapes it: the newline is part of the value.
                data = _ESCAPED_NEWLINE.sub(rb"\1\\n", data)
            if data.endswith(b"\\") and _TRAILING_BACKSLASH.search(data):
                # Data can only end without a newline at its very end, where PostgreSQL
                # drops a backslash that escapes nothing.
                data = data[:-1]
        skip = 1 if (req.header and self._first) else 0
        self._first = False
        names = [f"c{i}" for i in range(len(req.column_names))]
        try:
            raw = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(
                    column_names=names, skip_rows=skip, block_size=1 << 24, use_threads=True
                ),
                parse_options=pacsv.ParseOptions(
                    delimiter=req.delimiter,
                    quote_char=req.quote if csv else False,
                    double_quote=csv and req.escape == req.quote,
                    escape_char=(req.escape if csv and req.escape != req.quote else False),
                    newlines_in_values=csv,
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types={n: pa.string() for n in names},
                    null_values=[req.null],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                ),
            )
        except pa.ArrowInvalid as exc:
            raise self._row_shape_error(str(exc), original) from None
        if not csv:
            raw = _unescape_text_format(raw)
        try:
            shaped = await self.session.run_query(lambda cur: self._shape(cur, raw))
        except duckdb.Error as exc:
            error = translate(exc)
            located = await self.session.run_query(lambda cur: self._first_bad_value(cur, raw))
            if located is not None:
                row, column, value = located
                line = self._lines + skip + row + 1
                error.context = f'COPY {self.table.name}, line {line}, column {column}: "{value}"'
            else:
                error.context = f"COPY {self.table.name}, in the rows after line {self._lines}"
            raise error from None
        self._batches.append(shaped)
        self._line += raw.num_rows
        self._lines += lines

    def _context(self, data: bytes, pos: int, *, shown: int | None = None) -> str:
        """PostgreSQL's CONTEXT for an error at byte ``pos`` of ``data`` (with the ``shown``
        bytes of the row from there)."""
        line = self._lines + data.count(b"\n", 0, pos) + 1
        text = f"COPY {self.table.name}, line {line}"
        if shown is not None:
            text += f': "{data[pos : pos + shown].decode(errors="replace")}"'
        return text

    def _check_encoding(self, data: bytes) -> None:
        """The input is UTF-8 without NUL bytes (PostgreSQL's text type holds none)."""
        pos = data.find(b"\x00")
        if pos < 0:
            try:
                data.decode("utf-8")
                return
            except UnicodeDecodeError as exc:
                pos = exc.start
        raise sql_error(
            CHARACTER_NOT_IN_REPERTOIRE,
            f'invalid byte sequence for encoding "UTF8": 0x{data[pos]:02x}',
            context=self._context(data, pos),
        )

    def _check_quotes(self, data: bytes) -> None:
        """A CSV quoted field must end before the data does."""
        req = self.request
        quote = req.quote.encode()
        if quote not in data:
            return
        counted = data
        if req.escape != req.quote:
            counted = data.replace(req.escape.encode() * 2, b"").replace(
                req.escape.encode() + quote, b""
            )
        if counted.count(quote) % 2 == 0:
            return
        # Quotes pair up in order: the one left open is the last.
        pos = data.rfind(quote)
        start = data.rfind(b"\n", 0, pos) + 1
        line = self._lines + data.count(b"\n", 0, start) + 1
        shown = data[start:].decode(errors="replace")
        raise sql_error(
            BAD_COPY_FILE_FORMAT,
            "unterminated CSV quoted field",
            context=f'COPY {self.table.name}, line {line}: "{shown}"',
        )

    def _row_shape_error(self, text: str, data: bytes) -> Exception:
        """PostgreSQL's error for a row with too few or too many fields."""
        m = re.search(r"Expected (\d+) columns, got (\d+): (.*)", text, re.S)
        if m is None:
            return sql_error(BAD_COPY_FILE_FORMAT, f"bad COPY data: {text}")
        expected, got, row = int(m.group(1)), int(m.group(2)), m.group(3)
        if got < expected:
            message = f'missing data for column "{self.request.column_names[got]}"'
        else:
            message = "extra data after last expected column"
        # The row as it was sent: a newline its backslash escaped was read as "\n".
        shown = row.encode()
        pos = _find_line(data, shown)
        if pos < 0:
            shown = shown.replace(b"\\n", b"\\\n")
            pos = _find_line(data, shown)
        context = self._context(data, pos, shown=len(shown)) if pos >= 0 else None
        return sql_error(BAD_COPY_FILE_FORMAT, message, context=context)

    def _first_bad_value(
        self, cur: duckdb.DuckDBPyConnection, raw: pa.Table
    ) -> tuple[int, str, str] | None:
        """(row, column, text) of the first value that does not read as its column's type;
        only called once a batch failed."""
        by_target = {n: f"c{i}" for i, n in enumerate(self.request.column_names)}
        name = f"__copy_bad_{next(_names)}"
        cur.register(name, raw.append_column("_rw_row", pa.array(range(raw.num_rows))))
        try:
            for c in self.table.visible_columns:
                src = by_target.get(c.name)
                if src is None or c.type.name == "bytea":
                    continue
                found = cur.execute(
                    f"SELECT _rw_row, {src} FROM {name} WHERE {src} IS NOT NULL"
                    f" AND TRY_CAST({'trim(' + src + ')' if c.type.name == 'boolean' else src}"
                    f" AS {c.type.duckdb}) IS NULL ORDER BY _rw_row LIMIT 1"
                ).fetchall()
                if found:
                    return int(found[0][0]), c.name, str(found[0][1])
        finally:
            cur.unregister(name)
        return None

    def _shape(self, cur: duckdb.DuckDBPyConnection, raw: pa.Table) -> pa.Table:
        """Cast the text columns to the table's types (DuckDB casts), in table order."""
        req = self.request
        by_target = {n: f"c{i}" for i, n in enumerate(req.column_names)}
        cols = []
        for c in self.table.visible_columns:
            src = by_target.get(c.name)
            if src is None:
                cols.append(f'CAST(NULL AS {c.type.duckdb}) AS "{c.name}"')
            elif c.type.name == "bytea":
                cols.append(
                    f"CASE WHEN starts_with({src}, '\\x') THEN unhex(substr({src}, 3))"
                    f' ELSE CAST({src} AS BLOB) END AS "{c.name}"'
                )
            elif c.type.name == "boolean":
                cols.append(f'CAST(trim({src}) AS BOOLEAN) AS "{c.name}"')
            else:
                cols.append(f'CAST({src} AS {c.type.duckdb}) AS "{c.name}"')
        name = f"__copy_{next(_names)}"
        cur.register(name, raw)
        try:
            out = cur.sql(f"SELECT {', '.join(cols)} FROM {name}").to_arrow_table()
        finally:
            cur.unregister(name)
        schema = pa.schema(
            [pa.field(c.name, arrow_type_of(c.type)) for c in self.table.visible_columns]
        )
        return out.cast(schema)


def _find_line(data: bytes, line: bytes) -> int:
    """Where ``line`` stands in ``data`` as a whole line (-1: nowhere)."""
    if data.startswith(line + b"\n") or data == line:
        return 0
    i = data.find(b"\n" + line + b"\n")
    if i >= 0:
        return i + 1
    if data.endswith(b"\n" + line):
        return len(data) - len(line)
    return data.find(line)


# A newline after an odd number of backslashes.
_ESCAPED_NEWLINE = re.compile(rb"(?<!\\)((?:\\\\)*)\\\n")
_TRAILING_BACKSLASH = re.compile(rb"(?<!\\)(?:\\\\)*\\\Z")

_ESCAPES = [
    ("\\t", "\t"),
    ("\\n", "\n"),
    ("\\r", "\r"),
    ("\\b", "\b"),
    ("\\f", "\f"),
    ("\\v", "\v"),
]


def _unescape_text_format(table: pa.Table) -> pa.Table:
    """PostgreSQL's text format backslash escapes, on the columns that contain any."""
    out = []
    for col in table.columns:
        if pc.any(pc.match_substring(col, "\\")).as_py():
            col = pc.replace_substring(col, "\\\\", "\x00")
            for esc, ch in _ESCAPES:
                col = pc.replace_substring(col, esc, ch)
            col = pc.replace_substring(col, "\x00", "\\")
        out.append(col)
    return pa.table(out, names=table.column_names)


async def _copy_out(session: Session, ast: exp.Copy, opts: dict[str, object]) -> StatementResult:
    """COPY table|query TO STDOUT: the rows, sent by pgwire as CopyData."""
    source = ast.this
    if isinstance(source, exp.Subquery):
        query = source.this
    else:
        ref = source.this if isinstance(source, exp.Schema) else source
        cols = (
            [exp.column(e.name) for e in source.expressions]
            if isinstance(source, exp.Schema)
            else [exp.Star()]
        )
        query = exp.select(*cols).from_(ref.copy())
    bound = Binder(session.bind_context()).bind_query(query)
    store = session.ctx.store
    head, stream, columns = await session.run_query(
        lambda cur: start_query(store, cur, bound.sql, []), light=not bound.reads_data
    )
    csv = opts["format"] == "csv"
    result = query_result("COPY", head, stream, columns)
    result.copy_out = {
        "format": "csv" if csv else "text",
        "delimiter": str(opts.get("delimiter") or ("," if csv else "\t")),
        "null": str(opts["null"]) if opts.get("null") is not None else ("" if csv else "\\N"),
        "header": bool(opts.get("header")),
    }
    return result
