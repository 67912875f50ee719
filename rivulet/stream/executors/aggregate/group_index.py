"""Group keys -> slots: the in-memory index in front of an aggregation's state."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.columns import polars_dtype, to_arrow, valid_np
from rivulet.common.vnode import VNODE_COUNT, hash_columns


def _mirror_dtype(t: pa.DataType) -> type | None:
    if pa.types.is_integer(t):
        return np.int64
    if pa.types.is_floating(t):
        return np.float64
    return None


def _mirror_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    valid = valid_np(arr)
    if valid is None:
        valid = np.ones(len(arr), dtype=bool)
        values = arr.to_numpy(zero_copy_only=False)
    else:
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        return values.astype(np.float64, copy=False), valid
    return values.astype(np.int64, copy=False), valid


class _SortedHashes:
    """64-bit hashes -> slots, sorted for ``searchsorted``: a large main run and a small
    recent run. New hashes go into the recent run (cheap while it is small) and it is
    merged into the main one when it reaches an eighth of it, so adding a chunk of keys
    costs in proportion to the chunk, not to the groups already held."""

    _MIN_MERGE = 4096

    def __init__(self) -> None:
        self.runs = [
            (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
            (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
        ]

    def __len__(self) -> int:
        return len(self.runs[0][0]) + len(self.runs[1][0])

    def find(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each hash: whether it is held, and its slot where it is."""
        hit = np.zeros(len(h), dtype=bool)
        slots = np.full(len(h), -1, dtype=np.int64)
        if not len(self) or not len(h):
            return hit, slots
        order = np.argsort(h, kind="stable")  # probing in order is cache-friendly
        hs = h[order]
        for hashes, hash_slots in self.runs:
            if not len(hashes):
                continue
            pos = np.searchsorted(hashes, hs)
            np.minimum(pos, len(hashes) - 1, out=pos)
            found = np.flatnonzero(hashes[pos] == hs)
            hit[order[found]] = True
            slots[order[found]] = hash_slots[pos[found]]
        return hit, slots

    def insert(self, h: np.ndarray, slots: np.ndarray) -> None:
        """Add hashes not held yet (distinct, sorted)."""
        self.runs[1] = _merge_sorted(self.runs[1], (h, slots))
        main, recent = self.runs
        if len(recent[0]) >= max(self._MIN_MERGE, len(main[0]) // 8):
            self.runs = [
                _merge_sorted(main, recent),
                (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)),
            ]


