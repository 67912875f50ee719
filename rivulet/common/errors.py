"""Errors users see: PEP 249 classes, each carrying a SQLSTATE, a hint and a position.

Every layer raises these; the embedded API re-exports them and the pgwire server turns
them into ErrorResponse fields (C = sqlstate, M = message, H = hint, P = position,
W = context).
"""

from __future__ import annotations


class Warning(Exception):
    """PEP 249 Warning."""


class Error(Exception):
    """Base of every Rivulet error (PEP 249 ``Error``)."""

    default_sqlstate = "XX000"

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        hint: str | None = None,
        detail: str | None = None,
        position: int | None = None,
        context: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate or self.default_sqlstate
        self.hint = hint
        self.detail = detail
        # 1-based character offset into the statement text, as PostgreSQL reports it.
        self.position = position
        # Where it happened, as PostgreSQL's CONTEXT says it ("COPY t, line 3").
        self.context = context

    def __str__(self) -> str:
        text = self.message
        if self.hint:
            text += f"\nHINT: {self.hint}"
        return text


class InterfaceError(Error):
    default_sqlstate = "08000"


class DatabaseError(Error):
    default_sqlstate = "XX000"


class DataError(DatabaseError):
    default_sqlstate = "22000"


class OperationalError(DatabaseError):
    default_sqlstate = "55000"


class IntegrityError(DatabaseError):
    default_sqlstate = "23000"


class InternalError(DatabaseError):
    default_sqlstate = "XX000"


class ProgrammingError(DatabaseError):
    default_sqlstate = "42000"


class NotSupportedError(DatabaseError):
    default_sqlstate = "0A000"


class QueryCanceled(OperationalError):
    default_sqlstate = "57014"


# SQLSTATE codes used across the code base, named as PostgreSQL's errcodes.txt names them.
SYNTAX_ERROR = "42601"
UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"
UNDEFINED_FUNCTION = "42883"
UNDEFINED_OBJECT = "42704"
DUPLICATE_TABLE = "42P07"
DUPLICATE_COLUMN = "42701"
NAME_TOO_LONG = "42622"
INVALID_TABLE_DEFINITION = "42P16"
DUPLICATE_OBJECT = "42710"
AMBIGUOUS_COLUMN = "42702"
DATATYPE_MISMATCH = "42804"
INVALID_PARAMETER_VALUE = "22023"
INSUFFICIENT_PRIVILEGE = "42501"
INVALID_TEXT_REPRESENTATION = "22P02"
NUMERIC_VALUE_OUT_OF_RANGE = "22003"
DIVISION_BY_ZERO = "22012"
INVALID_DATETIME_FORMAT = "22007"
DATETIME_FIELD_OVERFLOW = "22008"
STRING_DATA_RIGHT_TRUNCATION = "22001"
BAD_COPY_FILE_FORMAT = "22P04"
NOT_NULL_VIOLATION = "23502"
UNIQUE_VIOLATION = "23505"
FEATURE_NOT_SUPPORTED = "0A000"
OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
OBJECT_IN_USE = "55006"
CANT_CHANGE_RUNTIME_PARAM = "55P02"
DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
INVALID_PASSWORD = "28P01"
INVALID_AUTHORIZATION = "28000"
PROTOCOL_VIOLATION = "08P01"
QUERY_CANCELED = "57014"
ADMIN_SHUTDOWN = "57P01"
INVALID_CATALOG_NAME = "3D000"
INVALID_SCHEMA_NAME = "3F000"
UNDEFINED_PARAMETER = "42P02"
INVALID_PREPARED_STATEMENT = "26000"
INVALID_CURSOR_NAME = "34000"
DUPLICATE_PREPARED_STATEMENT = "42P05"
INTERNAL_ERROR = "XX000"
DATA_CORRUPTED = "XX001"
CONFIG_FILE_ERROR = "F0000"
LOCK_NOT_AVAILABLE = "55P03"
IO_ERROR = "58030"
WRONG_OBJECT_TYPE = "42809"
INVALID_COLUMN_REFERENCE = "42P10"
PROGRAM_LIMIT_EXCEEDED = "54000"
INSUFFICIENT_RESOURCES = "53000"
TOO_MANY_CONNECTIONS = "53300"
INVALID_ARGUMENT_FOR_LOG = "2201E"
INVALID_ARGUMENT_FOR_POWER = "2201F"
CHARACTER_NOT_IN_REPERTOIRE = "22021"
STATEMENT_TOO_COMPLEX = "54001"
IDLE_IN_TRANSACTION_SESSION_TIMEOUT = "25P03"


def error_class_for(sqlstate: str) -> type[Error]:
    """The PEP 249 class a SQLSTATE belongs to (by its two-character class)."""
    cls = sqlstate[:2]
    if sqlstate == QUERY_CANCELED:
        return QueryCanceled
    if cls == "0A":
        return NotSupportedError
    if cls == "22":
        return DataError
    if cls == "23":
        return IntegrityError
    if cls in ("42", "2B", "3D", "3F", "26", "34", "28"):
        return ProgrammingError
    if cls in ("08",):
        return InterfaceError
    if cls in ("54", "55", "57", "53", "58", "F0"):
        return OperationalError
    return InternalError


def sql_error(
    sqlstate: str,
    message: str,
    *,
    hint: str | None = None,
    detail: str | None = None,
    position: int | None = None,
    context: str | None = None,
) -> Error:
    """Build the right PEP 249 error for a SQLSTATE."""
    return error_class_for(sqlstate)(
        message, sqlstate=sqlstate, hint=hint, detail=detail, position=position, context=context
    )


def stack_depth_error() -> Error:
    """A statement nested too deeply for the parser, binder or DuckDB (PostgreSQL's
    wording)."""
    return sql_error(
        STATEMENT_TOO_COMPLEX,
        "stack depth limit exceeded",
        hint="The statement nests expressions or parentheses too deeply: flatten it, e.g."
        " with IN (...) instead of a chain of OR, or split it into several statements.",
    )


def not_supported(what: str, *, hint: str | None = None) -> Error:
    return sql_error(FEATURE_NOT_SUPPORTED, f"{what} is not supported yet", hint=hint)
