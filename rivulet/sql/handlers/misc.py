"""FLUSH, WAIT, RECOVER, CANCEL JOBS and EXPLAIN."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, SYNTAX_ERROR, Error, sql_error
from rivulet.meta.recovery import FailureCause
from rivulet.sql.dialect import AlterJobSetting, AlterSystem, ExplainStatement
from rivulet.sql.handlers.query import bind_select
from rivulet.sql.handlers.show import rows_result
from rivulet.sql.parser import Statement
from rivulet.sql.result import StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session


async def handle_flush(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    """Commit every write made so far; the session's own writes raise if a failure
    lost them (with ``rw_implicit_flush`` off they returned before their commit)."""
    await session.settle_writes(force=True)
    await session.interruptible(session.ctx.barrier.flush())
    return command("FLUSH")


async def handle_wait(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    """Return once no job is creating (background DDL included)."""
    await session.ctx.ddl.creating.wait_all_created(lambda: session.cancel_requested)
    return command("WAIT")


async def handle_recover(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    """Rebuild every job from the last committed checkpoint, as after a failure."""
    barrier = session.ctx.barrier
    error = sql_error("57P01", "the stream jobs were rebuilt by RECOVER")
    # Asked for: recorded as RECOVER in rw_recovery_events, and never delayed by backoff.
    barrier.recover(error, FailureCause("RECOVER", manual=True))
    # While a checkpoint is being committed the recovery is deferred until that commit
    # ends, and then fails the epochs after it: this flush's own epoch among them. Flush
    # again then; only other statements' epochs are meant to get this error.
    for attempt in range(3):
        try:
            await barrier.flush()
            break
        except Error as exc:
            if exc is not error or attempt == 2:
                raise
    return command("RECOVER")


async def handle_cancel_jobs(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ids = []
    for e in stmt.ast.expressions:
        try:
            ids.append(int(e.sql()))
        except ValueError:
            raise sql_error(
                SYNTAX_ERROR, f"a job id is a number, not {e.sql()}",
                hint="SHOW JOBS lists the jobs that can be cancelled.",
            ) from None  # fmt: skip
    for job_id in ids:  # all checked first: a failed statement cancels nothing
        table = session.ctx.catalog.tables.get(job_id)
        if table is None or not table.creating:
            raise sql_error(
                "42704",
                f"no creating job with id {job_id}",
                hint="SHOW JOBS lists the jobs that can be cancelled.",
            )
    for job_id in ids:
        await session.ctx.ddl.jobs.cancel_job(job_id)
    return command("CANCEL_JOBS")


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

        def plan(cur):
            rows = cur.execute(prefix + bound.sql).fetchall()
            return rows[-1][-1] if rows else ""

        light = not (analyze and bound.reads_data)
        text = _user_names(str(await session.run_query(plan, light=light)), bound.tables)
        lines = [(line,) for line in text.splitlines() if line.strip()]
        return rows_result(["QUERY PLAN"], lines, tag="EXPLAIN")
    if isinstance(inner, exp.Insert | exp.Update | exp.Delete):
        kind = type(inner).__name__.upper()
        return rows_result(
            ["QUERY PLAN"],
            [
                (
                    f"{kind} into a table: evaluated as a batch query, sent to the table's"
                    " actors, committed with the next epoch",
                )
            ],
            tag="EXPLAIN",
        )
    if isinstance(inner, exp.Alter | AlterJobSetting | AlterSystem) or (
        isinstance(inner, exp.Command) and inner.name.upper() == "ALTER"
    ):
        from rivulet.sql.handlers.alter import explain_alter

        lines = [(line,) for line in explain_alter(session, inner)]
        return rows_result(["QUERY PLAN"], lines, tag="EXPLAIN")
    if isinstance(inner, exp.Create):
        from rivulet.sql.handlers.ddl import explain_create

        lines = [(line,) for line in explain_create(session, stmt, inner)]
        return rows_result(["QUERY PLAN"], lines, tag="EXPLAIN")
    raise sql_error(FEATURE_NOT_SUPPORTED, f"EXPLAIN of {type(inner).__name__} is not supported")


def _user_names(plan: str, tables: list) -> str:
    """The plan with each state table (``memory.state.t1001``) shown by the name of the
    table it stores, padded so that DuckDB's boxes stay aligned."""
    names = {t.id: t.qualified_name for t in tables}

    def name(m: re.Match[str]) -> str:
        shown = names.get(int(m.group(1)), "table")
        return shown.ljust(len(m.group(0)))

    return re.sub(r'(?:memory\.)?"?state"?\."?t(\d+)"?', name, plan)


async def handle_command(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    """Statements sqlglot could only keep as raw commands: refused with their name."""
    words = stmt.text.split()
    head = " ".join(words[:2]).upper() if words else ""
    if head.startswith("ALTER"):
        from rivulet.sql.handlers.alter import handle_alter

        return await handle_alter(session, stmt, params)
    if head.startswith(("CREATE", "DROP")):
        kind = words[1].upper() if len(words) > 1 else ""
        if kind not in _OBJECT_KINDS:
            # A typo (CREATE TABEL ...) is a syntax error, not a missing feature.
            word = words[1] if len(words) > 1 else words[0]
            raise sql_error(
                SYNTAX_ERROR,
                f'syntax error at or near "{word}"',
                position=stmt.text.find(word) + 1 if len(words) > 1 else None,
            )
        shown = words[:3] if kind in _TWO_WORD_KINDS and len(words) > 2 else words[:2]
        raise sql_error(FEATURE_NOT_SUPPORTED, f"{' '.join(shown).upper()} is not supported yet")
    verb = words[0].upper() if words else "this statement"
    if verb in ("SAVEPOINT", "RELEASE"):
        # psycopg wraps its type look-ups (TypeInfo.fetch, which SQLAlchemy runs on
        # connect) in a savepoint when a transaction block is open. Every statement
        # commits on its own, so a savepoint marks nothing: accept it as a no-op.
        if not session.in_transaction:
            raise sql_error("25P01", f"{verb} can only be used in transaction blocks")
        return command(verb)
    raise sql_error(FEATURE_NOT_SUPPORTED, f"{verb} is not supported yet")


# What may follow CREATE or DROP in PostgreSQL or RisingWave.
_OBJECT_KINDS = {
    "TABLE", "MATERIALIZED", "VIEW", "SOURCE", "SINK", "INDEX", "SCHEMA", "DATABASE", "USER",
    "ROLE", "GROUP", "FUNCTION", "AGGREGATE", "PROCEDURE", "SECRET", "CONNECTION",
    "SUBSCRIPTION", "TYPE", "DOMAIN", "SEQUENCE", "EXTENSION", "TRIGGER", "RULE", "POLICY",
    "PUBLICATION", "SERVER", "TABLESPACE", "CAST", "OPERATOR", "COLLATION", "STATISTICS",
    "TEMP", "TEMPORARY", "UNIQUE", "OR", "UNLOGGED", "FOREIGN", "EVENT", "LANGUAGE", "OWNED",
}  # fmt: skip
_TWO_WORD_KINDS = {"MATERIALIZED", "TEMP", "TEMPORARY", "UNIQUE", "OR", "UNLOGGED", "FOREIGN",
                   "EVENT"}  # fmt: skip
