"""Built-in source connectors (datagen, nexmark): generators of Arrow batches for a split
from an offset, deterministic so that a source replays exactly after a restart.

``prepare_source`` validates a CREATE SOURCE / CREATE TABLE ... WITH (connector = ...)
(columns, options, a sample batch cast to the declared types) and completes the options
with what must be fixed at creation; ``open_connector`` builds the generator an actor
reads from. A source's offsets are checkpointed in a state table of
``offsets_state_schema`` layout: one row per split.
"""

from __future__ import annotations

import pyarrow as pa

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.errors import (
    DATATYPE_MISMATCH,
    FEATURE_NOT_SUPPORTED,
    INVALID_PARAMETER_VALUE,
    SYNTAX_ERROR,
    UNDEFINED_COLUMN,
    sql_error,
)
from rivulet.common.types import BIGINT, DataType, arrow_type_of
from rivulet.storage.state_table import StateTableSchema
from rivulet.stream.connectors.base import ColumnSpec, Connector, Options, ReadBatch
from rivulet.stream.connectors.datagen import DatagenConnector, default_basetime
from rivulet.stream.connectors.nexmark import TABLE_COLUMNS, NexmarkConnector, table_type_of

__all__ = [
    "CONNECTORS",
    "ColumnSpec",
    "Connector",
    "ReadBatch",
    "offsets_state_schema",
    "open_connector",
    "prepare_source",
]

CONNECTORS: dict[str, type[Connector]] = {
    "datagen": DatagenConnector,
    "nexmark": NexmarkConnector,
}


# The declared types a generated value of each type may be stored as.
_COMPATIBLE = {
    "bigint": ("smallint", "integer", "bigint", "real", "double precision", "numeric"),
    "character varying": ("character varying",),
    "timestamp without time zone": ("timestamp without time zone", "timestamp with time zone"),
}


def offsets_state_schema(table_id: int = 0) -> StateTableSchema:
    """Per-split offsets of a source: split id -> the next offset to read."""
    return StateTableSchema(table_id, (("split_id", BIGINT), ("offset", BIGINT)), (0,), (0,))


# Connectors of the SQL surface Rivulet speaks that reach outside systems; they are
# refused as not supported rather than as unknown.
_EXTERNAL_CONNECTORS = frozenset(
    (
        "kafka",
        "pulsar",
        "kinesis",
        "s3",
        "s3_v2",
        "gcs",
        "azblob",
        "posix_fs",
        "iceberg",
        "postgres-cdc",
        "mysql-cdc",
        "sqlserver-cdc",
        "mongodb-cdc",
        "citus-cdc",
        "nats",
        "mqtt",
        "google_pubsub",
        "blackhole",
    )
)


def _connector_class(connector: str) -> type[Connector]:
    cls = CONNECTORS.get(connector.lower())
    if cls is None and connector.lower() in _EXTERNAL_CONNECTORS:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            f"connector '{connector}' is not supported yet",
            hint="Built-in connectors: " + ", ".join(sorted(CONNECTORS)) + ".",
        )
    if cls is None:
        raise sql_error(
            INVALID_PARAMETER_VALUE,
            f"unknown connector '{connector}'",
            hint="Built-in connectors: " + ", ".join(sorted(CONNECTORS)) + ".",
        )
    return cls


def open_connector(connector: str, options: dict[str, str], columns: list[ColumnSpec]) -> Connector:
    """The generator of a source whose options were validated by ``prepare_source``."""
    cls = _connector_class(connector)
    opts = Options(connector.lower(), options)
    conn = cls(opts, columns)
    opts.check_all_used()
    return conn


def prepare_source(
    connector: str,
    options: dict[str, str],
    columns: list[tuple[str, DataType]] | None,
) -> tuple[list[tuple[str, DataType]], dict[str, str]]:
    """Validate a source definition. ``columns``: the declared ones (None: none declared).
    Returns the columns the source produces (visible ones) and the options to store."""
    cls = _connector_class(connector)
    name = connector.lower()
    options = dict(options)
    if cls is NexmarkConnector:
        table_type = table_type_of(Options(name, options))
        known = dict(TABLE_COLUMNS.get(table_type or "", []))
        if columns is None:
            if table_type is None:
                NexmarkConnector(Options(name, options), [])  # raises: no table type
            columns = list(TABLE_COLUMNS[table_type or ""])
        for col_name, dtype in columns:
            if col_name not in known:
                raise sql_error(
                    UNDEFINED_COLUMN,
                    f'column "{col_name}" is not a column of nexmark {table_type} events',
                    hint=f"{table_type} events have columns: {', '.join(known)}.",
                )
            if dtype.name not in _COMPATIBLE[known[col_name].name]:
                raise sql_error(
                    DATATYPE_MISMATCH,
                    f'column "{col_name}" of nexmark {table_type} events is of type'
                    f" {known[col_name].display()}, not {dtype.display()}",
                )
    elif columns is None:
        raise sql_error(
            SYNTAX_ERROR,
            f"a {name} source needs a column list",
            hint="For example: CREATE SOURCE s (v INT) WITH (connector = 'datagen', ...).",
        )
    else:
        # Timestamps drawn back from "now" are drawn back from the creation time instead,
        # so that every replay of the source produces the same rows.
        for col_name, dtype in columns:
            if dtype.name in ("timestamp without time zone", "timestamp with time zone"):
                prefix = _field_prefix(options, col_name)
                mode = options.get(f"{prefix}.max_past_mode", "absolute").strip().lower()
                if f"{prefix}.basetime" not in options and mode == "absolute":
                    options[f"{prefix}.basetime"] = default_basetime()
    specs = [ColumnSpec(n, t) for n, t in columns] + [ColumnSpec(ROW_ID_COLUMN, BIGINT)]
    conn = open_connector(name, options, specs)
    _check_sample(conn, specs)
    return list(columns), options


def _field_prefix(options: dict[str, str], column: str) -> str:
    """``fields.<column>`` as the options spell the column (case-insensitively)."""
    for key in options:
        if key.startswith("fields.") and key.count(".") >= 2:
            col = key[len("fields.") :].rpartition(".")[0]
            if col.lower() == column.lower():
                return f"fields.{col}"
    return f"fields.{column}"


def _check_sample(conn: Connector, specs: list[ColumnSpec]) -> None:
    """Generate a few rows and cast them to the declared types: a type the generator's
    values do not fit fails now, not in the running job."""
    names = [s.name for s in specs]
    batch = conn.read(0, 0, 8, names).data
    for spec in specs:
        target = arrow_type_of(spec.type)
        try:
            batch.column(spec.name).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise sql_error(
                DATATYPE_MISMATCH,
                f'column "{spec.name}" cannot be of type {spec.type.display()} in a'
                f" {conn.name} source: {exc}",
            ) from None
