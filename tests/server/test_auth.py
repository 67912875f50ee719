"""SCRAM-SHA-256 authentication against a server started with a password."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest

PASSWORD = "s3cret pässword"


@pytest.fixture(scope="module")
def secured(session_server_factory):  # type: ignore[no-untyped-def]
    srv = session_server_factory(password=PASSWORD)
    yield srv
    assert srv.stop() == 0


def test_right_password(secured) -> None:  # type: ignore[no-untyped-def]
    with psycopg.connect(secured.dsn(), autocommit=True) as c:
        assert c.execute("select 1").fetchone() == (1,)


def test_wrong_password(secured) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(secured.dsn(password="nope"))
    assert 'password authentication failed for user "root"' in str(info.value)
    # The password never reaches the server's output.
    assert PASSWORD not in secured.output()


def test_missing_password(secured) -> None:  # type: ignore[no-untyped-def]
    dsn = secured.dsn(password="")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn)


def test_asyncpg_scram(secured) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        c = await asyncpg.connect(
            host=secured.host, port=secured.port, user="root", database="dev", password=PASSWORD
        )
        assert await c.fetchval("select 41 + 1") == 42
        await c.close()
        with pytest.raises(asyncpg.InvalidPasswordError) as info:
            await asyncpg.connect(
                host=secured.host, port=secured.port, user="root", database="dev", password="x"
            )
        assert info.value.sqlstate == "28P01"

    asyncio.run(main())
