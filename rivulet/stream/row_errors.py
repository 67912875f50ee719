"""Row errors: a row whose expression fails (division by zero, a failed cast) yields
NULL instead of stopping its job, as in RisingWave. Each such row is counted here, per
job, fragment and operator, logged (at most once a minute per operator), and the counts
are committed with the epochs so that ``rw_catalog.rw_stream_errors`` shows them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger("rivulet.stream")

_LOG_EVERY_S = 60.0


@dataclass
class _Count:
    total: int = 0
    unsaved: int = 0
    last_logged: float = float("-inf")
    logged_total: int = 0


class RowErrorLog:
    def __init__(self) -> None:
        # (job id, fragment id, operator) -> counts
        self._counts: dict[tuple[int, int, str], _Count] = {}

    def record(self, job_id: int, fragment_id: int, operator: str, rows: int) -> None:
        if rows <= 0:
            return
        count = self._counts.setdefault((job_id, fragment_id, operator), _Count())
        count.total += rows
        count.unsaved += rows
        now = time.monotonic()
        if now - count.last_logged >= _LOG_EVERY_S:
            log.warning(
                "job %d, fragment %d, %s: %d row(s) failed to evaluate (division by zero or"
                " an invalid cast); NULL was used instead",
                job_id, fragment_id, operator, count.total - count.logged_total,
            )  # fmt: skip
            count.last_logged = now
            count.logged_total = count.total

    def take_unsaved(self) -> list[tuple[int, int, str, int]]:
        """(job, fragment, operator, rows) counted since the last call."""
        out = [(j, f, op, c.unsaved) for (j, f, op), c in self._counts.items() if c.unsaved]
        for c in self._counts.values():
            c.unsaved = 0
        return out
