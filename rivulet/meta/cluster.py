"""Workers and their slots, and where actors go.

A worker offers slots; actors are placed on them. The embedded default is one worker with
as many slots as the machine has cores. The set of workers is kept in the meta store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rivulet.common.errors import INVALID_PARAMETER_VALUE, sql_error
from rivulet.common.vnode import VNODE_COUNT
from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_store import META_SCHEMA, StateStore


@dataclass(frozen=True, slots=True)
class Worker:
    id: int
    host: str
    port: int
    slots: int


class Cluster:
    def __init__(self, store: StateStore, *, workers: int | None = None, slots: int | None = None):
        self.store = store
        rows = (
            store.cursor()
            .execute(f"SELECT id, host, port, slots FROM {META_SCHEMA}.workers ORDER BY id")
            .fetchall()
        )
        self.workers = [Worker(*r) for r in rows]
        wanted_workers = workers or (len(self.workers) or 1)
        wanted_slots = slots or (self.workers[0].slots if self.workers else os.cpu_count() or 1)
        if not self.workers or workers or slots:
            self.workers = [
                Worker(i + 1, "127.0.0.1", 0, wanted_slots) for i in range(wanted_workers)
            ]
            cur = store.cursor()
            cur.execute(f"DELETE FROM {META_SCHEMA}.workers")
            for w in self.workers:
                cur.execute(
                    f"INSERT INTO {META_SCHEMA}.workers VALUES (?, ?, ?, ?)",
                    [w.id, w.host, w.port, w.slots],
                )

    @property
    def total_slots(self) -> int:
        return sum(w.slots for w in self.workers)

    def parallelism(self, policy: str) -> int:
        """Actors per hash fragment for a parallelism policy (never above the vnodes)."""
        p = policy.strip().lower()
        if p in ("adaptive", "default", "auto", "0", ""):
            n = self.total_slots
        else:
            try:
                n = int(p)
            except ValueError:
                raise sql_error(
                    INVALID_PARAMETER_VALUE, f'invalid parallelism "{policy}"'
                ) from None
        return max(1, min(n, VNODE_COUNT))

    def place(self, n: int) -> list[int]:
        """Workers for ``n`` actors: spread evenly over the workers' slots, taking one
        slot of each worker in turn."""
        most = max((w.slots for w in self.workers), default=0)
        slots = [w.id for i in range(most) for w in self.workers if i < w.slots]
        slots = slots or [self.workers[0].id]
        return [slots[i % len(slots)] for i in range(n)]

    def persist(self, change: CatalogChange) -> None:
        change.statements.append((f"DELETE FROM {META_SCHEMA}.workers", []))
        for w in self.workers:
            change.statements.append(
                (
                    f"INSERT INTO {META_SCHEMA}.workers VALUES (?, ?, ?, ?)",
                    [w.id, w.host, w.port, w.slots],
                )
            )
