"""The ``datagen`` connector: RisingWave's load generator, column by column.

Options (RisingWave's): ``datagen.rows.per.second`` (default 10, shared by the splits),
``datagen.split.num`` (default 1), and per column ``fields.<col>.kind`` = ``sequence`` |
``random`` (default random) with

* numbers (smallint, integer, bigint, real, double precision, numeric): ``start``/``end``
  for a sequence (default 0 and 32767), ``min``/``max``/``seed`` for random values
  (default 0 and 32767, bounds included);
* varchar: random alphanumeric text of ``length`` characters (default 10), ``seed``;
* timestamp, timestamptz: random instants up to ``max_past`` (a duration, default 1 day)
  before ``basetime`` (RFC 3339; default: when the source was created, so that replays
  agree) or, with ``max_past_mode = 'relative'``, before the moment of generation;
* boolean: random.

Split ``s`` of ``S`` produces the rows with global index ``g = s + S * offset``; a
sequence column holds ``start + g`` and the split ends when any sequence passes its
``end``. Random values are a hash of (seed, column, g). ``_row_id`` is ``g``.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.errors import FEATURE_NOT_SUPPORTED, UNDEFINED_COLUMN, sql_error
from rivulet.common.types import NUMERIC_SCALE, DataType, arrow_type_of
from rivulet.stream.connectors.base import (
    ALNUM_POOL,
    ColumnSpec,
    Connector,
    Draws,
    Options,
    ReadBatch,
    bad_value,
    mix64,
    parse_duration,
    pool_strings,
)

_INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_FLOATS = ("real", "double precision")
_TIMESTAMPS = ("timestamp without time zone", "timestamp with time zone")
_DEFAULT_LOW, _DEFAULT_HIGH = 0, 32767
_FIELD_OPTIONS = {
    "kind", "start", "end", "min", "max", "seed", "length", "max_past", "max_past_mode",
    "basetime",
}  # fmt: skip
SUPPORTED_TYPES = (
    "smallint, integer, bigint, real, double precision, numeric, varchar, boolean,"
    " timestamp, timestamptz"
)


@dataclass
class _Field:
    name: str
    type: DataType
    kind: str  # sequence | random
    salt: int
    # numbers: bounds as Python numbers (ints for integer types, scaled ints for numeric)
    low: int | float = 0
    high: int | float = 0
    scale: int = 0  # numeric: digits after the point
    length: int = 10
    base_us: int | None = None  # timestamps: base instant (None: the wall clock)
    max_past_us: int = 0


def _name_salt(name: str) -> int:
    """A stable 64-bit value per column name, so that columns draw different values."""
    h = np.uint64(0xCBF29CE484222325)
    with np.errstate(over="ignore"):
        for b in name.encode():
            h = (h ^ np.uint64(b)) * np.uint64(0x100000001B3)
    return int(mix64(np.array([h], dtype=np.uint64))[0])


class DatagenConnector(Connector):
    name = "datagen"

    def __init__(self, options: Options, columns: list[ColumnSpec]) -> None:
        self.rows_per_second = options.int("datagen.rows.per.second", 10, minimum=1)
        self.split_num = options.int("datagen.split.num", 1, minimum=1)
        self.columns = columns
        self.fields: dict[str, _Field] = {}
        by_lower = {c.name.lower(): c for c in columns if c.name != ROW_ID_COLUMN}
        field_keys: dict[str, dict[str, str]] = {}
        for key in options.keys_with_prefix("fields."):
            rest = key[len("fields.") :]
            col_name, _, opt = rest.rpartition(".")
            if not col_name or opt not in _FIELD_OPTIONS:
                continue  # reported as unknown
            if col_name.lower() not in by_lower:
                options.get(key)
                raise sql_error(
                    UNDEFINED_COLUMN,
                    f'option "{key}" names column "{col_name}", which the source does not have',
                )
            field_keys.setdefault(by_lower[col_name.lower()].name, {})[opt] = key
        for col in columns:
            if col.name == ROW_ID_COLUMN:
                continue
            self.fields[col.name] = self._field(col, field_keys.get(col.name, {}), options)

    # ------------------------------------------------------------ validation
    def _field(self, col: ColumnSpec, keys: dict[str, str], options: Options) -> _Field:
        def opt(name: str) -> str | None:
            key = keys.get(name)
            return options.get(key) if key is not None else None

        def refuse(name: str, why: str) -> Exception:
            return sql_error(
                FEATURE_NOT_SUPPORTED,
                f'option "{keys[name]}" does not apply: {why}',
            )

        t = col.type
        kind_raw = opt("kind")
        kind = "random"
        if kind_raw is not None:
            kind = kind_raw.strip().lower()
            if kind not in ("sequence", "random"):
                raise bad_value(keys["kind"], kind_raw, "'sequence' or 'random'")
        seed_raw = opt("seed")
        seed = 0
        if seed_raw is not None:
            try:
                seed = int(seed_raw.strip())
            except ValueError:
                raise bad_value(keys["seed"], seed_raw, "an integer") from None
        field = _Field(col.name, t, kind, _name_salt(col.name) ^ (seed & (2**64 - 1)))
        numeric_kind = t.name in _INT_RANGES or t.name in _FLOATS or t.name == "numeric"
        if not numeric_kind and t.name not in ("character varying", "boolean", *_TIMESTAMPS):
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'datagen cannot generate column "{col.name}" of type {t.display()}',
                hint=f"datagen generates {SUPPORTED_TYPES}.",
            )
        if kind == "sequence" and not numeric_kind:
            raise sql_error(
                FEATURE_NOT_SUPPORTED,
                f'datagen cannot generate a sequence of type {t.display()} (column "{col.name}")',
                hint="Sequences are numbers; use kind 'random' for this column.",
            )
        for name in ("start", "end"):
            if name in keys and kind != "sequence":
                raise refuse(name, f"column \"{col.name}\" is not a sequence (kind = 'random')")
        for name in ("min", "max"):
            if name in keys and (kind != "random" or not numeric_kind):
                raise refuse(name, f'column "{col.name}" is not a random number')
        if "length" in keys and t.name != "character varying":
            raise refuse("length", f'column "{col.name}" is not a varchar')
        for name in ("max_past", "max_past_mode", "basetime"):
            if name in keys and t.name not in _TIMESTAMPS:
                raise refuse(name, f'column "{col.name}" is not a timestamp')
        if numeric_kind:
            lo_name, hi_name = ("start", "end") if kind == "sequence" else ("min", "max")
            lo = self._number(t, keys.get(lo_name), opt(lo_name), _DEFAULT_LOW, field)
            hi = self._number(t, keys.get(hi_name), opt(hi_name), _DEFAULT_HIGH, field)
            if lo > hi:
                raise sql_error(
                    "22023",
                    f'datagen column "{col.name}": {lo_name} must not be greater than {hi_name}',
                )
            field.low, field.high = lo, hi
        elif t.name == "character varying":
            raw = opt("length")
            if raw is not None:
                try:
                    field.length = int(raw.strip())
                except ValueError:
                    raise bad_value(keys["length"], raw, "a length in characters") from None
                if not 0 <= field.length <= 65536:
                    raise bad_value(keys["length"], raw, "a length from 0 to 65536")
        elif t.name in _TIMESTAMPS:
            raw = opt("max_past")
            past = 86400.0 if raw is None else parse_duration(keys["max_past"], raw)
            field.max_past_us = int(past * 1_000_000)
            mode_raw = opt("max_past_mode")
            mode = "absolute" if mode_raw is None else mode_raw.strip().lower()
            if mode not in ("absolute", "relative"):
                raise bad_value(keys["max_past_mode"], mode_raw or "", "'absolute' or 'relative'")
            base_raw = opt("basetime")
            if base_raw is not None:
                field.base_us = _parse_rfc3339(keys["basetime"], base_raw)
            elif mode == "absolute":
                raise sql_error(
                    "22023",
                    f'datagen column "{col.name}" needs fields.{col.name}.basetime',
                    hint="CREATE SOURCE fills it in with the creation time.",
                )
        return field

    @staticmethod
    def _number(
        t: DataType, key: str | None, raw: str | None, default: int, field: _Field
    ) -> int | float:
        text = str(default) if raw is None else raw.strip()
        try:
            if t.name in _INT_RANGES:
                value: int | float = int(text)
                lo, hi = _INT_RANGES[t.name]
                if not lo <= value <= hi:
                    raise ValueError
                return value
            if t.name in _FLOATS:
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError
                return value
            scale = t.scale if t.precision is not None else NUMERIC_SCALE
            field.scale = scale or 0
            scaled = Decimal(text).scaleb(field.scale)
            if scaled != scaled.to_integral_value() or abs(scaled) >= 2**62:
                raise ValueError
            return int(scaled)
        except (ValueError, InvalidOperation):
            wanted = f"a number of type {t.display()}"
            if t.name == "numeric":
                wanted += f" with at most {field.scale} decimals, below 2^62 / 10^{field.scale}"
            raise bad_value(key or "", text, wanted) from None

    # --------------------------------------------------------------- reading
    def end_offset(self, split: int) -> int | None:
        ends = []
        for f in self.fields.values():
            if f.kind != "sequence":
                continue
            # Rows g = split + S * j with low + g <= high.
            room = f.high - f.low
            if f.type.name == "numeric":
                room = int(room) // 10**f.scale
            room -= split
            ends.append(0 if room < 0 else int(room // self.split_num) + 1)
        return min(ends) if ends else None

    def _rate(self, split: int) -> int:
        base, extra = divmod(self.rows_per_second, self.split_num)
        return base + (1 if split < extra else 0)

    def due_offset(self, split: int, start_offset: int, elapsed: float) -> int | None:
        return start_offset + int(self._rate(split) * elapsed)

    def due_time(self, split: int, start_offset: int, offset: int) -> float:
        rate = self._rate(split)
        return math.inf if rate == 0 else (offset - start_offset + 1) / rate

    def read(self, split: int, offset: int, count: int, columns: list[str]) -> ReadBatch:
        end = self.end_offset(split)
        if end is not None:
            count = max(0, min(count, end - offset))
        g = split + self.split_num * (offset + np.arange(count, dtype=np.int64))
        arrays = []
        for name in columns:
            if name == ROW_ID_COLUMN:
                arrays.append(pa.array(g, pa.int64()))
            else:
                arrays.append(self._column(self.fields[name], g))
        return ReadBatch(pa.Table.from_arrays(arrays, names=columns), offset + count)

    def _column(self, f: _Field, g: np.ndarray) -> pa.Array:
        t = f.type
        arrow = arrow_type_of(t)
        draws = Draws(g, f.salt)
        if f.kind == "sequence":
            if t.name in _FLOATS:
                return pa.array(f.low + g.astype(np.float64), arrow)
            if t.name == "numeric":
                return _decimal(int(f.low) + g * 10**f.scale, arrow)
            return pa.array(int(f.low) + g, pa.int64()).cast(arrow)
        if t.name in _INT_RANGES:
            span = int(f.high) - int(f.low) + 1
            u = draws.u64(0)
            off = u if span >= 2**64 else u % np.uint64(span)
            with np.errstate(over="ignore"):
                values = (off + np.uint64(int(f.low) & (2**64 - 1))).view(np.int64)
            return pa.array(values, pa.int64()).cast(arrow)
        if t.name in _FLOATS:
            values = f.low + draws.unit(0) * (f.high - f.low)
            return pa.array(values, pa.float64()).cast(arrow)
        if t.name == "numeric":
            span = int(f.high) - int(f.low) + 1
            values = int(f.low) + (draws.u64(0) % np.uint64(span)).astype(np.int64)
            return _decimal(values, arrow)
        if t.name == "character varying":
            return pool_strings(ALNUM_POOL, draws.u64(0), f.length)
        if t.name == "boolean":
            return pa.array((draws.u64(0) & np.uint64(1)).astype(bool), pa.bool_())
        # timestamps
        base = f.base_us
        if base is None:
            base = int(dt.datetime.now(dt.UTC).timestamp() * 1_000_000)
        back = (draws.u64(0) % np.uint64(f.max_past_us // 1000 + 1)).astype(np.int64) * 1000
        return pa.array(base - back, pa.int64()).cast(pa.timestamp("us")).cast(arrow)


def _decimal(scaled: np.ndarray, arrow: pa.DataType) -> pa.Array:
    """A decimal128 array from int64 values already multiplied by 10^scale."""
    scaled = np.asarray(scaled, dtype=np.int64)
    words = np.empty((len(scaled), 2), dtype=np.int64)
    words[:, 0] = scaled
    words[:, 1] = scaled >> 63
    return pa.Array.from_buffers(arrow, len(scaled), [None, pa.py_buffer(words)])


def _parse_rfc3339(key: str, raw: str) -> int:
    """Microseconds since the epoch of an RFC 3339 instant."""
    text = raw.strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise bad_value(
            key, raw, "an RFC 3339 timestamp such as '2024-01-01T00:00:00+00:00'"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1_000_000)


def default_basetime() -> str:
    """The base instant a timestamp column gets when CREATE names none: now."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
