"""SQLAlchemy (psycopg driver) smoke test: connect, text() queries, parameters."""

from __future__ import annotations

import pytest
import sqlalchemy as sa


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
    with engine.connect() as c:
        c.execute(sa.text(f"create table {table_name} (id int)"))
    assert table_name in sa.inspect(engine).get_table_names()
