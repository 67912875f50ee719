"""COPY ... FROM STDIN and COPY ... TO STDOUT (text and CSV formats).

COPY FROM STDIN returns a ``CopyInRequest``; the pgwire layer then streams the data into a
``CopyLoader``, which parses it with Arrow's CSV reader (vectorized: no per-row Python),
casts it with DuckDB (PostgreSQL's text input rules), and writes it as one statement.
Files on the server are never read or written.
"""

from __future__ import annotations

import io
import itertools
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlglot import exp

from rivulet.common.errors import (
    BAD_COPY_FILE_FORMAT,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_PRIVILEGE,
    SYNTAX_ERROR,
    sql_error,
)
from rivulet.common.types import arrow_type_of
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binder import Binder, position_of
from rivulet.sql.duckdb_errors import translate
from rivulet.sql.handlers.dml import _target_columns, insert_rows, resolve_target
from rivulet.sql.handlers.query import query_result, start_query
from rivulet.sql.parser import Statement
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
    if opts["format"] not in ("text", "csv"):
        raise sql_error(FEATURE_NOT_SUPPORTED, f"COPY format {opts['format']} is not supported")
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
            format="csv" if csv else "text",
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

    async def feed(self, data: bytes) -> None:
        self._buffer += data
        if self.request.format == "text" and len(self._buffer) >= _BATCH_BYTES:
            cut = self._buffer.rfind(b"\n")
            if cut >= 0:
                piece = bytes(self._buffer[: cut + 1])
                del self._buffer[: cut + 1]
                await self._parse(piece)

    async def finish(self) -> int:
        """Parse what is left, write every row, wait for the commit. Returns the count."""
        if self._buffer:
            piece = bytes(self._buffer)
            self._buffer.clear()
            await self._parse(piece)
        if not self._batches:
            return 0
        rows = pa.concat_tables(self._batches) if len(self._batches) > 1 else self._batches[0]
        self._batches.clear()
        return await insert_rows(self.session, self.table, rows)

    async def _parse(self, data: bytes) -> None:
        req = self.request
        if data.endswith(b"\\.\n") and (len(data) == 3 or data[-4:-3] == b"\n"):
            data = data[:-3]  # the old end-of-data marker
        if not data.strip():
            return
        skip = 1 if (req.header and self._first) else 0
        self._first = False
        names = [f"c{i}" for i in range(len(req.column_names))]
        csv = req.format == "csv"
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
            text = str(exc)
            if "Expected" in text and "columns" in text:
                raise sql_error(
                    BAD_COPY_FILE_FORMAT,
                    "COPY row does not have the table's number of columns",
                    detail=text.split("\n")[0],
                ) from None
            raise sql_error(BAD_COPY_FILE_FORMAT, f"bad COPY data: {text}") from None
        if not csv:
            raw = _unescape_text_format(raw)
        try:
            shaped = await self.session.run_query(lambda cur: self._shape(cur, raw))
        except duckdb.Error as exc:
            error = translate(exc)
            error.detail = (
                f"COPY {self.table.name}, in the rows after line {self._line}"
                if error.detail is None
                else error.detail
            )
            raise error from None
        self._batches.append(shaped)
        self._line += raw.num_rows

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
