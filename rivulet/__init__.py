"""Rivulet: a streaming SQL database with elastic, online-reschedulable materialized views.

The embedded face follows PEP 249::

    import rivulet
    con = rivulet.connect()            # in memory; rivulet.connect("data/") persists
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)")
"""

import os as _os
import sys as _sys

# Polars' allocator (jemalloc, options from this variable, read once when polars loads)
# keeps freed pages for 10 s by default: the temporaries of a few long values (a 10 MB
# string through a string_agg) stayed resident, ~70 MB at once. Returned at once instead;
# small allocations are unaffected and the streaming benchmarks are not slower. A value
# the user set is kept.
if "polars" not in _sys.modules:
    _os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")

from rivulet.common.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)
from rivulet.common.version import __version__
from rivulet.dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Connection,
    Cursor,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    apilevel,
    connect,
    paramstyle,
    threadsafety,
)

__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor",
    "DataError", "DatabaseError", "Date", "DateFromTicks", "Error", "IntegrityError",
    "InterfaceError", "InternalError", "NotSupportedError", "OperationalError",
    "ProgrammingError", "Time", "TimeFromTicks", "Timestamp", "TimestampFromTicks", "Warning",
    "__version__", "apilevel", "connect", "paramstyle", "threadsafety",
]  # fmt: skip
