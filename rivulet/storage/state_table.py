"""State tables: keyed, vnode-prefixed tables in the state store, with an epoch overlay.

Every row is stored as ``(_vnode, columns...)``; its key is ``(_vnode, pk...)`` and the
vnode is a function of the distribution key, so the key begins with the vnode. Moving a
vnode between actors therefore moves no data: the new owner reads it from DuckDB.

Writes of the running epoch go to an in-memory ``MemTable`` (Arrow batches); the writer
reads its own writes through it. At a checkpoint the memtable is sealed and later flushed
into DuckDB inside the epoch's transaction. Lookups consult the current memtable, then the
sealed ones not yet committed, then DuckDB - all vectorized, a chunk of keys at a time.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rivulet.common.chunk import OP_COLUMN, VNODE_COLUMN, Op, StreamChunk
from rivulet.common.types import DataType, arrow_type_of
from rivulet.common.vnode import compute_vnodes
from rivulet.storage.state_store import STATE_SCHEMA

_PRESENT_OPS = (int(Op.INSERT), int(Op.UPDATE_INSERT))
_registration_names = itertools.count()
# Which overlay a row came from in ``StateTable.visible`` (0: the newest).
_LAYER = "__layer"


def quote_ident(name: str) -> str:
    """Quote an identifier for DuckDB SQL built by the engine (never splice raw names)."""
    return '"' + name.replace('"', '""') + '"'


@contextlib.contextmanager
def registered(cursor: duckdb.DuckDBPyConnection, *tables: pa.Table) -> Iterator[list[str]]:
    """Arrow tables as DuckDB relations for the duration of the block: their (unique)
    names, in order. DuckDB reads them in place; they are unregistered however the block
    ends, so that a failed statement leaves no relation behind on a shared cursor."""
    names: list[str] = []
    try:
        for table in tables:
            name = f"__arrow_{next(_registration_names)}"
            cursor.register(name, table)
            names.append(name)
        yield names
    finally:
        for name in names:
            cursor.unregister(name)


def matching(left: str, right: str, columns: Sequence[str], *, nulls_equal: bool = True) -> str:
    """The SQL condition that ``left`` and ``right`` (aliases) agree on ``columns``;
    ``nulls_equal``: NULL matches NULL (keys of state tables), else never (join keys)."""
    op = "IS NOT DISTINCT FROM" if nulls_equal else "="
    return " AND ".join(f"{left}.{quote_ident(c)} {op} {right}.{quote_ident(c)}" for c in columns)


def physical_name_of(table_id: int) -> str:
    """The store's name of state table ``table_id``."""
    return f"{STATE_SCHEMA}.{quote_ident(f't{table_id}')}"


def committed_matching_sql(
    table: str, probe: str | None, on: Sequence[str], *, nulls_equal: bool = True
) -> str:
    """The committed rows (``[_vnode, cols...]``) whose columns ``on`` equal one of the rows
    of the relation ``probe`` (``nulls_equal`` as in ``matching``); all rows without one."""
    if probe is None:
        return f"SELECT * FROM {table}"
    cond = matching("s", "p", on, nulls_equal=nulls_equal)
    return f"SELECT s.* FROM {table} s SEMI JOIN {probe} p ON {cond}"


def committed_joined_sql(
    table: str, probe: str, on: Sequence[str], columns: Sequence[str] | None
) -> str:
    """The committed rows matching the rows of ``probe`` on ``on`` (NULL matches NULL),
    each with the probe's ``_i``: then ``columns`` of them (every column when None)."""
    select = "s.*" if columns is None else ", ".join(f"s.{quote_ident(c)}" for c in columns)
    return f"SELECT p._i AS _i, {select} FROM {table} s JOIN {probe} p ON {matching('s', 'p', on)}"


def table_exists(cursor: duckdb.DuckDBPyConnection, table_id: int) -> bool:
    """Whether the state table is in the store (it appears with its job's first commit)."""
    rows = cursor.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
        [STATE_SCHEMA, f"t{table_id}"],
    ).fetchall()
    return bool(rows[0][0])


