"""Bounded values over pgwire: a statement that would build a multi-GB value fails at
once with 54000, the server's memory does not jump, and other sessions go on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from conftest import ServerFactory

# Refused from their arguments, before anything is built.
REFUSED_UPFRONT = [
    "SELECT repeat('x', 2000000000)",
    "SELECT lpad('x', 2000000000, 'ab')",
    "SELECT rpad('', 1500000000)",
    "SELECT format('%1500000000s', 'x')",
    "SELECT replace(repeat('x', 1000000), 'x', repeat('y', 2000))",
]
# Built step by step: they fail at the first value over the limit (64 MiB), so memory
# grows by a few copies of the limit, never by gigabytes.
REFUSED_ON_THE_WAY = [
    "SELECT length(string_agg(repeat('x', 1000000), '')) FROM generate_series(1, 70) AS g(i)",
    "WITH RECURSIVE r(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1"
    " FROM r WHERE n < 40) SELECT max(length(s)) FROM r",
]


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_oversized_values_fail_fast_without_memory(server_factory: ServerFactory) -> None:
    srv = server_factory()
    pid = srv.proc.pid
    with srv.connect() as conn, srv.connect() as other:
        conn.execute("SELECT repeat('x', 10)").fetchall()  # warm up
        peak_start = _status_kb(pid, "VmHWM")
        # Another session keeps answering while the oversized statements run.
        answers: list[int] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                answers.append(other.execute("SELECT 1 + 1").fetchone()[0])
                time.sleep(0.01)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            for sql in REFUSED_UPFRONT + REFUSED_ON_THE_WAY:
                started = time.monotonic()
                with pytest.raises(psycopg.Error) as info:
                    conn.execute(sql)
                elapsed = time.monotonic() - started
                assert info.value.sqlstate == "54000", (sql, info.value)
                assert "requested length too large" in str(info.value), sql
                assert "max_value_bytes" in (info.value.diag.message_hint or ""), sql
                assert elapsed < 10, f"{sql} took {elapsed:.1f}s"
                if sql == REFUSED_UPFRONT[-1]:
                    peak_upfront = _status_kb(pid, "VmHWM")
        finally:
            stop.set()
            poller.join()
        peak_end = _status_kb(pid, "VmHWM")
        assert peak_upfront - peak_start < 100 * 1024, (
            f"peak RSS grew from {peak_start} kB to {peak_upfront} kB"
        )
        assert peak_end - peak_start < 1024 * 1024, (
            f"peak RSS grew from {peak_start} kB to {peak_end} kB"
        )
        assert answers and all(a == 2 for a in answers)
        # The failing session is fine, and values under the limit are built as before.
        assert conn.execute("SELECT length(repeat('x', 1000000))").fetchone() == (1000000,)
