"""Turn DuckDB's errors into PostgreSQL-style errors with the right SQLSTATE.

DuckDB prefixes messages with their class ("Binder Error: ...") and appends a caret
context; users get PostgreSQL's wording where we know it, and never the name of an
internal relation.
"""

from __future__ import annotations

import re

import duckdb

from rivulet.common.errors import (
    AMBIGUOUS_COLUMN,
    DATA_CORRUPTED,
    DATATYPE_MISMATCH,
    DATETIME_FIELD_OVERFLOW,
    DIVISION_BY_ZERO,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_PRIVILEGE,
    INTERNAL_ERROR,
    INVALID_DATETIME_FORMAT,
    INVALID_TEXT_REPRESENTATION,
    NOT_NULL_VIOLATION,
    NUMERIC_VALUE_OUT_OF_RANGE,
    PROGRAM_LIMIT_EXCEEDED,
    QUERY_CANCELED,
    SYNTAX_ERROR,
    UNDEFINED_COLUMN,
    UNDEFINED_FUNCTION,
    UNDEFINED_TABLE,
    UNIQUE_VIOLATION,
    Error,
    sql_error,
    stack_depth_error,
)
from rivulet.sql.system_catalog.macros import ERROR_STATES, VALUE_LIMIT_HINT, raised_message

_PREFIX = re.compile(r"^[A-Za-z ]+ Error: ", re.S)
_STATE_PREFIXES = ("state.", "rw_sys.", "meta.")


def _clean(message: str) -> str:
    text = _PREFIX.sub("", message, count=1)
    text = text.split("\n\nLINE ")[0].split("\nLINE ")[0].strip()
    text = re.sub(r'"?state"?\."?t\d+"?', "relation", text)
    text = re.sub(r"rw_sys\.(pg|is|rw)__", "", text)
    text = re.sub(r'"(pg|is|rw)__(\w+)"', r'"\2"', text)
    return text


_PG_TYPE_NAMES = {
    "INT8": "smallint", "INT16": "smallint", "INT32": "integer", "INT64": "bigint",
    "BOOL": "boolean", "BOOLEAN": "boolean", "FLOAT": "real", "DOUBLE": "double precision",
    "DATE": "date", "TIMESTAMP": "timestamp", "TIME": "time", "INTERVAL": "interval",
    "UUID": "uuid", "BLOB": "bytea", "JSON": "jsonb",
}  # fmt: skip


def _raised(msg: str) -> Error:
    """An error a macro raised on purpose (``rw_raise``), by its message."""
    for start, code in ERROR_STATES.items():
        if msg.startswith(start):
            hint = VALUE_LIMIT_HINT if code == PROGRAM_LIMIT_EXCEEDED else None
            return sql_error(code, msg, hint=hint)
    if msg == "division by zero":
        return sql_error(DIVISION_BY_ZERO, msg)
    # Raised by the catalog macros for 'x'::regclass and friends (system_catalog).
    m = re.fullmatch(r'(relation|type|function|schema|role) "(.*)" does not exist', msg)
    if m:
        code = {"relation": UNDEFINED_TABLE, "function": UNDEFINED_FUNCTION}
        return sql_error(code.get(m.group(1), "3F000" if m.group(1) == "schema" else "42704"), msg)
    return sql_error("22023", msg)


