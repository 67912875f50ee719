"""A fault injected into the filter executor, for the recovery tests: an exception where
a user would meet a bug (the filter is in every test's dataflow)."""

from __future__ import annotations

import time

import pytest

from rivulet.common.chunk import StreamChunk
from rivulet.stream.executors.filter import FilterExecutor
from rivulet.stream.message import Barrier

POISON = 666


class Fault:
    """Makes the filter executor raise: on a chunk holding ``POISON`` in a column v (at
    most ``times`` times; None: every time), or, with ``on_barriers``, on every barrier
    while ``active``. Records (actor, fragment, job) of each actor it made fail."""

    def __init__(self, times: int | None = 1, *, on_barriers: bool = False) -> None:
        self.times = times
        self.on_barriers = on_barriers
        self.active = True
        self.hits: list[tuple[int, int, int]] = []
        self.hit_times: list[float] = []

    def fires(self, msg: object) -> bool:
        if not self.active or (self.times is not None and len(self.hits) >= self.times):
            return False
        if self.on_barriers:
            return isinstance(msg, Barrier)
        if not isinstance(msg, StreamChunk):
            return False
        data = msg.data
        return any(
            POISON in data.column(i).to_pylist()
            for i, name in enumerate(data.column_names)
            if name == "v"
        )

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = FilterExecutor.execute
        fault = self

        async def execute(self):  # type: ignore[no-untyped-def]
            async for msg in original(self):
                if fault.fires(msg):
                    fault.hits.append((self.ctx.actor_id, self.ctx.fragment_id, self.ctx.job_id))
                    fault.hit_times.append(time.monotonic())
                    raise RuntimeError("injected fault")
                yield msg

        monkeypatch.setattr(FilterExecutor, "execute", execute)
