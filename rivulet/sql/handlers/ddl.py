"""CREATE TABLE, DROP TABLE, and the DDL that later issues will bring (refused clearly)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.errors import (
    DUPLICATE_COLUMN,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_PRIVILEGE,
    INVALID_PARAMETER_VALUE,
    INVALID_SCHEMA_NAME,
    SYNTAX_ERROR,
    UNDEFINED_COLUMN,
    UNDEFINED_TABLE,
    WRONG_OBJECT_TYPE,
    sql_error,
)
from rivulet.common.types import BIGINT, DataType, column_type_from_sql
from rivulet.meta.catalog import (
    DEFAULT_SCHEMA,
    SYSTEM_SCHEMAS,
    ColumnCatalog,
    TableCatalog,
    check_column_names,
)
from rivulet.meta.job_manager import PlannedMaterializedView
from rivulet.sql.binder import Binder
from rivulet.sql.parser import Statement, position_of
from rivulet.sql.result import Notice, StatementResult, command

if TYPE_CHECKING:
    from rivulet.sql.session import Session

# What later issues bring; until then such statements fail with 0A000 and say so.
_COMING = {
    "MATERIALIZED VIEW": "CREATE MATERIALIZED VIEW",
    "SINK": "CREATE SINK",
    "INDEX": "CREATE INDEX",
    "VIEW": "CREATE VIEW",
    "SCHEMA": "CREATE SCHEMA",
    "FUNCTION": "CREATE FUNCTION",
    "DATABASE": "CREATE DATABASE",
    "USER": "CREATE USER",
    "SECRET": "CREATE SECRET",
    "CONNECTION": "CREATE CONNECTION",
}


def target_schema(session: Session, table: exp.Table) -> str:
    """The schema a new object goes to: the named one, else the first of the search path."""
    if table.catalog and table.catalog != session.database:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f'cross-database references are not implemented: "{table.sql(dialect="postgres")}"',
        )
    if table.db:
        schema = table.db
    else:
        path = [s for s in session.config.search_path() if s != "$user"]
        schema = next((s for s in path if s in session.ctx.catalog.schemas), DEFAULT_SCHEMA)
    if schema in SYSTEM_SCHEMAS:
        raise sql_error(
            INSUFFICIENT_PRIVILEGE, f'permission denied to create in system schema "{schema}"'
        )
    if schema not in session.ctx.catalog.schemas:
        raise sql_error(INVALID_SCHEMA_NAME, f'schema "{schema}" does not exist')
    return schema


def _create_kind(ast: exp.Create) -> str:
    kind = (ast.args.get("kind") or "").upper()
    props = ast.args.get("properties")
    if (
        kind == "VIEW"
        and props
        and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)
    ):
        return "MATERIALIZED VIEW"
    return kind


async def handle_create(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Create)
    kind = _create_kind(ast)
    if kind == "TABLE":
        return await _create_table(session, stmt, ast)
    if kind == "MATERIALIZED VIEW":
        return await _create_materialized_view(session, stmt, ast)
    if kind == "SOURCE":
        return await _create_source(session, stmt, ast)
    what = _COMING.get(kind, f"CREATE {kind}")
    raise sql_error(FEATURE_NOT_SUPPORTED, f"{what} is not supported yet")


def plan_mv_statement(session: Session, stmt: Statement, ast: exp.Expr) -> PlannedMaterializedView:
    """The planned MV of a CREATE MATERIALIZED VIEW statement."""
    from rivulet.sql.planner import plan_materialized_view

    assert isinstance(ast, exp.Create)

    target = ast.this
    if isinstance(target, exp.Schema):
        raise sql_error(
            FEATURE_NOT_SUPPORTED, "a column list in CREATE MATERIALIZED VIEW is not supported yet"
        )
    assert isinstance(target, exp.Table)
    query = ast.expression
    if not isinstance(query, exp.Query):
        raise sql_error(SYNTAX_ERROR, "CREATE MATERIALIZED VIEW needs AS <query>")
    props = ast.args.get("properties")
    options = [
        p for p in (props.expressions if props is not None else [])
        if not isinstance(p, exp.MaterializedProperty)
    ]  # fmt: skip
    backfill_type: str | None = None
    rate_limit: int | None = None
    for option in list(options):
        if not isinstance(option, exp.Property):
            continue
        key = _option_key(option.this).lower()
        if key == "backfill_type":
            backfill_type = _backfill_type(_option_value(option.args.get("value")))
            options.remove(option)
        elif key == "backfill_rate_limit":
            rate_limit = parse_rate_limit(_option_value(option.args.get("value")))
            options.remove(option)
    if options:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f"materialized view options are not supported yet: {options[0].sql(dialect='postgres')}",
        )
    schema = target_schema(session, target)
    planned = plan_materialized_view(
        Binder(session.bind_context()),
        session.ctx.store.cursor,
        schema,
        target.name,
        query,
        stmt.text,
        policy=session.config.get("streaming_parallelism") or "default",
    )
    _choose_scan_type(session, planned, backfill_type)
    if rate_limit is not None:
        planned.table = replace(planned.table, backfill_rate_limit=rate_limit)
    return planned


def parse_rate_limit(value: str) -> int | None:
    """A backfill rate limit: rows per second (0 pauses), or DEFAULT/-1 for none."""
    v = value.strip().lower()
    if v in ("default", "-1"):
        return None
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise sql_error(
            INVALID_PARAMETER_VALUE,
            f'invalid backfill rate limit "{value}"',
            hint="Use a number of rows per second (0 pauses the backfill) or DEFAULT.",
        )
    return n


def _backfill_type(value: str) -> str:
    from rivulet.stream.plan import SCAN_TYPES

    v = value.strip().lower()
    if v not in SCAN_TYPES:
        raise sql_error(
            INVALID_PARAMETER_VALUE,
            f'invalid value for option "backfill_type": "{value}"',
            hint=f"Use one of: {', '.join(SCAN_TYPES)}.",
        )
    return v


def _choose_scan_type(session: Session, planned, backfill_type: str | None) -> None:
    """How the MV's scans read their upstreams' history: ``WITH (backfill_type = ...)``,
    else the session's ``streaming_use_snapshot_backfill`` (snapshot), else
    ``streaming_use_arrangement_backfill`` (true: arrangement, false: no_shuffle)."""
    from rivulet.stream.plan import StreamScanNode
    from rivulet.stream.state_layouts import apply_scan_type

    if backfill_type is None:
        if session.config.get("streaming_use_snapshot_backfill") == "true":
            backfill_type = "snapshot"
        elif session.config.get("streaming_use_arrangement_backfill") == "false":
            backfill_type = "no_shuffle"
        else:
            backfill_type = "arrangement"
    if not any(isinstance(n, StreamScanNode) for n in planned.root.walk()):
        return  # nothing to backfill (an MV over sources only)
    apply_scan_type(planned.root, backfill_type)
    planned.table = replace(planned.table, backfill_type=backfill_type)


def explain_create(session: Session, stmt: Statement, ast: exp.Create) -> list[str]:
    """The fragment graph a CREATE MATERIALIZED VIEW (or TABLE) would run, upstream last."""
    from rivulet.meta.catalog import CatalogChange
    from rivulet.meta.fragmenter import fragment_job
    from rivulet.meta.fragments import explain_fragment
    from rivulet.sql.planner.table import table_plan
    from rivulet.stream.plan import MaterializeNode

    kind = _create_kind(ast)
    ctx = session.ctx
    if kind == "MATERIALIZED VIEW":
        planned = plan_mv_statement(session, stmt, ast)
        table, root = planned.table, planned.root
        assert isinstance(root, MaterializeNode)
        root.table_name = table.name
        root.state_schema = table.state_schema()
    elif kind == "TABLE" and not isinstance(ast.expression, exp.Query):
        table = table_entry(session, stmt, ast)
        root = table_plan(table)
    else:
        raise sql_error(FEATURE_NOT_SUPPORTED, f"EXPLAIN CREATE {kind} is not supported yet")
    with ctx.catalog.preview_allocations():
        job = fragment_job(
            root, 0, ctx.ddl.cluster.parallelism(table.parallelism), ctx.catalog,
            ctx.ddl.cluster, ctx.runtime, CatalogChange(),
        )  # fmt: skip
    # Fragments are numbered within the plan, the materializing one first (as RisingWave
    # shows them): the ids the job would get depend on what ran before.
    ordered = list(reversed(job.graph.fragments))
    local = {f.fragment_id: i for i, f in enumerate(ordered)}
    lines: list[str] = []
    for i, f in enumerate(ordered):
        inputs = ", ".join(
            f"fragment {local[u]} by {k.value}"
            + (f" [{', '.join(f'c{c}' for c in key)}]" if key else "")
            for u, k, key in f.upstreams
        )
        head = f"Fragment {i} ({f.distribution.value}, parallelism {len(f.actor_ids)}"
        head += f", from {inputs})" if inputs else ")"
        lines.append(head)
        plan = explain_fragment(f.root)
        for real, index in local.items():
            plan = plan.replace(
                f"Merge {{ from: fragment {real} }}", f"Merge {{ from: fragment {index} }}"
            )
        lines.extend("  " + line for line in plan.splitlines())
    return lines


async def _create_materialized_view(
    session: Session, stmt: Statement, ast: exp.Create
) -> StatementResult:
    target = ast.this
    name = target.name
    schema = target_schema(session, target) if isinstance(target, exp.Table) else DEFAULT_SCHEMA
    if_not_exists = bool(ast.args.get("exists"))
    if session.ctx.catalog.name_taken(schema, name) and if_not_exists:
        return command(
            "CREATE_MATERIALIZED_VIEW", Notice(f'relation "{name}" already exists, skipping')
        )
    planned = plan_mv_statement(session, stmt, ast)
    config = session.config
    rate_limit = planned.table.backfill_rate_limit
    if rate_limit is None:
        rate_limit = parse_rate_limit(config.get("backfill_rate_limit") or "default")
    backfill_parallelism = config.get("streaming_parallelism_for_backfill")
    created = await session.ctx.ddl.jobs.create_materialized_view(
        planned,
        if_not_exists=if_not_exists,
        background=config.get("background_ddl") == "true",
        rate_limit=rate_limit,
        backfill_parallelism=None if backfill_parallelism == "default" else backfill_parallelism,
        cancelled=lambda: session.cancel_requested,
        progress=lambda text: session.notify(Notice(text)),
    )
    if not created:
        return command(
            "CREATE_MATERIALIZED_VIEW", Notice(f'relation "{name}" already exists, skipping')
        )
    return command("CREATE_MATERIALIZED_VIEW")


async def _create_table(session: Session, stmt: Statement, ast: exp.Create) -> StatementResult:
    if isinstance(ast.expression, exp.Query):
        props = ast.args.get("properties")
        if props is not None and connector_options(props, "table").get("connector"):
            raise sql_error(
                FEATURE_NOT_SUPPORTED, "CREATE TABLE AS with a connector is not supported"
            )
        return await _create_table_as(session, stmt, ast)
    table = table_entry(session, stmt, ast)
    created = await session.ctx.ddl.jobs.create_table(
        table, if_not_exists=bool(ast.args.get("exists"))
    )
    if not created:
        return command("CREATE_TABLE", Notice(f'relation "{table.name}" already exists, skipping'))
    return command("CREATE_TABLE")


def table_entry(session: Session, stmt: Statement, ast: exp.Create) -> TableCatalog:
    """The catalog entry (id 0) of ``CREATE TABLE name (columns) [WITH (connector ...)]``,
    every column, key and option checked: what CREATE TABLE creates and EXPLAIN shows."""
    target = ast.this
    props = ast.args.get("properties")
    options = connector_options(props, "table") if props is not None else None
    connector = options.get("connector") if options is not None else None
    if props is not None and connector is None:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f"table options are not supported yet: {props.sql(dialect='postgres')}",
        )
    if connector is not None and isinstance(target, exp.Table):
        target = exp.Schema(this=target, expressions=[])  # columns from the connector
    if not isinstance(target, exp.Schema):
        raise sql_error(SYNTAX_ERROR, "CREATE TABLE needs a column list or AS query")
    table_ref = target.this
    assert isinstance(table_ref, exp.Table)
    schema = target_schema(session, table_ref)
    name = table_ref.name
    columns: list[ColumnCatalog] = []
    pk_names: list[str] = []
    for item in target.expressions:
        if isinstance(item, exp.WatermarkColumnConstraint) and connector is not None:
            continue  # accepted; state is not cleaned by watermarks yet
        if isinstance(item, exp.ColumnDef):
            col, is_pk = _column(item)
            if any(c.name == col.name for c in columns):
                raise sql_error(
                    DUPLICATE_COLUMN,
                    f'column "{col.name}" specified more than once',
                    position=position_of(item),
                )
            columns.append(col)
            if is_pk:
                if pk_names:
                    raise sql_error(
                        "42P16", f'multiple primary keys for table "{name}" are not allowed'
                    )
                pk_names.append(col.name)
        elif isinstance(item, exp.PrimaryKey):
            if pk_names:
                raise sql_error(
                    "42P16", f'multiple primary keys for table "{name}" are not allowed'
                )
            pk_names = [e.name for e in item.expressions]
        else:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f"table constraint is not supported yet: {item.sql(dialect='postgres')}",
                position=position_of(item),
            )
    if connector is not None:
        assert options is not None
        declared = [(c.name, c.type) for c in columns] if columns else None
        produced, options = prepare_connector(connector, options, declared, f'table "{name}"')
        if not columns:
            columns = [ColumnCatalog(n, t) for n, t in produced]
    if not columns:
        raise sql_error(SYNTAX_ERROR, "a table needs at least one column")
    if len(set(pk_names)) != len(pk_names):
        raise sql_error(DUPLICATE_COLUMN, "primary key column listed more than once")
    table = build_table(schema, name, columns, pk_names, stmt.text)
    if connector is not None:
        assert options is not None
        table = replace(
            table,
            connector=connector.lower(),
            options=tuple(options.items()),
            append_only=table.has_row_id,
        )
    return table


# ------------------------------------------------------------------ sources
def connector_options(props: exp.Properties, what: str) -> dict[str, str]:
    """``WITH (key = value, ...)`` as a dict; ``FORMAT ... ENCODE ...`` is accepted and
    ignored (built-in connectors produce typed rows, not encoded messages)."""
    options: dict[str, str] = {}
    for p in props.expressions:
        if isinstance(p, exp.FileFormatProperty | exp.EncodeProperty):
            continue
        if not isinstance(p, exp.Property):
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f"{what} option is not supported: {p.sql(dialect='postgres')}",
            )
        key = _option_key(p.this).lower()
        if key in options:
            raise sql_error(SYNTAX_ERROR, f'option "{key}" is given more than once')
        options[key] = _option_value(p.args.get("value"))
    return options


def _option_key(node: exp.Expr) -> str:
    if isinstance(node, exp.Dot):
        return f"{_option_key(node.this)}.{_option_key(node.expression)}"
    if isinstance(node, exp.Column):
        return ".".join(part.name for part in node.parts)
    if isinstance(node, exp.Literal | exp.Identifier | exp.Var):
        return node.name
    return node.sql(dialect="postgres")


def _option_value(node: exp.Expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return f"-{node.this.this}"
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, exp.Identifier | exp.Var | exp.Column):
        return node.name
    return node.sql(dialect="postgres")


def prepare_connector(
    connector: str,
    options: dict[str, str],
    declared: list[tuple[str, DataType]] | None,
    relation: str,
) -> tuple[list[tuple[str, DataType]], dict[str, str]]:
    """Validate a connector's options against the columns (see ``prepare_source``)."""
    from rivulet.stream.connectors import prepare_source

    if declared is not None:
        check_column_names([n for n, _ in declared], relation)
    produced, options = prepare_source(connector, options, declared)
    check_column_names([n for n, _ in produced], relation)
    return produced, options


