"""The state store: one DuckDB database holding all committed state and the meta store.

* In memory when no directory is given, else ``<dir>/rivulet.duckdb``, guarded by an
  exclusive lock file so that a second process gets a clear error instead of a corrupted
  store.
* DuckDB runs with external access disabled and its configuration locked: SQL that reaches
  it can touch no file, load no extension and change no setting.
* One checkpoint is one DuckDB transaction (``commit_epoch``): a crash can never leave
  half an epoch behind. Only the committer writes; readers use their own cursors and see
  the last committed epoch (DuckDB's MVCC).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from rivulet.common.errors import (
    CONFIG_FILE_ERROR,
    DATA_CORRUPTED,
    LOCK_NOT_AVAILABLE,
    sql_error,
)

DB_FILE_NAME = "rivulet.duckdb"
LOCK_FILE_NAME = "LOCK"
# Bumped whenever the on-disk layout changes incompatibly.
FORMAT_VERSION = 1

STATE_SCHEMA = "state"
META_SCHEMA = "meta"


@dataclass(frozen=True, slots=True)
class StoreOptions:
    memory_limit: str = "1GB"
    threads: int | None = None


class DataDirLock:
    """An exclusive advisory lock on a data directory, held for the process's lifetime."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError, ValueError):
                holder = f" (pid {int(os.read(fd, 32).decode().strip())})"
            os.close(fd)
            raise sql_error(
                LOCK_NOT_AVAILABLE,
                f'data directory "{self.path.parent}" is in use by another Rivulet process{holder}',
                hint="Stop the other process, or open a different data directory.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None


class StateStore:
    """Owns the DuckDB database. Thread-safe: each thread reads through its own cursor."""

    def __init__(self, directory: str | os.PathLike[str] | None, options: StoreOptions) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._lock: DataDirLock | None = None
        db_path = ":memory:"
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock = DataDirLock(self.directory)
            self._lock.acquire()
            db_path = str(self.directory / DB_FILE_NAME)
        try:
            self._root = self._open(db_path, options)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self.committed_epoch = self._read_epoch()
        self.closed = False

    # ----------------------------------------------------------------- opening
    def _open(self, db_path: str, options: StoreOptions) -> duckdb.DuckDBPyConnection:
        config: dict[str, object] = {
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            "memory_limit": options.memory_limit,
            # PostgreSQL semantics: 5 / 2 = 2 for integers.
            "integer_division": True,
        }
        if options.threads:
            config["threads"] = options.threads
        try:
            con = duckdb.connect(db_path, config=config)
        except duckdb.Error as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise sql_error(
                    LOCK_NOT_AVAILABLE,
                    f'data directory "{self.directory}" is in use by another process',
                    hint="Stop the other process, or open a different data directory.",
                ) from None
            raise sql_error(
                DATA_CORRUPTED,
                f'cannot open the state store "{db_path}": {text}',
                hint="The file is damaged or not a Rivulet store. Restore it from a backup,"
                " or start with an empty data directory.",
            ) from None
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {STATE_SCHEMA}")
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {META_SCHEMA}")
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {META_SCHEMA}.store_format "
            "(format_version INTEGER NOT NULL, committed_epoch BIGINT NOT NULL)"
        )
        row = con.execute(f"SELECT format_version FROM {META_SCHEMA}.store_format").fetchall()
        row = row[0] if row else None
        if row is None:
            con.execute(f"INSERT INTO {META_SCHEMA}.store_format VALUES (?, 0)", [FORMAT_VERSION])
        elif row[0] > FORMAT_VERSION:
            con.close()
            raise sql_error(
                CONFIG_FILE_ERROR,
                f'the data directory "{self.directory}" was written by a newer Rivulet'
                f" (format version {row[0]}; this version reads up to {FORMAT_VERSION})",
                hint="Upgrade Rivulet to open it.",
            )
        return con

    def lock_configuration(self) -> None:
        """Forbid any further change of DuckDB settings (called once set-up is done)."""
        self._root.execute("SET lock_configuration = true")

    def _read_epoch(self) -> int:
        row = self._root.execute(
            f"SELECT committed_epoch FROM {META_SCHEMA}.store_format"
        ).fetchall()
        row = row[0] if row else None
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ access
    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (its own DuckDB connection to the same database)."""
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._root.cursor()
            self._local.cursor = cur
            with self._cursors_lock:
                self._cursors.append(cur)
        return cur

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor the caller owns (and closes), for work that may be interrupted."""
        return self._root.cursor()

    def interrupt(self, cursor: duckdb.DuckDBPyConnection) -> None:
        with contextlib.suppress(duckdb.Error):
            cursor.interrupt()

    def run_setup(self, statements: Iterable[str | tuple[str, list[object]]]) -> None:
        """Set-up statements at start (schemas, macros, meta tables), with parameters."""
        for stmt in statements:
            if isinstance(stmt, str):
                self._root.execute(stmt)
            else:
                self._root.execute(stmt[0], stmt[1])

    # ------------------------------------------------------------------ commit
    def commit_epoch(
        self,
        epoch: int,
        writes: Iterable[Callable[[duckdb.DuckDBPyConnection], None]],
    ) -> None:
        """Apply every write of one epoch in one DuckDB transaction, with the epoch.

        ``writes`` are callables that issue statements on the given cursor. If any fails,
        nothing of the epoch is applied and the error propagates.
        """
        if epoch <= self.committed_epoch:
            raise ValueError(f"epoch {epoch} is not after committed epoch {self.committed_epoch}")
        with self._commit_lock:
            cur = self.cursor()
            cur.execute("BEGIN TRANSACTION")
            try:
                for write in writes:
                    write(cur)
                cur.execute(f"UPDATE {META_SCHEMA}.store_format SET committed_epoch = ?", [epoch])
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
            self.committed_epoch = epoch

    def checkpoint(self) -> None:
        """Fold DuckDB's write-ahead log into the database file."""
        with self._commit_lock:
            self.cursor().execute("CHECKPOINT")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self._cursors_lock:
            for cur in self._cursors:
                with contextlib.suppress(duckdb.Error):
                    cur.close()
            self._cursors.clear()
        with contextlib.suppress(duckdb.Error):
            self._root.close()
        if self._lock is not None:
            self._lock.release()
