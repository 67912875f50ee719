"""What every built-in connector shares: the reader contract, option parsing, and a
counter-based random generator.

A connector's data is a pure function of (options, split, offset): the row at offset ``k``
of split ``s`` is the same whenever and however often it is generated. Replay after a
restart from a committed offset therefore reproduces exactly the rows that were lost with
the uncommitted epochs, and the ``_row_id`` a connector gives each row (its global index)
is stable. Randomness comes from hashing (seed, row, draw) - never from a stateful
generator - and everything is computed a column at a time with numpy.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rivulet.common.errors import INVALID_PARAMETER_VALUE, SYNTAX_ERROR, sql_error
from rivulet.common.types import DataType

# Chunks a source emits hold at most this many rows (a connector option may lower it).
DEFAULT_CHUNK_ROWS = 65536


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A column the source produces (the declared or default columns, hidden ones too)."""

    name: str
    type: DataType


class Connector(ABC):
    """Generates a source's rows: ``split_num`` splits, each an ordered sequence of rows
    addressed by offset (0, 1, 2, ...)."""

    name: str = ""
    split_num: int = 1
    chunk_rows: int = DEFAULT_CHUNK_ROWS

    @abstractmethod
    def read(self, split: int, offset: int, count: int, columns: list[str]) -> ReadBatch:
        """Rows ``offset .. offset + count`` of ``split`` (fewer at the split's end), with
        the named columns (``_row_id`` included when asked)."""

    @abstractmethod
    def end_offset(self, split: int) -> int | None:
        """The offset at which the split is exhausted (None: it never ends)."""

    @abstractmethod
    def due_offset(self, split: int, start_offset: int, elapsed: float) -> int | None:
        """Pacing: the offset the split may have reached ``elapsed`` seconds after it
        (re)started at ``start_offset`` (None: as fast as possible)."""

    @abstractmethod
    def due_time(self, split: int, start_offset: int, offset: int) -> float:
        """Pacing: seconds after the (re)start at which the row at ``offset`` is due."""


@dataclass(frozen=True, slots=True)
class ReadBatch:
    data: pa.Table
    next_offset: int


# ------------------------------------------------------------------- options
class Options:
    """A connector's WITH options; records which were read, so that leftovers (typos,
    options of another connector) are reported by name."""

    def __init__(self, connector: str, options: dict[str, str]) -> None:
        self.connector = connector
        self.values = dict(options)
        self.used: set[str] = {"connector"}

    def get(self, key: str) -> str | None:
        self.used.add(key)
        return self.values.get(key)

    def keys_with_prefix(self, prefix: str) -> list[str]:
        return [k for k in self.values if k.startswith(prefix)]

    def int(self, key: str, default: int, *, minimum: int | None = 0) -> int:
        raw = self.get(key)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            raise bad_value(key, raw, "an integer") from None
        if minimum is not None and value < minimum:
            raise bad_value(key, raw, f"an integer of at least {minimum}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        raw = self.get(key)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "t", "on", "1", "yes"):
            return True
        if value in ("false", "f", "off", "0", "no"):
            return False
        raise bad_value(key, raw, "true or false")

    def choice(self, key: str, choices: dict[str, str], default: str | None) -> str | None:
        """One of ``choices`` (matched case-insensitively; mapped to their values)."""
        raw = self.get(key)
        if raw is None:
            return default
        found = choices.get(raw.strip().lower())
        if found is None:
            allowed = ", ".join(f"'{c}'" for c in dict.fromkeys(choices.values()))
            raise bad_value(key, raw, f"one of {allowed}")
        return found

    def check_all_used(self) -> None:
        unknown = sorted(k for k in self.values if k not in self.used)
        if unknown:
            raise sql_error(
                SYNTAX_ERROR,
                f'unknown option "{unknown[0]}" for connector {self.connector}',
                hint=f"See the {self.connector} connector's options in the documentation;"
                " option names are case-sensitive.",
            )


def bad_value(key: str, raw: str, wanted: str) -> Exception:
    return sql_error(
        INVALID_PARAMETER_VALUE, f"invalid value '{raw}' for option \"{key}\": expected {wanted}"
    )


_DURATION_UNITS = {
    "ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
    "month": 2630016.0, "months": 2630016.0, "y": 31557600.0, "year": 31557600.0,
    "years": 31557600.0,
}  # fmt: skip
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)")


def parse_duration(key: str, raw: str) -> float:
    """A duration as humantime writes it ('10s', '2h 30min', '1day'), in seconds."""
    pos = 0
    total = 0.0
    text = raw.strip()
    if not text:
        raise bad_value(key, raw, "a duration such as '10s' or '2h 30min'")
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None or m.group(2).lower() not in _DURATION_UNITS:
            raise bad_value(key, raw, "a duration such as '10s' or '2h 30min'")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
        pos = m.end()
    return total