async def _create_source(session: Session, stmt: Statement, ast: exp.Create) -> StatementResult:
    """CREATE SOURCE name [(columns)] WITH (connector = ..., ...) [FORMAT ... ENCODE ...]:
    a catalog entry; jobs that read it run the connector."""
    target = ast.this
    table_ref = target.this if isinstance(target, exp.Schema) else target
    assert isinstance(table_ref, exp.Table)
    schema = target_schema(session, table_ref)
    name = table_ref.name
    if_not_exists = bool(ast.args.get("exists"))
    if session.ctx.catalog.name_taken(schema, name) and if_not_exists:
        return command("CREATE_SOURCE", Notice(f'relation "{name}" already exists, skipping'))
    props = ast.args.get("properties")
    options = connector_options(props, "source") if props is not None else {}
    connector = options.get("connector")
    if not connector:
        raise sql_error(
            SYNTAX_ERROR,
            "CREATE SOURCE needs WITH (connector = ...)",
            hint="Built-in connectors: datagen, nexmark.",
        )
    declared: list[tuple[str, DataType]] | None = None
    if isinstance(target, exp.Schema) and target.expressions:
        declared = []
        for item in target.expressions:
            if isinstance(item, exp.WatermarkColumnConstraint):
                continue  # accepted; state is not cleaned by watermarks yet
            if isinstance(item, exp.PrimaryKey) or (
                isinstance(item, exp.ColumnDef) and _column(item)[1]
            ):
                raise sql_error(
                    FEATURE_NOT_SUPPORTED,
                    "a source cannot have a primary key: its rows are appended",
                    hint="CREATE TABLE ... (..., PRIMARY KEY (...)) WITH (connector = ...) keeps"
                    " the last row of each key.",
                    position=position_of(item),
                )
            if not isinstance(item, exp.ColumnDef):
                raise sql_error(
                    FEATURE_NOT_SUPPORTED,
                    f"source constraint is not supported: {item.sql(dialect='postgres')}",
                    position=position_of(item),
                )
            col = _column(item)[0]
            if any(n == col.name for n, _ in declared):
                raise sql_error(
                    DUPLICATE_COLUMN,
                    f'column "{col.name}" specified more than once',
                    position=position_of(item),
                )
            declared.append((col.name, col.type))
    produced, options = prepare_connector(connector, options, declared, f'source "{name}"')
    columns = (
        *(ColumnCatalog(n, t) for n, t in produced),
        ColumnCatalog(ROW_ID_COLUMN, BIGINT, True, True),
    )
    source = TableCatalog(
        id=0,
        schema=schema,
        name=name,
        columns=columns,
        pk=(len(produced),),
        dist_key=(len(produced),),
        definition=stmt.text,
        kind="source",
        append_only=True,
        connector=connector.lower(),
        options=tuple(options.items()),
    )
    created = await session.ctx.ddl.jobs.create_source(source, if_not_exists=if_not_exists)
    if not created:
        return command("CREATE_SOURCE", Notice(f'relation "{name}" already exists, skipping'))
    return command("CREATE_SOURCE")


