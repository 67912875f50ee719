"""The catalog: every named object (schemas, tables; later MVs, sources, sinks), kept in
meta tables inside the state store and mirrored in memory.

Changes are made in two steps so that a failed statement changes nothing: a
``CatalogChange`` carries the DuckDB statements to run inside the epoch's transaction and
the in-memory update to apply only after that transaction committed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import duckdb

from rivulet.common.chunk import OP_COLUMN, ROW_ID_COLUMN, VNODE_COLUMN
from rivulet.common.errors import DUPLICATE_COLUMN, SYNTAX_ERROR, sql_error
from rivulet.common.types import DataType, type_from_name
from rivulet.meta.recovery import RECOVERY_EVENTS_DDL, RECOVERY_EVENTS_MIGRATION
from rivulet.storage.state_store import META_SCHEMA, StateStore
from rivulet.storage.state_table import StateTableSchema

DEFAULT_DATABASE = "dev"
DEFAULT_SCHEMA = "public"
DEFAULT_USER = "root"
FIRST_OBJECT_ID = 1001

# Schemas every database has; user objects live in ``public`` (or schemas users create).
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "rw_catalog")
# OIDs PostgreSQL gives these namespaces; clients sometimes hard-code them.
SCHEMA_OIDS = {"pg_catalog": 11, "public": 2200, "information_schema": 12131, "rw_catalog": 12132}


# Column names the system uses: Rivulet's in stored state, PostgreSQL's system columns.
RESERVED_COLUMNS = frozenset(
    {ROW_ID_COLUMN, VNODE_COLUMN, OP_COLUMN, "tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"}
)


def check_column_names(names: list[str], relation: str, hidden: tuple[str, ...] = ()) -> None:
    """Refuse column names a relation cannot store: empty ones, reserved ones, and names
    that differ only in case (the state store, like SQL's unquoted names, does not tell
    them apart). ``relation`` names the object in the message; ``hidden``: the system's
    own columns of it (checked for clashes only)."""
    seen: dict[str, str] = {}
    for position, name in enumerate([*names, *hidden]):
        if name == "":
            raise sql_error(SYNTAX_ERROR, "zero-length delimited identifier")
        folded = name.lower()
        if folded in RESERVED_COLUMNS and position < len(names):
            raise sql_error(
                DUPLICATE_COLUMN,
                f'column name "{name}" is reserved',
                hint=f'Rivulet uses "{folded}" itself; give the column of {relation} another name.',
            )
        if folded in seen:
            other = seen[folded]
            raise sql_error(
                DUPLICATE_COLUMN,
                f'column "{name}" specified more than once',
                hint=None
                if other == name
                else f'"{other}" and "{name}" differ only in case, which Rivulet does not'
                f" tell apart in stored state; rename one of them in {relation}.",
            )
        seen[folded] = name


@dataclass(frozen=True, slots=True)
class ColumnCatalog:
    name: str
    type: DataType
    not_null: bool = False
    hidden: bool = False


@dataclass(frozen=True, slots=True)
class TableCatalog:
    """A table. ``columns`` lists the stored columns: visible ones first, then the hidden
    ``_row_id`` when the table has no primary key. ``pk`` and ``dist_key`` index into it."""

    id: int
    schema: str
    name: str
    columns: tuple[ColumnCatalog, ...]
    pk: tuple[int, ...]
    dist_key: tuple[int, ...]
    definition: str
    owner: str = DEFAULT_USER
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    kind: str = "table"
    # Relations this one reads (an MV's upstream tables and MVs).
    dependencies: tuple[int, ...] = ()
    append_only: bool = False
    # The parallelism policy the job's actors run with (``adaptive``, ``n``,
    # ``bounded(n)``, ``ratio(r)``), and one stored to apply at the next rebuild (an ALTER
    # ... DEFERRED; None: none pending).
    parallelism: str = "adaptive"
    target_parallelism: str | None = None
    # A source: its connector and options (a table with a connector has them too).
    connector: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    # Ids of the job's internal state tables (aggregation, join, top-N state), in plan
    # order: a job rebuilt from its definition at restart finds its state again.
    internal_tables: tuple[int, ...] = ()
    # How the job's scans read their upstreams' history (``arrangement``, ``snapshot``,
    # ``no_shuffle``, ``upstream_only``; "" for a job without scans): a job rebuilt while
    # still backfilling goes on the same way.
    backfill_type: str = ""
    # ``creating`` while the job's scans backfill, then ``created``. A creating job runs
    # at ``backfill_parallelism`` when one is set; ``background``: its CREATE returned at
    # once; ``backfill_rate_limit``: rows per second per scan actor (None: unlimited).
    status: str = "created"
    background: bool = False
    backfill_parallelism: str | None = None
    backfill_rate_limit: int | None = None
    # Why a stored target waits (``blocked by job <id>``), shown by rw_streaming_jobs.
    reconcile_note: str | None = None

    @property
    def is_streaming_job(self) -> bool:
        return self.kind in ("table", "materialized view")

    def properties(self) -> dict[str, object]:
        return {
            "dependencies": list(self.dependencies),
            "append_only": self.append_only,
            "parallelism": self.parallelism,
            "target_parallelism": self.target_parallelism,
            "connector": self.connector,
            "options": [list(kv) for kv in self.options],
            "internal_tables": list(self.internal_tables),
            "backfill_type": self.backfill_type,
            "status": self.status,
            "background": self.background,
            "backfill_parallelism": self.backfill_parallelism,
            "backfill_rate_limit": self.backfill_rate_limit,
            "reconcile_note": self.reconcile_note,
        }

    @property
    def creating(self) -> bool:
        return self.status == "creating"

    @property
    def running_policy(self) -> str:
        """The policy its actors are built with now."""
        if self.creating and self.backfill_parallelism is not None:
            return self.backfill_parallelism
        return self.parallelism

    @property
    def visible_columns(self) -> list[ColumnCatalog]:
        return [c for c in self.columns if not c.hidden]

    @property
    def has_row_id(self) -> bool:
        return any(c.name == ROW_ID_COLUMN and c.hidden for c in self.columns)

    @property
    def user_pk(self) -> list[str]:
        """The primary key columns the user declared (empty when the key is ``_row_id``)."""
        return [] if self.has_row_id else [self.columns[i].name for i in self.pk]

    def column(self, name: str) -> ColumnCatalog | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def state_schema(self) -> StateTableSchema:
        return StateTableSchema(
            table_id=self.id,
            columns=tuple((c.name, c.type) for c in self.columns),
            pk=self.pk,
            dist_key=self.dist_key,
            not_null=tuple(i for i, c in enumerate(self.columns) if c.not_null),
        )

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass
class CatalogChange:
    """Statements to run in the committing transaction, and what to do once committed.
    ``setup`` runs before the epoch's state is written (creating state tables),
    ``statements`` after it (dropping them, catalog rows)."""

    statements: list[tuple[str, list[object]]] = field(default_factory=list)
    on_commit: list[Callable[[], None]] = field(default_factory=list)
    setup: list[tuple[str, list[object]]] = field(default_factory=list)

    def write_setup(self, cursor: duckdb.DuckDBPyConnection) -> None:
        for sql, params in self.setup:
            cursor.execute(sql, params)

    def write(self, cursor: duckdb.DuckDBPyConnection) -> None:
        for sql, params in self.statements:
            cursor.execute(sql, params)

    def committed(self) -> None:
        for fn in self.on_commit:
            fn()


_META_DDL = [
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.objects (
        id INTEGER PRIMARY KEY, kind VARCHAR NOT NULL, schema_name VARCHAR NOT NULL,
        name VARCHAR NOT NULL, definition VARCHAR NOT NULL, owner VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL, pk INTEGER[] NOT NULL, dist_key INTEGER[] NOT NULL,
        properties JSON)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.columns (
        object_id INTEGER NOT NULL, position INTEGER NOT NULL, name VARCHAR NOT NULL,
        type_name VARCHAR NOT NULL, type_precision INTEGER, type_scale INTEGER,
        not_null BOOLEAN NOT NULL, hidden BOOLEAN NOT NULL, type_duckdb VARCHAR NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.schemas (
        id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, owner VARCHAR NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.counters (
        name VARCHAR PRIMARY KEY, value BIGINT NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.fragments (
        fragment_id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,
        distribution_type VARCHAR NOT NULL, flags VARCHAR[] NOT NULL,
        upstream_fragment_ids INTEGER[] NOT NULL, state_table_ids INTEGER[] NOT NULL,
        dist_key INTEGER[] NOT NULL, plan VARCHAR NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.actors (
        actor_id INTEGER PRIMARY KEY, fragment_id INTEGER NOT NULL, worker_id INTEGER NOT NULL,
        vnode_count INTEGER NOT NULL, vnodes UTINYINT[] NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.stream_errors (
        job_id INTEGER NOT NULL, fragment_id INTEGER NOT NULL, operator VARCHAR NOT NULL,
        error_type VARCHAR NOT NULL, expression VARCHAR NOT NULL, count BIGINT NOT NULL,
        last_seen TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (job_id, fragment_id, operator, error_type, expression))""",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.ddl_progress (
        ddl_id INTEGER PRIMARY KEY, ddl_statement VARCHAR NOT NULL,
        create_type VARCHAR NOT NULL, progress VARCHAR NOT NULL,
        initialized_at TIMESTAMPTZ NOT NULL, backfill_type VARCHAR NOT NULL,
        consumed_rows BIGINT, total_rows BIGINT)""",
    # Stores made before the counts were kept as numbers (restored from them at start).
    f"ALTER TABLE {META_SCHEMA}.ddl_progress ADD COLUMN IF NOT EXISTS consumed_rows BIGINT",
    f"ALTER TABLE {META_SCHEMA}.ddl_progress ADD COLUMN IF NOT EXISTS total_rows BIGINT",
    f"""CREATE TABLE IF NOT EXISTS {META_SCHEMA}.workers (
        id INTEGER PRIMARY KEY, host VARCHAR NOT NULL, port INTEGER NOT NULL,
        slots INTEGER NOT NULL)""",
    RECOVERY_EVENTS_DDL,
    RECOVERY_EVENTS_MIGRATION,
]


class Catalog:
    """The in-memory mirror of the meta tables. Mutations only through ``CatalogChange``."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.tables: dict[int, TableCatalog] = {}
        self.schemas: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        # Bumped on every committed change; caches of bound statements key on it.
        self.version = 0
        store.run_setup(_META_DDL)
        self._load()

    # ----------------------------------------------------------------- loading
    def _load(self) -> None:
        cur = self.store.cursor()
        if not cur.execute(f"SELECT 1 FROM {META_SCHEMA}.schemas").fetchall():
            cur.execute(
                f"INSERT INTO {META_SCHEMA}.schemas VALUES (?, ?, ?)",
                [SCHEMA_OIDS[DEFAULT_SCHEMA], DEFAULT_SCHEMA, DEFAULT_USER],
            )
        for sid, name in cur.execute(f"SELECT id, name FROM {META_SCHEMA}.schemas").fetchall():
            self.schemas[name] = sid
        for name, value in cur.execute(
            f"SELECT name, value FROM {META_SCHEMA}.counters"
        ).fetchall():
            self._counters[name] = int(value)
        columns: dict[int, list[ColumnCatalog]] = {}
        for oid, name, tname, prec, scale, nn, hidden, tduck in cur.execute(
            f"SELECT object_id, name, type_name, type_precision, type_scale, not_null, hidden, "
            f"type_duckdb FROM {META_SCHEMA}.columns ORDER BY object_id, position"
        ).fetchall():
            columns.setdefault(oid, []).append(
                ColumnCatalog(name, _stored_type(tname, prec, scale, tduck), nn, hidden)
            )
        for oid, kind, schema, name, definition, owner, created, pk, dist, props in cur.execute(
            f"SELECT id, kind, schema_name, name, definition, owner, created_at, pk, dist_key, "
            f"properties FROM {META_SCHEMA}.objects ORDER BY id"
        ).fetchall():
            p = json.loads(props) if props else {}
            self.tables[oid] = TableCatalog(
                id=oid, schema=schema, name=name, columns=tuple(columns.get(oid, ())),
                pk=tuple(pk), dist_key=tuple(dist), definition=definition, owner=owner,
                created_at=created, kind=kind,
                dependencies=tuple(p.get("dependencies") or ()),
                append_only=bool(p.get("append_only")),
                parallelism=str(p.get("parallelism") or "adaptive"),
                target_parallelism=p.get("target_parallelism"),
                connector=p.get("connector"),
                options=tuple(tuple(kv) for kv in p.get("options") or ()),
                internal_tables=tuple(p.get("internal_tables") or ()),
                backfill_type=str(p.get("backfill_type") or ""),
                status=str(p.get("status") or "created"),
                background=bool(p.get("background")),
                backfill_parallelism=p.get("backfill_parallelism"),
                backfill_rate_limit=p.get("backfill_rate_limit"),
                reconcile_note=p.get("reconcile_note"),
            )  # fmt: skip

    # ----------------------------------------------------------------- lookups
    def get_table(self, schema: str, name: str) -> TableCatalog | None:
        for t in self.tables.values():
            if t.name == name and t.schema == schema:
                return t
        return None

    def all_tables(self) -> Iterator[TableCatalog]:
        return iter(sorted(self.tables.values(), key=lambda t: t.id))

    def name_taken(self, schema: str, name: str) -> bool:
        return self.get_table(schema, name) is not None

    def allocate_id(self, change: CatalogChange) -> int:
        """Reserve an object id (objects and their state tables share this space)."""
        return self.allocate("next_object_id", change, FIRST_OBJECT_ID)

    def allocate(self, counter: str, change: CatalogChange, first: int = 1, n: int = 1) -> int:
        """Reserve ``n`` consecutive ids of a counter; persisted with ``change``. Returns
        the first. Ids only move forward: those a failed statement reserved are never
        handed out again (a recovery may have built actors with later ones meanwhile),
        and the stored counter never goes back (changes may commit out of order)."""
        start = self._counters.get(counter, first)
        self._counters[counter] = start + n
        change.statements.append(
            (
                f"INSERT INTO {META_SCHEMA}.counters VALUES (?, ?) ON CONFLICT (name)"
                " DO UPDATE SET value = greatest(value, excluded.value)",
                [counter, start + n],
            )
        )
        return start

    @contextlib.contextmanager
    def preview_allocations(self) -> Iterator[None]:
        """Ids reserved inside are handed out again afterwards: for previews (EXPLAIN)
        that build what a statement would, synchronously, and commit nothing."""
        saved = dict(self._counters)
        try:
            yield
        finally:
            self._counters = saved

    def dependents(self, oid: int) -> list[TableCatalog]:
        """Relations that read ``oid`` directly."""
        return [t for t in self.all_tables() if oid in t.dependencies]

    # ----------------------------------------------------------------- changes
    def add_table(self, table: TableCatalog, change: CatalogChange) -> None:
        change.statements.append(
            (
                f"INSERT INTO {META_SCHEMA}.objects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    table.id, table.kind, table.schema, table.name, table.definition,
                    table.owner, table.created_at, list(table.pk), list(table.dist_key),
                    json.dumps(table.properties()),
                ],
            )
        )  # fmt: skip
        for pos, col in enumerate(table.columns):
            change.statements.append(
                (
                    f"INSERT INTO {META_SCHEMA}.columns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        table.id, pos, col.name, col.type.name, col.type.precision,
                        col.type.scale, col.not_null, col.hidden, col.type.duckdb,
                    ],
                )
            )  # fmt: skip
        change.on_commit.append(lambda: self._put(table))

    def remove_table(self, table: TableCatalog, change: CatalogChange) -> None:
        change.statements.append((f"DELETE FROM {META_SCHEMA}.objects WHERE id = ?", [table.id]))
        change.statements.append(
            (f"DELETE FROM {META_SCHEMA}.columns WHERE object_id = ?", [table.id])
        )
        change.on_commit.append(lambda: self._drop(table.id))

    def rename_table(self, table: TableCatalog, new_name: str, change: CatalogChange) -> None:
        change.statements.append(
            (f"UPDATE {META_SCHEMA}.objects SET name = ? WHERE id = ?", [new_name, table.id])
        )
        change.on_commit.append(lambda: self._put(replace(table, name=new_name)))

    def set_parallelism(
        self, table: TableCatalog, policy: str, change: CatalogChange, *, target: str | None = None
    ) -> None:
        """Store the policy a job's actors run with, and the one to apply at its next
        rebuild (None: none)."""
        self.update_job(table, change, parallelism=policy, target_parallelism=target)

    def update_job(
        self, table: TableCatalog, change: CatalogChange, **fields: object
    ) -> TableCatalog:
        """Change a job's properties (status, policies, ...) with ``change``."""
        updated = replace(table, **fields)  # type: ignore[arg-type]
        change.statements.append(
            (
                f"UPDATE {META_SCHEMA}.objects SET properties = ? WHERE id = ?",
                [json.dumps(updated.properties()), table.id],
            )
        )
        change.on_commit.append(lambda: self._put(updated))
        return updated

    def _put(self, table: TableCatalog) -> None:
        self.tables[table.id] = table
        self.version += 1

    def _drop(self, oid: int) -> None:
        self.tables.pop(oid, None)
        self.version += 1


def _stored_type(name: str, precision: int | None, scale: int | None, duck: str) -> DataType:
    """A column's type from its meta.columns row."""
    if name == "numeric" and precision is not None and duck.startswith("DECIMAL"):
        return DataType.numeric(precision, scale)
    found = type_from_name(name)
    if found is not None and found.duckdb == duck:
        return found
    return DataType.from_duckdb(duck)
