"""System parameters: cluster-wide settings stored in the meta store, shown by
``SHOW PARAMETERS`` and changed by ``ALTER SYSTEM SET name = value``.

A change is committed with a checkpoint like any catalog change and takes effect once
committed (``on_change`` callbacks, e.g. the barrier manager's interval).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rivulet.common.errors import (
    CANT_CHANGE_RUNTIME_PARAM,
    INVALID_PARAMETER_VALUE,
    UNDEFINED_OBJECT,
    sql_error,
)
from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_store import META_SCHEMA, StateStore


def _int_in(low: int, high: int) -> Callable[[str, str], str]:
    def check(name: str, value: str) -> str:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise sql_error(
                INVALID_PARAMETER_VALUE,
                f'invalid value for system parameter "{name}": "{value}"',
                hint=f"Expected an integer from {low} to {high}.",
            )
        return str(number)

    return check


def _boolean(name: str, value: str) -> str:
    lowered = value.strip().lower()
    if lowered in ("true", "on", "t", "1"):
        return "true"
    if lowered in ("false", "off", "f", "0"):
        return "false"
    raise sql_error(
        INVALID_PARAMETER_VALUE,
        f'invalid value for system parameter "{name}": "{value}"',
        hint="Expected true or false.",
    )


# PostgreSQL's limit on one value (MaxAllocSize, 1 GB - 1).
MAX_ALLOC_BYTES = 1024 * 1024 * 1024 - 1
# Lower than PostgreSQL's: a value is copied several times on its way to a client (DuckDB's
# string, the Arrow result, its text form, the wire buffer), so one 1 GB value costs a few
# GB of memory that every session shares.
DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SystemParam:
    name: str
    default: str
    description: str
    # None: fixed for the life of the data directory.
    check: Callable[[str, str], str] | None


PARAMS: dict[str, SystemParam] = {
    p.name: p
    for p in (
        SystemParam(
            "barrier_interval_ms",
            "1000",
            "The interval of barrier injection: how often an epoch is checkpointed.",
            _int_in(10, 3_600_000),
        ),
        SystemParam(
            "checkpoint_frequency",
            "1",
            "Barriers per checkpoint: every barrier is a checkpoint in Rivulet.",
            None,
        ),
        SystemParam(
            "disable_automatic_parallelism_control",
            "false",
            "When true, adding or removing workers does not reschedule adaptive jobs"
            " (a removed worker's actors still move).",
            _boolean,
        ),
        # Limits of the PostgreSQL server (read when a client connects).
        SystemParam(
            "max_connections",
            "100",
            "Client connections the server accepts at once, logged in or starting;"
            " past it a client gets 53300 'sorry, too many clients already'.",
            _int_in(1, 10_000),
        ),
        SystemParam(
            "max_startup_connections",
            "32",
            "Connections still in start-up or authentication at once (part of"
            " max_connections), so that idle sockets cannot take every slot.",
            _int_in(1, 10_000),
        ),
        SystemParam(
            "authentication_timeout",
            "60",
            "Seconds a client has to finish start-up and authentication.",
            _int_in(1, 600),
        ),
        SystemParam(
            "auth_delay_ms",
            "500",
            "Milliseconds a failed login waits before its error (slows password guessing;"
            " other clients are not held up).",
            _int_in(0, 10_000),
        ),
        SystemParam(
            "max_message_bytes",
            str(16 << 20),
            "The largest protocol message a logged-in client may send (a query, a Bind"
            " with its parameters), in bytes.",
            _int_in(1 << 16, 1 << 30),
        ),
        SystemParam(
            "max_copy_data_bytes",
            str(64 << 20),
            "The largest CopyData message in COPY FROM STDIN, in bytes (a file arrives as"
            " many of them).",
            _int_in(1 << 16, 1 << 30),
        ),
        SystemParam(
            "max_value_bytes",
            str(DEFAULT_MAX_VALUE_BYTES),
            "The largest text value a function may build (repeat, lpad, ||, string_agg...);"
            " larger ones fail with SQLSTATE 54000 before they are built.",
            _int_in(1024, MAX_ALLOC_BYTES),
        ),
        SystemParam(
            "max_concurrent_queries",
            "8",
            "User statements that read stored rows and may run at once; the others wait"
            " their turn (statements over constants and the system catalog never wait).",
            _int_in(1, 256),
        ),
        SystemParam(
            "max_statement_bytes",
            str(16 << 20),
            "The longest statement text accepted, in bytes (longer ones fail with 54000).",
            _int_in(1024, 1 << 30),
        ),
        SystemParam(
            "state_store",
            "duckdb",
            "Where operator state and tables are stored.",
            None,
        ),
    )
}


class SystemParams:
    """The stored values of the system parameters (defaults where none is stored)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.run_setup(
            [
                f"CREATE TABLE IF NOT EXISTS {META_SCHEMA}.system_params ("
                "name VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"
            ]
        )
        stored = dict(
            store.cursor()
            .execute(f"SELECT name, value FROM {META_SCHEMA}.system_params")
            .fetchall()
        )
        self._values = {name: stored.get(name, p.default) for name, p in PARAMS.items()}
        # Bumped on every committed change: statements bound with the old values are stale.
        self.version = 0
        # Called with (name, value) once a change is committed.
        self.on_change: list[Callable[[str, str], None]] = []

    def get(self, name: str) -> str:
        return self._values[name]

    def rows(self) -> list[tuple[str, str, str]]:
        """(name, value, mutable) in name order, as SHOW PARAMETERS lists them."""
        return [
            (n, self._values[n], "true" if PARAMS[n].check is not None else "false")
            for n in sorted(PARAMS)
        ]

    def prepare_set(self, name: str, value: str | None, change: CatalogChange) -> str:
        """Validate ``name = value`` (None: back to the default) and add it to ``change``.
        Returns the value that will be stored. Raises without touching anything."""
        param = PARAMS.get(name.lower())
        if param is None:
            raise sql_error(
                UNDEFINED_OBJECT,
                f'unrecognized system parameter "{name}"',
                hint="SHOW PARAMETERS lists the system parameters.",
            )
        if param.check is None:
            raise sql_error(
                CANT_CHANGE_RUNTIME_PARAM,
                f'system parameter "{param.name}" cannot be changed',
            )
        new = param.default if value is None else param.check(param.name, value)
        change.statements.append(
            (f"INSERT OR REPLACE INTO {META_SCHEMA}.system_params VALUES (?, ?)", [param.name, new])
        )
        change.on_commit.append(lambda: self._changed(param.name, new))
        return new

    def _changed(self, name: str, value: str) -> None:
        self._values[name] = value
        self.version += 1
        for fn in self.on_change:
            fn(name, value)