def build_table(
    schema: str, name: str, columns: list[ColumnCatalog], pk_names: list[str], definition: str
) -> TableCatalog:
    """A table catalog entry (id 0: the DDL controller allocates it)."""
    names = [c.name for c in columns]
    check_column_names(names, f'table "{name}"')
    for key_name in pk_names:
        if key_name not in names:
            raise sql_error(UNDEFINED_COLUMN, f'column "{key_name}" named in key does not exist')
    pk: tuple[int, ...]
    if pk_names:
        pk = tuple(names.index(p) for p in pk_names)
        for i in pk:
            if not _hashable(columns[i].type):
                raise sql_error(
                    FEATURE_NOT_SUPPORTED,
                    f'column "{columns[i].name}" of type {columns[i].type.name} cannot be part'
                    " of a primary key",
                )
        cols = tuple(
            ColumnCatalog(c.name, c.type, c.not_null or i in pk, c.hidden)
            for i, c in enumerate(columns)
        )
    else:
        cols = (*columns, ColumnCatalog(ROW_ID_COLUMN, BIGINT, True, True))
        pk = (len(columns),)
    return TableCatalog(
        id=0, schema=schema, name=name, columns=cols, pk=pk, dist_key=pk, definition=definition
    )


def _hashable(t: DataType) -> bool:
    return t.name not in ("jsonb",)


