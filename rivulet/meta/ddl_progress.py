"""Creating jobs' backfill progress as users see it (SHOW JOBS, rw_ddl_progress): the
rows written with each epoch while jobs are creating, and restored from at start."""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from rivulet.meta.catalog import Catalog
from rivulet.storage.state_store import META_SCHEMA
from rivulet.stream.backfill_tracker import BackfillProgress


class CreatingJobsProgress:
    def __init__(self, catalog: Catalog, backfill: BackfillProgress) -> None:
        self.catalog = catalog
        self.backfill = backfill
        self._progress_shown = True  # clear stale rows at the first commit

    def writer(self) -> Callable[[duckdb.DuckDBPyConnection], None] | None:
        """rw_ddl_progress's rows, written with each epoch while jobs are creating (and
        once more when the last one is done)."""
        rows = self.rows()
        if not rows and not self._progress_shown:
            return None
        self._progress_shown = bool(rows)

        def write(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute(f"DELETE FROM {META_SCHEMA}.ddl_progress")
            if rows:
                cur.executemany(
                    f"INSERT INTO {META_SCHEMA}.ddl_progress VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [list(r) for r in rows],
                )

        return write

    def rows(self) -> list[tuple[object, ...]]:
        """Creating jobs for SHOW JOBS / rw_ddl_progress: (id, statement, create type,
        progress text, initialized at, backfill type, consumed rows, total rows)."""
        rows = []
        for t in self.catalog.all_tables():
            if not t.creating:
                continue
            consumed, total, _ = self.backfill.progress(t.id)
            rows.append(
                (
                    t.id, t.definition, "BACKGROUND" if t.background else "FOREGROUND",
                    progress_text(consumed, total), t.created_at, t.backfill_type,
                    consumed, total,
                )
            )  # fmt: skip
        return rows

    def text(self, job_id: int) -> str:
        """A creating job's backfill progress, ``p% (consumed/total)``."""
        consumed, total, _ = self.backfill.progress(job_id)
        return progress_text(consumed, total)

    def restore(self) -> None:
        """At start: each creating job's progress as the last checkpoint wrote it, until
        its rebuilt scans report. (A store from before the counts were kept as numbers
        has them in the text only: its jobs start from 0 until their scans report.)"""
        rows = (
            self.catalog.store.cursor()
            .execute(
                f"SELECT ddl_id, consumed_rows, total_rows FROM {META_SCHEMA}.ddl_progress"
                " WHERE consumed_rows IS NOT NULL AND total_rows IS NOT NULL"
            )
            .fetchall()
        )
        for job_id, consumed, total in rows:
            self.backfill.restore(job_id, int(consumed), int(total))


def progress_text(consumed: int, total: int) -> str:
    """Backfill progress as SHOW JOBS shows it: ``41.20% (82400/200000)``."""
    pct = 100.0 * consumed / total if total else 0.0
    return f"{pct:.2f}% ({consumed}/{total})"
