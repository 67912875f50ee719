"""What the streaming oracle tests share: SQL literals for generated rows, query
results in a comparable form (sorted; floats to 9 significant digits, decimals
normalized, string_agg results as their sorted parts), and an MV compared with its query
in one snapshot."""

from __future__ import annotations

from decimal import Decimal

import rivulet


def sql_literal(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def normalized(v: object, delim: str | None = None) -> object:
    """A value as compared: ``delim`` marks a string_agg column (order unspecified)."""
    if delim is not None and isinstance(v, str):
        return tuple(sorted(v.split(delim)))
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, Decimal):
        return v.normalize()
    return v


def sorted_rows(cur: rivulet.Cursor, sql: str, aggs: dict[int, str] | None = None) -> list[tuple]:
    """The rows of ``sql``, sorted; with ``aggs`` (column -> string_agg delimiter), values
    normalized for comparison."""
    cur.execute(sql)
    rows = cur.fetchall()
    if aggs is not None:
        rows = [tuple(normalized(v, aggs.get(i)) for i, v in enumerate(r)) for r in rows]
    return sorted(rows, key=repr)


def differences(conn: rivulet.Connection, view: str, query: str) -> int:
    """Rows in which ``view`` and ``query`` differ as multisets, read in one snapshot: the
    sources keep committing epochs between two statements."""
    mv = f"SELECT * FROM {view}"
    (n,) = conn.execute(
        f"SELECT count(*) FROM (({mv} EXCEPT ALL {query}) UNION ALL ({query} EXCEPT ALL {mv})) AS d"
    ).fetchone()
    return int(n)
