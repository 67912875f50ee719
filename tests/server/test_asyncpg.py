"""asyncpg against the real server: it prepares every query, asks for binary results of
every type it knows, and uses portals with row limits for cursors."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import uuid

import asyncpg
import pytest


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _connect(server) -> asyncpg.Connection:  # type: ignore[no-untyped-def]
    return await asyncpg.connect(
        host=server.host, port=server.port, user="root", database="dev", password=server.password
    )


def test_connect_fetch_and_types(server, table_name: str) -> None:
    row = (
        True, 7, 2**40, 3, 1.5, 2.5, decimal.Decimal("12.345"), "hé", dt.date(2024, 1, 2),
        dt.time(10, 11, 12, 500), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.timedelta(days=1, hours=2),
        '{"a": 1}', b"\x00\xff",
    )  # fmt: skip

    async def main() -> None:
        c = await _connect(server)
        try:
            assert await c.fetchval("select 1") == 1
            await c.execute(
                f"create table {table_name} (bo boolean, i int, b bigint, s smallint,"
                " f double precision, r real, n numeric, v varchar, d date, t time,"
                " ts timestamp, tz timestamptz, iv interval, j jsonb, bb bytea)"
            )
            placeholders = ",".join(f"${i}" for i in range(1, len(row) + 1))
            await c.execute(f"insert into {table_name} values ({placeholders})", *row)
            got = await c.fetchrow(f"select * from {table_name}")
            assert tuple(got) == row
            assert await c.fetchval("select 2.5::numeric / 2") == decimal.Decimal("1.25")
            u = uuid.uuid4()
            assert await c.fetchval("select $1::uuid", u) == u
            assert await c.fetchval("select $1::varchar || 'x'", "y") == "yx"
        finally:
            await c.close()

    run(main())


def test_arrays(server) -> None:  # type: ignore[no-untyped-def]
    """String arrays are announced as text[]; other arrays make asyncpg introspect
    pg_type with its own catalog query first."""

    async def main() -> None:
        c = await _connect(server)
        try:
            assert await c.fetchval("select ['a', null, 'b c']::varchar[]") == ["a", None, "b c"]
            assert await c.fetchval("select $1::text[]", ["x", None]) == ["x", None]
            assert await c.fetchval("select [1, 2, null]") == [1, 2, None]
        finally:
            await c.close()

    run(main())


def test_prepare_executemany_and_cursor(server, table_name: str) -> None:
    async def main() -> None:
        c = await _connect(server)
        try:
            await c.execute(f"create table {table_name} (id int, v varchar)")
            await c.executemany(
                f"insert into {table_name} values ($1, $2)", [(i, f"v{i}") for i in range(50)]
            )
            stmt = await c.prepare(f"select v from {table_name} where id = $1")
            assert [a.name for a in stmt.get_attributes()] == ["v"]
            assert [t.name for t in stmt.get_parameters()] == ["int4"]
            assert await stmt.fetchval(7) == "v7"
            assert await stmt.fetchval(8) == "v8"
            # A cursor fetches through a portal with row limits (PortalSuspended).
            async with c.transaction():
                seen = [
                    r["id"]
                    async for r in c.cursor(f"select id from {table_name} order by id", prefetch=7)
                ]
            assert seen == list(range(50))
            async with c.transaction():
                cur = await c.cursor(f"select id from {table_name} order by id")
                assert [r["id"] for r in await cur.fetch(3)] == [0, 1, 2]
                assert [r["id"] for r in await cur.fetch(2)] == [3, 4]
        finally:
            await c.close()

    run(main())


def test_copy_to_table_csv_and_records(server, table_name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        c = await _connect(server)
        try:
            await c.execute(f"create table {table_name} (id int, name varchar, price double)")
            path = tmp_path / "data.csv"
            path.write_text('id,name,price\n1,"x, y",1.5\n2,,2.5\n')
            status = await c.copy_to_table(table_name, source=str(path), format="csv", header=True)
            assert status == "COPY 2"
            status = await c.copy_to_table(table_name, source=_lines(b"3\tz\t\\N\n"), format="text")
            assert status == "COPY 1"
            rows = await c.fetch(f"select id, name, price from {table_name} order by id")
            assert [tuple(r) for r in rows] == [(1, "x, y", 1.5), (2, None, 2.5), (3, "z", None)]
        finally:
            await c.close()

    run(main())


async def _lines(data: bytes):  # type: ignore[no-untyped-def]
    yield data


def test_errors_carry_sqlstate(server) -> None:
    async def main() -> None:
        c = await _connect(server)
        try:
            with pytest.raises(asyncpg.UndefinedTableError) as info:
                await c.fetch("select * from definitely_missing")
            assert info.value.sqlstate == "42P01"
            assert info.value.position == "15"
            with pytest.raises(asyncpg.PostgresSyntaxError):
                await c.execute("selec 1")
            assert await c.fetchval("select $1::int + 1", 1) == 2
        finally:
            await c.close()

    run(main())


def test_many_concurrent_connections(server) -> None:
    async def one(i: int) -> int:
        c = await _connect(server)
        try:
            total = 0
            for j in range(5):
                total += await c.fetchval("select $1::int * $2::int", i, j)
            return total
        finally:
            await c.close()

    async def main() -> list[int]:
        return await asyncio.gather(*(one(i) for i in range(30)))

    assert run(main()) == [i * 10 for i in range(30)]
