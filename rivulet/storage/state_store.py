"""The state store: one DuckDB database holding all committed state and the meta store.

* In memory when no directory is given, else ``<dir>/rivulet.duckdb``, guarded by an
  exclusive lock file so that a second process gets a clear error instead of a corrupted
  store.
* An existing store is checked read-only before it is opened for writing: one that is
  damaged (corrupt, truncated, missing committed epochs), written by a newer Rivulet,
  held by another process or not a Rivulet store is refused with a clear error (SQLSTATE
  and hint), and its files are left byte for byte as they were. Never is a store silently
  made anew: a directory whose database file is gone but whose ``EPOCH`` file says
  epochs were committed is refused too.
* The directory is private to its owner (0700, its files 0600): a directory found with
  looser permissions (as earlier versions made them) is tightened, with a warning.
* DuckDB runs with external access disabled and its configuration locked: SQL that reaches
  it can touch no file, load no extension and change no setting.
* One checkpoint is one DuckDB transaction (``commit_epoch``): a crash can never leave
  half an epoch behind. Only the committer writes; readers use their own cursors and see
  the last committed epoch (DuckDB's MVCC).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rivulet.common.errors import (
    CONFIG_FILE_ERROR,
    DATA_CORRUPTED,
    IO_ERROR,
    LOCK_NOT_AVAILABLE,
    Error,
    sql_error,
)

log = logging.getLogger(__name__)

DB_FILE_NAME = "rivulet.duckdb"
LOCK_FILE_NAME = "LOCK"
# The last committed epoch, written after each commit. DuckDB replays a WAL that was cut
# short or damaged as far as it can and opens what is left without complaint; this file
# is how a store that lost committed epochs (or its whole database file) is told from a
# new one.
EPOCH_FILE_NAME = "EPOCH"
# Bumped whenever the on-disk layout changes incompatibly.
FORMAT_VERSION = 1

# An in-memory store checkpoints after about this many bytes of rows that replaced or
# deleted others (DuckDB's threshold for a file's log), which frees the old versions:
# see _fold_in_memory.
IN_MEMORY_FOLD_BYTES = 16 << 20
STATE_SCHEMA = "state"
META_SCHEMA = "meta"


@dataclass(frozen=True, slots=True)
class StoreOptions:
    memory_limit: str = "1GB"
    # DuckDB's threads (None: one less than the cores, at least one).
    threads: int | None = None


class DataDirLock:
    """An exclusive advisory lock on a data directory, held for the process's lifetime.
    The kernel drops it when the process dies, so a crash leaves no stale lock."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _directory_error(self.path.parent, exc) from None
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


def _private_directory(directory: Path) -> None:
    """Create ``directory`` for its owner only (0700), or tighten an existing one that
    others could enter, and the files in it, saying so: the files hold every table."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if not info.st_mode & 0o077:
        return
    if info.st_uid != os.getuid():
        log.warning(
            'the data directory "%s" is open to other users (mode %o) and belongs to another'
            " user: it cannot be made private",
            directory,
            info.st_mode & 0o777,
        )
        return
    log.warning(
        'the data directory "%s" was open to other users (mode %o): made private (0700, its'
        " files 0600)",
        directory,
        info.st_mode & 0o777,
    )
    os.chmod(directory, 0o700)
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False):
            _private_file(Path(entry.path))


def _private_file(path: Path) -> None:
    """Take group and other permissions off a file of the store (created by DuckDB with
    the process umask)."""
    with contextlib.suppress(OSError):
        mode = path.lstat().st_mode
        if mode & 0o077:
            os.chmod(path, mode & 0o700)


def _directory_error(directory: Path, exc: OSError) -> Error:
    return sql_error(
        IO_ERROR,
        f'cannot use the data directory "{directory}": {exc.strerror or exc}',
        hint="Choose a directory this user can create and write to, or fix its permissions.",
    )


# The fixed part of a DuckDB file before its blocks: the main header and two database
# headers of 4 KiB each.
_DUCKDB_HEADERS_SIZE = 3 * 4096
_DAMAGED_HINT = (
    "Restore the data directory from a backup. Rivulet has left its files as they are; to"
    " start afresh instead, move the directory away and start with an empty one (its data"
    " is then lost)."
)


def duckdb_text(exc: duckdb.Error) -> str:
    """DuckDB's message, first line, without its class prefix ("IO Error: ")."""
    return re.sub(r"^[A-Za-z ]+ Error: ", "", str(exc).strip()).split("\n")[0]


