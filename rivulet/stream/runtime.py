"""The stream runtime of this process: the table writers (and, later, the actors).

The barrier manager walks it to seal every writer's epoch at a checkpoint.
"""

from __future__ import annotations

from rivulet.storage.state_table import StateTable
from rivulet.stream.table_writer import TableWriter


class StreamRuntime:
    def __init__(self) -> None:
        self._writers: dict[int, TableWriter] = {}

    def add_table(self, table_id: int, state: StateTable, *, has_row_id: bool) -> TableWriter:
        writer = TableWriter(state, has_row_id=has_row_id)
        self._writers[table_id] = writer
        return writer

    def remove_table(self, table_id: int) -> None:
        self._writers.pop(table_id, None)

    def writer(self, table_id: int) -> TableWriter | None:
        return self._writers.get(table_id)

    def writers(self) -> list[TableWriter]:
        return list(self._writers.values())

    def discard_uncommitted(self) -> None:
        for w in self._writers.values():
            w.state.discard_uncommitted()
