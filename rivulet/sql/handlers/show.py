"""SHOW and DESCRIBE: listings of the catalog and of session variables."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from rivulet.common.errors import INVALID_SCHEMA_NAME, UNDEFINED_TABLE, sql_error
from rivulet.common.types import VARCHAR
from rivulet.meta.catalog import DEFAULT_DATABASE, SYSTEM_SCHEMAS, TableCatalog
from rivulet.sql.binder import Binder
from rivulet.sql.dialect import ShowStatement
from rivulet.sql.parser import Statement
from rivulet.sql.result import Column, StatementResult

if TYPE_CHECKING:
    from rivulet.sql.session import Session


def rows_result(
    names: list[str], rows: Sequence[tuple[object, ...]], tag: str = "SHOW"
) -> StatementResult:
    """A result of text columns (every SHOW output is text)."""
    columns = [Column(n, VARCHAR) for n in names]
    data = {
        n: pa.array([None if r[i] is None else str(r[i]) for r in rows], pa.string())
        for i, n in enumerate(names)
    }
    table = pa.table(data) if names else pa.table({})
    return StatementResult(tag=tag, columns=columns, rows=table, rowcount=len(rows))


def _like(pattern: str | None, name: str) -> bool:
    if pattern is None:
        return True
    glob = pattern.replace("%", "*").replace("_", "?")
    return fnmatch.fnmatchcase(name, glob)


def _schema_of(session: Session, from_: str | None) -> str:
    if from_ is None:
        path = [s for s in session.config.search_path() if s != "$user"]
        return path[0] if path else "public"
    schema = from_.strip('"')
    if schema not in session.ctx.catalog.schemas and schema not in SYSTEM_SCHEMAS:
        raise sql_error(INVALID_SCHEMA_NAME, f'schema "{schema}" does not exist')
    return schema


def _objects(
    session: Session, kind: str, from_: str | None, like: str | None
) -> list[tuple[object]]:
    schema = _schema_of(session, from_)
    return [
        (t.name,)
        for t in sorted(session.ctx.catalog.all_tables(), key=lambda t: t.name)
        if t.kind == kind and t.schema == schema and _like(like, t.name)
    ]


async def handle_show(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, ShowStatement)
    what: str = ast.name if isinstance(ast.this, exp.Expr) else ast.args["this"]
    from_ = ast.args.get("from_")
    like = ast.args.get("like")
    if what == "tables":
        return rows_result(["Name"], _objects(session, "table", from_, like))
    if what in ("materialized views", "views", "sources", "sinks", "indexes", "subscriptions",
                "secrets", "connections", "functions"):  # fmt: skip
        return rows_result(["Name"], _objects(session, what.rstrip("s"), from_, like))
    if what == "databases":
        return rows_result(["Name"], [(DEFAULT_DATABASE,)])
    if what == "schemas":
        names = sorted([*session.ctx.catalog.schemas, *SYSTEM_SCHEMAS])
        return rows_result(["Name"], [(n,) for n in names if _like(like, n)])
    if what == "jobs":
        return rows_result(
            ["Id", "Statement", "Create Type", "Progress"],
            [r[:4] for r in session.ctx.ddl.creating.progress.rows()],
        )
    if what == "all":
        return rows_result(["Name", "Setting", "Description"], session.config.all())
    if what in ("columns",):
        if from_ is None:
            raise sql_error("42601", "SHOW COLUMNS needs FROM <table>")
        table = _table(session, from_)
        return rows_result(
            ["Name", "Type", "Is Hidden", "Description"],
            [
                (c.name, c.type.display(), str(c.hidden).lower(), None)
                for c in table.visible_columns
            ],
        )
    if what.startswith("create table") or what.startswith("create "):
        parts = what.split()
        name = ast.args.get("target") or (" ".join(parts[2:]) if len(parts) > 2 else "")
        table = _table(session, name)
        return rows_result(["Name", "Create Sql"], [(table.qualified_name, table.definition)])
    if what in ("parameters",):
        return rows_result(["Name", "Value", "Mutable"], session.ctx.params.rows())
    if what == "processlist":
        return rows_result(["Id", "User", "Host", "Database", "Time", "Info"], [])
    if what in ("cluster", "worker nodes"):
        return rows_result(["Id", "Host", "Type", "State", "Parallelism"], [])
    var = session.config.require(what)
    return rows_result([var.name], [(session.config.get(var.name),)])


def _table(session: Session, dotted: str) -> TableCatalog:
    """The table a (possibly qualified and quoted) name in SQL syntax names."""
    try:
        ref = exp.to_table(dotted, dialect="postgres")
    except Exception:
        raise sql_error(UNDEFINED_TABLE, f'relation "{dotted}" does not exist') from None
    normalize_identifiers(ref, dialect="postgres")
    table = Binder(session.bind_context()).lookup_table(ref.db or None, ref.name)
    if table is None:
        shown = f"{ref.db}.{ref.name}" if ref.db else ref.name
        raise sql_error(UNDEFINED_TABLE, f'relation "{shown}" does not exist')
    return table


async def handle_describe(
    session: Session, stmt: Statement, params: list[object]
) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Describe)
    target = ast.this
    if not isinstance(target, exp.Table):
        raise sql_error("0A000", "DESCRIBE of a query is not supported yet")
    table = _table(session, target.sql(dialect="postgres"))
    rows: list[tuple[object, ...]] = [
        (c.name, c.type.display(), "false", None) for c in table.visible_columns
    ]
    if table.has_row_id:
        rows.insert(len(table.visible_columns), ("_row_id", "bigint", "true", None))
    pk = ", ".join(table.columns[i].name for i in table.pk)
    dist = ", ".join(table.columns[i].name for i in table.dist_key)
    rows.append(("primary key", pk, None, None))
    rows.append(("distribution key", dist, None, None))
    rows.append(("table description", table.name, None, None))
    return rows_result(["Name", "Type", "Is Hidden", "Description"], rows, tag="DESCRIBE")