@dataclass(frozen=True, slots=True)
class PositionedScan:
    """A read of a state table's committed rows in key order, each vnode from a position
    of its own on: a backfill's read of its upstream's history, resumable per vnode.

    Positions are a relation ``[vnode, started, pk0..]``: a vnode not ``started`` is read
    from its beginning, else strictly after ``(pk0, ..)``. NULL key parts sort last.
    ``by_vnode``: rows come in (vnode, key) order (a vnode after the other), else in
    (key, vnode) order (one position shared by all). Rows read are
    ``[_vnode, columns...]``. Plain data (JSON), so another process can ask for one."""

    table_id: int
    key: tuple[str, ...]
    key_not_null: bool
    columns: tuple[str, ...]
    by_vnode: bool

    @classmethod
    def of(
        cls, schema: StateTableSchema, columns: Sequence[str], *, by_vnode: bool
    ) -> PositionedScan:
        names = schema.column_names
        not_null = set(schema.not_null)
        return cls(
            schema.table_id,
            tuple(names[i] for i in schema.pk),
            all(i in not_null for i in schema.pk),
            tuple(columns),
            by_vnode,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "table_id": self.table_id,
            "key": list(self.key),
            "key_not_null": self.key_not_null,
            "columns": list(self.columns),
            "by_vnode": self.by_vnode,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> PositionedScan:
        key, columns = d["key"], d["columns"]
        assert isinstance(key, list) and isinstance(columns, list)
        return cls(
            int(str(d["table_id"])),
            tuple(str(k) for k in key),
            bool(d["key_not_null"]),
            tuple(str(c) for c in columns),
            bool(d["by_vnode"]),
        )

    def run(
        self, cursor: duckdb.DuckDBPyConnection, positions: pa.Table, limit: int | None
    ) -> pa.Table:
        """Up to ``limit`` rows after ``positions``, in read order; with ``limit`` None,
        how many rows each vnode has left (``[v, n]``). Blocking (DuckDB)."""
        with registered(cursor, positions) as (name,):
            return cursor.sql(self._sql(name, limit)).to_arrow_table()

    def _sql(self, positions: str, limit: int | None) -> str:
        vnode = f"s.{VNODE_COLUMN}"
        source = (
            f"FROM {physical_name_of(self.table_id)} s JOIN {positions} q ON {vnode} = q.vnode"
            f" WHERE NOT q.started OR {self._after()}"
        )
        if limit is None:
            return f"SELECT {vnode} AS v, count(*) AS n {source} GROUP BY {vnode}"
        pk = [f"s.{quote_ident(c)} NULLS LAST" for c in self.key]
        order = [vnode, *pk] if self.by_vnode else [*pk, vnode]
        cols = ", ".join([vnode] + [f"s.{quote_ident(c)}" for c in self.columns])
        return f"SELECT {cols} {source} ORDER BY {', '.join(order)} LIMIT {int(limit)}"

    def _after(self) -> str:
        """Row ``s`` lies strictly after its vnode's position ``q``."""
        s = [f"s.{quote_ident(n)}" for n in self.key]
        q = [f"q.pk{i}" for i in range(len(s))]
        if not s:
            return "FALSE"
        if self.key_not_null:
            if len(s) == 1:
                return f"{s[0]} > {q[0]}"
            return f"({', '.join(s)}) > ({', '.join(q)})"
        # NULLS LAST: NULL sorts after every value (the ORDER BY).
        terms = []
        for i in range(len(s)):
            eq = [f"{s[j]} IS NOT DISTINCT FROM {q[j]}" for j in range(i)]
            gt = f"({q[i]} IS NOT NULL AND ({s[i]} IS NULL OR {s[i]} > {q[i]}))"
            terms.append("(" + " AND ".join([*eq, gt]) + ")")
        return " OR ".join(terms)


class CommittedReader(Protocol):
    """Where a state table's committed rows come from when it does not read the store's
    DuckDB itself: another process serves them (``storage/state_service.py``). Batched,
    Arrow in and Arrow out; blocking, called from a query thread."""

    def matching(
        self,
        schema: StateTableSchema,
        probe: pa.Table | None,
        on: Sequence[str],
        nulls_equal: bool,
    ) -> pa.Table: ...

    def joined(
        self,
        schema: StateTableSchema,
        probe: pa.Table,
        on: Sequence[str],
        columns: Sequence[str] | None,
    ) -> pa.Table: ...

    def exists(self, schema: StateTableSchema) -> bool: ...

    def scan(
        self,
        scan: PositionedScan,
        positions: pa.Table,
        limit: int | None,
        snapshot: int | None = None,
    ) -> pa.Table:
        """``PositionedScan.run``; inside ``snapshot`` (see ``open_snapshot``) if given."""
        ...

    def open_snapshot(self) -> int:
        """A read transaction whose snapshot is fixed by the first read in it: its handle."""
        ...

    def close_snapshot(self, snapshot: int) -> None: ...


@dataclass(frozen=True, slots=True)
class StateTableSchema:
    """Layout of one state table: stored columns (hidden ones included), key and
    distribution key as indices into ``columns``."""

    table_id: int
    columns: tuple[tuple[str, DataType], ...]
    pk: tuple[int, ...]
    dist_key: tuple[int, ...]
    not_null: tuple[int, ...] = ()

    @property
    def physical_name(self) -> str:
        return physical_name_of(self.table_id)

    @property
    def column_names(self) -> list[str]:
        return [c[0] for c in self.columns]

    @property
    def key_names(self) -> list[str]:
        return [VNODE_COLUMN] + [self.columns[i][0] for i in self.pk]

    @property
    def match_names(self) -> list[str]:
        """The columns that find a stored row by its key in DuckDB: the key without the
        vnode when the vnode is a function of the key (the distribution key is part of
        it). A join on fewer columns is several times cheaper. A table without a
        distribution key may place rows in vnodes of its own choosing (a backfill's
        change log): its vnode stays part of the match."""
        if self.pk and self.dist_key and set(self.dist_key) <= set(self.pk):
            return [self.columns[i][0] for i in self.pk]
        return self.key_names

    def create_sql(self) -> str:
        cols = [f"{VNODE_COLUMN} SMALLINT NOT NULL"]
        for i, (name, dtype) in enumerate(self.columns):
            # Key columns may hold NULL (an MV over an outer join, a NULL group): a
            # table's primary key is NOT NULL through ``not_null``.
            nn = " NOT NULL" if i in self.not_null else ""
            cols.append(f"{quote_ident(name)} {dtype.duckdb}{nn}")
        return f"CREATE TABLE {self.physical_name} ({', '.join(cols)})"

    def drop_sql(self) -> str:
        return f"DROP TABLE IF EXISTS {self.physical_name}"


@dataclass
class MemTable:
    """One epoch's writes to a state table: Arrow batches of ``[_vnode, cols..., __op]``.

    A key's last op wins. ``overwrites`` is False while every write was an insert of a
    key that did not exist, in which case the batches need no consolidation and the flush
    needs no delete.
    """

    batches: list[pa.Table] = field(default_factory=list)
    overwrites: bool = False
    # Every batch so far was written with each key at most once (``unique``).
    unique: bool = True
    _consolidated: pa.Table | None = None

    def __len__(self) -> int:
        return sum(b.num_rows for b in self.batches)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.batches)

    def append(self, batch: pa.Table, overwrites: bool, unique: bool = False) -> None:
        if batch.num_rows == 0:
            return
        self.batches.append(batch)
        self.overwrites = self.overwrites or overwrites
        self.unique = self.unique and unique
        self._consolidated = None

    def consolidated(self, key_names: Sequence[str]) -> pa.Table:
        """Every key once, with its last op."""
        if self._consolidated is None:
            table = pa.concat_tables(self.batches) if len(self.batches) > 1 else self.batches[0]
            # One batch with each key once (an operator's per-epoch state) is already
            # consolidated.
            if (
                self.overwrites
                and table.num_rows > 1
                and not (self.unique and len(self.batches) == 1)
            ):
                table = last_per_key(table, key_names)
            self.batches = [table]
            self._consolidated = table
        return self._consolidated


