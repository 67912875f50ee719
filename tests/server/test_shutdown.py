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