# -------------------------------------------------------------------- random
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11, _S32 = (np.uint64(s) for s in (30, 27, 31, 11, 32))


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijective, well-mixed hash of each uint64."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _S30)) * _C1
        x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


class Draws:
    """Independent random streams for a vector of keys (row ids): draw ``j`` of key ``k``
    is ``mix64(mix64(k ^ seed) + j * golden)``, whatever else is drawn."""

    def __init__(self, keys: np.ndarray, seed: int = 0) -> None:
        seeded = keys.astype(np.uint64) ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        self._base = mix64(seeded)
        self.n = len(keys)

    def u64(self, draw: int) -> np.ndarray:
        with np.errstate(over="ignore"):
            return mix64(self._base + np.uint64(draw + 1) * _GOLDEN)

    def unit(self, draw: int) -> np.ndarray:
        """Uniform floats in [0, 1)."""
        return (self.u64(draw) >> _S11).astype(np.float64) * (1.0 / (1 << 53))

    def below(self, draw: int, n: int | np.ndarray) -> np.ndarray:
        """Uniform integers in [0, n) (n < 2^32; per-row bounds allowed)."""
        hi = self.u64(draw) >> _S32
        with np.errstate(over="ignore"):
            return ((hi * np.asarray(n, dtype=np.uint64)) >> _S32).astype(np.int64)


# ------------------------------------------------------------------- strings
_POOL_SIZE = 1 << 20
# Generated strings are at most this long.
MAX_POOL_STRING = 1 << 16
_LOWER = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
_ALNUM = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8
)


def _pool(alphabet: np.ndarray, salt: int) -> np.ndarray:
    """A fixed pseudo-random text (the same in every process and version)."""
    with np.errstate(over="ignore"):
        u = mix64(np.arange(_POOL_SIZE, dtype=np.uint64) + np.uint64(salt) * _GOLDEN)
    return alphabet[(u % np.uint64(len(alphabet))).astype(np.int64)]


LOWER_POOL = _pool(_LOWER, 1)
ALNUM_POOL = _pool(_ALNUM, 2)


def pool_strings(pool: np.ndarray, starts: np.ndarray, lengths: np.ndarray | int) -> pa.Array:
    """Strings cut from ``pool``: row ``i`` is ``pool[s : s + lengths[i]]`` with ``s``
    derived from ``starts[i]`` (taken modulo the room left in the pool)."""
    n = len(starts)
    lens = np.broadcast_to(np.asarray(lengths, dtype=np.int64), (n,))
    if n and int(lens.max()) > MAX_POOL_STRING:
        raise ValueError(f"strings longer than {MAX_POOL_STRING} characters")
    # The same start for a row whatever else the chunk holds: rows replay identically.
    room = np.uint64(len(pool) - MAX_POOL_STRING)
    s = (np.asarray(starts, dtype=np.uint64) % room).astype(np.int64)
    # Arrow string views into the pool (no copy), then one cast compacts them in C++.
    if n and np.isscalar(lengths) and n * int(lengths) < 2**31:
        # One length (datagen's ``length``): gather fixed-width rows of a sliding window
        # over the pool, already laid out as a string array's data.
        width = int(lengths)
        if width == 0:
            return pa.array([""] * n, pa.string())
        rows = np.lib.stride_tricks.sliding_window_view(pool, width)[s]
        return fixed_width_strings(rows)
    views = np.zeros((n, 4), dtype=np.int32)
    views[:, 0] = lens
    raw = views.view(np.uint8).reshape(n, 16)
    raw[:, 4:8] = pool[s[:, None] + np.arange(4)]
    views[:, 3] = s
    short = lens <= 12
    if short.any():
        inline = pool[s[short][:, None] + np.arange(12)]
        inline[np.arange(12)[None, :] >= lens[short][:, None]] = 0
        raw[short, 4:16] = inline
    buffers = [None, pa.py_buffer(raw), pa.py_buffer(pool)]
    return pa.Array.from_buffers(pa.string_view(), n, buffers).cast(pa.string())


def strings_from_bytes(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A string array over a byte buffer and its offsets (no copy of the bytes)."""
    return pa.Array.from_buffers(
        pa.string(),
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))],
    )


def fixed_width_strings(matrix: np.ndarray) -> pa.Array:
    """Each row of a (n, width) uint8 matrix as one string."""
    n, width = matrix.shape
    return strings_from_bytes(matrix.ravel(), np.arange(n + 1, dtype=np.int64) * width)
