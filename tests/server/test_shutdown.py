"""Clean shutdown on SIGTERM/SIGINT: prompt exit 0, clients told, data kept."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly_and_data_survives(server_factory, tmp_path, sig) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "data"
    srv = server_factory(data_dir=data_dir)
    with srv.connect() as c:
        c.execute("create table kept (id int, v varchar)")
        c.execute("insert into kept values (1, 'a'), (2, 'b')")
    idle = srv.connect()
    busy = srv.connect()
    busy_error: list[BaseException] = []

    def run_long() -> None:
        try:
            busy.execute(
                "select count(*) from generate_series(1, 300000) a(x),"
                " generate_series(1, 300000) b(y) where x + y = 7"
            )
        except BaseException as exc:  # the server goes away under it
            busy_error.append(exc)

    t = threading.Thread(target=run_long)
    t.start()
    time.sleep(0.5)
    started = time.monotonic()
    assert srv.stop(sig, timeout=15) == 0, srv.output()
    assert time.monotonic() - started < 10
    t.join(10)
    assert busy_error and isinstance(busy_error[0], psycopg.Error)
    with pytest.raises(psycopg.OperationalError):
        idle.execute("select 1")
    idle.close()
    busy.close()
    assert "Traceback" not in srv.output()

    again = server_factory(data_dir=data_dir)
    with again.connect() as c:
        assert c.execute("select id, v from kept order by id").fetchall() == [(1, "a"), (2, "b")]
    assert again.stop() == 0


def test_port_in_use_is_a_clear_error(server, server_factory) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "rivulet", "playground", "--port", str(server.port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot serve on" in proc.stdout


def test_sigterm_stops_busy_server_within_5_s_and_loses_nothing_committed(
    server_factory, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Whatever runs when SIGTERM comes - a heavy SELECT, a foreground CREATE MATERIALIZED
    VIEW still backfilling, a stream of INSERTs, a COPY, a background backfill - the
    server exits within 5 s; statements under way fail with 57P01 (or see their
    connection closed); a restart has every acknowledged write and the MVs agree."""
    data_dir = tmp_path / "data"
    srv = server_factory(data_dir=data_dir)
    with srv.connect() as c:
        c.execute("CREATE TABLE big (id BIGINT PRIMARY KEY, v INT)")
        c.execute("INSERT INTO big SELECT i, i % 100 FROM generate_series(1, 200000) AS g(i)")
        c.execute("CREATE TABLE w (id BIGINT PRIMARY KEY, v INT)")
        c.execute(
            "CREATE MATERIALIZED VIEW wm AS SELECT v % 10 AS k, count(*) AS n FROM w GROUP BY k"
        )
        c.execute("SET background_ddl = true")
        c.execute(
            "CREATE MATERIALIZED VIEW bg WITH (backfill_rate_limit = 1000) AS"
            " SELECT v, count(*) AS n FROM big GROUP BY v"
        )
    errors: dict[str, BaseException] = {}
    acknowledged: list[int] = []
    started = threading.Event()

    def heavy() -> None:
        with srv.connect() as c:
            try:
                c.execute(
                    "SELECT count(*) FROM generate_series(1, 300000) a(x),"
                    " generate_series(1, 300000) b(y) WHERE x + y = 7"
                )
            except BaseException as exc:
                errors["heavy"] = exc

    def create_mv() -> None:
        with srv.connect() as c:
            try:
                c.execute(
                    "CREATE MATERIALIZED VIEW fg WITH (backfill_rate_limit = 1000) AS"
                    " SELECT id, v FROM big"
                )
            except BaseException as exc:
                errors["create"] = exc

    def inserts() -> None:
        with srv.connect() as c:
            i = 0
            try:
                while True:
                    c.execute("INSERT INTO w VALUES (%s, %s)", [i, i])
                    acknowledged.append(i)
                    i += 1
                    started.set()
            except BaseException as exc:
                errors["insert"] = exc

    def copy() -> None:
        with srv.connect() as c:
            try:
                with c.cursor().copy("COPY big FROM STDIN") as cp:
                    for i in range(10_000_000):
                        cp.write(f"{1_000_000 + i}\t{i % 100}\n")
            except BaseException as exc:
                errors["copy"] = exc

    threads = [threading.Thread(target=f, daemon=True) for f in (heavy, create_mv, inserts, copy)]
    for t in threads:
        t.start()
    assert started.wait(30)
    time.sleep(1.0)
    begun = time.monotonic()
    assert srv.stop(signal.SIGTERM, timeout=15) == 0, srv.output()
    took = time.monotonic() - begun
    for t in threads:
        t.join(10)
    assert took < 5.0, took
    assert set(errors) == {"heavy", "create", "insert", "copy"}, errors
    for name in ("heavy", "create", "insert"):
        exc = errors[name]
        assert isinstance(exc, psycopg.Error), (name, exc)
        assert getattr(exc, "sqlstate", None) in ("57P01", None), (name, exc)
    assert "Traceback" not in srv.output()

    again = server_factory(data_dir=data_dir)
    with again.connect() as c:
        stored = {r[0] for r in c.execute("SELECT id FROM w").fetchall()}
        assert set(acknowledged) <= stored
        c.execute("ALTER MATERIALIZED VIEW bg SET BACKFILL_RATE_LIMIT = DEFAULT")
        c.execute("WAIT")
        assert c.execute("SHOW JOBS").fetchall() == []
        got = sorted(c.execute("SELECT * FROM wm").fetchall())
        want = sorted(c.execute("SELECT v % 10 AS k, count(*) FROM w GROUP BY k").fetchall())
        assert got == want
        # The COPY never finished: none of its rows is there.
        assert c.execute("SELECT count(*) FROM big WHERE id > 1000000").fetchone() == (0,)
    assert again.stop() == 0
