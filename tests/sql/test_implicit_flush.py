"""``rw_implicit_flush``: on (Rivulet's default) a write returns once committed and
visible; off (RisingWave's default) it returns once its rows are in the current epoch,
and FLUSH waits for them - and says so when a failure lost them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import rivulet


@pytest.fixture
def con() -> Iterator[rivulet.Connection]:
    # Deterministic: no timer barriers, so an epoch commits only when a statement asks.
    with rivulet.connect(deterministic=True) as c:
        c.execute("CREATE TABLE t (id INT)")
        c.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
        yield c


def count(con: rivulet.Connection) -> tuple[int, int]:
    (stored,) = con.execute("SELECT count(*) FROM t").fetchone()
    (viewed,) = con.execute("SELECT n FROM n").fetchone()
    return stored, viewed


def test_the_default_returns_once_committed(con: rivulet.Connection) -> None:
    assert con.execute("SHOW rw_implicit_flush").fetchone() == ("true",)
    con.execute("INSERT INTO t VALUES (1)")
    assert count(con) == (1, 1)


def test_off_a_write_returns_before_its_commit_and_flush_waits(con: rivulet.Connection) -> None:
    con.execute("SET rw_implicit_flush = false")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("INSERT INTO t VALUES (2), (3)")
    assert count(con) == (0, 0)  # accepted into the epoch, not yet committed
    con.execute("FLUSH")
    assert count(con) == (3, 3)
    con.execute("SET rw_implicit_flush = true")
    con.execute("DELETE FROM t WHERE id = 1")
    assert count(con) == (2, 2)


def test_off_flush_fails_when_a_recovery_lost_the_writes(con: rivulet.Connection) -> None:
    con.execute("SET rw_implicit_flush = false")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("RECOVER")  # drops every epoch not yet committed
    with pytest.raises(rivulet.OperationalError) as failed:
        con.execute("FLUSH")
    # It says why: the epoch holding the write was dropped by the RECOVER.
    assert (failed.value.sqlstate, failed.value.message) == (
        "57P01",
        "the stream jobs were rebuilt by RECOVER",
    )
    assert count(con) == (0, 0)
    con.execute("INSERT INTO t VALUES (2)")
    con.execute("FLUSH")  # the loss was reported once; later writes are unaffected
    assert count(con) == (1, 1)
