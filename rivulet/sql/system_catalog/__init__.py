"""System relations: ``pg_catalog``, ``information_schema`` and ``rw_catalog``.

Each is a DuckDB view in the ``rw_sys`` schema over the meta tables, so it always shows
the last committed catalog, and PostgreSQL clients (psql, drivers, ORMs) can introspect
Rivulet as they would PostgreSQL. Functions PostgreSQL has and DuckDB lacks are macros in
the same schema; the binder renames calls to them (``rewrite`` holds the PostgreSQL
syntax it translates on the way: ``::regclass`` and friends, qualified names...).

OIDs agree across the views: a relation's ``pg_class.oid`` is its catalog id (which
``pg_attribute.attrelid``, ``pg_index.indrelid``... repeat), type OIDs are those of
``rivulet.common.types``, namespace OIDs those of ``meta.catalog.SCHEMA_OIDS``.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from rivulet.sql.system_catalog.base import SYS_SCHEMA, SYSTEM_REL_OID_BASE, SystemView
from rivulet.sql.system_catalog.information_schema import information_schema_views
from rivulet.sql.system_catalog.internal import internal_statements
from rivulet.sql.system_catalog.macros import LOOKUP, PURE, USER_MACROS
from rivulet.sql.system_catalog.pg_catalog import pg_catalog_views, pk_view
from rivulet.sql.system_catalog.rw_catalog import rw_catalog_views

__all__ = ["MACROS", "MACRO_NAMES", "SYS_SCHEMA", "VIEWS", "SystemCatalog", "SystemView"]

VIEWS: list[SystemView] = [
    *pg_catalog_views(),
    *information_schema_views(),
    *rw_catalog_views(),
]
# Each system relation's OID in pg_class: stable for a given set of views.
REL_OIDS: dict[tuple[str, str], int] = {
    key: SYSTEM_REL_OID_BASE + i for i, key in enumerate(sorted((v.schema, v.name) for v in VIEWS))
}
assert SYSTEM_REL_OID_BASE + len(REL_OIDS) < 1001, "system relation OIDs reach user ids"

MACROS: dict[str, str] = {**PURE, **LOOKUP}
# The macros a query may call by name; the binder renames the calls to ``rw_sys.<name>``.
MACRO_NAMES = USER_MACROS


class SystemCatalog:
    """Resolves system relation names and creates their views and macros."""

    def __init__(self) -> None:
        self._by_name = {(v.schema, v.name): v for v in VIEWS}
        self._inline: dict[tuple[str, str], exp.Expr] = {}

    def relation(self, schema: str, name: str) -> str | None:
        """The name of the DuckDB view (in ``rw_sys``) standing for a system relation."""
        view = self._by_name.get((schema, name))
        return view.duckdb_name if view else None

    def inline(self, schema: str, name: str) -> exp.Expr | None:
        """For a system relation that is always empty, the subquery standing for it (no
        DuckDB view exists for those: creating ~70 of them would slow every start)."""
        view = self._by_name.get((schema, name))
        if view is None or not view.empty:
            return None
        parsed = self._inline.get((schema, name))
        if parsed is None:
            parsed = sqlglot.parse_one(view.sql, dialect="duckdb").subquery()
            self._inline[(schema, name)] = parsed
        return parsed.copy()

    def names(self) -> list[tuple[str, str]]:
        return sorted(self._by_name)

    def view(self, schema: str, name: str) -> SystemView | None:
        return self._by_name.get((schema, name))

    def compute_setup_sql(self) -> list[str]:
        """What a DuckDB that only computes (a compute node's) needs to evaluate what
        streaming jobs evaluate: the macros that read nothing."""
        out = [f"CREATE SCHEMA IF NOT EXISTS {SYS_SCHEMA}"]
        out += [f"CREATE MACRO {SYS_SCHEMA}.{name}{body}" for name, body in PURE.items()]
        return out

    def setup_sql(self) -> list[str]:
        """The statements that create ``rw_sys`` afresh: macros that read nothing, the
        internal views, the system views, then the macros that read them."""
        out = [f"DROP SCHEMA IF EXISTS {SYS_SCHEMA} CASCADE", f"CREATE SCHEMA {SYS_SCHEMA}"]
        for name, body in PURE.items():
            out.append(f"CREATE MACRO {SYS_SCHEMA}.{name}{body}")
        out.extend(internal_statements(VIEWS, REL_OIDS))
        out.append(f"CREATE VIEW {SYS_SCHEMA}.i_pk AS {pk_view()}")
        for v in VIEWS:
            if not v.empty:
                out.append(f'CREATE VIEW {SYS_SCHEMA}."{v.duckdb_name}" AS {v.sql}')
        for name, body in LOOKUP.items():
            out.append(f"CREATE MACRO {SYS_SCHEMA}.{name}{body}")
        return out
