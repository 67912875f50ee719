"""Split a query string into statements and parse each with the Rivulet dialect.

Errors become SQLSTATE 42601 with the 1-based character position PostgreSQL reports, so
that psql can point at the offending token.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import re
from collections.abc import Iterator

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from rivulet.common.errors import SYNTAX_ERROR, Error, sql_error
from rivulet.sql.dialect import DIALECT, WORD_STATEMENTS, RwStatement

# sqlglot warns when it falls back to a bare command; we report such statements ourselves.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

# Top-level nodes that are statements; anything else at the top is a syntax error.
_STATEMENT_TYPES: tuple[type[exp.Expr], ...] = (
    exp.Query,
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Copy,
    exp.Describe,
    exp.Command,
    exp.Set,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.TruncateTable,
    exp.Use,
    exp.Pragma,
    exp.Comment,
    exp.Grant,
    exp.Merge,
    exp.Analyze,
    exp.Kill,
    RwStatement,
)


class Statement:
    """One parsed statement and where it sits in the query string.

    Handlers rewrite trees in place, so a statement made from a shared tree (the parse
    cache, a prepared statement) copies it the first time ``ast`` is read: a query whose
    binding is cached never pays for the copy.
    """

    __slots__ = ("_names", "_owned", "_tree", "notices", "start", "text")

    def __init__(
        self,
        ast: exp.Expr,
        text: str,
        start: int,
        *,
        shared: bool = False,
        notices: tuple[str, ...] = (),
        names: exp.Expr | None = None,
    ):
        self._tree = ast
        # The part of the tree that holds every identifier, when the parser knows it to be
        # smaller than the tree (the rows of a scanned VALUES list hold none).
        self._names = names
        self._owned = not shared
        self.text = text
        self.start = start  # 0-based offset of the statement's first character
        # What parsing told the user (identifiers it truncated), sent with the result.
        self.notices = notices

    @property
    def ast(self) -> exp.Expr:
        """This statement's own tree, free to rewrite."""
        if not self._owned:
            self._tree = self._tree.copy()
            self._owned = True
            self._names = None
        return self._tree

    @property
    def tree(self) -> exp.Expr:
        """The tree for reading only (no copy)."""
        return self._tree

    @property
    def names_tree(self) -> exp.Expr:
        """The subtree that holds the statement's identifiers (often the whole tree)."""
        return self._names if self._names is not None else self._tree

    def fresh(self) -> Statement:
        """Another run of this statement (its tree must not have been rewritten)."""
        return Statement(self._tree, self.text, self.start, shared=True, notices=self.notices)


# PostgreSQL's NAMEDATALEN - 1: longer identifiers are truncated to this many bytes.
MAX_IDENTIFIER_BYTES = 63


def check_identifiers(stmt: Statement) -> None:
    """Identifiers as PostgreSQL reads them: an empty quoted one is an error, one longer
    than 63 bytes is truncated (on a character boundary) with a notice."""
    notices = []
    for ident in stmt.names_tree.find_all(exp.Identifier):
        name = ident.this
        if not isinstance(name, str):
            continue
        if name == "" and ident.quoted:
            raise sql_error(SYNTAX_ERROR, 'zero-length delimited identifier at or near """"')
        raw = name.encode()
        if len(raw) > MAX_IDENTIFIER_BYTES:
            short = raw[:MAX_IDENTIFIER_BYTES].decode("utf-8", errors="ignore")
            notices.append(f'identifier "{name}" will be truncated to "{short}"')
            ident.set("this", short)
    stmt.notices = tuple(notices)


def _position(sql: str, line: int, col: int) -> int:
    """1-based character position of (line, col) as sqlglot reports them."""
    lines = sql.split("\n")
    offset = sum(len(part) + 1 for part in lines[: max(line - 1, 0)])
    return offset + max(col, 1)


def _syntax_error(sql: str, exc: Exception) -> Error:
    if isinstance(exc, ParseError) and exc.errors:
        err = exc.errors[0]
        near = (err.get("highlight") or "").strip()
        desc = err.get("description") or "syntax error"
        if "SENTINEL" in desc:
            return sql_error(SYNTAX_ERROR, "syntax error at end of input", position=len(sql) + 1)
        if near:
            pos = _position(sql, err.get("line") or 1, err.get("col") or 1) - len(near) + 1
            message = f'syntax error at or near "{near}"'
        else:
            pos = len(sql) + 1
            message = "syntax error at end of input"
        if desc.startswith("syntax error") or "<Token" in desc or "<class " in desc:
            detail = None  # sqlglot's internals say nothing to users
        else:
            detail = desc.split(". Line ")[0]
        return sql_error(SYNTAX_ERROR, message, detail=detail, position=max(pos, 1))
    if isinstance(exc, TokenError):
        text = str(exc)
        return sql_error(
            SYNTAX_ERROR,
            "syntax error: unterminated quoted string or identifier"
            if "'" in text or '"' in text
            else f"syntax error: {text}",
            position=len(sql),
        )
    return sql_error(SYNTAX_ERROR, f"syntax error: {exc}")


