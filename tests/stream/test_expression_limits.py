"""Bounded values in streaming expressions: the checked forms the binder gives repeat,
lpad, || ... raise a DuckDB error when a chunk holds a row that would build an oversized
value, before anything is allocated (the executor then deals with the row's error)."""

from __future__ import annotations

import resource
import time

import duckdb
import pyarrow as pa
import pytest
import sqlglot

import rivulet
from rivulet.sql.binder import Binder
from rivulet.stream.expression import positional


@pytest.mark.parametrize(
    "expr",
    [
        "length(repeat(c0, c1))",
        "length(lpad(c0, c1, 'ab'))",
        "length(rpad(c0, c1))",
        "length(c0 || repeat(c0, c1 / 40))",
    ],
)
def test_oversized_value_raises_over_a_chunk(expr: str) -> None:
    con = rivulet.connect()
    try:
        session = con._session
        sql = Binder(session.bind_context()).prepare(sqlglot.parse_one(expr, read="postgres"))
        chunk = positional(
            pa.table({"a": ["x", "yy", "z"], "b": pa.array([3, 2_000_000_000, 1], pa.int32())})
        )
        cur = session.ctx.store.cursor()
        cur.register("chunk", chunk)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        with pytest.raises(duckdb.Error, match="requested length too large"):
            cur.sql(f"SELECT {sql.sql(dialect='duckdb')} FROM chunk").fetchall()
        assert time.monotonic() - started < 5
        grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grown_kb < 256 * 1024, f"peak RSS grew by {grown_kb} kB"
        # Rows under the limit evaluate as before.
        ok = positional(pa.table({"a": ["x"], "b": pa.array([3], pa.int32())}))
        cur.register("ok_chunk", ok)
        assert cur.sql(f"SELECT {sql.sql(dialect='duckdb')} FROM ok_chunk").fetchall()[0][0] > 0
    finally:
        con.close()
