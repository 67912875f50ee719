"""Heavy queries cannot freeze the server: cheap statements and writes go on beside them,
a query whose client left is interrupted, and heavy work is admitted a few at a time."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from conftest import ServerFactory, ServerProcess
from wire_client import WireClient, cstring, message

# Runs for minutes: tests cancel it.
HEAVY = (
    "SELECT count(*) FROM generate_series(1, 300000) AS a(x), generate_series(1, 300000)"
    " AS b(y) WHERE x + y = 7"
)


@pytest.fixture
def own_server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory()


class HeavyClients:
    """``n`` connections, each running HEAVY in a thread until cancelled."""

    def __init__(self, server: ServerProcess, n: int) -> None:
        self.conns = [server.connect() for _ in range(n)]
        self.outcomes: list[BaseException | None] = []
        self.threads = [threading.Thread(target=self._run, args=(c,)) for c in self.conns]

    def _run(self, conn: psycopg.Connection) -> None:
        try:
            conn.execute(HEAVY)
            self.outcomes.append(None)
        except BaseException as exc:
            self.outcomes.append(exc)

    def start(self) -> HeavyClients:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        for c in self.conns:
            c.cancel_safe()
        for t in self.threads:
            t.join(30)
        for c in self.conns:
            c.close()


def wait_running(conn: psycopg.Connection, pattern: str, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        (n,) = conn.execute(  # type: ignore[misc]
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s",
            [pattern],
        ).fetchone()
        if n == count:
            return
        assert time.monotonic() < deadline, f"{n} statements like {pattern!r} active, not {count}"
        time.sleep(0.05)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_heavy_selects_do_not_delay_select_1_or_inserts(own_server: ServerProcess) -> None:
    with own_server.connect() as con:
        con.execute("CREATE TABLE pings (id BIGINT PRIMARY KEY, at TIMESTAMPTZ)")
        heavy = HeavyClients(own_server, 4).start()
        try:
            wait_running(con, "SELECT count(*) FROM generate_series%", 4)
            selects: list[float] = []
            inserts: list[float] = []
            deadline = time.monotonic() + 8
            i = 0
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                assert con.execute("SELECT 1").fetchone() == (1,)
                selects.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                con.execute("INSERT INTO pings VALUES (%s, now())", [i])
                inserts.append(time.perf_counter() - t0)
                i += 1
            # All four were still running: what was measured ran beside them.
            wait_running(con, "SELECT count(*) FROM generate_series%", 4, timeout=1)
            cancelled = con.execute(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'SELECT count(*) FROM generate_series%'"
            ).fetchall()
            assert cancelled == [(True,)] * 4
        finally:
            heavy.stop()
        assert con.execute("SELECT count(*) FROM pings").fetchone() == (i,)
    assert len(heavy.outcomes) == 4, heavy.outcomes
    assert all(isinstance(o, psycopg.errors.QueryCanceled) for o in heavy.outcomes)
    print(
        f"\nSELECT 1 p50 {statistics.median(selects) * 1000:.1f} ms p99 {p99(selects) * 1000:.1f} ms;"
        f" INSERT p50 {statistics.median(inserts) * 1000:.1f} ms p99 {p99(inserts) * 1000:.1f} ms"
    )
    assert p99(selects) < 1.0
    assert p99(inserts) < 3.0


def test_query_of_a_vanished_client_is_interrupted(own_server: ServerProcess) -> None:
    """Clients that close their socket mid-query free their query threads: with room
    for two heavy statements, two vanished ones must not block the next."""
    with own_server.connect() as con:
        con.execute("ALTER SYSTEM SET max_concurrent_queries = 2")
        con.execute("CREATE TABLE t (v INT)")
        con.execute("INSERT INTO t VALUES (1), (2)")
        gone = []
        for _ in range(2):
            client = WireClient(own_server.host, own_server.port)
            client.send(message(b"Q", cstring(HEAVY)))
            gone.append(client)
        wait_running(con, "SELECT count(*) FROM generate_series%", 2)
        for client in gone:
            client.sock.close()
        wait_running(con, "SELECT count(*) FROM generate_series%", 0, timeout=5)
        started = time.monotonic()
        assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert time.monotonic() - started < 5
        (listed,) = con.execute("SELECT count(*) FROM pg_stat_activity").fetchone()  # type: ignore[misc]
        assert listed == 1  # the vanished sessions are gone too


@pytest.fixture
def two_slots(own_server: ServerProcess) -> Iterator[ServerProcess]:
    with own_server.connect() as con:
        con.execute("ALTER SYSTEM SET max_concurrent_queries = 2")
        con.execute("CREATE TABLE t (v INT)")
        con.execute("INSERT INTO t VALUES (1), (2), (3)")
    yield own_server


def test_heavy_work_waits_its_turn_and_light_work_never_waits(two_slots: ServerProcess) -> None:
    heavy = HeavyClients(two_slots, 2).start()
    try:
        with two_slots.connect() as con, two_slots.connect() as waiting:
            wait_running(con, "SELECT count(*) FROM generate_series%", 2)
            # Statements over constants and the catalog do not wait for a turn.
            started = time.monotonic()
            assert con.execute("SELECT 1").fetchone() == (1,)
            assert con.execute("SELECT count(*) > 0 FROM pg_catalog.pg_class").fetchone() == (True,)
            con.execute("SET application_name = 'light'")
            assert time.monotonic() - started < 2
            # A statement that reads a table waits its turn ... (timed out meanwhile)
            waiting.execute("SET statement_timeout = 500")
            with pytest.raises(psycopg.errors.QueryCanceled) as info:
                waiting.execute("SELECT sum(v) FROM t")
            assert "statement timeout" in str(info.value)
            waiting.execute("SET statement_timeout = 0")
            done = threading.Event()
            result: list[object] = []

            def read() -> None:
                result.append(waiting.execute("SELECT sum(v) FROM t").fetchone())
                done.set()

            reader = threading.Thread(target=read)
            reader.start()
            assert not done.wait(1.0)  # ... until a heavy one ends
            heavy.conns[0].cancel_safe()
            assert done.wait(10)
            reader.join()
            assert result == [(6,)]
            # More room: the limit is a system parameter, applied at once.
            con.execute("ALTER SYSTEM SET max_concurrent_queries = 8")
            assert con.execute("SELECT count(*) FROM t").fetchone() == (3,)
    finally:
        heavy.stop()