def translate(exc: duckdb.Error, sql: str | None = None) -> Error:
    """The Rivulet error for a DuckDB exception raised while running user SQL."""
    raw = str(exc)
    msg = _clean(raw)
    inner = raised_message(msg)
    if inner is not None:
        return _raised(inner)
    low = msg.lower()
    position = None

    def locate(name: str) -> int | None:
        if sql and name:
            i = sql.find(name)
            return i + 1 if i >= 0 else None
        return None

    if isinstance(exc, duckdb.InterruptException):
        return sql_error(QUERY_CANCELED, "canceling statement due to user request")
    if "max expression depth limit" in low:
        return stack_depth_error()
    if "corrupt database file" in low or "could not read enough bytes from file" in low:
        # A block of committed state fails its checksum or is missing (DuckDB reads the
        # store lazily, so damage outside the catalog shows when it is read).
        return sql_error(
            DATA_CORRUPTED,
            f"the state store is damaged: {msg}",
            hint="Part of the stored state cannot be read. Stop Rivulet and restore the"
            " data directory from a backup.",
        )
    if "division by zero" in low:
        return sql_error(DIVISION_BY_ZERO, "division by zero")
    if isinstance(exc, duckdb.ConstraintException):
        if "not null" in low:
            return sql_error(NOT_NULL_VIOLATION, msg)
        return sql_error(UNIQUE_VIOLATION, msg)
    if isinstance(exc, duckdb.PermissionException):
        return sql_error(INSUFFICIENT_PRIVILEGE, msg)
    if isinstance(exc, duckdb.BinderException):
        m = re.search(r'Referenced column "([^"]+)" not found', msg) or re.search(
            r'does not have a column named "([^"]+)"', msg
        )
        if m:
            name = m.group(1)
            return sql_error(
                UNDEFINED_COLUMN, f'column "{name}" does not exist', position=locate(name)
            )
        m = re.search(r'Referenced table "([^"]+)" not found', msg)
        if m:
            name = m.group(1)
            return sql_error(
                UNDEFINED_TABLE,
                f'missing FROM-clause entry for table "{name}"',
                position=locate(name),
            )
        if "ambiguous" in low:
            m = re.search(r'"([^"]+)" is ambiguous', msg) or re.search(
                r'Ambiguous reference to column name "([^"]+)"', msg
            )
            name = m.group(1) if m else ""
            return sql_error(
                AMBIGUOUS_COLUMN,
                f'column reference "{name}" is ambiguous' if name else msg,
                position=locate(name),
            )
        if "set operations can only apply to expressions with the same number" in low:
            return sql_error(SYNTAX_ERROR, "each UNION query must have the same number of columns")
        if "no function matches" in low or "could not choose a best candidate" in low:
            return _no_matching_function(msg)
        if "function with name" in low:
            return sql_error(UNDEFINED_FUNCTION, msg)
        if "group by" in low:
            m = re.search(r'column "([^"]+)" must appear in the GROUP BY clause', msg)
            if m:
                return sql_error(
                    "42803",
                    f'column "{m.group(1)}" must appear in the GROUP BY clause or be used in'
                    " an aggregate function",
                    position=locate(m.group(1)),
                )
            return sql_error("42803", msg)
        if (
            "cannot compare" in low
            or "cannot mix" in low
            or "implicit cast" in low
            or ("could not" in low and "convert" in low)
        ):
            return sql_error(DATATYPE_MISMATCH, msg)
        return sql_error("42000", msg)
    if isinstance(exc, duckdb.CatalogException):
        m = re.search(r"with name ([^ ]+) does not exist", msg)
        if m:
            name = m.group(1).strip('"!')
            kind = "function" if "function" in low else "relation"
            code = UNDEFINED_FUNCTION if kind == "function" else UNDEFINED_TABLE
            return sql_error(code, f'{kind} "{name}" does not exist', position=locate(name))
        return sql_error(UNDEFINED_TABLE, msg)
    if isinstance(exc, duckdb.ParserException):
        m = re.search(r'syntax error at or near "([^"]*)"', msg)
        return sql_error(SYNTAX_ERROR, msg, position=locate(m.group(1)) if m else position)
    m = re.search(r"Unimplemented type for cast \((.+?) -> (.+?)\)", msg)
    if m:
        return sql_error(
            "42846", f"cannot cast type {_pg_type(m.group(1))} to {_pg_type(m.group(2))}"
        )
    if "not in timestamp range" in low:
        return sql_error(DATETIME_FIELD_OVERFLOW, "timestamp out of range")
    if low.startswith("date out of range"):
        return sql_error(DATETIME_FIELD_OVERFLOW, "date out of range")
    m = re.search(r'invalid (date|timestamp) field format: "([^"]*)"', msg)
    if m:
        return sql_error(
            INVALID_DATETIME_FORMAT, f'invalid input syntax for type {m.group(1)}: "{m.group(2)}"'
        )
    m = re.search(r'(?:date|time|timestamp) field value out of range: "([^"]*)"', msg)
    if m:
        return sql_error("22008", f'date/time field value out of range: "{m.group(1)}"')
    if isinstance(exc, duckdb.ConversionException):
        m = re.search(r"Could not convert string '(.*)' to (\w+)", msg, re.S)
        if m:
            pg = _PG_TYPE_NAMES.get(m.group(2).upper(), m.group(2).lower())
            return sql_error(
                INVALID_TEXT_REPRESENTATION,
                f'invalid input syntax for type {pg}: "{m.group(1)}"',
            )
        if "out of range" in low or "overflow" in low:
            return sql_error(NUMERIC_VALUE_OUT_OF_RANGE, _out_of_range_message(msg))
        if "timestamp" in low or "date" in low or "time" in low or "interval" in low:
            return sql_error(INVALID_DATETIME_FORMAT, msg)
        return sql_error(INVALID_TEXT_REPRESENTATION, msg)
    if isinstance(exc, duckdb.OutOfRangeException):
        return sql_error(NUMERIC_VALUE_OUT_OF_RANGE, _out_of_range_message(msg))
    if isinstance(exc, duckdb.NotImplementedException):
        return sql_error(FEATURE_NOT_SUPPORTED, msg)
    if "more than one row returned by a subquery" in low:
        return sql_error("21000", "more than one row returned by a subquery used as an expression")
    if isinstance(exc, duckdb.InvalidInputException):
        return _raised(msg)
    if isinstance(exc, duckdb.TypeMismatchException):
        return sql_error(DATATYPE_MISMATCH, msg)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return sql_error("53200", msg)
    return sql_error(INTERNAL_ERROR, msg)


