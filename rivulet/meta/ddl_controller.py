"""DDL: creating and dropping objects, atomically with an epoch.

Each DDL builds one ``CatalogChange`` - the state table's DuckDB DDL and the catalog rows -
and commits it through the barrier manager; the in-memory catalog and the stream runtime
change only once that commit succeeded. DDL statements run one at a time.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from rivulet.common.errors import DUPLICATE_TABLE, UNDEFINED_TABLE, sql_error
from rivulet.meta.barrier_manager import BarrierManager
from rivulet.meta.catalog import Catalog, CatalogChange, TableCatalog
from rivulet.storage.state_table import StateTable
from rivulet.stream.runtime import StreamRuntime


class DdlController:
    def __init__(self, catalog: Catalog, runtime: StreamRuntime, barrier: BarrierManager) -> None:
        self.catalog = catalog
        self.runtime = runtime
        self.barrier = barrier
        self.lock = asyncio.Lock()

    def start_existing(self) -> None:
        """At start: a writer for every table in the catalog."""
        for table in self.catalog.all_tables():
            if table.kind == "table":
                self._start_table(table)

    def _start_table(self, table: TableCatalog) -> None:
        self.runtime.add_table(
            table.id, StateTable(table.state_schema()), has_row_id=table.has_row_id
        )

    async def create_table(self, table: TableCatalog, *, if_not_exists: bool = False) -> bool:
        """Create a table; ``table.id`` is ignored and allocated here. Returns False when
        it existed and ``if_not_exists`` was given."""
        async with self.lock:
            if self.catalog.name_taken(table.schema, table.name):
                if if_not_exists:
                    return False
                raise sql_error(DUPLICATE_TABLE, f'relation "{table.name}" already exists')
            change = CatalogChange()
            oid = self.catalog.allocate_id(change)
            table = replace(table, id=oid)
            schema = table.state_schema()
            change.statements.append((schema.create_sql(), []))
            self.catalog.add_table(table, change)
            change.on_commit.append(lambda: self._start_table(table))
            try:
                await self.barrier.checkpoint(change)
            except BaseException:
                self.catalog.discard_allocations()
                raise
            return True

    async def drop_table(self, table: TableCatalog) -> None:
        async with self.lock:
            if table.id not in self.catalog.tables:
                raise sql_error(UNDEFINED_TABLE, f'table "{table.name}" does not exist')
            writer = self.runtime.writer(table.id)
            if writer is not None:
                async with writer.lock:
                    writer.dropped = True
            change = CatalogChange()
            change.statements.append((table.state_schema().drop_sql(), []))
            self.catalog.remove_table(table, change)
            change.on_commit.append(lambda: self.runtime.remove_table(table.id))
            try:
                await self.barrier.checkpoint(change)
            except BaseException:
                if writer is not None:
                    writer.dropped = False
                raise