def _column(item: exp.ColumnDef) -> tuple[ColumnCatalog, bool]:
    name = item.name
    kind = item.args.get("kind")
    if kind is None:
        raise sql_error(SYNTAX_ERROR, f'column "{name}" needs a type', position=position_of(item))
    try:
        dtype = column_type_from_sql(kind)
    except Exception as exc:
        if hasattr(exc, "position") and exc.position is None:
            exc.position = position_of(item)
        raise
    not_null = False
    is_pk = False
    for c in item.args.get("constraints") or []:
        k = c.args.get("kind")
        if isinstance(k, exp.PrimaryKeyColumnConstraint):
            is_pk = True
        elif isinstance(k, exp.NotNullColumnConstraint):
            not_null = not k.args.get("allow_null")
        else:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f"column constraint is not supported yet: {c.sql(dialect='postgres')}",
                position=position_of(item),
            )
    return ColumnCatalog(name, dtype, not_null), is_pk


async def _create_table_as(session: Session, stmt: Statement, ast: exp.Create) -> StatementResult:
    """CREATE TABLE t AS query: the query's columns, then its rows."""
    from rivulet.sql.handlers.dml import insert_rows

    table_ref = ast.this
    if isinstance(table_ref, exp.Schema):
        raise sql_error(
            FEATURE_NOT_SUPPORTED, "CREATE TABLE AS with a column list is not supported yet"
        )
    assert isinstance(table_ref, exp.Table)
    schema = target_schema(session, table_ref)
    name = table_ref.name
    if session.ctx.catalog.name_taken(schema, name):
        if ast.args.get("exists"):
            return command("CREATE_TABLE", Notice(f'relation "{name}" already exists, skipping'))
        from rivulet.common.errors import DUPLICATE_TABLE

        raise sql_error(DUPLICATE_TABLE, f'relation "{name}" already exists')
    binder = Binder(session.bind_context())
    bound = binder.bind_query(ast.expression)
    rows = await session.run_query(lambda cur: cur.sql(bound.sql).to_arrow_table())
    described = await session.run_query(lambda cur: cur.sql(bound.sql).types)
    columns = []
    for col_name, dtype in zip(rows.column_names, described):
        t = DataType.from_duckdb(str(dtype))
        if t.name not in {
            "boolean", "smallint", "integer", "bigint", "real", "double precision", "numeric",
            "character varying", "date", "time without time zone", "timestamp without time zone",
            "timestamp with time zone", "interval", "jsonb", "bytea",
        }:  # fmt: skip
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'column "{col_name}" would have type {t.name}, which tables do not support yet',
            )
        if t.name == "numeric" and str(dtype).upper() in ("HUGEINT", "UBIGINT", "UHUGEINT"):
            t = DataType.numeric(38, 0)
        columns.append(ColumnCatalog(col_name, t))
    table = build_table(schema, name, columns, [], stmt.text)
    await session.ctx.ddl.jobs.create_table(table)
    created = session.ctx.catalog.get_table(schema, name)
    assert created is not None
    try:
        count = await insert_rows(session, created, rows.rename_columns([c.name for c in columns]))
    except BaseException:
        # The statement failed: the table it created goes too. (Creating it and writing
        # its rows are two epochs; a crash between them can still leave it empty.)
        try:
            await session.ctx.ddl.jobs.drop(created)
        except Exception:
            pass
        raise
    return StatementResult(tag="CREATE_TABLE", rowcount=count)


