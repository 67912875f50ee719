"""The per-session caches of parsed, bound and planned statements, by text.

A repeated statement (an application's prepared INSERT, a driver's executemany) is
parsed and planned once. Long texts are kept too - a batched multi-row INSERT of
parameters repeats - but only a few: each holds a large tree, and hundreds of them would
make every garbage collection walk them (a 6,000-row VALUES is ~30,000 objects).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LONG_TEXT_CHARS", "StatementCache"]

V = TypeVar("V")

# A text at least this long counts as long.
LONG_TEXT_CHARS = 8 << 10


class StatementCache(Generic[V]):
    """A least-recently-used map of at most ``size`` entries, of which at most
    ``long_size`` have a long text: the key itself, or its item ``text_index``."""

    def __init__(self, size: int, long_size: int, text_index: int | None = None) -> None:
        self.size = size
        self.long_size = long_size
        self._text_index = text_index
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._long: OrderedDict[Hashable, None] = OrderedDict()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        """The value for ``key``, now the most recently used; None if absent."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
            if key in self._long:
                self._long.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._text(key)) >= LONG_TEXT_CHARS:
            self._long[key] = None
            self._long.move_to_end(key)
            while len(self._long) > self.long_size:
                oldest, _ = self._long.popitem(last=False)
                del self._entries[oldest]
        while len(self._entries) > self.size:
            oldest, _ = self._entries.popitem(last=False)
            self._long.pop(oldest, None)

    def _text(self, key: Hashable) -> str:
        text = key if self._text_index is None else key[self._text_index]  # type: ignore[index]
        assert isinstance(text, str)
        return text
