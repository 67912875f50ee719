"""The Rivulet SQL dialect: sqlglot's RisingWave dialect, extended with the statements
sqlglot leaves as bare commands (SHOW, FLUSH, WAIT, RECOVER, EXPLAIN, CANCEL JOBS,
SET TIME ZONE, START TRANSACTION, ...).

Each extension parses into an expression node defined here, so that handlers dispatch on
node types, never on strings.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.risingwave import RisingWave
from sqlglot.errors import ParseError
from sqlglot.parsers.risingwave import RisingWaveParser
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import TokenType

# --------------------------------------------------------------------- nodes


class RwStatement(exp.Expression):
    """Base of the statements this dialect adds."""


class ShowStatement(RwStatement):
    """``SHOW <what> [FROM schema] [LIKE 'pattern']`` - ``this`` is the lower-cased words."""

    arg_types = {"this": True, "from_": False, "like": False, "target": False}


class FlushStatement(RwStatement):
    arg_types: dict[str, bool] = {}


class WaitStatement(RwStatement):
    arg_types: dict[str, bool] = {}


class RecoverStatement(RwStatement):
    arg_types: dict[str, bool] = {}


class ExplainStatement(RwStatement):
    """``EXPLAIN [ANALYZE] [VERBOSE] [(options)] <statement>``."""

    arg_types = {"this": True, "analyze": False, "verbose": False, "options": False}


class CancelJobsStatement(RwStatement):
    arg_types = {"expressions": True}


class SetVariable(RwStatement):
    """``SET [SESSION|LOCAL] name {=|TO} value[, ...] | DEFAULT`` and ``SET TIME ZONE``.

    ``this`` is the variable name (lower case); ``expressions`` the values (strings), or
    None for DEFAULT.
    """

    arg_types = {"this": True, "expressions": False, "local": False}


class ResetVariable(RwStatement):
    arg_types = {"this": True}


class TransactionStatement(RwStatement):
    """BEGIN / START TRANSACTION / COMMIT / END / ROLLBACK / ABORT. ``this`` is the verb
    (``begin``, ``commit`` or ``rollback``), ``read_only`` the access mode if given."""

    arg_types = {"this": True, "read_only": False}


class DiscardStatement(RwStatement):
    arg_types = {"this": False}


class DeallocateStatement(RwStatement):
    """``DEALLOCATE [PREPARE] name | ALL`` - ``this`` the statement's name (an identifier),
    None for ALL."""

    arg_types = {"this": False}


class AlterJobSetting(RwStatement):
    """``ALTER <kind> name SET {PARALLELISM | BACKFILL_PARALLELISM | BACKFILL_RATE_LIMIT}
    {=|TO} value [DEFERRED]``.

    ``kind`` is the object kind as written (``MATERIALIZED VIEW``), ``this`` the table,
    ``setting`` the lower-case setting, ``value`` the value's text (quotes removed) or None
    for a bare DEFAULT.
    """

    arg_types = {"this": True, "kind": True, "setting": True, "value": False, "deferred": False}


class AlterSystem(RwStatement):
    """``ALTER SYSTEM SET name {=|TO} value | DEFAULT`` - ``value`` None for DEFAULT."""

    arg_types = {"this": True, "value": False}


# -------------------------------------------------------------------- parser


WORD_STATEMENTS = {
    "FLUSH",
    "WAIT",
    "RECOVER",
    "EXPLAIN",
    "CANCEL",
    "START",
    "END",
    "ABORT",
    "DISCARD",
    "RESET",
    "SHOW",
    "DEALLOCATE",
}

# ALTER <kind> name SET <setting>: the kinds and settings this dialect parses itself.
_ALTER_JOB_KINDS = [["MATERIALIZED", "VIEW"], ["TABLE"], ["SINK"], ["INDEX"], ["SOURCE"], ["VIEW"]]
_ALTER_JOB_SETTINGS = {"PARALLELISM", "BACKFILL_PARALLELISM", "BACKFILL_RATE_LIMIT"}


_SHOW_CREATE = [
    ["CREATE", "TABLE"],
    ["CREATE", "MATERIALIZED", "VIEW"],
    ["CREATE", "VIEW"],
    ["CREATE", "SOURCE"],
    ["CREATE", "SINK"],
    ["CREATE", "INDEX"],
]


class RivuletParser(RisingWaveParser):
    STATEMENT_PARSERS = {
        **RisingWaveParser.STATEMENT_PARSERS,
        TokenType.SET: lambda self: self._parse_rw_set(),
        TokenType.BEGIN: lambda self: self._parse_rw_begin(),
        TokenType.COMMIT: lambda self: self._parse_rw_end("commit"),
        TokenType.ROLLBACK: lambda self: self._parse_rw_end("rollback"),
        TokenType.ALTER: lambda self: self._parse_rw_alter(),
    }

    def _parse_file_location(self) -> exp.Expr | None:
        # ``COPY t FROM STDIN (FORMAT csv)``: STDIN is the endpoint, not a function call.
        if self._curr and self._curr.text.upper() in ("STDIN", "STDOUT"):
            self._advance()
            return exp.to_identifier(self._prev.text)
        return super()._parse_file_location()

    def _parse_types(
        self,
        check_func: bool = False,
        schema: bool = False,
        allow_identifiers: bool = True,
        with_collation: bool = False,
    ) -> exp.Expr | None:
        this = super()._parse_types(
            check_func=check_func,
            schema=schema,
            allow_identifiers=allow_identifiers,
            with_collation=with_collation,
        )
        # sqlglot stops after OID / REGCLASS...: read the [] of ``$1::oid[]`` too.
        if isinstance(this, exp.ObjectIdentifier):
            while self._match_pair(TokenType.L_BRACKET, TokenType.R_BRACKET):
                this = exp.DataType(this=exp.DType.ARRAY, expressions=[this], nested=True)
        return this

    def _parse_statement(self) -> exp.Expr | None:
        if self._curr and self._curr.token_type != TokenType.STRING:
            word = self._curr.text.upper()
            if word in WORD_STATEMENTS:
                self._advance()
                return getattr(self, f"_parse_rw_{word.lower()}")()
        return super()._parse_statement()

    # -- helpers ---------------------------------------------------------------
    def _rw_words(self) -> list[str]:
        """Consume the rest of the statement as lower-cased words."""
        words = []
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            words.append(self._curr.text)
            self._advance()
        return words

    def _rw_error(self, message: str) -> None:
        """A syntax error at the current token, or at the end of input when the statement
        stopped short (as PostgreSQL reports it)."""
        if not self._curr or self._curr.token_type == TokenType.SEMICOLON:
            raise ParseError.new(message, description=message, highlight="")
        self.raise_error(message)

    def _rw_expect_end(self) -> None:
        if self._curr and self._curr.token_type != TokenType.SEMICOLON:
            self.raise_error(f'syntax error at or near "{self._curr.text}"')

    # -- statements ------------------------------------------------------------
    def _parse_rw_flush(self) -> exp.Expr:
        self._rw_expect_end()
        return self.expression(FlushStatement())

    def _parse_rw_wait(self) -> exp.Expr:
        self._rw_expect_end()
        return self.expression(WaitStatement())

    def _parse_rw_recover(self) -> exp.Expr:
        self._rw_expect_end()
        return self.expression(RecoverStatement())

    def _parse_rw_cancel(self) -> exp.Expr:
        if not (self._match_text_seq("JOBS") or self._match_text_seq("JOB")):
            self.raise_error("expected JOBS after CANCEL")
        ids = self._parse_csv(self._parse_number)
        self._rw_expect_end()
        return self.expression(CancelJobsStatement(expressions=ids))

    def _parse_rw_explain(self) -> exp.Expr:
        analyze = bool(self._match_text_seq("ANALYZE"))
        verbose = bool(self._match_text_seq("VERBOSE"))
        options = None
        if self._match(TokenType.L_PAREN):
            options = [w.lower() for w in self._rw_words_until_paren()]
        inner = self._parse_statement()
        if inner is None:
            self.raise_error("EXPLAIN needs a statement")
        return self.expression(
            ExplainStatement(this=inner, analyze=analyze, verbose=verbose, options=options)
        )

    def _rw_words_until_paren(self) -> list[str]:
        words = []
        while self._curr and self._curr.token_type != TokenType.R_PAREN:
            words.append(self._curr.text)
            self._advance()
        if not self._match(TokenType.R_PAREN):
            self.raise_error("expected )")
        return words

    def _parse_rw_show(self) -> exp.Expr:
        parts: list[str] = []
        from_: str | None = None
        like: str | None = None
        target: str | None = None
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            if target is None and [p.upper() for p in parts] in _SHOW_CREATE:
                # SHOW CREATE TABLE <name>: the name keeps its quoting and case.
                table = self._parse_table_parts()
                target = table.sql(dialect="postgres") if table else None
                continue
            if self._curr.token_type == TokenType.FROM or self._curr.text.upper() == "IN":
                self._advance()
                table = self._parse_table_parts()
                from_ = table.sql(dialect="postgres") if table else None
                continue
            if self._curr.token_type == TokenType.LIKE:
                self._advance()
                lit = self._parse_string()
                like = lit.name if lit else None
                continue
            parts.append(self._curr.text)
            self._advance()
        if not parts:
            self.raise_error("SHOW needs a name")
        return self.expression(
            ShowStatement(
                this=" ".join(p.lower() for p in parts), from_=from_, like=like, target=target
            )
        )

    def _parse_rw_set(self) -> exp.Expr:
        local = False
        if self._match_text_seq("SESSION"):
            pass
        elif self._match_text_seq("LOCAL"):
            local = True
        if self._match_text_seq("TIME", "ZONE"):
            name = "timezone"
        else:
            parts = [self._curr.text if self._curr else ""]
            if not self._curr:
                self.raise_error("SET needs a variable name")
            self._advance()
            while self._match(TokenType.DOT):
                parts.append(self._curr.text if self._curr else "")
                self._advance()
            name = ".".join(parts).lower()
            if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
                self.raise_error(
                    f'syntax error at or near "{self._curr.text if self._curr else name}"'
                )
        values: list[str] | None = []
        if self._match(TokenType.DEFAULT) or self._match_text_seq("DEFAULT"):
            values = None
        else:
            assert values is not None
            while self._curr and self._curr.token_type != TokenType.SEMICOLON:
                tok = self._curr
                if tok.token_type == TokenType.COMMA:
                    self._advance()
                    continue
                if tok.token_type == TokenType.DASH:
                    self._advance()
                    values.append("-" + (self._curr.text if self._curr else ""))
                    self._advance()
                    continue
                values.append(tok.text)
                self._advance()
            if not values:
                self.raise_error("SET needs a value")
        return self.expression(SetVariable(this=name, expressions=values, local=local))

    def _parse_rw_reset(self) -> exp.Expr:
        words = self._rw_words()
        if not words:
            self.raise_error("RESET needs a variable name")
        return self.expression(ResetVariable(this=" ".join(words).lower()))

    def _parse_rw_begin(self) -> exp.Expr:
        self._match_text_seq("TRANSACTION") or self._match_text_seq("WORK")
        return self._rw_transaction_modes("begin")

    def _parse_rw_start(self) -> exp.Expr:
        if not self._match_text_seq("TRANSACTION"):
            self.raise_error("expected TRANSACTION after START")
        return self._rw_transaction_modes("begin")

    def _rw_transaction_modes(self, verb: str) -> exp.Expr:
        words = [w.upper() for w in self._rw_words() if w != ","]
        read_only = None
        text = " ".join(words)
        if "READ ONLY" in text:
            read_only = True
        elif "READ WRITE" in text:
            read_only = False
        return self.expression(TransactionStatement(this=verb, read_only=read_only))

    def _parse_rw_end(self, verb: str = "commit") -> exp.Expr:
        self._match_text_seq("TRANSACTION") or self._match_text_seq("WORK")
        self._rw_words()  # AND [NO] CHAIN
        return self.expression(TransactionStatement(this=verb))

    def _parse_rw_abort(self) -> exp.Expr:
        return self._parse_rw_end("rollback")

    def _parse_rw_discard(self) -> exp.Expr:
        words = self._rw_words()
        return self.expression(DiscardStatement(this=" ".join(words).lower()))

    def _parse_rw_deallocate(self) -> exp.Expr:
        self._match_text_seq("PREPARE")
        name = None if self._match(TokenType.ALL) else self._parse_id_var(any_token=True)
        if name is None and self._prev.token_type != TokenType.ALL:
            self._rw_error("DEALLOCATE needs a prepared statement's name or ALL")
        self._rw_expect_end()
        return self.expression(DeallocateStatement(this=name))

    def _parse_rw_alter(self) -> exp.Expr:
        """ALTER SYSTEM and ALTER ... SET <job setting>; any other ALTER is sqlglot's."""
        start = self._index
        if self._match_text_seq("SYSTEM"):
            return self._parse_rw_alter_system()
        kind = next((k for k in _ALTER_JOB_KINDS if self._match_text_seq(*k)), None)
        table = self._parse_table_parts() if kind else None
        nxt = self._next
        if (
            table is None
            or not self._match(TokenType.SET, advance=False)
            or not nxt
            or nxt.text.upper() not in _ALTER_JOB_SETTINGS
        ):
            self._retreat(start)
            return self._parse_alter()
        self._advance(2)
        setting = self._prev.text.lower()
        value = self._rw_setting_value(f"SET {setting.upper()}")
        deferred = bool(self._match_text_seq("DEFERRED"))
        self._rw_expect_end()
        return self.expression(
            AlterJobSetting(
                this=table,
                kind=" ".join(kind or []),
                setting=setting,
                value=value,
                deferred=deferred,
            )
        )

    def _parse_rw_alter_system(self) -> exp.Expr:
        if not self._match(TokenType.SET):
            self._rw_error("expected SET after ALTER SYSTEM")
        name = self._parse_id_var(any_token=True)
        if name is None:
            self._rw_error("ALTER SYSTEM SET needs a parameter's name")
        parts = [name.name]
        while self._match(TokenType.DOT):
            part = self._parse_id_var(any_token=True)
            parts.append(part.name if part else "")
        value = self._rw_setting_value("ALTER SYSTEM SET")
        self._rw_expect_end()
        return self.expression(AlterSystem(this=".".join(parts), value=value))

    def _rw_setting_value(self, what: str) -> str | None:
        """``{=|TO} value`` of a SET clause: the value's text (a string's contents, a number
        with its sign, a word), None for a bare DEFAULT."""
        if not (self._match(TokenType.EQ) or self._match_text_seq("TO")):
            self._rw_error(f"expected = or TO after {what}")
        tok = self._curr
        if not tok or tok.token_type == TokenType.SEMICOLON:
            self._rw_error(f"{what} needs a value (a number, a word, a string or DEFAULT)")
        assert tok is not None
        self._advance()
        if tok.token_type == TokenType.STRING:
            return tok.text
        if tok.token_type == TokenType.DEFAULT or tok.text.upper() == "DEFAULT":
            return None
        if tok.token_type == TokenType.DASH and self._curr:
            self._advance()
            return "-" + self._prev.text
        return tok.text


class _DollarParamTokenizerCore(TokenizerCore):
    """A dollar-quote tag cannot begin with a digit (PostgreSQL), so ``$1,$2`` is two
    parameters, not a string tagged ``1,``; sqlglot reads it as the latter."""

    __slots__ = ()

    def _scan_string(self, start: str) -> bool:
        if start == "$" and self._peek.isdigit():
            self._add(self.heredoc_string_alternative)
            return True
        return super()._scan_string(start)


class Rivulet(RisingWave):
    """RisingWave's SQL surface as Rivulet parses it."""

    class Tokenizer(RisingWave.Tokenizer):
        # SHOW is parsed here, not swallowed whole as a command.
        COMMANDS = {*RisingWave.Tokenizer.COMMANDS} - {TokenType.SHOW}
        # EXPLAIN parses its statement instead of swallowing it as a command.
        KEYWORDS = {**RisingWave.Tokenizer.KEYWORDS, "EXPLAIN": TokenType.VAR}

        def _init_core(self) -> TokenizerCore:
            core = super()._init_core()
            core.__class__ = _DollarParamTokenizerCore
            return core

    Parser = RivuletParser


DIALECT = Rivulet()