# Kinds DROP can name, by the words after DROP, with their catalog kind.
_DROPPABLE = {"TABLE": "table", "MATERIALIZED VIEW": "materialized view", "SOURCE": "source"}
# Kinds that cannot exist yet: dropping one behaves as for a missing object.
_NOT_YET = ("VIEW", "SINK", "INDEX", "SCHEMA")


async def handle_drop(session: Session, stmt: Statement, params: list[object]) -> StatementResult:
    ast = stmt.ast
    assert isinstance(ast, exp.Drop)
    kind = (ast.args.get("kind") or "").upper()
    if ast.args.get("materialized"):
        kind = "MATERIALIZED VIEW"
    # sqlglot keeps the dropped objects under "tables" (older versions: "expressions").
    objects = list(ast.args.get("tables") or ast.expressions)
    tag = f"DROP_{kind.replace(' ', '_')}"
    if_exists = bool(ast.args.get("exists"))
    if kind in _NOT_YET:
        if if_exists:
            names = ", ".join(t.name for t in objects)
            return command(tag, Notice(f'{kind.lower()} "{names}" does not exist, skipping'))
        t = objects[0] if objects else None
        raise sql_error(
            UNDEFINED_TABLE,
            f'{kind.lower()} "{t.name if t else ""}" does not exist',
            position=position_of(t) if t is not None else None,
        )
    wanted = _DROPPABLE.get(kind)
    if wanted is None:
        raise sql_error(FEATURE_NOT_SUPPORTED, f"DROP {kind} is not supported yet")
    binder = Binder(session.bind_context())
    notices = []
    targets: list[TableCatalog] = []
    for t in objects:
        assert isinstance(t, exp.Table)
        table = binder.lookup_table(t.db or None, t.name)
        if table is None and session.ctx.system.relation(t.db or "pg_catalog", t.name):
            raise sql_error(
                INSUFFICIENT_PRIVILEGE, f'permission denied: "{t.name}" is a system catalog'
            )
        if table is None:
            if if_exists:
                notices.append(Notice(f'{wanted} "{t.name}" does not exist, skipping'))
                continue
            raise sql_error(
                UNDEFINED_TABLE, f'{wanted} "{t.name}" does not exist', position=position_of(t)
            )
        if table.kind != wanted:
            raise sql_error(
                WRONG_OBJECT_TYPE,
                f'"{t.name}" is not a {wanted}',
                hint=f"Use DROP {table.kind.upper()} to remove a {table.kind}.",
            )
        targets.append(table)
    cascade = bool(ast.args.get("cascade"))
    for table in targets:
        if table.id in session.ctx.catalog.tables:  # not dropped by an earlier CASCADE
            await session.ctx.ddl.jobs.drop(table, cascade=cascade)
    return command(tag, *notices)
