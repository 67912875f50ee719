"""Workers and their slots, and where actors go.

A worker offers slots; actors are placed on them. The embedded default is one worker with
as many slots as the machine has cores. The set of workers is kept in the meta store.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from rivulet.common.errors import (
    INVALID_PARAMETER_VALUE,
    OBJECT_NOT_IN_PREREQUISITE_STATE,
    UNDEFINED_OBJECT,
    sql_error,
)
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

    def prepare_add(self, slots: int, change: CatalogChange) -> Worker:
        """A new worker with ``slots`` slots, joining once ``change`` is committed."""
        if not 1 <= slots <= VNODE_COUNT:
            raise sql_error(
                INVALID_PARAMETER_VALUE,
                f"invalid slot count {slots}",
                hint=f"A worker offers from 1 to {VNODE_COUNT} slots.",
            )
        worker = Worker(max((w.id for w in self.workers), default=0) + 1, "127.0.0.1", 0, slots)
        change.statements.append(
            (
                f"INSERT INTO {META_SCHEMA}.workers VALUES (?, ?, ?, ?)",
                [worker.id, worker.host, worker.port, worker.slots],
            )
        )
        change.on_commit.append(lambda: self.workers.append(worker))
        return worker

    def prepare_remove(self, worker_id: int, change: CatalogChange) -> Worker:
        """Take a worker out once ``change`` is committed (its actors must move)."""
        worker = next((w for w in self.workers if w.id == worker_id), None)
        if worker is None:
            raise sql_error(
                UNDEFINED_OBJECT,
                f"worker {worker_id} does not exist",
                hint="rw_worker_nodes lists the workers.",
            )
        if len(self.workers) == 1:
            raise sql_error(
                OBJECT_NOT_IN_PREREQUISITE_STATE,
                f"cannot remove worker {worker_id}: it is the last worker",
                hint="Add another worker first; every job needs somewhere to run.",
            )
        change.statements.append((f"DELETE FROM {META_SCHEMA}.workers WHERE id = ?", [worker_id]))
        change.on_commit.append(lambda: self._forget(worker_id))
        return worker

    def _forget(self, worker_id: int) -> None:
        self.workers = [w for w in self.workers if w.id != worker_id]

    @property
    def total_slots(self) -> int:
        return sum(w.slots for w in self.workers)

    def parallelism(self, policy: str) -> int:
        """Actors per hash fragment for a parallelism policy (never above the vnodes)."""
        kind, value = parse_policy(policy)
        slots = self.total_slots
        if kind == "adaptive":
            n = slots
        elif kind == "bounded":
            n = min(slots, int(value))
        elif kind == "ratio":
            n = max(int(slots * value), 1)
        else:
            n = int(value)
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


_BOUNDED = re.compile(r"^bounded\s*\(\s*(\d+)\s*\)$")
_RATIO = re.compile(r"^ratio\s*\(\s*([0-9]*\.?[0-9]+)\s*\)$")


def parse_policy(policy: str) -> tuple[str, float]:
    """A parallelism policy as (kind, value): ("fixed", n), ("adaptive", 0),
    ("bounded", n) or ("ratio", r). Raises 22023 for anything else."""
    p = policy.strip().lower().strip("'")
    if p in ("adaptive", "default", "auto", ""):
        return "adaptive", 0
    hint = (
        f"Use a number from 1 to {VNODE_COUNT}, ADAPTIVE, 'bounded(n)' or 'ratio(r)'"
        " with 0 < r <= 1."
    )
    if (m := _BOUNDED.match(p)) is not None:
        n = int(m.group(1))
        if 1 <= n <= VNODE_COUNT:
            return "bounded", n
    elif (m := _RATIO.match(p)) is not None:
        r = float(m.group(1))
        if 0 < r <= 1:
            return "ratio", r
    else:
        try:
            n = int(p)
        except ValueError:
            n = 0
        if 1 <= n <= VNODE_COUNT:
            return "fixed", n
    raise sql_error(INVALID_PARAMETER_VALUE, f'invalid parallelism "{policy}"', hint=hint)


def normalize_policy(policy: str) -> str:
    """The policy as stored and shown: "adaptive", "5", "bounded(4)", "ratio(0.5)"."""
    kind, value = parse_policy(policy)
    if kind == "adaptive":
        return "adaptive"
    if kind == "fixed":
        return str(int(value))
    if kind == "bounded":
        return f"bounded({int(value)})"
    return f"ratio({value:g})"
