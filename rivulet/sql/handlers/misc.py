"""FLUSH, WAIT, RECOVER, CANCEL JOBS and EXPLAIN."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, sql_error
from rivulet.sql.dialect import ExplainStatement
from rivulet.sql.handlers.query import bind_select
from rivulet.sql.handlers.show import rows_result
from rivulet.sql.parser import Statement
from rivulet.sql.result import StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session


async def handle_flush(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    await session.ctx.barrier.flush()
    return command("FLUSH")


async def handle_wait(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    # No background jobs exist before streaming jobs do; WAIT returns at once.
    return command("WAIT")


async def handle_recover(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    raise sql_error(
        FEATURE_NOT_SUPPORTED,
        "RECOVER is not supported yet",
        hint="There are no streaming jobs to recover yet.",
    )


async def handle_cancel_jobs(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ids = [e.sql() for e in stmt.ast.expressions]
    raise sql_error(
        "42704",
        f"no creating job with id {', '.join(ids)}",
        hint="SHOW JOBS lists the jobs that can be cancelled.",
    )


async def handle_explain(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, ExplainStatement)
    inner = ast.this
    if isinstance(inner, exp.Query):
        bound = bind_select(session, inner)
        if bound.param_count:
            raise sql_error(FEATURE_NOT_SUPPORTED, "EXPLAIN of a statement with parameters")
        analyze = bool(ast.args.get("analyze"))
        prefix = "EXPLAIN ANALYZE " if analyze else "EXPLAIN "

        def plan(cur):  # type: ignore[no-untyped-def]
            rows = cur.execute(prefix + bound.sql).fetchall()
            return rows[-1][-1] if rows else ""

        text = await session.run_query(plan)
        lines = [(line,) for line in str(text).splitlines() if line.strip()]
        return rows_result(["QUERY PLAN"], lines, tag="EXPLAIN")
    if isinstance(inner, exp.Insert | exp.Update | exp.Delete):
        kind = type(inner).__name__.upper()
        return rows_result(
            ["QUERY PLAN"],
            [
                (
                    f"{kind} into a table: evaluated as a batch query, written through the table's"
                    " writer, committed with the next epoch",
                )
            ],
            tag="EXPLAIN",
        )
    if isinstance(inner, exp.Create):
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "EXPLAIN CREATE is not supported yet",
            hint="Streaming plans arrive with materialized views.",
        )
    raise sql_error(FEATURE_NOT_SUPPORTED, f"EXPLAIN of {type(inner).__name__} is not supported")


async def handle_command(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    """Statements sqlglot could only keep as raw commands: refused with their name."""
    words = stmt.text.split()
    head = " ".join(words[:2]).upper() if words else ""
    if head.startswith("ALTER"):
        from rivulet.sql.handlers.ddl import handle_alter

        return await handle_alter(session, stmt, params)
    if head.startswith(("CREATE", "DROP")):
        raise sql_error(
            FEATURE_NOT_SUPPORTED, f"{' '.join(words[:3]).upper()} is not supported yet"
        )
    raise sql_error(FEATURE_NOT_SUPPORTED, f"{head or 'this statement'} is not supported yet")
