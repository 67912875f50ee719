"""What each session is doing, as ``pg_stat_activity`` shows it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Activity:
    """One session: who, from where, since when, and its running (or last) statement."""

    pid: int
    user: str
    database: str
    application_name: str
    client_addr: str | None
    client_port: int | None
    backend_start: dt.datetime
    xact_start: dt.datetime | None
    query_start: dt.datetime | None
    state_change: dt.datetime
    # "active", "idle", "idle in transaction" or "idle in transaction (aborted)".
    state: str
    query: str


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
