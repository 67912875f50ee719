"""Questions about where a node sits in a statement's tree."""

from __future__ import annotations

from sqlglot import exp


def names_a_cte(table: exp.Table) -> bool:
    """Whether a WITH clause enclosing ``table`` defines a CTE of its name. A CTE named
    elsewhere in the statement must not hide a reference from the binder: DuckDB would
    resolve it against its own catalog (``duckdb_tables``, ``pg_settings``...)."""
    node = table.parent
    while node is not None:
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With) and any(
            cte.alias_or_name == table.name for cte in with_.expressions
        ):
            return True
        node = node.parent
    return False
