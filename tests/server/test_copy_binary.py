"""COPY ... FROM STDIN (FORMAT binary): PostgreSQL's binary COPY stream, as asyncpg's
``copy_records_to_table`` writes it, checked against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import struct

import asyncpg
import pytest
from conftest import ServerProcess
from postgres_reference import Pair, PostgresServer

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
TYPES = (
    "b BOOLEAN, s SMALLINT, i INT, g BIGINT, r REAL, d DOUBLE PRECISION, n NUMERIC,"
    " t TEXT, vc VARCHAR, dt DATE, tm TIME, ts TIMESTAMP, tz TIMESTAMPTZ, iv INTERVAL,"
    " j JSONB, by BYTEA"
)
RECORDS = [
    (True, 3, -7, 1 << 40, 1.5, 2.25, decimal.Decimal("-12.34"), "héllo", "x",
     dt.date(2024, 2, 29), dt.time(13, 5, 7, 123), dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(2020, 1, 1, 12, tzinfo=dt.UTC), dt.timedelta(days=3, microseconds=7),
     '{"a": [1, 2]}', b"\x00\x01\xff"),
    (False, -32768, 2**31 - 1, -(2**63), -0.0, 1e300, decimal.Decimal("1000000.5"), "", "tab\tnl\n",
     dt.date(1970, 1, 1), dt.time(0, 0), dt.datetime(2000, 1, 1),
     dt.datetime(1969, 7, 20, 20, 17, tzinfo=dt.UTC), dt.timedelta(days=-1, seconds=1),
     "[]", b""),
    (None,) * 16,
]  # fmt: skip


def _copy_records(args: dict[str, object], table: str, records: list[tuple]) -> tuple[str, list]:
    async def main() -> tuple[str, list]:
        c = await asyncpg.connect(**args)
        try:
            await c.execute(f"DROP TABLE IF EXISTS {table}")
            await c.execute(f"CREATE TABLE {table} ({TYPES})")
            status = await c.copy_records_to_table(table, records=records)
            rows = await c.fetch(f"SELECT * FROM {table} ORDER BY i NULLS LAST")
            return status, [tuple(r) for r in rows]
        finally:
            await c.close()

    return asyncio.run(main())


def test_copy_records_to_table_stores_what_postgresql_stores(
    server: ServerProcess, postgres: PostgresServer, table_name: str
) -> None:
    ours = _copy_records(server.asyncpg_args(), table_name, RECORDS)
    theirs = _copy_records(postgres.asyncpg_args(), table_name, RECORDS)
    assert ours == theirs
    assert ours[0] == "COPY 3"


def test_a_large_binary_copy_is_read_in_pieces(server: ServerProcess, table_name: str) -> None:
    """More than one read batch of data (rows straddle the pieces); an MV over it agrees."""
    rows = 400_000

    async def main() -> None:
        c = await asyncpg.connect(**server.asyncpg_args())
        try:
            await c.execute(f"CREATE TABLE {table_name} (id BIGINT, k INT, name VARCHAR)")
            await c.execute(
                f"CREATE MATERIALIZED VIEW {table_name}_agg AS"
                f" SELECT k, count(*) AS n, sum(id) AS s FROM {table_name} GROUP BY k"
            )
            records = [(i, i % 7, f"name-{i}" if i % 5 else None) for i in range(rows)]
            assert await c.copy_records_to_table(table_name, records=records) == f"COPY {rows}"
            got = await c.fetchrow(
                f"SELECT count(*), sum(id), count(name), max(name) FROM {table_name}"
            )
            assert tuple(got) == (rows, rows * (rows - 1) // 2, rows - rows // 5, "name-99999")
            agg = await c.fetch(f"SELECT k, n, s FROM {table_name}_agg ORDER BY k")
            expected = [(k, len(range(k, rows, 7)), sum(range(k, rows, 7))) for k in range(7)]
            assert [(r[0], r[1], int(r[2])) for r in agg] == expected
        finally:
            await c.close()

    asyncio.run(main())


def _tuple(*fields: bytes | None) -> bytes:
    out = struct.pack(">h", len(fields))
    for f in fields:
        out += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    return out


def _int4(v: int) -> bytes:
    return struct.pack(">i", v)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(HEADER + _tuple(_int4(1), b"a") + TRAILER, id="good"),
        pytest.param(HEADER + _tuple(_int4(1), b"a"), id="no-trailer"),
        pytest.param(b"PGCOPY\nXX" + HEADER[9:] + TRAILER, id="bad-signature"),
        pytest.param(HEADER[:8], id="short-header"),
        pytest.param(HEADER + _tuple(_int4(1)) + TRAILER, id="too-few-fields"),
        pytest.param(HEADER + _tuple(_int4(1), b"a", b"b") + TRAILER, id="too-many-fields"),
        pytest.param(HEADER + _tuple(b"\x00\x01", b"a") + TRAILER, id="short-int"),
        pytest.param(HEADER + _tuple(_int4(1), b"a")[:-1], id="cut-in-a-row"),
        pytest.param(HEADER + TRAILER + _tuple(_int4(1), b"a"), id="data-after-trailer"),
        pytest.param(HEADER + _tuple(_int4(1), b"\xff\xfe") + TRAILER, id="bad-utf8"),
        pytest.param(HEADER + _tuple(_int4(1), b"a\x00b") + TRAILER, id="nul-in-text"),
        pytest.param(
            SIGNATURE + struct.pack(">ii", 1 << 20, 0) + TRAILER, id="critical-header-flag"
        ),
        pytest.param(HEADER + _tuple(_int4(1), None) + _tuple(None, b"z") + TRAILER, id="nulls"),
    ],
)
def test_binary_copy_data_as_postgresql_reads_it(
    pg_pair: Pair, table_name: str, payload: bytes
) -> None:
    pg_pair.setup(f"CREATE TABLE {table_name} (i INT, t TEXT)")
    pg_pair.assert_same(
        f"COPY {table_name} FROM STDIN (FORMAT binary)", copy_data=payload, messages=True
    )
    pg_pair.assert_same(f"SELECT i, t FROM {table_name} ORDER BY i, t")


@pytest.mark.parametrize(
    "options",
    ["FORMAT binary, DELIMITER ','", "FORMAT binary, NULL 'x'", "FORMAT binary, HEADER"],
)
def test_binary_copy_refuses_text_options_as_postgresql(
    pg_pair: Pair, table_name: str, options: str
) -> None:
    pg_pair.setup(f"CREATE TABLE {table_name} (i INT)")
    pg_pair.assert_same(
        f"COPY {table_name} FROM STDIN ({options})", copy_data=HEADER + TRAILER, messages=True
    )
