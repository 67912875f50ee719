"""Writes of an extended-protocol pipeline commit at its Sync, as PostgreSQL commits the
implicit transaction there: asyncpg's executemany (many Bind/Execute, one Sync) shares an
epoch, its rows are all visible once it returns, and a read inside a pipeline sees the
writes before it."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
from conftest import ServerProcess


def test_executemany_rows_are_visible_when_it_returns(
    server: ServerProcess, table_name: str
) -> None:
    async def main() -> None:
        c = await asyncpg.connect(
            host=server.host, port=server.port, user="root", database="dev",
            password=server.password,
        )  # fmt: skip
        try:
            await c.execute(f"CREATE TABLE {table_name} (id BIGINT, v INT)")
            await c.execute(
                f"CREATE MATERIALIZED VIEW {table_name}_n AS SELECT count(*) AS n,"
                f" sum(v) AS s FROM {table_name}"
            )
            for batch in range(3):
                rows = [(batch * 1000 + i, i) for i in range(1000)]
                await c.executemany(f"INSERT INTO {table_name} VALUES ($1, $2)", rows)
                n, s = await c.fetchrow(f"SELECT n, s FROM {table_name}_n")
                assert (n, s) == (1000 * (batch + 1), 499500 * (batch + 1))
        finally:
            await c.close()

    asyncio.run(main())


def test_a_read_in_a_pipeline_sees_the_writes_before_it(
    conn: psycopg.Connection, table_name: str
) -> None:
    conn.execute(f"CREATE TABLE {table_name} (v INT)")
    with conn.pipeline():
        conn.execute(f"INSERT INTO {table_name} VALUES (%s)", [1])
        conn.execute(f"INSERT INTO {table_name} VALUES (%s)", [2])
        cur = conn.execute(f"SELECT count(*), sum(v) FROM {table_name}")
    assert cur.fetchone() == (2, 3)
    assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (2,)
