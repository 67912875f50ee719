"""Planning a table's streaming job from its catalog entry: the DML inbox (or the
connector's source) into the materialize that stores the table."""

from __future__ import annotations

from rivulet.meta.catalog import TableCatalog
from rivulet.stream.connectors import offsets_state_schema
from rivulet.stream.executor import Field, Schema
from rivulet.stream.plan import (
    DmlNode,
    ExchangeNode,
    MaterializeNode,
    PlanNode,
    SourceNode,
)


def table_plan(table: TableCatalog) -> PlanNode:
    """A table's job: its DML inbox into a materialize with overwrite-on-conflict."""
    schema = Schema(Field(c.name, c.type) for c in table.columns)
    if table.connector:
        return _connector_table_plan(table, schema)
    dml = DmlNode(schema, list(table.pk), table_id=table.id)
    return MaterializeNode(
        schema,
        list(table.pk),
        inputs=[dml],
        table_id=table.id,
        table_name=table.name,
        conflict="overwrite",
        state_schema=table.state_schema(),
        fresh_inserts=table.has_row_id,
    )


def _connector_table_plan(table: TableCatalog, schema: Schema) -> PlanNode:
    """A table with a connector: the source's rows, hashed by the table's distribution key
    to the table's actors. Keyed by generated row ids, it only ever appends."""
    source = SourceNode(
        schema,
        list(table.pk),
        append_only=True,
        source_id=table.id,
        source_name=table.name,
        connector=table.connector or "",
        options=dict(table.options),
        state_schema=offsets_state_schema(),
    )
    exchange = ExchangeNode.hash_of(source, list(table.dist_key))
    return MaterializeNode(
        schema,
        list(table.pk),
        append_only=table.has_row_id,
        inputs=[exchange],
        table_id=table.id,
        table_name=table.name,
        conflict="overwrite",
        state_schema=table.state_schema(),
        fresh_inserts=table.has_row_id,
    )