# Tokens that may begin a statement (besides the dialect's word statements).
_STARTERS = {
    TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN, TokenType.TABLE,
    TokenType.INSERT, TokenType.UPDATE, TokenType.DELETE, TokenType.CREATE, TokenType.DROP,
    TokenType.ALTER, TokenType.COPY, TokenType.DESCRIBE, TokenType.DESC, TokenType.SET,
    TokenType.BEGIN, TokenType.COMMIT, TokenType.ROLLBACK, TokenType.TRUNCATE,
    TokenType.COMMAND, TokenType.EXECUTE, TokenType.FETCH, TokenType.SHOW, TokenType.COMMENT,
    TokenType.GRANT, TokenType.REVOKE, TokenType.MERGE, TokenType.ANALYZE, TokenType.USE,
    TokenType.PRAGMA, TokenType.KILL, TokenType.LOAD, TokenType.DECLARE, TokenType.RENAME,
    TokenType.CACHE, TokenType.UNCACHE, TokenType.REFRESH,
}  # fmt: skip


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            chunks.append([])
        else:
            chunks[-1].append(tok)
    return [c for c in chunks if c]


# A long ``INSERT INTO t [(cols)] VALUES (...), ...`` of plain literals is read by
# ``_scan_literal_insert`` instead of sqlglot (6,000 rows took 0.45 s to tokenize and parse).
_LONG_INSERT_CHARS = 4096
_INSERT_PREFIX = re.compile(
    r"\s*insert\s+into\s+[^'();\-/]+?(?:\([^'();\-/]*\))?\s*values\s*", re.I
)
_VALUES_TOKEN = re.compile(
    r"\s*(?:([(),])|(-)?(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?![\w.])|'([^'\\]*(?:''[^'\\]*)*)'"
    r"|(null|true|false)(?!\w))",
    re.I,
)
_KEYWORD_NODES = {"null": exp.Null, "true": lambda: exp.Boolean(this=True),
                  "false": lambda: exp.Boolean(this=False)}  # fmt: skip
# One item of a row, as one group (the same items as ``_VALUES_TOKEN``'s).
_ROW_ITEM = (
    r"\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.])|'[^'\\]*(?:''[^'\\]*)*'"
    r"|(?:null|true|false)(?!\w))"
)


@functools.lru_cache(maxsize=64)
def _row_pattern(width: int) -> re.Pattern[str]:
    """A whole row of ``width`` items and the "," after it, if any: a long VALUES list
    is read a row per match once its first row gave the width."""
    items = r"\s*,".join([_ROW_ITEM] * width)
    return re.compile(rf"\s*\({items}\s*\)(\s*,)?", re.I)


def _item_node(text: str) -> exp.Expr:
    """The literal node of an item's text (as ``_ROW_ITEM`` or ``_VALUES_TOKEN`` read it)."""
    first = text[0]
    if first == "'":
        return exp.Literal(this=text[1:-1].replace("''", "'"), is_string=True)
    if first == "-":
        return exp.Neg(this=exp.Literal(this=text[1:], is_string=False))
    if first.isdigit():
        return exp.Literal(this=text, is_string=False)
    return _KEYWORD_NODES[text.lower()]()


