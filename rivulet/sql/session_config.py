"""Session variables: the ones RisingWave and PostgreSQL clients set and show.

Each has a default and a validator; unknown names are refused (SQLSTATE 42704) as
PostgreSQL does. Variables marked ``reported`` are sent to pgwire clients as
ParameterStatus when they change.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass

from rivulet.common.errors import INVALID_PARAMETER_VALUE, UNDEFINED_OBJECT, sql_error
from rivulet.common.version import __version__

PG_VERSION = "13.14.0"
SERVER_VERSION = f"{PG_VERSION}-Rivulet-{__version__}"
VERSION_STRING = f"PostgreSQL {PG_VERSION}-Rivulet-{__version__} (a streaming SQL database)"


def _bool(value: str) -> str:
    v = value.strip().lower()
    if v in ("true", "on", "yes", "1", "t"):
        return "true"
    if v in ("false", "off", "no", "0", "f"):
        return "false"
    raise ValueError("expects a boolean")


def _int(value: str) -> str:
    return str(int(value.strip()))


def _nonneg_int(value: str) -> str:
    n = int(value.strip())
    if n < 0:
        raise ValueError("expects a number >= 0")
    return str(n)


def _timezone(value: str) -> str:
    v = value.strip()
    if v.upper() in ("UTC", "GMT", "Z"):
        return "UTC"
    if re.fullmatch(r"[+-]?\d{1,2}(:\d{2})?", v):
        return v
    try:
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f'time zone "{value}" not recognized') from None
    return v


def zone_offset(timezone: str) -> str | None:
    """A numeric ``timezone`` as an ISO 8601 offset ``+HH:MM`` (positive east), or None
    for a zone name. PostgreSQL reads a bare number (``-5``) as ISO 8601 does, and an
    ``HH:MM`` offset (``+05:30``) as a POSIX zone does: positive west of Greenwich."""
    m = re.fullmatch(r"([+-]?)(\d{1,2})(?::(\d{2}))?", timezone.strip())
    if m is None:
        return None
    east = m.group(1) != "-"
    if m.group(3) is not None:
        east = not east
    return f"{'+' if east else '-'}{int(m.group(2)):02d}:{m.group(3) or '00'}"


def duckdb_zone(timezone: str) -> str:
    """The session's ``timezone`` as DuckDB's ICU names it (offsets as ``GMT+hh:mm``)."""
    offset = zone_offset(timezone)
    return timezone.strip() if offset is None else f"GMT{offset}"


def _client_encoding(value: str) -> str:
    """UTF8 under any of PostgreSQL's spellings; SQL_ASCII passes bytes through unconverted
    (as PostgreSQL does for it, so nothing needs converting); other encodings are refused."""
    key = re.sub(r"[^a-z0-9]", "", value.strip().lower())
    if key in ("utf8", "unicode"):
        return "UTF8"
    if key == "sqlascii":
        return "SQL_ASCII"
    raise ValueError(f"conversion between {value.strip()} and UTF8 is not supported")


def _parallelism(value: str) -> str:
    v = value.strip().lower()
    if v in ("default", "adaptive", "auto", "0"):
        return "default" if v in ("default", "0") else "adaptive"
    n = int(v)
    if not 1 <= n <= 256:
        raise ValueError("expects a number between 1 and 256, adaptive or default")
    return str(n)


def _rate_limit(value: str) -> str:
    v = value.strip().lower()
    if v in ("default", "-1"):
        return "default"
    return _nonneg_int(v)


def _any(value: str) -> str:
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        v = value.strip().lower()
        if v not in options:
            raise ValueError("expects one of " + ", ".join(options))
        return v

    return check


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    default: str
    check: Callable[[str], str] = _any
    description: str = ""
    reported: bool = False
    read_only: bool = False
    # The name clients see in ParameterStatus (PostgreSQL spells some in mixed case).
    wire_name: str | None = None
    # What to do when a value is refused.
    hint: str | None = None


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in [
        Variable("application_name", "", reported=True,
                 description="Sets the application name to be reported in statistics and logs."),
        Variable("timezone", "UTC", _timezone, "Sets the time zone for displaying timestamps.",
                 reported=True, wire_name="TimeZone"),
        Variable("datestyle", "ISO, MDY", description="Sets the display format for dates.",
                 reported=True, wire_name="DateStyle"),
        Variable("intervalstyle", "postgres", reported=True, wire_name="IntervalStyle"),
        Variable("client_encoding", "UTF8", _client_encoding, reported=True,
                 hint="Rivulet exchanges text in UTF8: set client_encoding to UTF8 (psql:"
                 " \\encoding UTF8, or PGCLIENTENCODING=UTF8)."),
        Variable("server_encoding", "UTF8", reported=True, read_only=True),
        Variable("server_version", SERVER_VERSION, reported=True, read_only=True),
        Variable("server_version_num", "130014", read_only=True),
        Variable("standard_conforming_strings", "on", reported=True),
        Variable("integer_datetimes", "on", reported=True, read_only=True),
        Variable("is_superuser", "on", reported=True, read_only=True),
        Variable("session_authorization", "root", reported=True, read_only=True),
        Variable("extra_float_digits", "1", _int),
        Variable("client_min_messages", "notice",
                 _choice("debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice",
                         "warning", "error")),
        Variable("search_path", '"$user", public',
                 description="Sets the schema search order for names that are not schema-qualified."),
        Variable("transaction_isolation", "read committed", read_only=True),
        Variable("transaction_read_only", "off", read_only=True),
        Variable("default_transaction_isolation", "read committed"),
        Variable("default_transaction_read_only", "off"),
        Variable("statement_timeout", "0", _nonneg_int,
                 "Abort any statement that takes more than the given milliseconds (0: never)."),
        Variable("lock_timeout", "0", _nonneg_int),
        Variable("idle_in_transaction_session_timeout", "0", _nonneg_int),
        Variable("bytea_output", "hex", _choice("hex")),
        Variable("row_security", "off"),
        Variable("max_identifier_length", "63", read_only=True),
        Variable("query_mode", "auto", _choice("auto", "local", "distributed")),
        Variable("rw_implicit_flush", "true", _bool,
                 "A write returns once committed and visible (true), or once its rows are"
                 " in the current epoch (false, RisingWave's default; FLUSH waits for them)."),
        Variable("batch_parallelism", "0", _nonneg_int),
        Variable("streaming_parallelism", "default", _parallelism,
                 "Parallelism of new streaming jobs: a number, adaptive or default."),
        Variable("streaming_parallelism_for_backfill", "default", _parallelism,
                 "Parallelism of a new streaming job while it backfills."),
        Variable("streaming_use_arrangement_backfill", "true", _bool),
        Variable("streaming_use_snapshot_backfill", "false", _bool),
        Variable("background_ddl", "false", _bool,
                 "Run CREATE MATERIALIZED VIEW in the background."),
        Variable("backfill_rate_limit", "default", _rate_limit,
                 "Rows per second per fragment during backfill (0 pauses it)."),
        Variable("source_rate_limit", "default", _rate_limit),
        Variable("sink_decouple", "default"),
        Variable("streaming_enable_delta_join", "false", _bool),
        Variable("streaming_enable_bushy_join", "true", _bool),
        Variable("rw_batch_enable_sort_agg", "true", _bool),
        Variable("rw_batch_enable_lookup_join", "true", _bool),
        Variable("enable_join_ordering", "true", _bool),
        Variable("create_compaction_group_for_mv", "false", _bool),
        Variable("synchronize_seqscans", "on"),
        Variable("max_parallel_workers_per_gather", "0"),
    ]
}  # fmt: skip


class SessionConfig:
    """One session's variables."""

    def __init__(self, user: str) -> None:
        self._values: dict[str, str] = {}
        # Bumped on every change: bound statements cached by a session key on it.
        self.version = 0
        self._values["session_authorization"] = user

    @staticmethod
    def canonical(name: str) -> str:
        name = name.strip().lower()
        return {
            "time zone": "timezone",
            "time_zone": "timezone",
            # SHOW TRANSACTION ISOLATION LEVEL (SQLAlchemy asks it on connect).
            "transaction isolation level": "transaction_isolation",
        }.get(name, name)

    def get(self, name: str) -> str | None:
        name = self.canonical(name)
        var = VARIABLES.get(name)
        if var is None:
            return None
        return self._values.get(name, var.default)

    def require(self, name: str) -> Variable:
        var = VARIABLES.get(self.canonical(name))
        if var is None:
            raise sql_error(UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"')
        return var

    def set(self, name: str, value: str | None) -> Variable:
        """Set a variable (None: back to its default). Returns the variable."""
        var = self.require(name)
        self.version += 1
        if value is None:
            self._values.pop(var.name, None)
            return var
        if var.read_only:
            if value.strip().lower() == self.get(var.name).lower():  # type: ignore[union-attr]
                return var
            raise sql_error("55P02", f'parameter "{var.name}" cannot be changed')
        try:
            checked = var.check(value)
        except ValueError as exc:
            raise sql_error(
                INVALID_PARAMETER_VALUE,
                f'invalid value for parameter "{var.name}": "{value}"',
                detail=str(exc),
                hint=var.hint,
            ) from None
        self._values[var.name] = checked
        return var

    def reset_all(self) -> None:
        user = self._values.get("session_authorization")
        self.version += 1
        self._values.clear()
        if user:
            self._values["session_authorization"] = user

    def search_path(self) -> tuple[str, ...]:
        raw = self.get("search_path") or ""
        parts = [p.strip().strip('"') for p in raw.split(",")]
        return tuple(p for p in parts if p)

    def all(self) -> list[tuple[str, str, str]]:
        return [(v.name, self.get(v.name) or "", v.description) for v in VARIABLES.values()]

    def reported(self) -> list[tuple[str, str]]:
        """(wire name, value) of every variable reported to clients."""
        return [
            (v.wire_name or v.name, self.get(v.name) or "")
            for v in VARIABLES.values()
            if v.reported
        ]
