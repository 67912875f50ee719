"""ALTER statements: ALTER SYSTEM SET (system parameters), ALTER ... SET PARALLELISM
(rescheduling a job); the rest are refused by name."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import (
    FEATURE_NOT_SUPPORTED,
    SYNTAX_ERROR,
    UNDEFINED_TABLE,
    WRONG_OBJECT_TYPE,
    sql_error,
)
from rivulet.meta.catalog import CatalogChange, TableCatalog
from rivulet.meta.cluster import normalize_policy
from rivulet.sql.binder import Binder
from rivulet.sql.parser import Statement
from rivulet.sql.result import StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session

_ALTER_SYSTEM = re.compile(
    r"^\s*ALTER\s+SYSTEM\s+SET\s+(?P<name>[A-Za-z_][A-Za-z0-9_.]*|\"[^\"]+\")\s*(?:=|\s+TO\s+)\s*"
    r"(?P<value>'(?:[^']|'')*'|[^\s;']+)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


_ALTER_PARALLELISM = re.compile(
    r"^\s*ALTER\s+(?P<kind>MATERIALIZED\s+VIEW|TABLE|SINK|INDEX|SOURCE|VIEW)\s+"
    r"(?P<name>(?:\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_$]*)(?:\.(?:\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_$]*))?)"
    r"\s+SET\s+(?P<what>BACKFILL_PARALLELISM|PARALLELISM)\s*(?:=|\s+TO\s+)\s*"
    r"(?P<value>'[^']*'|[^\s;']+)(?P<deferred>\s+DEFERRED)?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


async def handle_alter(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    text = " ".join(stmt.text.split())
    upper = text.upper()
    if upper.startswith("ALTER SYSTEM"):
        return await _alter_system(session, stmt.text)
    if "BACKFILL_RATE_LIMIT" in upper:
        return await _alter_rate_limit(session, stmt.text)
    if "PARALLELISM" in upper:
        return await _alter_parallelism(session, stmt.text)
    raise sql_error(FEATURE_NOT_SUPPORTED, "ALTER is not supported yet")


async def _alter_parallelism(session: Session, text: str) -> StatementResult:
    match = _ALTER_PARALLELISM.match(text)
    if match is None:
        raise sql_error(
            SYNTAX_ERROR,
            "syntax error in ALTER ... SET PARALLELISM",
            hint="Write ALTER MATERIALIZED VIEW name SET PARALLELISM = n | ADAPTIVE |"
            " 'bounded(n)' | 'ratio(r)' | DEFAULT [DEFERRED].",
        )
    kind, wanted = _kind(match)
    if wanted is None:
        raise sql_error(
            FEATURE_NOT_SUPPORTED, f"ALTER {kind} ... SET PARALLELISM is not supported yet"
        )
    table = _job(session, match["name"], wanted)
    raw = match["value"].strip("'")
    deferred = bool(match["deferred"])
    if match["what"].upper() == "BACKFILL_PARALLELISM":
        policy = None if raw.lower() == "default" else normalize_policy(raw)
        await session.ctx.ddl.alter_backfill_parallelism(table, policy, deferred=deferred)
        return command(f"ALTER {kind}")
    await session.ctx.ddl.alter_parallelism(table, _target_policy(raw), deferred=deferred)
    return command(f"ALTER {kind}")


def explain_alter(session: Session, text: str) -> list[str]:
    """EXPLAIN ALTER ... SET PARALLELISM: the planned layout; nothing changes."""
    match = _ALTER_PARALLELISM.match(text)
    if match is None or match["what"].upper() != "PARALLELISM":
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "EXPLAIN of this ALTER is not supported",
            hint="EXPLAIN ALTER {MATERIALIZED VIEW|TABLE} name SET PARALLELISM = ... shows"
            " the planned layout.",
        )
    kind, wanted = _kind(match)
    if wanted is None:
        raise sql_error(FEATURE_NOT_SUPPORTED, f"EXPLAIN ALTER {kind} is not supported")
    table = _job(session, match["name"], wanted)
    return session.ctx.ddl.explain_reschedule(table, _target_policy(match["value"].strip("'")))


def _kind(match: re.Match[str]) -> tuple[str, str | None]:
    """The ALTER's object kind as written (``MATERIALIZED VIEW``) and the catalog kind it
    names, None for kinds that cannot be rescheduled yet."""
    kind = " ".join(match["kind"].upper().split())
    return kind, {"MATERIALIZED VIEW": "materialized view", "TABLE": "table"}.get(kind)


def _target_policy(raw: str) -> str:
    """A SET PARALLELISM value as a policy; DEFAULT is adaptive."""
    return "adaptive" if raw.lower() == "default" else normalize_policy(raw)


_ALTER_RATE_LIMIT = re.compile(
    r"^\s*ALTER\s+MATERIALIZED\s+VIEW\s+"
    r"(?P<name>(?:\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_$]*)(?:\.(?:\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_$]*))?)"
    r"\s+SET\s+BACKFILL_RATE_LIMIT\s*(?:=|\s+TO\s+)\s*(?P<value>'[^']*'|[^\s;']+)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


async def _alter_rate_limit(session: Session, text: str) -> StatementResult:
    from rivulet.sql.handlers.ddl import parse_rate_limit

    match = _ALTER_RATE_LIMIT.match(text)
    if match is None:
        raise sql_error(
            SYNTAX_ERROR,
            "syntax error in ALTER ... SET BACKFILL_RATE_LIMIT",
            hint="Write ALTER MATERIALIZED VIEW name SET BACKFILL_RATE_LIMIT = n | 0 | DEFAULT.",
        )
    table = _job(session, match["name"], "materialized view")
    limit = parse_rate_limit(match["value"].strip("'"))
    await session.ctx.ddl.alter_backfill_rate_limit(table, limit)
    return command("ALTER MATERIALIZED VIEW")


def _job(session: Session, name: str, wanted: str) -> TableCatalog:
    """The streaming job an ALTER names (42P01 when missing, 42809 for another kind)."""
    ref = exp.to_table(name, dialect="postgres")
    normalize_identifiers(ref, dialect="postgres")
    table = Binder(session.bind_context()).lookup_table(ref.db or None, ref.name)
    if table is None:
        raise sql_error(UNDEFINED_TABLE, f'relation "{ref.name}" does not exist')
    if table.kind != wanted:
        raise sql_error(
            WRONG_OBJECT_TYPE,
            f'"{table.name}" is not a {wanted}',
            hint=f"Use ALTER {table.kind.upper()} for a {table.kind}."
            if table.is_streaming_job
            else f"A {table.kind} runs no streaming job of its own.",
        )
    return table


async def _alter_system(session: Session, text: str) -> StatementResult:
    match = _ALTER_SYSTEM.match(text)
    if match is None:
        raise sql_error(
            SYNTAX_ERROR,
            "syntax error in ALTER SYSTEM",
            hint="Write ALTER SYSTEM SET name = value (or = DEFAULT).",
        )
    name = match["name"].strip('"')
    raw = match["value"]
    value: str | None
    if raw.startswith("'"):
        value = raw[1:-1].replace("''", "'")
    elif raw.upper() == "DEFAULT":
        value = None
    else:
        value = raw
    change = CatalogChange()
    session.ctx.params.prepare_set(name, value, change)
    await session.ctx.barrier.checkpoint(change)
    return command("ALTER SYSTEM")