def _scan_literal_insert(sql: str) -> Statement | None:
    """The one statement of a long INSERT whose VALUES rows hold only numbers, strings,
    NULL, TRUE and FALSE, with the tree sqlglot would give it (its head - target and
    columns - is parsed by sqlglot); None for anything else (then the parser reads it)."""
    head = _INSERT_PREFIX.match(sql)
    if head is None:
        return None
    rows: list[exp.Expr] = []
    items: list[exp.Expr] = []
    # What comes next: a row's "(", an item, "," or ")" after an item, "," after a row.
    expect = "row"
    pos = last = head.end()
    match = _VALUES_TOKEN.match
    row_match = None
    while True:
        if expect == "row" and row_match is not None:
            # Rows as wide as the first, a match each; anything else goes token by token.
            while (r := row_match(sql, pos)) is not None:
                groups = r.groups()
                rows.append(exp.Tuple(expressions=[_item_node(g) for g in groups[:-1]]))
                pos = r.end()
                if groups[-1] is None:  # no "," after it: the last row
                    expect, last = "after row", pos
                    break
                last = r.start(len(groups))
        m = match(sql, pos)
        if m is None:
            break
        pos = m.end()
        punct = m.group(1)
        if expect == "row":
            if punct != "(":
                return None
            expect, items = "item", []
        elif expect == "item":
            if punct is not None:
                return None
            items.append(_item_node(m.group(0).lstrip()))
            expect = "after item"
        elif expect == "after item":
            if punct == ",":
                expect = "item"
            elif punct == ")":
                rows.append(exp.Tuple(expressions=items))
                expect, last = "after row", pos
                if row_match is None:
                    row_match = _row_pattern(len(items)).match
            else:
                return None
        elif punct == ",":  # after a row
            expect = "row"
        else:
            return None
    if expect != "after row" or sql[last:].strip() not in ("", ";"):
        return None
    try:
        (stmt,) = _parse_with_sqlglot(sql[: head.end()] + " (NULL)")
    except Error:
        return None
    values = stmt.tree.expression
    if not isinstance(stmt.tree, exp.Insert) or not isinstance(values, exp.Values):
        return None
    values.set("expressions", rows)
    return Statement(stmt.tree, sql[stmt.start : last], stmt.start, names=stmt.tree.this)


def parse_statements(sql: str) -> list[Statement]:
    """Every statement in ``sql``, in order. Raises a 42601 error on bad syntax."""
    if len(sql) <= _LONG_INSERT_CHARS:
        return _parse_with_sqlglot(sql)
    # A long statement makes a node per token, all alive until it is done: collections
    # meanwhile find nothing to free but walk the whole heap (a 6,000-row VALUES list
    # took 60-200 ms instead of 30 in a server holding many objects).
    with _collection_paused():
        if (fast := _scan_literal_insert(sql)) is not None:
            return [fast]
        return _parse_with_sqlglot(sql)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block (unless it was off already)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _parse_with_sqlglot(sql: str) -> list[Statement]:
    try:
        tokens = DIALECT.tokenize(sql)
    except TokenError as exc:
        raise _syntax_error(sql, exc) from None
    out: list[Statement] = []
    for chunk in _split(tokens):
        first = chunk[0]
        if first.token_type not in _STARTERS and first.text.upper() not in WORD_STATEMENTS:
            raise sql_error(
                SYNTAX_ERROR, f'syntax error at or near "{first.text}"', position=first.start + 1
            )
        start, end = first.start, chunk[-1].end + 1
        # A string token may carry its quotes outside [start, end]; extend to the token.
        text = sql[start:end]
        try:
            parsed = DIALECT.parser().parse(chunk, sql)
        except (ParseError, TokenError) as exc:
            raise _syntax_error(sql, exc) from None
        ast = parsed[0] if parsed else None
        if ast is None:
            continue
        if isinstance(ast, exp.Values):
            ast = _values_as_query(ast)
        if not isinstance(ast, _STATEMENT_TYPES):
            first = chunk[0]
            raise sql_error(
                SYNTAX_ERROR,
                f'syntax error at or near "{first.text}"',
                position=first.start + 1,
            )
        out.append(Statement(ast, text, start))
    return out


def _values_as_query(values: exp.Values) -> exp.Expr:
    """A bare ``VALUES`` list is a query whose columns are named column1, column2, ...
    (PostgreSQL): ``SELECT * FROM (VALUES ...) AS "values"(column1, ...)``."""
    modifiers = {}
    for key in ("order", "limit", "offset"):
        if values.args.get(key) is not None:
            modifiers[key] = values.args[key]
            values.set(key, None)
    first = values.expressions[0] if values.expressions else None
    width = len(first.expressions) if isinstance(first, exp.Tuple) else 1
    values.set(
        "alias",
        exp.TableAlias(
            this=exp.to_identifier("values"),
            columns=[exp.to_identifier(f"column{i}") for i in range(1, width + 1)],
        ),
    )
    select = exp.select("*").from_(values)
    for key, value in modifiers.items():
        select.set(key, value)
    return select


def parse_one(sql: str) -> Statement:
    stmts = parse_statements(sql)
    if len(stmts) != 1:
        raise sql_error(SYNTAX_ERROR, f"expected one statement, got {len(stmts)}")
    return stmts[0]


def position_of(node: exp.Expr) -> int | None:
    """1-based position of a node's first identifier in the statement text."""
    for ident in [node, *node.find_all(exp.Identifier)]:
        meta = getattr(ident, "_meta", None) or {}
        if "start" in meta:
            return int(meta["start"]) + 1
    return None
