"""Rivulet: a streaming SQL database with elastic, online-reschedulable materialized views.

The embedded face follows PEP 249::

    import rivulet
    con = rivulet.connect()            # in memory; rivulet.connect("data/") persists
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)")
"""

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
