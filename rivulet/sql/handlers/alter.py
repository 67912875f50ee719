"""ALTER statements: ALTER SYSTEM SET (system parameters); the rest are refused by name."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rivulet.common.errors import FEATURE_NOT_SUPPORTED, SYNTAX_ERROR, sql_error
from rivulet.meta.catalog import CatalogChange
from rivulet.sql.parser import Statement
from rivulet.sql.result import StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session

_ALTER_SYSTEM = re.compile(
    r"^\s*ALTER\s+SYSTEM\s+SET\s+(?P<name>[A-Za-z_][A-Za-z0-9_.]*|\"[^\"]+\")\s*(?:=|\s+TO\s+)\s*"
    r"(?P<value>'(?:[^']|'')*'|[^\s;']+)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


async def handle_alter(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    text = " ".join(stmt.text.split())
    upper = text.upper()
    if upper.startswith("ALTER SYSTEM"):
        return await _alter_system(session, stmt.text)
    if "PARALLELISM" in upper:
        raise sql_error(FEATURE_NOT_SUPPORTED, "ALTER ... SET PARALLELISM is not supported yet")
    raise sql_error(FEATURE_NOT_SUPPORTED, "ALTER is not supported yet")


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
