"""SQLAlchemy (psycopg driver): connect, text() queries, parameters, reflection, and the
bulk writes of SQLAlchemy and pandas compared with PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest
import sqlalchemy as sa
from conftest import ServerProcess
from postgres_reference import PostgresServer
from psycopg.types.numeric import Int8


@pytest.fixture
def engine(server):  # type: ignore[no-untyped-def]
    eng = sa.create_engine(server.url("postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    yield eng
    eng.dispose()


def test_text_queries(engine: sa.Engine, table_name: str) -> None:
    with engine.connect() as c:
        assert c.execute(sa.text("select 1")).scalar() == 1
        c.execute(sa.text(f"create table {table_name} (id int, name varchar)"))
        c.execute(
            sa.text(f"insert into {table_name} values (:id, :name)"),
            [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
        )
        rows = c.execute(
            sa.text(f"select id, name from {table_name} where id > :lo order by id"), {"lo": 0}
        ).all()
        assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]


def test_table_reflection(engine: sa.Engine, table_name: str) -> None:
    """A table created over SQL reflects with its columns, types, nullability and key,
    and the reflected Table writes and reads it."""
    with engine.connect() as c:
        c.execute(
            sa.text(
                f"create table {table_name}"
                " (id int primary key, name varchar not null, price numeric(10, 2))"
            )
        )
    assert table_name in sa.inspect(engine).get_table_names()
    table = sa.Table(table_name, sa.MetaData(), autoload_with=engine)
    assert [(c.name, type(c.type).__name__, c.nullable) for c in table.columns] == [
        ("id", "INTEGER", False),
        ("name", "VARCHAR", False),
        ("price", "NUMERIC", True),
    ]
    assert (table.c.price.type.precision, table.c.price.type.scale) == (10, 2)
    assert [c.name for c in table.primary_key] == ["id"]
    with engine.connect() as c:
        c.execute(
            table.insert(),
            [{"id": 2, "name": "b", "price": None}, {"id": 1, "name": "a", "price": 1.5}],
        )
        rows = c.execute(sa.select(table).order_by(table.c.id)).all()
    assert [tuple(r) for r in rows] == [(1, "a", Decimal("1.50")), (2, "b", None)]


# -- bulk writes: SQLAlchemy's executemany and pandas' to_sql send one INSERT per row with
# a cast on each parameter (``%(id)s::BIGINT``); they are written as one batch, and what
# they store (or refuse) is what PostgreSQL stores (or refuses).
def _engines(server: ServerProcess, postgres: PostgresServer) -> tuple[sa.Engine, sa.Engine]:
    ours = sa.create_engine(
        "postgresql+psycopg://", creator=server.connect, isolation_level="AUTOCOMMIT"
    )
    theirs = sa.create_engine(
        "postgresql+psycopg://", creator=postgres.connect, isolation_level="AUTOCOMMIT"
    )
    return ours, theirs


def _stored(engine: sa.Engine, table: str) -> list[tuple]:
    with engine.connect() as c:
        rows = c.execute(sa.text(f"SELECT * FROM {table}")).all()
    return sorted((tuple(r) for r in rows), key=repr)


def test_a_core_bulk_insert_stores_what_postgresql_stores(
    server: ServerProcess, postgres: PostgresServer, table_name: str
) -> None:
    meta = sa.MetaData()
    table = sa.Table(
        table_name,
        meta,
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("n", sa.Integer),
        sa.Column("name", sa.String),
        sa.Column("flag", sa.Boolean),
        sa.Column("x", sa.Double),
    )
    rows = [
        {
            "id": i,
            "n": None if i % 7 == 0 else i * 3 - 1000,
            "name": None if i % 5 == 0 else f"n{i}",
            "flag": i % 3 == 0,
            "x": i / 8,
        }
        for i in range(3000)
    ]
    results = []
    for engine in _engines(server, postgres):
        try:
            meta.create_all(engine)
            with engine.begin() as c:
                c.execute(sa.insert(table), rows)
            results.append(_stored(engine, table_name))
        finally:
            meta.drop_all(engine)
            engine.dispose()
    assert results[0] == results[1]
    assert len(results[0]) == 3000


def test_pandas_to_sql_stores_what_postgresql_stores(
    server: ServerProcess, postgres: PostgresServer, table_name: str
) -> None:
    pd = pytest.importorskip("pandas")
    n = 2500
    frame = pd.DataFrame(
        {
            "id": range(n),
            "k": [i % 17 for i in range(n)],
            "s": [None if i % 11 == 0 else f"s{i}" for i in range(n)],
            "x": [i * 0.25 for i in range(n)],
            "b": [i % 2 == 0 for i in range(n)],
        }
    )
    for method in (None, "multi"):
        results = []
        for engine in _engines(server, postgres):
            try:
                frame.to_sql(table_name, engine, index=False, method=method, chunksize=1000)
                results.append(_stored(engine, table_name))
            finally:
                with engine.begin() as c:
                    c.execute(sa.text(f"DROP TABLE IF EXISTS {table_name}"))
                engine.dispose()
        assert results[0] == results[1], method
        assert len(results[0]) == n


@pytest.mark.parametrize(
    ("cast", "value"),
    [("INT", 1 << 40), ("SMALLINT", 40000), ("INT", -(1 << 31) - 1)],
)
def test_a_cast_parameter_out_of_its_range_fails_as_in_postgresql(
    server: ServerProcess, postgres: PostgresServer, table_name: str, cast: str, value: int
) -> None:
    """A cast on a parameter is checked even where the column would take the value; the
    values are all sent as int8, so that the rows are one statement's."""
    outcomes = []
    for connect in (server.connect, postgres.connect):
        with connect() as c:
            c.execute(f"CREATE TABLE {table_name} (id BIGINT)")
            try:
                error = None
                with c.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table_name} VALUES (%s::{cast})",
                        [(Int8(1),), (Int8(value),), (Int8(2),)],
                    )
            except psycopg.Error as exc:
                error = exc.sqlstate
            stored = c.execute(f"SELECT count(*) FROM {table_name}").fetchone()
            c.execute(f"DROP TABLE {table_name}")
        outcomes.append((error, stored))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "22003"
