"""INSERT, UPDATE and DELETE.

Each statement is evaluated by DuckDB as a query over the last committed state - what to
insert, which rows to change and their new values - and the resulting chunk goes to the
table's writer, which resolves primary-key conflicts (a new row overwrites the old one, as
in RisingWave) and produces the change chunk. The statement returns once its epoch is
committed, so the next statement sees its effect.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from rivulet.common.chunk import ROW_ID_COLUMN, VNODE_COLUMN, Op, StreamChunk
from rivulet.common.errors import (
    DUPLICATE_COLUMN,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_PRIVILEGE,
    NOT_NULL_VIOLATION,
    QUERY_CANCELED,
    SYNTAX_ERROR,
    UNDEFINED_COLUMN,
    UNDEFINED_TABLE,
    WRONG_OBJECT_TYPE,
    Error,
    sql_error,
)
from rivulet.common.types import DataType, arrow_type_of
from rivulet.meta.catalog import SYSTEM_SCHEMAS, TableCatalog
from rivulet.sql.binder import INTERNAL, Binder, BoundQuery, quote
from rivulet.sql.handlers.literal_rows import LiteralRows, literal_rows_of
from rivulet.sql.handlers.query import run_bound
from rivulet.sql.parser import Statement, position_of
from rivulet.sql.result import Column, StatementResult

if TYPE_CHECKING:
    import duckdb

    from rivulet.sql.session import Session

_names = itertools.count()


def resolve_target(session: Session, binder: Binder, ref: exp.Expr) -> TableCatalog:
    """The table a DML statement writes to."""
    assert isinstance(ref, exp.Table)
    table = binder.lookup_table(ref.db or None, ref.name)
    if table is None:
        if ref.db in SYSTEM_SCHEMAS or session.ctx.system.relation(
            ref.db or "pg_catalog", ref.name
        ):
            raise sql_error(INSUFFICIENT_PRIVILEGE, f'cannot change system catalog "{ref.name}"')
        raise sql_error(
            UNDEFINED_TABLE, f'table "{ref.name}" does not exist', position=position_of(ref)
        )
    if table.kind != "table":
        raise sql_error(
            WRONG_OBJECT_TYPE,
            f'cannot change {table.kind} "{table.name}"',
            hint="Only tables accept INSERT, UPDATE and DELETE.",
        )
    if table.connector:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f'cannot change table "{table.name}": its rows come from connector {table.connector}',
            hint="Create a table without a connector to write to it.",
        )
    return table


def check_not_null(table: TableCatalog, rows: pa.Table) -> None:
    for col in table.columns:
        if col.not_null and col.name in rows.column_names and rows.column(col.name).null_count:
            raise sql_error(
                NOT_NULL_VIOLATION,
                f'null value in column "{col.name}" of relation "{table.name}" violates'
                " not-null constraint",
            )


async def write_chunk(session: Session, table: TableCatalog, chunk: StreamChunk) -> None:
    """Hand a chunk of the table's stored columns to its actors; return once committed
    (raises if a failure of the table's jobs lost it). In a pipeline the chunk waits for
    the protocol's Sync, which hands over all of its writes or, if one of its statements
    failed, none (``Session.holds_writes``); with ``rw_implicit_flush`` off the statement
    returns once the chunk is in the current epoch."""
    jobs = frozenset({table.id})
    await session.interruptible(session.ctx.barrier.wait_jobs_ready(jobs))
    if session.holds_writes:
        _check_table_alive(session, table)
        session.hold_write(lambda: session.defer_commit(*_place(session, table, chunk), jobs))
        return
    epoch, since = _place(session, table, chunk)
    if session.defer_commits or not session.implicit_flush:
        session.defer_commit(epoch, since, jobs)  # committed by the next Sync (or FLUSH)
        return
    try:
        await session.interruptible(session.ctx.barrier.commit_writes(epoch, jobs, since=since))
    except Error as exc:
        if exc.sqlstate == QUERY_CANCELED:
            # Past this point nothing can take the rows back out of the dataflow.
            exc.detail = (
                f'The statement\'s changes to table "{table.name}" had already been handed'
                f" to the dataflow in epoch {epoch}: they become visible when that epoch"
                " commits, unless a failure loses the epoch first (which undoes them)."
            )
        raise


def _check_table_alive(session: Session, table: TableCatalog) -> None:
    if table.id not in session.ctx.runtime.jobs:
        raise sql_error(UNDEFINED_TABLE, f'table "{table.name}" does not exist')


def _place(session: Session, table: TableCatalog, chunk: StreamChunk) -> tuple[int, int]:
    """Put the chunk into the current epoch: (that epoch, the barrier's loss count, from
    which on a recovery drops the rows)."""
    _check_table_alive(session, table)
    since = session.ctx.barrier.loss_count
    return session.ctx.runtime.write_dml(table.id, chunk, list(table.dist_key)), since


async def insert_rows(session: Session, table: TableCatalog, rows: pa.Table) -> int:
    """Write rows (the table's visible columns, in order and typed) and wait for commit."""
    check_not_null(table, rows)
    if rows.num_rows == 0:
        return 0
    if table.has_row_id:
        generator = session.ctx.row_ids(table)
        if not generator.ready:
            generator.start_after(await session.run_query(generator.committed_max))
        rows = rows.append_column(ROW_ID_COLUMN, pa.array(generator.allocate(rows.num_rows)))
    await write_chunk(session, table, StreamChunk.inserts(rows))
    return rows.num_rows


def _target_columns(table: TableCatalog, target: exp.Expr) -> list[str]:
    visible = [c.name for c in table.visible_columns]
    if not isinstance(target, exp.Schema):
        return visible
    names = [e.name for e in target.expressions]
    for e, n in zip(target.expressions, names):
        if n not in visible:
            raise sql_error(
                UNDEFINED_COLUMN,
                f'column "{n}" of relation "{table.name}" does not exist',
                position=position_of(e),
            )
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise sql_error(DUPLICATE_COLUMN, f'column "{dup}" specified more than once')
    return names


@dataclass
class DmlPlan:
    """A bound INSERT / UPDATE / DELETE: the DuckDB query that computes its rows."""

    table: TableCatalog
    ref: exp.Table
    bound: BoundQuery
    returning: exp.Expr | None
    targets: list[str]
    # An INSERT whose VALUES are parameters and plain literals: its rows without DuckDB.
    literal_rows: LiteralRows | None = None


def plan_insert(session: Session, ast: exp.Expr) -> DmlPlan:
    assert isinstance(ast, exp.Insert)
    if ast.args.get("conflict"):
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "INSERT ... ON CONFLICT is not supported yet",
            hint="A row whose primary key exists already overwrites the old row.",
        )
    binder = Binder(session.bind_context())
    binder.number_parameters(ast)
    target_ref = ast.this.this if isinstance(ast.this, exp.Schema) else ast.this
    table = resolve_target(session, binder, target_ref)
    targets = _target_columns(table, ast.this)
    types = {c.name: c.type for c in table.columns}
    source = ast.expression
    if source is None:
        raise sql_error(SYNTAX_ERROR, "INSERT needs VALUES or a query")
    literal_rows = None
    if isinstance(source, exp.Values):
        targets = _values_targets(ast, source, targets)
        literal_rows = literal_rows_of(source, targets, [types[n] for n in targets])
        # PostgreSQL coerces each VALUES item to its target column's type.
        casts = {n: exp.DataType.build(types[n].duckdb, dialect="duckdb") for n in targets}
        for row in source.expressions:
            items = row.expressions
            if len(items) != len(targets):
                raise _width_error(len(items), len(targets), row)
            for item, name in zip(list(items), targets):
                if isinstance(item, exp.Var) and item.name.upper() == "DEFAULT":
                    item.replace(exp.cast(exp.null(), types[name].duckdb))
                    continue
                binder.note_param_type(item, types[name])
                item.replace(exp.Cast(this=item.copy(), to=casts[name].copy()))
    if isinstance(source, exp.Query):
        _attach_with(source, ast)
    bound = binder.bind_query(source, name_outputs=False)
    return DmlPlan(
        table, target_ref, bound, ast.args.get("returning"), targets, literal_rows=literal_rows
    )


def _values_targets(ast: exp.Insert, values: exp.Values, targets: list[str]) -> list[str]:
    """The columns a VALUES list fills: without a column list, PostgreSQL fills the
    trailing columns of a shorter list with NULL."""
    width = len(values.expressions[0].expressions) if values.expressions else 0
    if not isinstance(ast.this, exp.Schema) and width < len(targets):
        return targets[:width]
    return targets


def literal_insert_plan(session: Session, ast: exp.Expr) -> DmlPlan | None:
    """The plan of an INSERT whose VALUES are only literals stored as they are, read off
    the statement's tree without copying it: there is no query to bind (a long VALUES
    list took seconds to copy, bind and print as SQL that never ran). Else None."""
    if not isinstance(ast, exp.Insert) or any(
        ast.args.get(k) for k in ("conflict", "returning", "with_")
    ):
        return None
    source = ast.expression
    if not isinstance(source, exp.Values):
        return None
    binder = Binder(session.bind_context())
    target_ref = ast.this.this if isinstance(ast.this, exp.Schema) else ast.this
    table = resolve_target(session, binder, target_ref)
    types = {c.name: c.type for c in table.columns}
    targets = _values_targets(ast, source, _target_columns(table, ast.this))
    rows = literal_rows_of(source, targets, [types[n] for n in targets])
    if rows is None or rows.param_count:
        return None
    empty = BoundQuery("", 0, [], [table], reads_data=False)
    return DmlPlan(table, target_ref, empty, None, targets, literal_rows=rows)


def _attach_with(query: exp.Expr, statement: exp.Expr) -> None:
    """``WITH ... INSERT/UPDATE/DELETE``: the statement's CTEs become the query's."""
    outer = statement.args.get("with_")
    if outer is None:
        return
    inner = query.args.get("with_")
    if inner is None:
        query.set("with_", outer)
    else:
        inner.set("expressions", [*outer.expressions, *inner.expressions])


async def handle_insert(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.tree  # read only (planning takes its own copy, once per text)
    assert isinstance(ast, exp.Insert)
    plan = await session.compile_cached(
        _INSERT_PLAN,
        stmt,
        lambda st: literal_insert_plan(session, st.tree) or plan_insert(session, st.ast),
        keep=_keeps,
    )
    _check_params(plan.bound.param_count, params)
    src = plan.literal_rows.build(params) if plan.literal_rows is not None else None
    if src is None:
        src = await session.run_query(
            lambda cur: cur.sql(plan.bound.sql, params=params or None).to_arrow_table(),
            light=not plan.bound.reads_data,
        )
    if not isinstance(ast.this, exp.Schema) and src.num_columns < len(plan.targets):
        # Trailing columns get NULL.
        plan = dataclasses.replace(plan, targets=plan.targets[: src.num_columns])
    if src.num_columns != len(plan.targets):
        raise _width_error(src.num_columns, len(plan.targets), ast)
    rows = typed_rows(plan.table, plan.targets, src)
    if rows is None:
        rows = await session.run_query(
            lambda cur: shape_rows(cur, plan.table, plan.targets, src), light=True
        )
    count = await insert_rows(session, plan.table, rows)
    if plan.returning is not None:
        return await _returning(session, plan, rows, f"INSERT 0 {count}")
    return StatementResult(tag=f"INSERT 0 {count}", rowcount=count)


def batchable_insert(session: Session, stmt: Statement) -> DmlPlan | None:
    """The plan of an INSERT that runs for many parameter sets as one write
    (``insert_parameter_sets``): one VALUES row of parameters and plain literals (either
    may carry a cast), no RETURNING; else None."""
    ast = stmt.tree
    if not isinstance(ast, exp.Insert) or ast.args.get("returning") or ast.args.get("conflict"):
        return None
    source = ast.expression
    if not isinstance(source, exp.Values) or len(source.expressions) != 1:
        return None
    if not all(
        isinstance(
            item.this if isinstance(item, exp.Cast) else item,
            exp.Parameter | exp.Literal | exp.Null | exp.Boolean,
        )
        for item in source.expressions[0].expressions
    ):
        return None
    try:
        plan = planned_insert(session, stmt)
    except Error:
        return None  # the statement's own run reports it
    if plan.literal_rows is None or not plan.literal_rows.param_count:
        return None
    return plan


async def insert_parameter_sets(
    session: Session, stmt: Statement, param_sets: list[list[object]]
) -> int | None:
    """Run an INSERT (``batchable_insert``) once per parameter set as one write: the
    rows of all in one chunk, in one epoch (a driver's ``executemany``, pipelined), all
    or nothing as PostgreSQL's implicit transaction of a pipeline. Values that need
    DuckDB's casts are evaluated set by set, still into the one write. None, having
    written nothing, when a set's shape needs the general path (each then runs alone,
    with its own result or error)."""
    plan = batchable_insert(session, stmt)
    if plan is None or any(len(p) != plan.bound.param_count for p in param_sets):
        return None
    assert plan.literal_rows is not None
    src = plan.literal_rows.build_many(param_sets)
    if src is None:
        rows = await session.run_query(
            lambda cur: _evaluate_sets(cur, plan, param_sets), light=not plan.bound.reads_data
        )
        if rows is None:
            return None
        return await insert_rows(session, plan.table, rows)
    rows = typed_rows(plan.table, plan.targets, src)
    if rows is None:
        rows = await session.run_query(
            lambda cur: shape_rows(cur, plan.table, plan.targets, src), light=True
        )
    return await insert_rows(session, plan.table, rows)


def _evaluate_sets(
    cur: duckdb.DuckDBPyConnection, plan: DmlPlan, param_sets: list[list[object]]
) -> pa.Table | None:
    """The rows of an INSERT's general plan for each parameter set, as the table's
    columns (one query per set: each binds its own values); None if a set's width is not
    the targets' (its own run says why)."""
    parts = []
    for params in param_sets:
        src = cur.sql(plan.bound.sql, params=params or None).to_arrow_table()
        if src.num_columns != len(plan.targets):
            return None
        rows = typed_rows(plan.table, plan.targets, src)
        parts.append(rows if rows is not None else shape_rows(cur, plan.table, plan.targets, src))
    return pa.concat_tables(parts)


def _width_error(have: int, want: int, node: exp.Expr) -> Exception:
    if have > want:
        return sql_error(
            SYNTAX_ERROR,
            "INSERT has more expressions than target columns",
            position=position_of(node),
        )
    return sql_error(
        SYNTAX_ERROR, "INSERT has more target columns than expressions", position=position_of(node)
    )


def _check_params(needed: int, params: list[object]) -> None:
    if needed != len(params):
        raise sql_error(
            "08P01",
            f"the statement needs {needed} parameters, but {len(params)} were supplied",
        )


_INSERT_PLAN = "insert"


def _keeps(plan: DmlPlan) -> bool:
    """Whether a planned INSERT may serve the same text again (not when volatile)."""
    return not plan.bound.volatile


def planned_insert(session: Session, stmt: Statement) -> DmlPlan:
    """The INSERT's plan, from the session's cache when it has it (Describe, then
    Execute, of a statement an application repeats plan it once)."""
    plan = session.cached(_INSERT_PLAN, stmt)
    if plan is None:
        plan = literal_insert_plan(session, stmt.tree) or plan_insert(session, stmt.tree.copy())
        if _keeps(plan):
            session.cache(_INSERT_PLAN, stmt, plan)
    assert isinstance(plan, DmlPlan)
    return plan


def typed_rows(table: TableCatalog, targets: list[str], src: pa.Table) -> pa.Table | None:
    """The source as the table's visible columns when its columns already have their
    target's types (missing ones NULL), without DuckDB; else None (``shape_rows``)."""
    visible = table.visible_columns
    expected = pa.schema([pa.field(c.name, arrow_type_of(c.type)) for c in visible])
    by_target = dict(zip(targets, src.columns))
    for name, column in by_target.items():
        if column.type != expected.field(name).type:
            return None
    columns = [
        by_target[f.name] if f.name in by_target else pa.nulls(src.num_rows, f.type)
        for f in expected
    ]
    return pa.Table.from_arrays(columns, schema=expected)


def shape_rows(
    cur: duckdb.DuckDBPyConnection, table: TableCatalog, targets: list[str], src: pa.Table
) -> pa.Table:
    """The source's columns as the table's visible columns: cast to their types (DuckDB
    casts, PostgreSQL semantics), missing ones NULL."""
    visible = table.visible_columns
    expected = pa.schema([pa.field(c.name, arrow_type_of(c.type)) for c in visible])
    name = f"__insert_{next(_names)}"
    by_target = {t: f"c{i}" for i, t in enumerate(targets)}
    cols = []
    for c in visible:
        if c.name in by_target:
            cols.append(f'CAST("{by_target[c.name]}" AS {c.type.duckdb}) AS {quote(c.name).sql()}')
        else:
            cols.append(f"CAST(NULL AS {c.type.duckdb}) AS {quote(c.name).sql()}")
    cur.register(name, src.rename_columns([f"c{i}" for i in range(src.num_columns)]))
    try:
        out = cur.sql(f"SELECT {', '.join(cols)} FROM {name}").to_arrow_table()
    finally:
        cur.unregister(name)
    return out.cast(expected)


def _target_relation(binder: Binder, table: TableCatalog, ref: exp.Table) -> exp.Expr:
    """The target table with its hidden columns, aliased as the statement names it."""
    sub = Binder.table_subquery(table, with_hidden=True)
    alias = ref.args.get("alias")
    sub.set("alias", alias.copy() if alias else exp.TableAlias(this=exp.to_identifier(ref.name)))
    binder.scope[ref.alias_or_name] = table
    return sub


def plan_update(session: Session, ast: exp.Expr) -> DmlPlan:
    """SELECT _vnode, old stored columns (o0..), new stored columns (n0..) of the rows."""
    assert isinstance(ast, exp.Update)
    binder = Binder(session.bind_context())
    binder.number_parameters(ast)
    ref = ast.this
    table = resolve_target(session, binder, ref)
    sets: dict[str, exp.Expr] = {}
    for eq in ast.expressions:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise sql_error(SYNTAX_ERROR, f"bad SET item: {eq.sql(dialect='postgres')}")
        name = eq.this.name
        col = table.column(name)
        if col is None or col.hidden:
            raise sql_error(
                UNDEFINED_COLUMN,
                f'column "{name}" of relation "{table.name}" does not exist',
                position=position_of(eq.this),
            )
        if name in sets:
            raise sql_error(DUPLICATE_COLUMN, f'multiple assignments to same column "{name}"')
        binder.note_param_type(eq.expression, col.type)
        sets[name] = eq.expression
    stored = table.columns
    # Qualified by the target's alias: a FROM list may have columns of the same names.
    target = quote(ref.alias_or_name)
    old_cols = [exp.alias_(exp.column(quote(VNODE_COLUMN), target), quote(VNODE_COLUMN))]
    old_cols += [
        exp.alias_(exp.column(quote(c.name), target), quote(f"o{i}")) for i, c in enumerate(stored)
    ]
    new_cols = []
    for i, c in enumerate(stored):
        value = sets.get(c.name)
        expr = (
            exp.Cast(this=value, to=exp.DataType.build(c.type.duckdb, dialect="duckdb"))
            if value is not None
            else exp.column(quote(c.name), target)
        )
        new_cols.append(exp.alias_(expr, quote(f"n{i}")))
    from_ = ast.args.get("from_")
    extras: list[exp.Expr] = []
    if from_ is not None:
        extras = [from_.this, *from_.expressions]
    extras = [e for e in extras if e is not None]
    return _target_rows_plan(binder, table, ast, old_cols + new_cols, extras)


async def handle_update(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Update)
    plan = await session.compile(stmt, lambda st: plan_update(session, st.ast))
    _check_params(plan.bound.param_count, params)
    table = plan.table
    stored = table.columns
    names = [c.name for c in stored]
    result = await session.run_query(
        lambda cur: cur.sql(plan.bound.sql, params=params or None).to_arrow_table()
    )
    n = len(stored)
    schema = pa.schema([pa.field(c.name, arrow_type_of(c.type)) for c in stored])
    old = result.select([VNODE_COLUMN, *[f"o{i}" for i in range(n)]]).rename_columns(
        [VNODE_COLUMN, *names]
    )
    new = result.select([f"n{i}" for i in range(n)]).rename_columns(names).cast(schema)
    check_not_null(table, new)
    count = await _write_update(session, table, old, new)
    if plan.returning is not None:
        visible = new.select([c.name for c in table.visible_columns])
        return await _returning(session, plan, visible, f"UPDATE {count}")
    return StatementResult(tag=f"UPDATE {count}", rowcount=count)


async def _write_update(session: Session, table: TableCatalog, old: pa.Table, new: pa.Table) -> int:
    """Each old row (``_vnode`` + stored columns) replaced by the new row at its index."""
    n = old.num_rows
    if n == 0:
        return 0
    old = old.drop_columns([VNODE_COLUMN])
    new = new.cast(old.schema)
    keys = [table.columns[i].name for i in table.pk]
    same_key = all(old.column(k).equals(new.column(k)) for k in keys)
    if same_key:
        chunk = StreamChunk.updates(old, new)
    else:
        # Keys move (``SET id = id + 1``): every old key goes before any new key arrives.
        ops = np.concatenate(
            [np.full(n, Op.DELETE, dtype=np.int8), np.full(n, Op.INSERT, dtype=np.int8)]
        )
        chunk = StreamChunk(pa.concat_tables([old, new]), ops)
    await write_chunk(session, table, chunk)
    return n


def plan_delete(session: Session, ast: exp.Expr) -> DmlPlan:
    """SELECT _vnode and the stored columns of the rows to delete."""
    assert isinstance(ast, exp.Delete)
    binder = Binder(session.bind_context())
    binder.number_parameters(ast)
    ref = ast.this
    table = resolve_target(session, binder, ref)
    target = quote(ref.alias_or_name)
    cols = [exp.column(quote(VNODE_COLUMN), target)]
    cols += [exp.column(quote(c.name), target) for c in table.columns]
    return _target_rows_plan(binder, table, ast, cols, ast.args.get("using") or [])


def _target_rows_plan(
    binder: Binder,
    table: TableCatalog,
    ast: exp.Update | exp.Delete,
    columns: Sequence[exp.Expr],
    extras: Sequence[exp.Expr],
) -> DmlPlan:
    """The SELECT of ``columns`` over the target rows an UPDATE or DELETE touches: the
    target, its WITH, the extra relations (``FROM`` / ``USING``) cross-joined, the WHERE."""
    ref = ast.this
    select = exp.select(*columns).from_(_target_relation(binder, table, ref))
    _attach_with(select, ast)
    for extra in extras:
        select = select.join(extra, join_type="cross")
    if ast.args.get("where") is not None:
        select.set("where", ast.args["where"])
    bound = binder.bind_query(select, name_outputs=False)
    return DmlPlan(table, ref, bound, ast.args.get("returning"), [])


async def handle_delete(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Delete)
    plan = await session.compile(stmt, lambda st: plan_delete(session, st.ast))
    _check_params(plan.bound.param_count, params)
    table = plan.table
    rows = await session.run_query(
        lambda cur: cur.sql(plan.bound.sql, params=params or None).to_arrow_table()
    )
    count = rows.num_rows
    if count:
        await write_chunk(session, table, StreamChunk.deletes(rows.drop_columns([VNODE_COLUMN])))
    if plan.returning is not None:
        visible = rows.select([c.name for c in table.visible_columns])
        return await _returning(session, plan, visible, f"DELETE {count}")
    return StatementResult(tag=f"DELETE {count}", rowcount=count)


def _returning_select(plan: DmlPlan, relation: exp.Expr) -> exp.Expr:
    """``SELECT <returning> FROM relation AS <target alias>``."""
    assert plan.returning is not None
    alias = plan.ref.args.get("alias")
    relation.set(
        "alias", alias.copy() if alias else exp.TableAlias(this=exp.to_identifier(plan.ref.name))
    )
    return exp.select(*[e.copy() for e in plan.returning.expressions]).from_(relation)


async def _returning(session: Session, plan: DmlPlan, rows: pa.Table, tag: str) -> StatementResult:
    """Evaluate RETURNING expressions over the affected rows."""
    name = f"__returning_{next(_names)}"
    rel = exp.Table(this=exp.to_identifier(name))
    rel.meta[INTERNAL] = True
    bound = Binder(session.bind_context()).bind_query(_returning_select(plan, rel))

    def run(cur: duckdb.DuckDBPyConnection) -> tuple[pa.Table, list[Column]]:
        cur.register(name, rows)
        try:
            return run_bound(cur, bound.sql, [])
        finally:
            cur.unregister(name)

    out, columns = await session.run_query(run, light=True)
    return StatementResult(tag=tag, columns=columns, rows=out, rowcount=out.num_rows)


def returning_columns(session: Session, plan: DmlPlan) -> list[Column]:
    """The RETURNING columns of a plan, without running it (pgwire Describe)."""
    visible = plan.table.visible_columns
    empty = exp.select(
        *[exp.alias_(exp.cast(exp.null(), c.type.duckdb), quote(c.name)) for c in visible]
    ).where(exp.false())
    bound = Binder(session.bind_context()).bind_query(_returning_select(plan, empty.subquery()))
    relation = session.ctx.store.cursor().sql(bound.sql)
    return [
        Column(n, DataType.from_duckdb(str(t))) for n, t in zip(relation.columns, relation.types)
    ]


async def insert_many(
    session: Session, sql: str, param_rows: list[tuple[object, ...]]
) -> StatementResult | None:
    """``INSERT ... VALUES (%s, ...)`` for many parameter rows, as one batch: the rows
    become Arrow columns and one write. None when ``sql`` is not of that shape."""
    with session.running(sql):
        return await _insert_many(session, sql, param_rows)


async def _insert_many(
    session: Session, sql: str, param_rows: list[tuple[object, ...]]
) -> StatementResult | None:
    stmts = session.parse(sql)
    if len(stmts) != 1 or not isinstance(stmts[0].ast, exp.Insert):
        return None
    ast = stmts[0].ast
    source = ast.expression
    if (
        not isinstance(source, exp.Values)
        or len(source.expressions) != 1
        or ast.args.get("returning") is not None
        or ast.args.get("conflict") is not None
    ):
        return None
    items = source.expressions[0].expressions
    if not all(isinstance(i, exp.Placeholder | exp.Parameter) for i in items):
        return None
    if any(isinstance(i, exp.Parameter) for i in items):
        order = [int(i.name) - 1 for i in items]
    else:
        order = list(range(len(items)))
    width = max(order, default=-1) + 1
    if any(len(r) != width for r in param_rows):
        raise sql_error("08P01", f"every parameter row needs {width} values")
    binder = Binder(session.bind_context())
    target_ref = ast.this.this if isinstance(ast.this, exp.Schema) else ast.this
    table = resolve_target(session, binder, target_ref)
    targets = _target_columns(table, ast.this)
    if len(items) != len(targets):
        raise _width_error(len(items), len(targets), ast)
    try:
        src = pa.table({f"c{j}": pa.array([r[k] for r in param_rows]) for j, k in enumerate(order)})
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # mixed Python types in a column: one statement per row instead
    if not param_rows:
        return StatementResult(tag="INSERT 0 0", rowcount=0)
    rows = typed_rows(table, targets, src)
    if rows is None:
        rows = await session.run_query(lambda cur: shape_rows(cur, table, targets, src), light=True)
    count = await insert_rows(session, table, rows)
    return StatementResult(tag=f"INSERT 0 {count}", rowcount=count)
