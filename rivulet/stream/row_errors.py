"""Row errors: a value whose expression fails (an overflow, division by zero, a failed
cast, an invalid regular expression...) is NULL instead of stopping its job, as in
RisingWave's non-strict streaming mode. Each failure is counted here, per job, fragment,
operator, kind of error and expression, logged (at most once a minute per operator,
without data values), and the counts are committed with the epochs so that
``rw_catalog.rw_stream_errors`` shows them."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from rivulet.stream.expression import RowErrors

log = logging.getLogger("rivulet.stream")

_LOG_EVERY_S = 60.0

# (job id, fragment id, operator, error kind, expression)
ErrorKey = tuple[int, int, str, str, str]


@dataclass
class _Count:
    total: int = 0
    unsaved: int = 0


class RowErrorLog:
    """Thread-safe: executors count from the query threads that evaluate their chunks."""

    def __init__(self) -> None:
        self._counts: dict[ErrorKey, _Count] = {}
        self._logged: dict[tuple[int, int, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def record(self, job_id: int, fragment_id: int, operator: str, errors: RowErrors) -> None:
        if errors.rows <= 0:
            return
        parts = errors.by_expression or [("", errors.rows, errors.kind)]
        with self._lock:
            for expression, rows, kind in parts:
                key = (job_id, fragment_id, operator, kind, expression)
                count = self._counts.setdefault(key, _Count())
                count.total += rows
                count.unsaved += rows
            where = (job_id, fragment_id, operator)
            last, logged_total = self._logged.get(where, (float("-inf"), 0))
            total = sum(c.total for k, c in self._counts.items() if k[:3] == where)
            now = time.monotonic()
            if now - last < _LOG_EVERY_S:
                return
            self._logged[where] = (now, total)
        log.warning(
            "job %d, fragment %d, %s: %d value(s) could not be computed (%s); NULL was used"
            " instead (rw_stream_errors counts them)",
            job_id, fragment_id, operator, total - logged_total, errors.kind,
        )  # fmt: skip

    def take_unsaved(self) -> list[tuple[int, int, str, str, str, int]]:
        """(job, fragment, operator, kind, expression, count) counted since the last call."""
        with self._lock:
            out = [(*key, c.unsaved) for key, c in self._counts.items() if c.unsaved]
            for c in self._counts.values():
                c.unsaved = 0
        return out
