"""ALTER statements: ALTER SYSTEM SET (system parameters), ALTER ... SET PARALLELISM |
BACKFILL_PARALLELISM | BACKFILL_RATE_LIMIT (rescheduling a job); the rest are refused by
name. The dialect parses each into its own node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import (
    FEATURE_NOT_SUPPORTED,
    UNDEFINED_TABLE,
    WRONG_OBJECT_TYPE,
    sql_error,
)
from rivulet.meta.catalog import CatalogChange, TableCatalog
from rivulet.meta.cluster import normalize_policy
from rivulet.sql import dialect
from rivulet.sql.binder import Binder
from rivulet.sql.parser import Statement
from rivulet.sql.result import StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session


async def handle_alter(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    tree = stmt.tree
    if isinstance(tree, dialect.AlterSystem):
        return await _alter_system(session, tree)
    if isinstance(tree, dialect.AlterJobSetting):
        if tree.args["setting"] == "backfill_rate_limit":
            return await _alter_rate_limit(session, tree)
        return await _alter_parallelism(session, tree)
    raise sql_error(FEATURE_NOT_SUPPORTED, f"{_alter_form(tree)} is not supported yet")


def _alter_form(tree: exp.Expr) -> str:
    """``ALTER TABLE ... RENAME``: what an unsupported ALTER does, for its error."""
    if isinstance(tree, exp.Alter):
        kind = str(tree.args.get("kind") or "").upper()
        actions = tree.args.get("actions") or []
        action = (
            {
                "AlterRename": "RENAME",
                "RenameColumn": "RENAME COLUMN",
                "ColumnDef": "ADD COLUMN",
                "Drop": "DROP",
                "AlterColumn": "ALTER COLUMN",
                "AlterSet": "SET",
            }.get(type(actions[0]).__name__, "")
            if actions
            else ""
        )
        return " ".join(w for w in ("ALTER", kind, "...", action) if w)
    words = str(tree.args.get("expression") or "").upper().split()
    kind = words[:2] if words[:1] == ["MATERIALIZED"] else words[:1]
    return " ".join(["ALTER", *kind])


async def _alter_parallelism(session: Session, tree: dialect.AlterJobSetting) -> StatementResult:
    kind, wanted = _kind(tree)
    if wanted is None:
        raise sql_error(
            FEATURE_NOT_SUPPORTED, f"ALTER {kind} ... SET PARALLELISM is not supported yet"
        )
    table = _job(session, tree.this, wanted)
    raw = _raw_value(tree)
    deferred = bool(tree.args.get("deferred"))
    if tree.args["setting"] == "backfill_parallelism":
        policy = None if raw.lower() == "default" else normalize_policy(raw)
        await session.ctx.ddl.scale.alter_backfill_parallelism(table, policy, deferred=deferred)
        return command(f"ALTER {kind}")
    await session.ctx.ddl.scale.alter_parallelism(table, _target_policy(raw), deferred=deferred)
    return command(f"ALTER {kind}")


def explain_alter(session: Session, tree: exp.Expr) -> list[str]:
    """EXPLAIN ALTER ... SET PARALLELISM: the planned layout; nothing changes."""
    if not isinstance(tree, dialect.AlterJobSetting) or tree.args["setting"] != "parallelism":
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "EXPLAIN of this ALTER is not supported",
            hint="EXPLAIN ALTER {MATERIALIZED VIEW|TABLE} name SET PARALLELISM = ... shows"
            " the planned layout.",
        )
    kind, wanted = _kind(tree)
    if wanted is None:
        raise sql_error(FEATURE_NOT_SUPPORTED, f"EXPLAIN ALTER {kind} is not supported")
    table = _job(session, tree.this, wanted)
    return session.ctx.ddl.scale.explain_reschedule(table, _target_policy(_raw_value(tree)))


def _raw_value(tree: dialect.AlterJobSetting) -> str:
    """The setting's value as written; a bare DEFAULT reads as ``default``."""
    value = tree.args.get("value")
    return "default" if value is None else str(value)


def _kind(tree: dialect.AlterJobSetting) -> tuple[str, str | None]:
    """The ALTER's object kind as written (``MATERIALIZED VIEW``) and the catalog kind it
    names, None for kinds that cannot be rescheduled yet."""
    kind = str(tree.args["kind"])
    return kind, {"MATERIALIZED VIEW": "materialized view", "TABLE": "table"}.get(kind)


def _target_policy(raw: str) -> str:
    """A SET PARALLELISM value as a policy; DEFAULT is adaptive."""
    return "adaptive" if raw.lower() == "default" else normalize_policy(raw)


async def _alter_rate_limit(session: Session, tree: dialect.AlterJobSetting) -> StatementResult:
    from rivulet.sql.handlers.ddl import parse_rate_limit

    kind, wanted = _kind(tree)
    if wanted != "materialized view":
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f"ALTER {kind} ... SET BACKFILL_RATE_LIMIT is not supported",
            hint="A backfill rate limit belongs to a materialized view: use ALTER MATERIALIZED"
            " VIEW name SET BACKFILL_RATE_LIMIT = n | 0 | DEFAULT.",
        )
    table = _job(session, tree.this, wanted)
    await session.ctx.ddl.scale.alter_backfill_rate_limit(table, parse_rate_limit(_raw_value(tree)))
    return command("ALTER MATERIALIZED VIEW")


def _job(session: Session, name: exp.Table, wanted: str) -> TableCatalog:
    """The streaming job an ALTER names (42P01 when missing, 42809 for another kind)."""
    ref = normalize_identifiers(name.copy(), dialect="postgres")
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


async def _alter_system(session: Session, tree: dialect.AlterSystem) -> StatementResult:
    value = tree.args.get("value")
    change = CatalogChange()
    session.ctx.params.prepare_set(str(tree.this), None if value is None else str(value), change)
    await session.ctx.barrier.checkpoint(change)
    return command("ALTER SYSTEM")