def last_per_key(table: pa.Table, key_names: Sequence[str]) -> pa.Table:
    """Each key's last row (in table order), vectorized."""
    seq = "__seq"
    indexed = table.select(list(key_names)).append_column(
        seq, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    last = indexed.group_by(list(key_names), use_threads=False).aggregate([(seq, "max")])
    order = pc.sort_indices(last.column(f"{seq}_max"))
    return table.take(pc.take(last.column(f"{seq}_max"), order))


class StateTable:
    """A state table and its epoch overlay. Writes must come from one writer at a time."""

    def __init__(self, schema: StateTableSchema, reader: CommittedReader | None = None) -> None:
        self.schema = schema
        # None: committed rows come from the DuckDB cursor each read is given.
        self.reader = reader
        self._current = MemTable()
        # Sealed memtables awaiting their checkpoint's commit, oldest first.
        self._sealed: list[tuple[int, MemTable]] = []
        self._seen_committed = False  # once committed, a table stays for the actor's life

    # ----------------------------------------------------------------- writing
    def with_vnodes(self, data: pa.Table) -> pa.Table:
        """``data`` (the stored columns) with the ``_vnode`` column in front. A table
        without a distribution key (a singleton's) keeps everything in vnode 0."""
        if not self.schema.dist_key:
            vnodes = np.zeros(data.num_rows, dtype=np.int16)
        else:
            cols = [data.column(self.schema.columns[i][0]) for i in self.schema.dist_key]
            vnodes = compute_vnodes(cols)
        return data.add_column(0, VNODE_COLUMN, pa.array(vnodes, pa.int16()))

    def write(self, chunk: StreamChunk, *, overwrites: bool, unique: bool = False) -> None:
        """Add a chunk (its data already carrying ``_vnode``) to the running epoch.

        ``overwrites``: the chunk may delete or replace keys that exist already.
        ``unique``: the chunk holds each key at most once.
        """
        batch = chunk.data.append_column(OP_COLUMN, pa.array(chunk.ops, pa.int8()))
        self._current.append(batch, overwrites or bool(np.any(~chunk.is_insert())), unique)

    def seal(self, epoch: int) -> MemTable | None:
        """End the running epoch's overlay; it stays readable until ``committed``."""
        if not self._current.batches:
            return None
        sealed = self._current
        self._sealed.append((epoch, sealed))
        self._current = MemTable()
        return sealed

    def committed(self, epoch: int) -> None:
        """Drop sealed overlays of epochs up to ``epoch``: DuckDB now holds them."""
        self._sealed = [(e, m) for e, m in self._sealed if e > epoch]

    def discard_uncommitted(self) -> None:
        """Forget every write not yet committed (recovery, or a failed commit)."""
        self._current = MemTable()
        self._sealed = []

    @property
    def has_pending_writes(self) -> bool:
        return bool(self._current.batches)

    # ----------------------------------------------------------------- reading
    def overlay_layers(self) -> list[pa.Table]:
        """The uncommitted overlays, newest first, each consolidated. Take them before
        reading DuckDB: an overlay committed meanwhile is then still consulted first."""
        keys = self.schema.key_names
        layers = [self._current] + [m for _, m in reversed(self._sealed)]
        return [m.consolidated(keys) for m in layers if m.batches]

    def lookup(
        self, keys: pa.Table, layers: list[pa.Table], cursor: duckdb.DuckDBPyConnection
    ) -> pa.Table:
        """The visible rows (``[_vnode, cols...]``) for the given keys (``[_vnode, pk...]``):
        overlays first, newest first, then the committed table. Blocking (DuckDB)."""
        key_names = self.schema.key_names
        out_cols = [VNODE_COLUMN, *self.schema.column_names]
        found: list[pa.Table] = []
        remaining = keys.select(key_names)
        for layer in layers:
            if remaining.num_rows == 0:
                break
            hit = layer.join(remaining, key_names, join_type="left semi")
            if hit.num_rows:
                present = pc.is_in(hit.column(OP_COLUMN), pa.array(_PRESENT_OPS, pa.int8()))
                found.append(hit.filter(present).select(out_cols))
                remaining = remaining.join(hit.select(key_names), key_names, join_type="left anti")
        if remaining.num_rows:
            # NULL key parts match NULL, as in the flush (an MV over an outer join).
            found.append(self._committed_matching(cursor, remaining, self.schema.match_names))
        schema = self.arrow_schema()
        if not found:
            return schema.empty_table()
        return pa.concat_tables([t.cast(schema) for t in found])

    @contextlib.contextmanager
    def visible(
        self,
        cursor: duckdb.DuckDBPyConnection,
        layers: list[pa.Table],
        *,
        probe: pa.Table | None = None,
        on: Sequence[str] = (),
        nulls_equal: bool = True,
        committed: bool = True,
    ) -> Iterator[str]:
        """The visible rows (``[_vnode, cols...]``) as a DuckDB relation (a parenthesized
        query) valid inside the block: the committed rows whose key no overlay holds,
        and the overlays' newest present version of each key. With ``probe``, only rows
        whose columns ``on`` equal one of its rows' (its columns of those names);
        ``nulls_equal`` as in ``matching``. ``layers`` come from ``overlay_layers``,
        taken before the committed table is read; ``committed=False``: the table is not
        committed yet (a new job's first epoch), so only the overlays count.

        Batched and Arrow in, Arrow out (the caller reads the relation into Arrow): the
        shape in which another process could serve it."""
        s = self.schema
        cols = ", ".join(f"t.{quote_ident(c)}" for c in [VNODE_COLUMN, *s.column_names])
        overlay = None
        if layers:
            schema = layers[0].schema
            overlay = pa.concat_tables(
                [
                    t.cast(schema).append_column(_LAYER, pa.array(np.full(t.num_rows, i, np.int32)))
                    for i, t in enumerate(layers)
                ]
            )
        elif not committed:  # nothing to read: an empty overlay keeps the relation's shape
            schema = self.arrow_schema().append(pa.field(OP_COLUMN, pa.int8()))
            overlay = schema.append(pa.field(_LAYER, pa.int32())).empty_table()
        # Served by another process, the committed rows come first, cut down to the probe.
        fetched = None
        if committed and self.reader is not None:
            fetched = self.reader.matching(s, probe, on, nulls_equal)
        tables = [t for t in (overlay, probe, fetched) if t is not None]
        with registered(cursor, *tables) as names:
            stored = s.physical_name if fetched is None else names[-1]
            semi = ""
            if probe is not None:
                cond = matching("t", "p", on, nulls_equal=nulls_equal)
                semi = f" SEMI JOIN {names[1 if overlay is not None else 0]} p ON {cond}"
            parts = []
            with_ov = ""
            if overlay is not None:
                # A key's versions all agree on columns of the key: the overlay can be
                # cut down to the probe's keys before its newest versions are taken.
                cut = semi if set(on) <= set(s.key_names) else ""
                newest = ""
                if len(layers) > 1:
                    by = ", ".join(f"t.{quote_ident(k)}" for k in s.key_names)
                    newest = (
                        f" QUALIFY row_number() OVER (PARTITION BY {by} ORDER BY t.{_LAYER}) = 1"
                    )
                with_ov = f"WITH ov AS (SELECT t.* FROM {names[0]} t{cut}{newest}) "
            if committed:
                part = f"SELECT {cols} FROM {stored} t{semi}"
                if overlay is not None:
                    part += f" ANTI JOIN ov o ON {matching('t', 'o', s.key_names)}"
                parts.append(part)
            if overlay is not None:
                present = ", ".join(str(op) for op in _PRESENT_OPS)
                parts.append(f"SELECT {cols} FROM ov t{semi} WHERE t.{OP_COLUMN} IN ({present})")
            yield "(" + with_ov + " UNION ALL ".join(parts) + ")"

    def read_visible(
        self,
        cursor: duckdb.DuckDBPyConnection,
        layers: list[pa.Table],
        probe: pa.Table,
        on: Sequence[str],
        *,
        nulls_equal: bool = True,
    ) -> pa.Table:
        """``visible``'s rows for ``probe``, read (typed as ``arrow_schema``). A new job's
        table may not be committed yet when its actors read (they go on with the next
        epoch while the first commits): then only the overlays count."""
        committed = self.is_committed(cursor)
        if not committed and not layers:
            return self.arrow_schema().empty_table()
        with self.visible(
            cursor, layers, probe=probe, on=on, nulls_equal=nulls_equal, committed=committed
        ) as rel:
            return cursor.sql(f"SELECT * FROM {rel}").to_arrow_table().cast(self.arrow_schema())

    def committed_matches(
        self,
        cursor: duckdb.DuckDBPyConnection,
        probe: pa.Table,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The committed rows matching ``probe`` on its columns but ``_i`` (NULL matches
        NULL), joined with the probe's ``_i``: ``_i`` and ``columns`` of them (all if None).
        For readers that know no overlay holds those keys (an aggregation's uncached
        groups). Where the probe has the distribution key, its ``_vnode`` is left out of
        the match: the vnode follows from the key, and the join is cheaper without it."""
        keys = [n for n in probe.column_names if n != "_i"]
        dist = {self.schema.columns[i][0] for i in self.schema.dist_key}
        if dist and dist <= set(keys) - {VNODE_COLUMN}:
            keys.remove(VNODE_COLUMN)
        if self.reader is not None:
            return self.reader.joined(self.schema, probe, keys, columns)
        with registered(cursor, probe) as (name,):
            sql = committed_joined_sql(self.schema.physical_name, name, keys, columns)
            return cursor.sql(sql).to_arrow_table()

    def _committed_matching(
        self, cursor: duckdb.DuckDBPyConnection, probe: pa.Table, on: Sequence[str]
    ) -> pa.Table:
        if self.reader is not None:
            return self.reader.matching(self.schema, probe, on, True)
        with registered(cursor, probe) as (name,):
            sql = committed_matching_sql(self.schema.physical_name, name, on)
            return cursor.sql(sql).to_arrow_table()

    def exists(self, cursor: duckdb.DuckDBPyConnection) -> bool:
        """Whether the table is committed (a new job's tables appear with its first
        commit; until then there is nothing to read)."""
        if self.reader is not None:
            return self.reader.exists(self.schema)
        return table_exists(cursor, self.schema.table_id)

    def is_committed(self, cursor: duckdb.DuckDBPyConnection) -> bool:
        """``exists``, asked of DuckDB only until the answer is yes."""
        if not self._seen_committed:
            self._seen_committed = self.exists(cursor)
        return self._seen_committed

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of ``[_vnode, cols...]`` as DuckDB returns it."""
        if not hasattr(self, "_arrow_schema"):
            fields = [pa.field(VNODE_COLUMN, pa.int16())]
            fields += [pa.field(n, arrow_type_of(t)) for n, t in self.schema.columns]
            self._arrow_schema = pa.schema(fields)
        return self._arrow_schema

    # ------------------------------------------------------------------- flush
    def flush(self, memtable: MemTable, cursor: duckdb.DuckDBPyConnection) -> None:
        """Write a sealed memtable into DuckDB (inside the caller's transaction)."""
        self._write(memtable.consolidated(self.schema.key_names), memtable.overwrites, cursor)

    def _write(self, table: pa.Table, overwrites: bool, cursor: duckdb.DuckDBPyConnection) -> None:
        names = [VNODE_COLUMN, *self.schema.column_names]
        cols = ", ".join(map(quote_ident, names))
        target = self.schema.physical_name
        if not overwrites:
            # Straight from Arrow, in the table's column order: registering a relation
            # by name costs more than this whole insert for the few rows of a small
            # epoch (0.85 ms against 1.1-1.2 ms for 1-16 rows).
            cursor.from_arrow(table.select(names)).insert_into(target)
            return
        with registered(cursor, table) as (name,):
            # One MERGE, not DELETE + INSERT: a key that stays is updated in place. In
            # an in-memory database DuckDB never reclaims the long strings of deleted
            # rows, so a rewritten 10 MB aggregate would cost 10 MB more every epoch.
            match = self.schema.match_names
            present = ", ".join(str(op) for op in _PRESENT_OPS)
            updated = ", ".join(
                f"{quote_ident(n)} = s.{quote_ident(n)}" for n in names if n not in match
            )
            when_matched = f"WHEN MATCHED THEN UPDATE SET {updated} " if updated else ""
            cursor.execute(
                f"MERGE INTO {target} t USING {name} s ON {matching('t', 's', match)} "
                f"WHEN MATCHED AND s.{OP_COLUMN} NOT IN ({present}) THEN DELETE "
                f"{when_matched}"
                f"WHEN NOT MATCHED AND s.{OP_COLUMN} IN ({present}) THEN INSERT ({cols}) "
                f"VALUES ({', '.join('s.' + quote_ident(n) for n in names)})"
            )


def flush_sealed(
    sealed: Sequence[tuple[StateTable, MemTable]], cursor: duckdb.DuckDBPyConnection
) -> None:
    """Write an epoch's sealed memtables into DuckDB, one DELETE and one INSERT per
    physical table: the actors sharing a table (each its own vnodes, so disjoint keys)
    are written together, because a delete joins against the whole stored table."""
    by_table: dict[int, list[tuple[StateTable, MemTable]]] = {}
    for table, memtable in sealed:
        by_table.setdefault(table.schema.table_id, []).append((table, memtable))
    for parts in by_table.values():
        table = parts[0][0]
        if len(parts) == 1:
            table.flush(parts[0][1], cursor)
            continue
        keys = table.schema.key_names
        batches = [m.consolidated(keys) for _, m in parts]
        schema = batches[0].schema
        merged = pa.concat_tables([b if b.schema == schema else b.cast(schema) for b in batches])
        table._write(merged, any(m.overwrites for _, m in parts), cursor)
