"""Statements about the session itself: SET, RESET, transactions, DISCARD, DEALLOCATE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rivulet.common.errors import INVALID_PREPARED_STATEMENT, sql_error
from rivulet.sql.dialect import (
    DeallocateStatement,
    DiscardStatement,
    ResetVariable,
    SetVariable,
    TransactionStatement,
)
from rivulet.sql.parser import Statement
from rivulet.sql.result import Notice, StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session


async def handle_set(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, SetVariable)
    name: str = ast.args["this"]
    values: list[str] | None = ast.args.get("expressions")
    value = None if values is None else ", ".join(values)
    if name == "names":  # SET NAMES 'utf8'
        name = "client_encoding"
    var = session.config.set(name, value)
    result = command("SET_VARIABLE")
    if var.reported:
        result.parameter_status = [(var.wire_name or var.name, session.config.get(var.name) or "")]
    return result


async def handle_reset(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, ResetVariable)
    name: str = ast.args["this"]
    if name == "all":
        session.config.reset_all()
    else:
        session.config.set(name, None)
    return command("RESET")


async def handle_transaction(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, TransactionStatement)
    verb: str = ast.args["this"]
    if verb == "begin":
        if session.in_transaction:
            return command(
                "BEGIN",
                Notice(
                    "there is already a transaction in progress",
                    severity="WARNING",
                    sqlstate="25001",
                ),
            )
        session.in_transaction = True
        session.wrote_in_transaction = False
        session.transaction_read_only = ast.args.get("read_only") is True
        return command("BEGIN")
    was_open = session.in_transaction
    wrote = session.wrote_in_transaction
    session.in_transaction = False
    session.wrote_in_transaction = False
    session.transaction_read_only = False
    tag = "COMMIT" if verb == "commit" else "ROLLBACK"
    if not was_open:
        return command(
            tag,
            Notice("there is no transaction in progress", severity="WARNING", sqlstate="25P01"),
        )
    if verb == "rollback" and wrote:
        return command(
            tag,
            Notice(
                "writes made in this transaction block were already committed",
                severity="WARNING",
                sqlstate="25000",
                hint="Rivulet commits each statement on its own; ROLLBACK cannot undo them.",
            ),
        )
    return command(tag)


async def handle_deallocate(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    """DEALLOCATE in a session with no prepared statements of its own (embedded): ALL has
    nothing to forget, a name is unknown. The pgwire layer answers it for its clients."""
    ast = stmt.tree
    assert isinstance(ast, DeallocateStatement)
    if ast.this is None:
        return command("DEALLOCATE ALL")
    raise sql_error(
        INVALID_PREPARED_STATEMENT, f'prepared statement "{ast.this.name}" does not exist'
    )


async def handle_discard(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, DiscardStatement)
    what = ast.args.get("this") or "all"
    if what == "all":
        session.config.reset_all()
        session.in_transaction = False
    # The pgwire layer drops the session's prepared statements on DISCARD ALL.
    return command(f"DISCARD {what.upper()}")