def open_error(db_path: str, exc: duckdb.Error) -> Error:
    """The error for a store DuckDB refused to open, by what DuckDB says went wrong."""
    text = duckdb_text(exc)
    if "Could not set lock" in text or "Conflicting lock" in text:
        return sql_error(
            LOCK_NOT_AVAILABLE,
            f'the state store "{db_path}" is in use by another process: {text}',
            hint="Stop the other process, or open a different data directory.",
        )
    if "Trying to read a database file with version number" in text:
        return sql_error(
            CONFIG_FILE_ERROR,
            f'the state store "{db_path}" was written by an incompatible version of DuckDB: {text}',
            hint="Open it with the Rivulet (and DuckDB) version that wrote it. Rivulet has"
            " left the file as it is.",
        )
    return damaged_error(db_path, text)


def read_next_batch(reader: pa.RecordBatchReader) -> pa.RecordBatch:
    """The next batch of a streamed DuckDB result (StopIteration at its end). An interrupt
    while DuckDB computes it reaches Arrow as an OSError: it is raised as DuckDB's
    ``InterruptException``, like an interrupt of any other statement."""
    try:
        return reader.read_next_batch()
    except OSError as exc:
        if str(exc).startswith("INTERRUPT Error"):
            raise duckdb.InterruptException(str(exc)) from exc
        raise


def stream_query(
    cur: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None, batch_rows: int
) -> tuple[list[tuple[str, str]], pa.RecordBatchReader | None]:
    """Run a query whose rows are read as Arrow record batches, computed as they are
    read: (name, DuckDB type) of each column, and the reader (None for a statement that
    returns no rows). The reader holds ``cur`` until it is read out or closed.

    DuckDB's relation API (``cur.sql(...).to_arrow_reader()``) binds every statement
    twice; its result submission runs it once, which matters for ``SELECT 1``."""
    submit = getattr(cur, "_submit", None)
    if submit is None:
        relation = cur.sql(sql, params=params or None)
        if relation is None:
            return [], None
        columns = [(n, str(t)) for n, t in zip(relation.columns, relation.types)]
        return columns, relation.to_arrow_reader(batch_rows)
    result = submit(sql, params or None, "stream", batch_rows)
    if result.return_type != "query_result":
        result.close()
        return [], None
    columns = [(d[0], str(d[1])) for d in result.description]
    return columns, result.arrow_reader()


def damaged_error(db_path: str, text: str) -> Error:
    """The error for a store whose file is damaged (corrupt, truncated, unreadable)."""
    return sql_error(
        DATA_CORRUPTED,
        f'the state store "{db_path}" is damaged: {text}',
        hint=_DAMAGED_HINT,
    )