def _merge_sorted(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Two runs of sorted hashes with their slots, merged in one pass (no sort)."""
    if not len(b[0]):
        return a
    at = np.searchsorted(a[0], b[0]) + np.arange(len(b[0]))  # b's places in the result
    rest = np.ones(len(a[0]) + len(b[0]), dtype=bool)
    rest[at] = False
    out = []
    for x, y in zip(a, b):
        merged = np.empty(len(rest), dtype=x.dtype)
        merged[rest] = x
        merged[at] = y
        out.append(merged)
    return out[0], out[1]


class GrowableColumn:
    """A growable numpy array (amortized doubling): appending costs the rows appended."""

    def __init__(self, dtype: np.dtype) -> None:
        self.buf = np.zeros(64, dtype=dtype)
        self.n = 0

    def append(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.buf):
            grown = np.zeros(max(need, 2 * len(self.buf)), dtype=self.buf.dtype)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : need] = values
        self.n = need

    @property
    def values(self) -> np.ndarray:
        return self.buf[: self.n]


class GroupIndex:
    """Group keys -> slots: 64-bit key hashes (the vnode hash, so the vnode comes for
    free) with their slots, each hit verified against the stored keys; keys whose hash
    collides with another key's live in a small dict. Adding keys costs in proportion to
    the keys added, so a large, cold index warms up at a steady cost per chunk."""

    def __init__(self, key_types: list[pa.DataType]) -> None:
        self.key_types = key_types
        self.names = [f"k{i}" for i in range(len(key_types))]
        self.keys = pl.DataFrame(
            [pl.Series(n, [], dtype=polars_dtype(t)) for n, t in zip(self.names, key_types)]
        )
        self.hashes = _SortedHashes()
        self._vnodes = GrowableColumn(np.dtype(np.int16))
        self.collided: dict[tuple[object, ...], int] = {}
        self.size = 1 if not key_types else 0
        self.hash_fn = hash_columns
        # Integer and float keys also as numpy (values, valid) by slot: cheap to verify.
        self.mirrors: list[tuple[GrowableColumn, GrowableColumn] | None] = [
            (GrowableColumn(np.dtype(_mirror_dtype(t))), GrowableColumn(np.dtype(bool)))
            if _mirror_dtype(t) is not None
            else None
            for t in key_types
        ]

    def key_arrays(self, keys: pl.DataFrame) -> list[pa.Array]:
        return [to_arrow(keys[n], t) for n, t in zip(self.names, self.key_types)]

    def lookup(self, keys: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Slots of ``keys`` (distinct group keys), -1 where unknown, and their hashes."""
        slots, h, _ = self.lookup_hashes(keys)
        return slots, h

    def lookup_hashes(self, keys: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``lookup``, and whether each hash is taken (by the key or another): ``add``
        need not look again."""
        n = keys.height
        arrays = self.key_arrays(keys)
        h = self.hash_fn(arrays)
        slots = np.full(n, -1, dtype=np.int64)
        hit = np.zeros(n, dtype=bool)
        if len(self.hashes):
            hit, cand_all = self.hashes.find(h)
            rows = np.flatnonzero(hit)
            cand = cand_all[rows]
            same = self._same(arrays, keys, rows, cand)
            slots[rows[same]] = cand[same]
            if not same.all():
                for r in rows[~same]:
                    slots[r] = self.collided.get(self._tuple(keys, int(r)), -1)
        return slots, h, hit

    def _same(
        self, arrays: list[pa.Array], keys: pl.DataFrame, rows: np.ndarray, slots: np.ndarray
    ) -> np.ndarray:
        """Whether ``keys[rows]`` equal the stored keys of ``slots`` (NULL equals NULL)."""
        same = np.ones(len(slots), dtype=bool)
        stored: pl.DataFrame | None = None
        for n, mirror, arr in zip(self.names, self.mirrors, arrays):
            if mirror is not None:
                values, valid = _mirror_of(arr)
                values, valid = values[rows], valid[rows]
                sv, sm = mirror[0].values[slots], mirror[1].values[slots]
                eq = values == sv
                if values.dtype.kind == "f":
                    eq |= np.isnan(values) & np.isnan(sv)
                same &= np.where(valid & sm, eq, valid == sm)
                continue
            if stored is None:
                stored = self.keys[slots]
            same &= stored[n].eq_missing(keys[n][rows]).to_numpy()
        return same

    @staticmethod
    def _tuple(keys: pl.DataFrame, row: int) -> tuple[object, ...]:
        return tuple(keys.row(row))

    def add(self, keys: pl.DataFrame, h: np.ndarray, taken: np.ndarray | None = None) -> np.ndarray:
        """New slots for ``keys`` (unknown, distinct), in order. ``taken``: whether each
        hash is held already (``lookup_hashes``), else looked up here."""
        n = keys.height
        start = self.size
        new = np.arange(start, start + n, dtype=np.int64)
        self.size += n
        if not self.names:
            return new
        self.keys = pl.concat([self.keys, keys.select(self.names)], rechunk=False)
        if self.keys.n_chunks() > 32:
            self.keys = self.keys.rechunk()
        self._vnodes.append((h % np.uint64(VNODE_COUNT)).astype(np.int16))
        for j, (t, mirror) in enumerate(zip(self.key_types, self.mirrors)):
            if mirror is not None:
                values, valid = _mirror_of(to_arrow(keys[self.names[j]], t))
                mirror[0].append(values)
                mirror[1].append(valid)
        # A hash that is taken (or repeats within ``keys``) is a collision.
        order = np.argsort(h, kind="stable")
        hs = h[order]
        first = np.ones(n, dtype=bool)
        first[1:] = hs[1:] != hs[:-1]
        if taken is not None:
            first &= ~taken[order]
        elif len(self.hashes):
            first &= ~self.hashes.find(hs)[0]
        for r in order[~first]:
            self.collided[self._tuple(keys, int(r))] = int(new[r])
        ins = order[first]
        self.hashes.insert(h[ins], new[ins])
        return new

    def vnodes_of(self, slots: np.ndarray) -> np.ndarray:
        if not self.names:
            return np.zeros(len(slots), dtype=np.int16)
        return self._vnodes.values[slots]