def _pg_type(duck: str) -> str:
    """PostgreSQL's name for a DuckDB type as error messages spell it."""
    t = duck.strip().strip('"').upper()
    if t.endswith("_LITERAL"):
        return "unknown" if t.startswith("STRING") else _pg_type(t[: -len("_LITERAL")])
    if t.startswith("DECIMAL"):
        return "numeric"
    names = {
        "TINYINT": "smallint", "SMALLINT": "smallint", "INTEGER": "integer",
        "BIGINT": "bigint", "HUGEINT": "numeric", "VARCHAR": "character varying",
        "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
        "TIMESTAMP": "timestamp without time zone", "TIME": "time without time zone",
    }  # fmt: skip
    return names.get(t, _PG_TYPE_NAMES.get(t, t.lower()))


def _no_matching_function(msg: str) -> Error:
    """PostgreSQL's wording for a call no function or operator accepts (DuckDB lists every
    candidate, which says more about DuckDB than about the query)."""
    ambiguous = "could not choose" in msg.lower()
    m = re.search(r"""['"]([^'"(]+)\((.*?)\)['"]""", msg)
    if m is None:
        first = msg.split("\n")[0]
        return sql_error("42725" if ambiguous else UNDEFINED_FUNCTION, first)
    name, args = m.group(1), [_pg_type(a) for a in m.group(2).split(",") if a.strip()]
    is_operator = not re.match(r"\w", name)
    if is_operator:
        shown = f"{args[0]} {name} {args[1]}" if len(args) == 2 else f"{name} {' '.join(args)}"
        kind, what = "operator", shown
    else:
        kind, what = "function", f"{name}({', '.join(args)})"
    if ambiguous:
        return sql_error(
            "42725",
            f"operator is not unique: {what}" if is_operator else f"function {what} is not unique",
            hint=f"Could not choose a best candidate {kind}. You might need to add explicit"
            " type casts.",
        )
    return sql_error(
        UNDEFINED_FUNCTION,
        f"operator does not exist: {what}" if is_operator else f"function {what} does not exist",
        hint=f"No {kind} matches the given name and argument types. You might need to add"
        " explicit type casts.",
    )


def _out_of_range_message(msg: str) -> str:
    """``integer out of range`` and ``numeric field overflow``, as PostgreSQL says them."""
    m = re.search(r"destination type (\w+)", msg) or re.search(r"Overflow in \w+ of (\w+)", msg)
    if m and m.group(1).upper() in ("INT16", "INT32", "INT64", "SMALLINT", "INTEGER", "BIGINT"):
        return f"{_pg_type(_PG_INT_NAMES.get(m.group(1).upper(), m.group(1)))} out of range"
    if re.search(r"to type DECIMAL\(\d+,\s*\d+\) failed", msg):
        return "numeric field overflow"
    return msg


_PG_INT_NAMES = {"INT16": "SMALLINT", "INT32": "INTEGER", "INT64": "BIGINT"}
