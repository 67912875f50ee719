"""What every part of the binder shares: the session context a query is bound against
(``BindContext``), what binding produces (``BoundQuery``), the mark on nodes the engine
built (``INTERNAL``) and identifier quoting. Kept apart so the parts import it without
importing each other or the ``Binder``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from rivulet.common.types import DataType
from rivulet.meta.catalog import (
    DEFAULT_DATABASE,
    DEFAULT_SCHEMA,
    Catalog,
    TableCatalog,
)
from rivulet.meta.system_params import DEFAULT_MAX_VALUE_BYTES
from rivulet.sql.activity import Activity
from rivulet.sql.system_catalog import SystemCatalog

DUCKDB = "duckdb"
# Marks relation nodes the engine built (never set by the parser): the binder leaves them.
INTERNAL = "rw_internal"


@dataclass
class BindContext:
    """What binding needs from the session."""

    catalog: Catalog
    system: SystemCatalog
    user: str = "root"
    database: str = DEFAULT_DATABASE
    search_path: tuple[str, ...] = (DEFAULT_SCHEMA,)
    session_id: int = 0
    server_version: str = ""
    setting: Callable[[str], str | None] = field(default=lambda _name: None)
    # The system parameter max_value_bytes: the largest value a function may build.
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    # Every client session's activity, for pg_stat_activity.
    activity: Callable[[], list[Activity]] = field(default=lambda: [])


@dataclass
class BoundQuery:
    """A query ready for DuckDB: its SQL, parameter count and inferred parameter types."""

    sql: str
    param_count: int
    param_types: list[DataType | None]
    tables: list[TableCatalog]
    # Whether it reads stored or generated rows (tables, MVs, table functions, CTEs):
    # such work waits its turn for a query thread; work over constants and the system
    # catalog never waits (``sql.query_pool``).
    reads_data: bool = True
    # Whether its SQL holds state outside the catalog and the session's settings (other
    # sessions' activity): never cached, never prepared.
    volatile: bool = False


def quote(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)
