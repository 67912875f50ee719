"""Writes of an extended-protocol pipeline commit at its Sync, as PostgreSQL commits the
implicit transaction there: asyncpg's executemany (many Bind/Execute, one Sync) shares an
epoch, its rows are all visible once it returns, and a read inside a pipeline sees the
writes before it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import psycopg
from conftest import ServerProcess
from postgres_reference import PostgresServer


def test_executemany_rows_are_visible_when_it_returns(
    server: ServerProcess, table_name: str
) -> None:
    async def main() -> None:
        c = await asyncpg.connect(**server.asyncpg_args())
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


def _executemany_outcome(con_args: dict[str, object], table: str, rows: list[tuple]) -> tuple:
    """What an executemany with ``rows`` does to a fresh ``table (id INT, v INT NOT
    NULL)``: the error's class and SQLSTATE (or None), and the rows stored after it."""

    async def main() -> tuple:
        c = await asyncpg.connect(**con_args)
        try:
            await c.execute(f"DROP TABLE IF EXISTS {table}")
            await c.execute(f"CREATE TABLE {table} (id INT, v INT NOT NULL)")
            error = None
            try:
                await c.executemany(f"INSERT INTO {table} VALUES ($1, $2)", rows)
            except asyncpg.PostgresError as exc:
                error = (type(exc).__name__, exc.sqlstate)
            stored = sorted(tuple(r) for r in await c.fetch(f"SELECT id, v FROM {table}"))
            return error, stored
        finally:
            await c.close()

    return asyncio.run(main())


def test_an_executemany_with_one_bad_row_writes_none_as_in_postgresql(
    server: ServerProcess, postgres, table_name: str
) -> None:
    rows = [(i, i) for i in range(50)] + [(50, None)] + [(i, i) for i in range(51, 60)]
    ours = _executemany_outcome(server.asyncpg_args(), table_name, rows)
    theirs = _executemany_outcome(postgres.asyncpg_args(), table_name, rows)
    assert ours == theirs == (("NotNullViolationError", "23502"), [])


def test_an_executemany_of_good_rows_matches_postgresql(
    server: ServerProcess, postgres, table_name: str
) -> None:
    rows = [(i, i * 7 - 3) for i in range(2000)]
    ours = _executemany_outcome(server.asyncpg_args(), table_name, rows)
    theirs = _executemany_outcome(postgres.asyncpg_args(), table_name, rows)
    assert ours == theirs == (None, sorted(rows))


def test_repeated_keys_in_one_executemany_keep_the_last_row(
    server: ServerProcess, table_name: str
) -> None:
    """The rows of a batched executemany overwrite each other in order, as the same
    statements one at a time do (a primary key's new row replaces the old one)."""

    async def main() -> None:
        c = await asyncpg.connect(**server.asyncpg_args())
        try:
            await c.execute(f"CREATE TABLE {table_name} (id INT PRIMARY KEY, v TEXT)")
            rows = [(i % 10, f"v{i}") for i in range(100)]
            await c.executemany(f"INSERT INTO {table_name} VALUES ($1, $2)", rows)
            stored = sorted(tuple(r) for r in await c.fetch(f"SELECT id, v FROM {table_name}"))
            assert stored == [(k, f"v{90 + k}") for k in range(10)]
        finally:
            await c.close()

    asyncio.run(main())


def test_psycopg_executemany_with_values_needing_casts(
    conn: psycopg.Connection, table_name: str
) -> None:
    """Parameters sent as untyped text (psycopg's ``str``) take the general path, each
    cast as PostgreSQL casts it; typed ones the batched path; both in one pipeline, with
    a read after them that sees every row."""
    conn.execute(f"CREATE TABLE {table_name} (id INT, v INT, t TEXT)")
    cur = conn.cursor()
    cur.executemany(
        f"INSERT INTO {table_name} VALUES (%s, %s, %s)",
        [("1", "2", "a"), ("2", "3", "b")],
    )
    cur.executemany(f"INSERT INTO {table_name} (id, t) VALUES (%s, %s)", [(3, "c"), (4, None)])
    assert cur.rowcount == 2
    with conn.pipeline():
        cur.executemany(f"INSERT INTO {table_name} (id) VALUES (%s)", [(i,) for i in range(5, 9)])
        total = conn.execute(f"SELECT count(*), sum(id), sum(v) FROM {table_name}")
    assert total.fetchone() == (8, 36, 5)
    rows = conn.execute(f"SELECT id, v, t FROM {table_name} WHERE id <= 4 ORDER BY id")
    assert rows.fetchall() == [(1, 2, "a"), (2, 3, "b"), (3, None, "c"), (4, None, None)]


def test_a_pipeline_mixing_statements_keeps_every_row_in_order(
    conn: psycopg.Connection, table_name: str
) -> None:
    """Batched Executes of one INSERT stop at another statement (or the same one with a
    value that needs its general path) and take up again after it; an UPDATE in the
    pipeline sees the rows inserted before it (it ignored them: it read the last commit)."""
    conn.execute(f"CREATE TABLE {table_name} (id INT PRIMARY KEY, v TEXT)")
    cur = conn.cursor()
    with conn.pipeline():
        cur.executemany(f"INSERT INTO {table_name} VALUES (%s, %s)", [(i, "a") for i in range(50)])
        cur.execute(f"UPDATE {table_name} SET v = 'b' WHERE id < 10")
        cur.executemany(
            f"INSERT INTO {table_name} VALUES (%s, %s)",
            [(i, "c") for i in range(5, 15)] + [("15", "d")] + [(i, "e") for i in range(16, 60)],
        )
        counted = conn.execute(f"SELECT v, count(*) FROM {table_name} GROUP BY v ORDER BY v")
    assert counted.fetchall() == [("b", 5), ("c", 10), ("d", 1), ("e", 44)]
    # Every row, as the statements applied one after the other leave it: the UPDATE saw
    # the first batch, the later rows replaced theirs by key, in order.
    want = [(i, "b") for i in range(5)] + [(i, "c") for i in range(5, 15)]
    want += [(15, "d")] + [(i, "e") for i in range(16, 60)]
    assert conn.execute(f"SELECT id, v FROM {table_name} ORDER BY id").fetchall() == want


def _pipeline_outcome(connect: Callable[[], psycopg.Connection], table: str) -> tuple:
    """An executemany whose rows are several statements (psycopg parses again when a
    value needs a wider integer type), the last of which fails."""
    with connect() as c:
        c.execute(f"CREATE TABLE {table} (id BIGINT, v SMALLINT)")
        error = None
        try:
            with c.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table} VALUES (%s, %s)",
                    [(1, 1), (2, 2), (1 << 40, 3), (3, 4), (4, 1 << 20)],
                )
        except psycopg.Error as exc:
            error = exc.sqlstate
        stored = c.execute(f"SELECT count(*) FROM {table}").fetchone()
        c.execute(f"DROP TABLE {table}")
    return error, stored


def test_a_failed_statement_of_a_pipeline_writes_none_of_it_as_in_postgresql(
    server: ServerProcess, postgres: PostgresServer, table_name: str
) -> None:
    ours = _pipeline_outcome(server.connect, table_name)
    theirs = _pipeline_outcome(postgres.connect, table_name)
    assert ours == theirs == ("22003", (0,))
