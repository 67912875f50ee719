"""Evaluating expressions over chunks with DuckDB, one statement per chunk.

Expressions are DuckDB SQL over the chunk's columns named ``c0, c1, ...``. A row whose
expression fails (an overflow, division by zero, a bad cast, an invalid regular
expression...) must not fail the job, as in RisingWave's non-strict streaming mode: the
chunk is evaluated strictly first (the fast path), and when that raises, again with the
safe forms of the expressions, which yield NULL where a value cannot be computed. Each
expression's ``error_predicate`` says on which rows it failed, so that the errors are
counted per expression (``RowErrors``) and shown in ``rw_stream_errors``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

_names = itertools.count()


@dataclass(frozen=True)
class ExprSet:
    """Expressions with their error-tolerant forms. ``safe`` may equal ``strict`` when
    nothing can fail. ``error_predicates`` has one entry per expression, true on rows
    where it failed ("" when it cannot fail); ``labels`` name each expression as the user
    wrote it (for the error counts)."""

    strict: list[str]
    safe: list[str]
    error_predicates: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    @staticmethod
    def plain(exprs: list[str]) -> ExprSet:
        return ExprSet(list(exprs), list(exprs), [""] * len(exprs), list(exprs))

    def __add__(self, other: ExprSet) -> ExprSet:
        return ExprSet(
            self.strict + other.strict,
            self.safe + other.safe,
            self._predicates() + other._predicates(),
            self._labels() + other._labels(),
        )

    def _predicates(self) -> list[str]:
        return list(self.error_predicates) + [""] * (len(self.strict) - len(self.error_predicates))

    def _labels(self) -> list[str]:
        return list(self.labels) + self.strict[len(self.labels) :]

    @property
    def can_fail(self) -> bool:
        return self.safe != self.strict or any(self.error_predicates)


@dataclass(frozen=True)
class RowErrors:
    """The rows of one chunk whose expressions failed: how many, the kind of error (as
    DuckDB raised it first, without the values), and per failing expression its label,
    how many rows it failed on and the kind of its error."""

    rows: int
    kind: str
    by_expression: list[tuple[str, int, str]]


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
) -> tuple[pa.Table, RowErrors | None]:
    """The expressions' values per row (columns c0..), and the rows that had an error."""
    if not exprs.strict:  # e.g. count(*)'s pre-projection: rows without columns
        return table.select([]), None
    refs = [_column_ref(e) for e in exprs.strict]
    if any(r is not None for r in refs):
        return _evaluate_around_refs(cur, table, exprs, refs)
    return _evaluate_all(cur, table, exprs)


def column_refs(exprs: ExprSet) -> list[int] | None:
    """The input columns that the expressions only name, in order (a projection that
    selects columns: no DuckDB needed); None if one of them computes something."""
    refs = [_column_ref(e) for e in exprs.strict]
    if not refs or any(r is None for r in refs):
        return None
    return [r for r in refs if r is not None]


def select_columns(table: pa.Table, refs: list[int]) -> pa.Table:
    """``evaluate`` of expressions that only name columns (``column_refs``)."""
    return pa.Table.from_arrays(
        [table.column(r) for r in refs], names=[f"c{i}" for i in range(len(refs))]
    )


_COLUMN_REF = re.compile(r"c(\d+)")


def _column_ref(expr: str) -> int | None:
    """The input column an expression only names (``c3``), else None."""
    m = _COLUMN_REF.fullmatch(expr)
    return int(m.group(1)) if m else None


def _evaluate_around_refs(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, exprs: ExprSet, refs: list[int | None]
) -> tuple[pa.Table, RowErrors | None]:
    """Columns the expressions only name are taken as they are, without DuckDB: a copy
    of each through a statement costs time and, for long values, several times their
    size in memory (a 10 MB string took ~30 MB). DuckDB computes the rest."""
    computed = [i for i, r in enumerate(refs) if r is None]
    rest: pa.Table | None = None
    errors: RowErrors | None = None
    if computed:
        rest, errors = _evaluate_all(
            cur,
            table,
            ExprSet(
                [exprs.strict[i] for i in computed],
                [exprs.safe[i] for i in computed],
                [exprs._predicates()[i] for i in computed],
                [exprs._labels()[i] for i in computed],
            ),
        )
    computed_columns = iter(rest.columns if rest is not None else [])
    columns = [table.column(r) if r is not None else next(computed_columns) for r in refs]
    names = [f"c{i}" for i in range(len(refs))]
    return pa.Table.from_arrays(columns, names=names), errors


def _evaluate_all(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, exprs: ExprSet
) -> tuple[pa.Table, RowErrors | None]:
    select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs.strict))
    try:
        return _run(cur, table, select), None
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        failure = exc
    if exprs.can_fail:
        select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs.safe))
        try:
            return _run(cur, table, select), count_errors(cur, table, exprs, failure)
        except duckdb.InterruptException:
            raise
        except duckdb.Error:
            pass  # an expression without a safe form failed (TRY refuses volatile ones)
    return _evaluate_by_rows(cur, table, exprs, failure)


