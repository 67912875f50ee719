"""Evaluating expressions over chunks with DuckDB, one statement per chunk.

Expressions are DuckDB SQL over the chunk's columns named ``c0, c1, ...``. A row whose
expression fails (division by zero, a bad cast) must not kill the job: the chunk is
evaluated again with the safe forms of the expressions (NULL instead of an error), and the
rows that hit an error are counted (``error_predicates`` say which rows did).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

_names = itertools.count()


@dataclass(frozen=True)
class ExprSet:
    """Expressions with their error-tolerant forms. ``safe`` may equal ``strict`` when
    nothing can fail; ``error_predicates`` are true on rows where something failed."""

    strict: list[str]
    safe: list[str]
    error_predicates: list[str] = field(default_factory=list)

    @staticmethod
    def plain(exprs: list[str]) -> ExprSet:
        return ExprSet(list(exprs), list(exprs), [])


def positional(table: pa.Table) -> pa.Table:
    """The chunk with its columns named c0, c1, ... as expressions name them."""
    return table.rename_columns([f"c{i}" for i in range(table.num_columns)])


def _run(cur: duckdb.DuckDBPyConnection, table: pa.Table, select: str) -> pa.Table:
    name = f"__chunk_{next(_names)}"
    cur.register(name, positional(table))
    try:
        return cur.sql(f"SELECT {select} FROM {name}").to_arrow_table()
    finally:
        cur.unregister(name)


def evaluate(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, exprs: ExprSet
) -> tuple[pa.Table, int]:
    """The expressions' values per row (columns c0..), and how many rows had an error."""
    if not exprs.strict:  # e.g. count(*)'s pre-projection: rows without columns
        return table.select([]), 0
    select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs.strict))
    try:
        return _run(cur, table, select), 0
    except duckdb.Error:
        if exprs.safe == exprs.strict and not exprs.error_predicates:
            raise
    select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs.safe))
    out = _run(cur, table, select)
    return out, count_errors(cur, table, exprs.error_predicates)


def evaluate_predicate(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, condition: ExprSet
) -> tuple[np.ndarray, int]:
    """A boolean mask (NULL counts as false) and the number of rows with an error."""
    out, errors = evaluate(
        cur,
        table,
        ExprSet(
            [f"coalesce(({e})::BOOLEAN, false)" for e in condition.strict],
            [f"coalesce(({e})::BOOLEAN, false)" for e in condition.safe],
            condition.error_predicates,
        ),
    )
    mask = np.asarray(out.column(0).to_numpy(zero_copy_only=False), dtype=bool)
    return mask, errors


def count_errors(cur: duckdb.DuckDBPyConnection, table: pa.Table, predicates: list[str]) -> int:
    if not predicates:
        return table.num_rows
    cond = " OR ".join(f"coalesce(({p})::BOOLEAN, false)" for p in predicates)
    out = _run(cur, table, f"count(*) FILTER (WHERE {cond}) AS n")
    return int(out.column(0)[0].as_py())
