"""The embedded face: a PEP 249 (DB-API 2.0) connection to an in-process engine.

``rivulet.connect()`` opens an in-memory instance; ``rivulet.connect("data/")`` a data
directory (connections of one process to the same directory share one engine). Each
statement commits on its own (autocommit): ``commit()`` does nothing and ``rollback()``
raises ``NotSupportedError``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.errors import (
    InterfaceError,
    NotSupportedError,
    ProgrammingError,
)
from rivulet.common.types import DataType
from rivulet.engine import Engine, EngineOptions, EngineThread
from rivulet.sql.result import Column, StatementResult

apilevel = "2.0"
threadsafety = 1
paramstyle = "format"

_registry_lock = threading.Lock()
# Open data directories of this process: path -> (engine thread, open connections).
_registry: dict[str, list[Any]] = {}


def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    user: str = "root",
    workers: int | None = None,
    slots: int | None = None,
    barrier_interval_ms: int | None = None,
    deterministic: bool = False,
    state_reads: str = "local",
    compute: str = "in-process",
) -> Connection:
    """Open a connection: in memory when ``path`` is None or ":memory:", else to a data
    directory.

    ``workers``/``slots``: the compute layout (default: one worker, a slot per core).
    ``barrier_interval_ms``: overrides the stored system parameter for this run.
    ``deterministic``: barriers only when statements ask for them and no worker threads,
    so that a run replays exactly (tests). ``state_reads="served"``: actors read their
    committed state through the storage service over a loopback socket, as actors in
    other processes do, not from the store directly. ``compute="processes"``: each
    worker is a compute node process running the actors placed on it (the default runs
    every actor in this process). The options apply when the engine opens; a second
    connection to an open directory shares its engine as it is.
    """
    options = EngineOptions(
        workers=workers,
        slots=slots,
        barrier_interval_ms=barrier_interval_ms,
        deterministic=deterministic,
        state_reads=state_reads,
        compute=compute,
    )
    if path is None or str(path) == ":memory:":  # ":memory:" as sqlite3 and DuckDB take it
        thread = EngineThread(Engine(None, options))
        return Connection(thread, user, key=None)
    key = str(Path(path).resolve())
    with _registry_lock:
        entry = _registry.get(key)
        if entry is None:
            entry = [EngineThread(Engine(path, options)), 0]
            _registry[key] = entry
        entry[1] += 1
        return Connection(entry[0], user, key=key)


def _release(key: str | None, thread: EngineThread) -> None:
    if key is None:
        thread.stop()
        return
    with _registry_lock:
        entry = _registry.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _registry[key]
            thread.stop()


class Connection:
    def __init__(self, thread: EngineThread, user: str, *, key: str | None) -> None:
        self._thread = thread
        self._key = key
        self._session = thread.engine.new_session(user=user)
        self.closed = False

    # -- PEP 249 -------------------------------------------------------------
    def cursor(self) -> Cursor:
        self._check_open()
        return Cursor(self)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        """Shortcut: a new cursor with ``sql`` executed."""
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> Cursor:
        return self.cursor().executemany(sql, seq_of_params)

    def commit(self) -> None:
        """Every statement commits on its own; nothing to do."""
        self._check_open()

    def rollback(self) -> None:
        raise NotSupportedError(
            "rollback is not supported: every statement commits on its own (autocommit)",
            hint="Undo a change with a compensating statement.",
        )

    # -- compute workers (Rivulet's own) -------------------------------------
    def workers(self) -> list[tuple[int, int]]:
        """(worker id, slots) of every worker."""
        self._check_open()
        return [(w.id, w.slots) for w in self._thread.engine.cluster.workers]

    def add_worker(self, slots: int) -> int:
        """Add a worker with ``slots`` slots; adaptive jobs spread onto it online. Returns
        its id once the new layout is committed."""
        self._check_open()
        return self._thread.run(self._thread.engine.ddl.scale.add_worker(slots))

    def remove_worker(self, worker_id: int) -> None:
        """Remove a worker; its actors move to the other workers online. The last worker
        cannot be removed."""
        self._check_open()
        self._thread.run(self._thread.engine.ddl.scale.remove_worker(worker_id))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._session.close()
        _release(self._key, self._thread)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def autocommit(self) -> bool:
        return True

    # -- helpers --------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise InterfaceError("connection already closed")

    def _run(self, coro: Any) -> Any:
        self._check_open()
        try:
            return self._thread.run(coro)
        except KeyboardInterrupt:
            self._session.cancel()
            raise

    def interrupt(self) -> None:
        """Cancel the statement running on this connection (from another thread)."""
        self._session.cancel()


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._result: StatementResult | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._pos = 0
        self.rowcount = -1
        self.closed = False

    # -- executing -----------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        self._check_open()
        if isinstance(params, Mapping):
            raise ProgrammingError("named parameters are not supported; use %s or $1")
        session = self.connection._session
        results = self.connection._run(session.execute(sql, params))
        if any(r.copy_in is not None for r in results):
            raise NotSupportedError(
                "COPY ... FROM STDIN needs a PostgreSQL client: the embedded API has no"
                " data stream to read it from",
                hint="Insert the rows with executemany() or INSERT ... VALUES instead.",
            )
        self._set_result(results[-1] if results else None)
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> Cursor:
        """Run ``sql`` once per parameter row. An INSERT ... VALUES of parameters is
        written as one batch (one statement, one commit)."""
        self._check_open()
        rows = [tuple(p) for p in seq_of_params]
        session = self.connection._session
        from rivulet.sql.handlers.dml import insert_many

        result = self.connection._run(insert_many(session, sql, rows))
        if result is None:
            total = 0
            for p in rows:
                self.execute(sql, p)
                total += max(self.rowcount, 0)
            result = StatementResult(tag=f"INSERT 0 {total}", rowcount=total)
        self._set_result(result)
        return self

    def _set_result(self, result: StatementResult | None) -> None:
        self._result = result
        self._pos = 0
        self._rows = []
        if result is None:
            self.rowcount = -1
            return
        self.rowcount = result.rowcount
        if result.rows is not None and result.columns is not None:
            tz = self.connection._session.config.get("timezone") or "UTC"
            self._rows = arrow_to_rows(result.rows, result.columns, tz)

    # -- fetching --------------------------------------------------------------
    @property
    def description(self) -> list[tuple[Any, ...]] | None:
        if self._result is None or self._result.columns is None:
            return None
        return [
            (c.name, c.type.oid, None, c.type.typlen if c.type.typlen > 0 else None,
             c.type.precision, c.type.scale, None)
            for c in self._result.columns
        ]  # fmt: skip

    def fetchone(self) -> tuple[Any, ...] | None:
        self._check_result()
        if self._pos >= len(self._rows):
            return None
        row = self._rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        self._check_result()
        n = self.arraysize if size is None else size
        out = self._rows[self._pos : self._pos + n]
        self._pos += len(out)
        return out

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._check_result()
        out = self._rows[self._pos :]
        self._pos = len(self._rows)
        return out

    def fetch_arrow_table(self) -> pa.Table:
        """The whole result as an Arrow table (no conversion to Python objects)."""
        self._check_result()
        assert self._result is not None and self._result.rows is not None
        return self._result.rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while True:
            row = self.fetchone()
            if row is None:
                return
            yield row

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        self._rows = []

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise InterfaceError("cursor already closed")
        self.connection._check_open()

    def _check_result(self) -> None:
        self._check_open()
        if self._result is None or self._result.columns is None:
            raise ProgrammingError("the last statement returned no rows")


def arrow_to_rows(
    table: pa.Table, columns: Sequence[Column], timezone: str = "UTC"
) -> list[tuple[Any, ...]]:
    """Python values for DB-API rows, converted a column at a time."""
    out = []
    for column, col in zip(columns, table.columns):
        t = col.type
        if pa.types.is_timestamp(t) and t.tz is not None and timezone != "UTC":
            col = pc.cast(col, pa.timestamp(t.unit, tz=_zone_name(timezone)))
        values = col.to_pylist()
        if t == pa.month_day_nano_interval():
            values = [None if v is None else _interval(v) for v in values]
        elif column.type.name == "jsonb":
            values = [None if v is None else json.loads(v) for v in values]
        out.append(values)
    return list(zip(*out)) if out else []


def _zone_name(tz: str) -> str:
    if tz[:1] in "+-" or tz[:1].isdigit():
        sign = "-" if tz.startswith("-") else "+"
        body = tz.lstrip("+-")
        hours, _, minutes = body.partition(":")
        return f"{sign}{int(hours):02d}:{int(minutes or 0):02d}"
    return tz


def _interval(v: Any) -> dt.timedelta:
    """A month_day_nano value as a timedelta (a year counts 365 days and a month 30, as
    psycopg does)."""
    years, months = divmod(abs(v.months), 12)
    days = (years * 365 + months * 30) * (1 if v.months >= 0 else -1)
    return dt.timedelta(days=days + v.days, microseconds=v.nanoseconds // 1000)


# -- PEP 249 type objects and constructors -------------------------------------
class _TypeSet(frozenset):
    def __eq__(self, other: object) -> bool:
        return other in self if isinstance(other, int) else super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()


STRING = _TypeSet({25, 1043, 19, 18, 1042, 3802})
BINARY = _TypeSet({17})
NUMBER = _TypeSet({16, 20, 21, 23, 26, 700, 701, 1700})
DATETIME = _TypeSet({1082, 1083, 1114, 1184, 1186})
ROWID = _TypeSet({20})

Date = dt.date
Time = dt.time
Timestamp = dt.datetime


def DateFromTicks(ticks: float) -> dt.date:
    return dt.date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> dt.time:
    return dt.time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> dt.datetime:
    return dt.datetime(*time.localtime(ticks)[:6])


def Binary(value: bytes) -> bytes:
    return bytes(value)


__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor",
    "DataType", "Date", "DateFromTicks", "Time", "TimeFromTicks", "Timestamp",
    "TimestampFromTicks", "apilevel", "connect", "paramstyle", "threadsafety",
]  # fmt: skip