def _evaluate_by_rows(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, exprs: ExprSet, failure: duckdb.Error
) -> tuple[pa.Table, RowErrors]:
    """The last resort: each expression over halves of the rows, down to single rows,
    until the rows that fail are found; those get NULL. A few statements per failing
    row, so only for expressions DuckDB cannot make safe."""
    columns: list[pa.Array] = []
    failed_rows: set[int] = set()
    by_expression: list[tuple[str, int, str]] = []
    for i, (sql, label) in enumerate(zip(exprs.safe, exprs._labels())):
        empty = _run(cur, table.slice(0, 0), f"{sql} AS c{i}").column(0).type
        failed: list[int] = []
        errors: list[duckdb.Error] = []
        columns.append(_bisect(cur, table, 0, f"{sql} AS c{i}", empty, failed, errors))
        failed_rows.update(failed)
        if failed:
            by_expression.append((label, len(failed), error_kind(errors[0])))
    out = pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(columns))])
    return out, RowErrors(len(failed_rows), error_kind(failure), by_expression)


def _bisect(
    cur: duckdb.DuckDBPyConnection,
    rows: pa.Table,
    offset: int,
    select: str,
    type_: pa.DataType,
    failed: list[int],
    errors: list[duckdb.Error],
) -> pa.Array:
    try:
        return _run(cur, rows, select).column(0).combine_chunks().cast(type_)
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        if rows.num_rows <= 1:
            failed.extend(range(offset, offset + rows.num_rows))
            errors.append(exc)
            return pa.nulls(rows.num_rows, type_)
    half = rows.num_rows // 2
    return pa.concat_arrays(
        [
            _bisect(cur, rows.slice(0, half), offset, select, type_, failed, errors),
            _bisect(cur, rows.slice(half), offset + half, select, type_, failed, errors),
        ]
    )


def evaluate_predicate(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, condition: ExprSet
) -> tuple[np.ndarray, RowErrors | None]:
    """A boolean mask (NULL counts as false) and the rows that had an error."""
    out, errors = evaluate(
        cur,
        table,
        ExprSet(
            [f"coalesce(({e})::BOOLEAN, false)" for e in condition.strict],
            [f"coalesce(({e})::BOOLEAN, false)" for e in condition.safe],
            condition.error_predicates,
            condition._labels(),
        ),
    )
    mask = np.asarray(out.column(0).to_numpy(zero_copy_only=False), dtype=bool)
    return mask, errors


def count_errors(
    cur: duckdb.DuckDBPyConnection, table: pa.Table, exprs: ExprSet, failure: duckdb.Error
) -> RowErrors:
    """Which rows of ``table`` made which expression fail (the slow path, after an error)."""
    kind = error_kind(failure)
    failing = [
        (label, p, strict)
        for label, p, strict in zip(exprs._labels(), exprs._predicates(), exprs.strict)
        if p
    ]
    if not failing:
        return RowErrors(table.num_rows, kind, [])
    counts = ", ".join(
        f"count(*) FILTER (WHERE coalesce(({p})::BOOLEAN, false)) AS e{i}"
        for i, (_, p, _) in enumerate(failing)
    )
    any_failed = " OR ".join(f"coalesce(({p})::BOOLEAN, false)" for _, p, _ in failing)
    row = _run(cur, table, f"{counts}, count(*) FILTER (WHERE {any_failed}) AS total").to_pylist()
    values = row[0]
    by_expression = []
    for i, (label, _, strict) in enumerate(failing):
        if values[f"e{i}"]:
            by_expression.append((label, int(values[f"e{i}"]), _kind_of(cur, table, strict, kind)))
    return RowErrors(int(values["total"]), kind, by_expression)


def _kind_of(cur: duckdb.DuckDBPyConnection, table: pa.Table, strict: str, default: str) -> str:
    """The kind of error one expression raises over ``table`` (it failed on some row)."""
    try:
        _run(cur, table, f"{strict} AS c0")
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        return error_kind(exc)
    return default


# DuckDB's error classes and messages, as the kinds of error users see (never the values).
_KINDS: list[tuple[str, str]] = [
    # Rivulet's own checks (PostgreSQL's limits and ranges, over DuckDB's)
    ("requested length too large", "value too large"),
    ("date out of range", "datetime value out of range"),
    ("timestamp out of range", "datetime value out of range"),
    ("square root of a negative", "invalid argument for power function"),
    ("logarithm of", "invalid argument for logarithm"),
    ("division by zero", "division by zero"),
    ("regex", "invalid regular expression"),
    ("regular expression", "invalid regular expression"),
    # RE2's messages (DuckDB passes them on, followed by the pattern)
    ("missing )", "invalid regular expression"),
    ("missing ]", "invalid regular expression"),
    ("unexpected )", "invalid regular expression"),
    ("invalid escape", "invalid regular expression"),
    ("repetition", "invalid regular expression"),
    ("character class", "invalid regular expression"),
    ("trailing \\", "invalid regular expression"),
    ("perl operator", "invalid regular expression"),
    ("named capture", "invalid regular expression"),
    ("could not convert", "invalid input syntax"),
    ("can't be cast", "invalid cast"),
    ("date", "datetime value out of range"),
    ("timestamp", "datetime value out of range"),
    ("interval", "interval value out of range"),
    ("overflow", "numeric value out of range"),
    ("out of range", "numeric value out of range"),
    ("too large", "value too large"),
    ("cast", "invalid cast"),
    ("json", "invalid json"),
    ("utf", "invalid byte sequence"),
]


def error_kind(exc: duckdb.Error) -> str:
    """What went wrong, in a few words that carry no data value (for rw_stream_errors)."""
    text = str(exc).split("\n", 1)[0].lower()
    if isinstance(exc, duckdb.OutOfRangeException) and "date" not in text and "time" not in text:
        return "numeric value out of range"
    for needle, kind in _KINDS:
        if needle in text:
            return kind
    name = type(exc).__name__.removesuffix("Exception")
    return "".join(f" {c.lower()}" if c.isupper() else c for c in name).strip() + " error"
