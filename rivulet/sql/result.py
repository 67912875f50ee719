"""What a statement returns: a command tag, and for queries the columns and rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from rivulet.common.types import DataType
from rivulet.storage.state_store import read_next_batch


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: DataType


@dataclass(frozen=True, slots=True)
class Notice:
    """A NOTICE / WARNING sent to the client alongside a result."""

    message: str
    severity: str = "NOTICE"
    sqlstate: str = "00000"
    hint: str | None = None


class RowStream:
    """The rows of a query not read yet, computed by DuckDB as they are read (its Arrow
    record-batch reader): only about a batch is held at a time, whatever the result's
    size. The stream owns a DuckDB cursor, and with it the read transaction whose
    snapshot the rows come from, until it is read out or closed.

    ``read`` blocks: call it on a query thread, never on the event loop. ``close`` may be
    called from any thread, also while a read runs (that read is interrupted)."""

    def __init__(
        self,
        reader: pa.RecordBatchReader,
        cursor: object,
        release: Callable[[], None],
        interrupt: Callable[[], None],
        check: Callable[[pa.RecordBatch], object] | None = None,
    ) -> None:
        self.schema: pa.Schema = reader.schema
        # Raises on a batch clients must not get (a date PostgreSQL cannot hold).
        self._check = check
        self.cursor = cursor
        self.rows_read = 0
        self._reader: pa.RecordBatchReader | None = reader
        self._release = release
        self._interrupt = interrupt
        self._lock = threading.Lock()
        self._reading = False
        self._close_pending = False

    @property
    def closed(self) -> bool:
        return self._reader is None

    def read(self) -> pa.RecordBatch | None:
        """The next batch; None once every row was read (the stream is then closed).
        An error (an interrupt included) closes the stream and propagates."""
        with self._lock:
            reader = self._reader
            if reader is None or self._close_pending:
                return None
            self._reading = True
        batch = None
        try:
            batch = read_next_batch(reader)
            if self._check is not None:
                try:
                    self._check(batch)
                except BaseException:
                    batch = None  # the stream closes with the error
                    raise
            self.rows_read += batch.num_rows
            return batch
        except StopIteration:
            return None
        finally:
            with self._lock:
                self._reading = False
                done = batch is None or self._close_pending
            if done:
                self._close_now()

    def close(self) -> None:
        """Release the cursor and what DuckDB holds for the rest of the result."""
        with self._lock:
            if self._reader is None:
                return
            if self._reading:
                # The reading thread closes it when DuckDB returns.
                self._close_pending = True
                self._interrupt()
                return
        self._close_now()

    def _close_now(self) -> None:
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            finally:
                self._release()


@dataclass
class StatementResult:
    """``tag`` is the command tag (``SELECT 3``, ``INSERT 0 5``, ``CREATE_TABLE``...).
    Queries carry ``columns`` and ``rows`` (an Arrow table); commands carry neither.

    A large result also carries ``stream``: ``rows`` are then its first rows and the
    stream the rest, read a batch at a time; its ``tag`` is the verb alone (``SELECT``,
    ``COPY``) until the count is known (``counted_tag``)."""

    tag: str
    columns: list[Column] | None = None
    rows: pa.Table | None = None
    stream: RowStream | None = None
    rowcount: int = -1
    notices: list[Notice] = field(default_factory=list)
    # Reported variables the statement changed, for pgwire ParameterStatus.
    parameter_status: list[tuple[str, str]] = field(default_factory=list)
    # Set when the statement is COPY ... FROM STDIN: the data must be sent next.
    copy_in: CopyInRequest | None = None
    # Set when the statement is COPY ... TO STDOUT: how to format ``rows`` as CopyData.
    copy_out: dict[str, object] | None = None

    @property
    def is_query(self) -> bool:
        return self.columns is not None

    def counted_tag(self, count: int) -> str:
        """The command tag once ``count`` rows were returned in all."""
        return f"{self.tag} {count}" if self.stream is not None else self.tag

    def close(self) -> None:
        """Release what the rest of a streamed result holds (idempotent)."""
        if self.stream is not None:
            self.stream.close()


@dataclass
class CopyInRequest:
    """A COPY FROM STDIN waiting for its data (pgwire CopyData messages)."""

    table_id: int
    column_names: list[str]
    column_types: list[DataType]
    format: str  # "text", "csv" or "binary"
    delimiter: str
    null: str
    header: bool
    quote: str = '"'
    escape: str = '"'


def command(tag: str, *notices: Notice) -> StatementResult:
    return StatementResult(tag=tag, notices=list(notices))