class StateStore:
    """Owns the DuckDB database. Thread-safe: each thread reads through its own cursor."""

    def __init__(self, directory: str | os.PathLike[str] | None, options: StoreOptions) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._unfolded_bytes = 0
        self._lock: DataDirLock | None = None
        self.path = ":memory:"
        self._epoch_fd: int | None = None
        if self.directory is not None:
            try:
                _private_directory(self.directory)
            except OSError as exc:
                raise _directory_error(self.directory, exc) from None
            self._lock = DataDirLock(self.directory)
            self._lock.acquire()
            self.path = str(self.directory / DB_FILE_NAME)
        try:
            if self.directory is not None:
                marked = self._marked_epoch()
                if os.path.exists(self.path):
                    self._check(self.path, options, marked)
                elif marked:
                    raise sql_error(
                        DATA_CORRUPTED,
                        f'the data directory "{self.directory}" has lost its state store'
                        f' "{DB_FILE_NAME}": epochs up to {marked} were committed to it',
                        hint=_DAMAGED_HINT,
                    )
            self._root = self._open(self.path, options)
            if self.directory is not None:
                _private_file(Path(self.path))
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        # Cursors handed out by ``new_cursor`` (their owners close them).
        self._owned_cursors: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()
        self._commit_lock = threading.Lock()
        self.committed_epoch = self._read_epoch()
        self.closed = False
        if self.directory is not None:
            try:
                self._epoch_fd = os.open(
                    self.directory / EPOCH_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600
                )
                self._mark_epoch(self.committed_epoch)
            except OSError as exc:
                self.close()
                raise _directory_error(self.directory, exc) from None

    # ----------------------------------------------------------------- opening
    @staticmethod
    def _config(options: StoreOptions) -> dict[str, object]:
        config: dict[str, object] = {
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            "memory_limit": options.memory_limit,
            # PostgreSQL semantics: 5 / 2 = 2 for integers.
            "integer_division": True,
            # DuckDB's allocator keeps what a task freed up to these amounts (128 and
            # 512 MiB by default) before giving it back; with long values that stayed
            # resident (~50 MiB more in one run of a rewritten 10 MB string_agg).
            "allocator_flush_threshold": "8MiB",
            "allocator_bulk_deallocation_flush_threshold": "8MiB",
        }
        # One query's DuckDB threads (its own and the shared workers) leave a core to
        # the dataflow and the event loop: every query runs on all but one core.
        config["threads"] = options.threads or max(1, (os.cpu_count() or 2) - 1)
        return config

    @staticmethod
    def compute_database(options: StoreOptions) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB that computes as the store does (the same settings: integer
        division, UTC, no external access) and holds no state: a compute node's."""
        config: Any = StateStore._config(options)
        con = duckdb.connect(":memory:", config=config)
        con.execute("SET TimeZone = 'UTC'")
        return con

    def _marked_epoch(self) -> int:
        """The epoch the ``EPOCH`` file says was committed last (0: none, or unreadable:
        it only ever lags the store, so ignoring it never refuses a good store)."""
        assert self.directory is not None
        try:
            return int((self.directory / EPOCH_FILE_NAME).read_text().strip() or 0)
        except (OSError, ValueError):  # missing (a new or older directory) or unreadable
            return 0

    def _mark_epoch(self, epoch: int) -> None:
        # Fixed width, so that each write replaces the whole content. Written after
        # DuckDB's commit synced its WAL, it never says more than the store has; synced
        # too, so that after an OS crash it does not lag and hide a WAL that lost epochs.
        if self._epoch_fd is not None:
            os.pwrite(self._epoch_fd, f"{epoch:020d}\n".encode(), 0)
            os.fdatasync(self._epoch_fd)

    def _check(self, db_path: str, options: StoreOptions, marked: int = 0) -> None:
        """Look at an existing store read-only before opening it for writing, so that a
        store this version must not use (damaged, truncated, newer, not Rivulet's) is
        refused with the file left byte for byte as it was: a read-write open could
        write to it (WAL replay and checkpoint, set-up statements) before any check."""
        try:
            con = duckdb.connect(db_path, read_only=True, config=self._config(options))
        except duckdb.Error as exc:
            raise open_error(db_path, exc) from None
        try:
            self._check_size(con, db_path)
            tables = {
                (schema, name)
                for schema, name in con.execute(
                    "SELECT schema_name, table_name FROM duckdb_tables()"
                    " WHERE database_name = current_database()"
                ).fetchall()
            }
            self._check_format(con, tables)
            self._check_epoch(con, tables, db_path, marked)
            # Read every meta table whole: DuckDB verifies each block's checksum as it
            # reads it, so damage in the catalog is found now. (State tables are read
            # lazily, by vnode, and may be large: damage there surfaces when read.)
            for schema, name in sorted(tables):
                if schema == META_SCHEMA:
                    con.execute(f'SELECT * FROM {META_SCHEMA}."{name}"').fetchall()
        except duckdb.Error as exc:
            raise damaged_error(db_path, duckdb_text(exc)) from None
        finally:
            con.close()

    @staticmethod
    def _check_size(con: duckdb.DuckDBPyConnection, db_path: str) -> None:
        """A file too short for the blocks in use was truncated (DuckDB itself would only
        notice when it reads a missing block). Only the blocks in use count: DuckDB cuts
        free blocks off the end of the file, and a crash while it extends the file may
        leave a partial block after them; neither is damage."""
        row = con.execute(
            "SELECT block_size, used_blocks FROM pragma_database_size()"
            " WHERE database_name = current_database()"
        ).fetchone()
        if row is None or not row[0]:
            return
        block_size, used = int(row[0]), int(row[1])
        actual = os.path.getsize(db_path)
        if (actual - _DUCKDB_HEADERS_SIZE) // block_size < used:
            raise damaged_error(
                db_path,
                f"the file is truncated: it holds {actual} bytes, too few for the {used}"
                f" blocks of {block_size} bytes in use",
            )

    def _check_format(self, con: duckdb.DuckDBPyConnection, tables: set[tuple[str, str]]) -> None:
        if (META_SCHEMA, "store_format") not in tables:
            if tables:
                raise sql_error(
                    CONFIG_FILE_ERROR,
                    f'"{self.path}" is a DuckDB database but not a Rivulet store (it has no'
                    f" {META_SCHEMA}.store_format table)",
                    hint="Open a Rivulet data directory, or an empty directory to create a"
                    " new store. Rivulet has left the file as it is.",
                )
            return  # created but never set up (a crash at the very first start)
        rows = con.execute(f"SELECT format_version FROM {META_SCHEMA}.store_format").fetchall()
        if not rows:
            if any(s == META_SCHEMA and n != "store_format" for s, n in tables):
                raise damaged_error(self.path, f"{META_SCHEMA}.store_format has no row")
            return
        self._check_version(rows[0][0])

    @staticmethod
    def _check_epoch(
        con: duckdb.DuckDBPyConnection, tables: set[tuple[str, str]], db_path: str, marked: int
    ) -> None:
        """Committed epochs missing from the store: DuckDB dropped part of its WAL."""
        if (META_SCHEMA, "store_format") in tables:
            row = con.execute(f"SELECT committed_epoch FROM {META_SCHEMA}.store_format").fetchone()
            stored = int(row[0]) if row else 0
        else:
            stored = 0
        if stored < marked:
            error = damaged_error(
                db_path,
                f"it holds the epochs up to {stored}, but epochs up to {marked} were committed"
                f' (its write-ahead log "{db_path}.wal" was cut short or damaged)',
            )
            error.hint = (
                f"{error.hint} If {DB_FILE_NAME} alone was put back from an older backup on"
                f" purpose, delete the {EPOCH_FILE_NAME} file next to it to accept its older"
                " state."
            )
            raise error

    def _check_version(self, version: int) -> None:
        if version > FORMAT_VERSION:
            raise sql_error(
                CONFIG_FILE_ERROR,
                f'the data directory "{self.directory}" was written by a newer Rivulet'
                f" (format version {version}; this version reads up to {FORMAT_VERSION})",
                hint="Upgrade Rivulet to open it. This version has left it as it is.",
            )

    def _open(self, db_path: str, options: StoreOptions) -> duckdb.DuckDBPyConnection:
        try:
            con = duckdb.connect(db_path, config=self._config(options))
        except duckdb.Error as exc:
            raise open_error(db_path, exc) from None
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {STATE_SCHEMA}")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {META_SCHEMA}")
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {META_SCHEMA}.store_format "
                "(format_version INTEGER NOT NULL, committed_epoch BIGINT NOT NULL)"
            )
            rows = con.execute(f"SELECT format_version FROM {META_SCHEMA}.store_format").fetchall()
            if not rows:
                con.execute(
                    f"INSERT INTO {META_SCHEMA}.store_format VALUES (?, 0)", [FORMAT_VERSION]
                )
            else:
                self._check_version(rows[0][0])
        except BaseException as exc:
            con.close()
            if isinstance(exc, duckdb.Error):
                raise damaged_error(db_path, duckdb_text(exc)) from None
            raise
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
        cur = self._root.cursor()
        self._owned_cursors.add(cur)
        return cur

    def interrupt_all(self) -> None:
        """Interrupt whatever runs on any cursor (shutting down): reads, and a commit
        under way, which then applies nothing."""
        with self._cursors_lock:
            cursors = [*self._cursors, *self._owned_cursors]
        for cur in cursors:
            self.interrupt(cur)

    def detach_cursor(self, cur: duckdb.DuckDBPyConnection) -> None:
        """Hand this thread's cursor ``cur`` to the caller, who closes it with
        ``release_cursor``: a result left open on it (a stream read later, from any
        thread) holds the cursor, so the thread takes a new one for its next work."""
        if getattr(self._local, "cursor", None) is cur:
            self._local.cursor = None

    def release_cursor(self, cur: duckdb.DuckDBPyConnection) -> None:
        """Close a detached cursor (and whatever result it still holds)."""
        with self._cursors_lock, contextlib.suppress(ValueError):
            self._cursors.remove(cur)
        with contextlib.suppress(duckdb.Error):
            cur.close()

    def interrupt(self, cursor: duckdb.DuckDBPyConnection) -> None:
        with contextlib.suppress(duckdb.Error):
            cursor.interrupt()

    def register_function(
        self,
        name: str,
        fn: Callable[..., pa.Array],
        parameters: list[str],
        returns: str,
    ) -> None:
        """A DuckDB scalar function implemented in Python over Arrow arrays, with side
        effects (never folded into a constant), visible to every cursor."""
        self._root.create_function(
            name,
            fn,
            [duckdb.sqltype(p) for p in parameters],
            duckdb.sqltype(returns),
            type="arrow",
            side_effects=True,
        )

    def run_setup(self, statements: Iterable[str | tuple[str, list[object]]]) -> None:
        """Set-up statements at start (schemas, macros, meta tables), with parameters."""
        for stmt in statements:
            if isinstance(stmt, str):
                self._root.execute(stmt)
            else:
                self._root.execute(stmt[0], stmt[1])

    def check_setup(self, statements: Iterable[tuple[str, list[object]]]) -> None:
        """Run statements in a transaction that is rolled back: raises what DuckDB would
        raise at the commit (a name it refuses), changing nothing."""
        cur = self._root.cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                for sql, params in statements:
                    cur.execute(sql, params)
            finally:
                cur.execute("ROLLBACK")
        finally:
            cur.close()

    # ------------------------------------------------------------------ commit
    def commit_epoch(
        self,
        epoch: int,
        writes: Iterable[Callable[[duckdb.DuckDBPyConnection], None]],
        nbytes: int = 0,
    ) -> None:
        """Apply every write of one epoch in one DuckDB transaction, with the epoch.

        ``writes`` are callables that issue statements on the given cursor. If any fails,
        nothing of the epoch is applied and the error propagates. ``nbytes``: about how
        much of what they write replaces or deletes stored rows (what the in-memory fold
        counts; rows only added leave no old versions behind).
        """
        if epoch <= self.committed_epoch:
            raise ValueError(f"epoch {epoch} is not after committed epoch {self.committed_epoch}")
        with self._commit_lock:
            cur = self.cursor()
            cur.execute("BEGIN TRANSACTION")
            try:
                for write in writes:
                    write(cur)
                if self.directory is not None:
                    # Read back only when a data directory is opened again; in memory
                    # the attribute is the record (a statement less per epoch, ~0.4 ms).
                    cur.execute(
                        f"UPDATE {META_SCHEMA}.store_format SET committed_epoch = ?", [epoch]
                    )
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
            self.committed_epoch = epoch
            self._fold_in_memory(cur, nbytes)
            try:
                self._mark_epoch(epoch)
            except OSError:  # the epoch is committed; the marker merely lags
                log.warning("could not record epoch %d in %s", epoch, EPOCH_FILE_NAME)

    def _fold_in_memory(self, cur: duckdb.DuckDBPyConnection, nbytes: int) -> None:
        """In memory, DuckDB keeps the old versions of updated rows and the long strings
        of deleted ones until a CHECKPOINT, which it never runs by itself there (a file
        database runs one as its log grows): a job rewriting one long value would grow
        without bound. So fold after each ``IN_MEMORY_FOLD_BYTES`` of such rewrites. A fold
        refused while a reader holds a snapshot is tried again after the next commit."""
        if self.directory is not None:
            return
        self._unfolded_bytes += nbytes
        if self._unfolded_bytes < IN_MEMORY_FOLD_BYTES:
            return
        try:
            cur.execute("CHECKPOINT")
        except duckdb.Error:
            return
        self._unfolded_bytes = 0

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
        if self._epoch_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._epoch_fd)
            self._epoch_fd = None
        if self._lock is not None:
            self._lock.release()
