"""Constant intervals as microseconds, the unit window arithmetic works in.

RisingWave counts a month as 30 days and a day as 24 hours in window arithmetic
(``tumble_start``, HOP); the planner, the binder and the hop executor all take their
window sizes from here."""

from __future__ import annotations

import functools
import threading

import duckdb

USECS_PER_DAY = 86_400_000_000
USECS_PER_MONTH = 30 * USECS_PER_DAY


_constants: duckdb.DuckDBPyConnection | None = None
_constants_lock = threading.Lock()


@functools.lru_cache(maxsize=256)
def interval_micros(sql: str) -> int:
    """A constant interval (DuckDB SQL) in microseconds, a month as 30 days (RisingWave).
    Evaluated by a private in-memory DuckDB (no tables), once per distinct interval."""
    global _constants
    with _constants_lock:
        if _constants is None:
            _constants = duckdb.connect()
        value = _constants.sql(f"SELECT ({sql})::INTERVAL AS v").to_arrow_table().column(0)[0]
    v = value.as_py()
    if v is None:
        raise ValueError("the window interval is NULL")
    return v.months * USECS_PER_MONTH + v.days * USECS_PER_DAY + v.nanoseconds // 1000
