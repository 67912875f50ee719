"""Statement handlers, one module per family; ``dispatch`` picks one by node type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, INSUFFICIENT_PRIVILEGE, sql_error
from rivulet.common.types import DataType
from rivulet.sql import dialect
from rivulet.sql.handlers import alter, copy, ddl, dml, misc, query, session_statements, show
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, StatementResult
from rivulet.sql.session import Session, StatementHandlers

Handler = Callable[["Session", Statement, list[object]], Awaitable[StatementResult]]

_HANDLERS: list[tuple[type[exp.Expr], Handler]] = [
    (exp.Query, query.handle_query),
    (exp.Insert, dml.handle_insert),
    (exp.Update, dml.handle_update),
    (exp.Delete, dml.handle_delete),
    (exp.Create, ddl.handle_create),
    (exp.Drop, ddl.handle_drop),
    (exp.Alter, alter.handle_alter),
    (dialect.AlterJobSetting, alter.handle_alter),
    (dialect.AlterSystem, alter.handle_alter),
    (exp.Copy, copy.handle_copy),
    (exp.Describe, show.handle_describe),
    (dialect.ShowStatement, show.handle_show),
    (dialect.SetVariable, session_statements.handle_set),
    (dialect.ResetVariable, session_statements.handle_reset),
    (dialect.TransactionStatement, session_statements.handle_transaction),
    (dialect.DiscardStatement, session_statements.handle_discard),
    (dialect.DeallocateStatement, session_statements.handle_deallocate),
    (dialect.FlushStatement, misc.handle_flush),
    (dialect.WaitStatement, misc.handle_wait),
    (dialect.RecoverStatement, misc.handle_recover),
    (dialect.CancelJobsStatement, misc.handle_cancel_jobs),
    (dialect.ExplainStatement, misc.handle_explain),
    (exp.Command, misc.handle_command),
]

_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Copy)
_ALTERS = (exp.Alter, dialect.AlterJobSetting, dialect.AlterSystem)


async def dispatch(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.tree  # read only: handlers take ``stmt.ast`` (their own copy) to rewrite it
    if isinstance(ast, exp.Pragma):
        raise sql_error(
            INSUFFICIENT_PRIVILEGE,
            "PRAGMA is not a Rivulet statement",
            hint="Use SET and SHOW for session settings.",
        )
    if (
        session.in_transaction
        and session.transaction_read_only
        and isinstance(ast, (*_WRITES, exp.Create, exp.Drop, *_ALTERS))
    ):
        raise sql_error(
            "25006",
            f"cannot execute {type(ast).__name__.upper()} in a read-only transaction",
            hint="End the transaction (COMMIT or ROLLBACK) to write.",
        )
    for kind, handler in _HANDLERS:
        if isinstance(ast, kind):
            if session.in_transaction and isinstance(ast, _WRITES):
                session.wrote_in_transaction = True
            return await handler(session, stmt, params)
    name = type(ast).__name__.upper()
    if isinstance(ast, exp.TruncateTable):
        name = "TRUNCATE"
    raise sql_error(FEATURE_NOT_SUPPORTED, f"{name} is not supported yet")


def describe(
    session: Session, stmt: Statement, param_types: list[DataType | None]
) -> tuple[list[DataType | None], list[Column] | None]:
    """Parameter types and result columns of a statement without running it (pgwire
    Describe). Columns are None for statements that return no rows, or whose rows are
    only known by running them (SHOW, EXPLAIN): describe those after binding instead."""
    plan = None
    if isinstance(stmt.tree, exp.Insert):
        plan = dml.planned_insert(session, stmt)  # the plan the statement runs
    else:
        ast = stmt.tree.copy()
        if isinstance(ast, exp.Query):
            return query.describe_query(session, ast, param_types)
        if isinstance(ast, exp.Update):
            plan = dml.plan_update(session, ast)
        elif isinstance(ast, exp.Delete):
            plan = dml.plan_delete(session, ast)
    if plan is not None:
        inferred = plan.bound.param_types
        types = [
            param_types[i] if i < len(param_types) and param_types[i] is not None else inferred[i]
            for i in range(len(inferred))
        ]
        columns = dml.returning_columns(session, plan) if plan.returning is not None else None
        return types, columns
    count = max((int(p.name) for p in stmt.tree.find_all(exp.Parameter)), default=0)
    count = max(count, len(list(stmt.tree.find_all(exp.Placeholder))))
    types = [param_types[i] if i < len(param_types) else None for i in range(count)]
    return types, None


STATEMENT_HANDLERS = StatementHandlers(
    dispatch=dispatch,
    batchable_insert=dml.batchable_insert,
    insert_parameter_sets=dml.insert_parameter_sets,
)
