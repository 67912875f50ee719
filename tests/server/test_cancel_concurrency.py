"""Cancel requests and many sessions at once."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

LONG_QUERY = (
    "select count(*) from generate_series(1, 300000) a(x), generate_series(1, 300000) b(y)"
    " where x + y = 7"
)


def test_cancel_long_query(server) -> None:  # type: ignore[no-untyped-def]
    with server.connect() as c:
        timer = threading.Timer(0.5, c.cancel_safe)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled) as info:
            c.execute(LONG_QUERY)
        elapsed = time.monotonic() - started
        timer.join()
        assert info.value.diag.sqlstate == "57014"
        assert elapsed < 10
        # The session goes on.
        assert c.execute("select 1").fetchone() == (1,)


def test_cancel_with_wrong_key_is_ignored(server) -> None:  # type: ignore[no-untyped-def]
    """A CancelRequest must name the session's secret key too."""
    import socket
    import struct

    with server.connect() as c:
        pid = c.info.backend_pid
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(struct.pack("!iiii", 16, 80877102, pid, 12345))
            s.settimeout(5)
            assert s.recv(1) == b""  # the server just closes the cancel connection
        assert c.execute("select 2").fetchone() == (2,)


def test_concurrent_sessions(server, table_name: str) -> None:  # type: ignore[no-untyped-def]
    with server.connect() as c:
        c.execute(f"create table {table_name} (worker int, n int)")
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            with server.connect() as c:
                c.execute(f"set application_name = {psycopg.sql.quote(f'w{worker}')}")
                for n in range(10):
                    c.execute(f"insert into {table_name} values (%s, %s)", [worker, n])
                got = c.execute(
                    f"select count(*) from {table_name} where worker = %s", [worker]
                ).fetchone()
                assert got == (10,)
                assert c.execute("show application_name").fetchone() == (f"w{worker}",)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with server.connect() as c:
        assert c.execute(f"select count(*) from {table_name}").fetchone() == (160,)


def test_long_query_does_not_block_other_sessions(server) -> None:  # type: ignore[no-untyped-def]
    with server.connect() as slow, server.connect() as fast:
        timer = threading.Timer(1.5, slow.cancel_safe)
        timer.start()
        done = threading.Event()

        def run_slow() -> None:
            with pytest.raises(psycopg.errors.QueryCanceled):
                slow.execute(LONG_QUERY)
            done.set()

        t = threading.Thread(target=run_slow)
        t.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert fast.execute("select 1").fetchone() == (1,)
        assert time.monotonic() - started < 1.0
        t.join(15)
        timer.cancel()
        assert done.is_set()
