"""What a statement returns: a command tag, and for queries the columns and rows."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from rivulet.common.types import DataType


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


@dataclass
class StatementResult:
    """``tag`` is the command tag (``SELECT 3``, ``INSERT 0 5``, ``CREATE_TABLE``...).
    Queries carry ``columns`` and ``rows`` (an Arrow table); commands carry neither."""

    tag: str
    columns: list[Column] | None = None
    rows: pa.Table | None = None
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


@dataclass
class CopyInRequest:
    """A COPY FROM STDIN waiting for its data (pgwire CopyData messages)."""

    table_id: int
    column_names: list[str]
    column_types: list[DataType]
    format: str  # "text" or "csv"
    delimiter: str
    null: str
    header: bool
    quote: str = '"'
    escape: str = '"'


def command(tag: str, *notices: Notice) -> StatementResult:
    return StatementResult(tag=tag, notices=list(notices))
