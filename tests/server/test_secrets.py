"""Files and secrets: a private data directory, passwords kept off the command line and
out of errors and logs, no open server on the network by mistake, slow failed logins."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from conftest import ServerFactory, free_port
from wire import error_fields, message, read_until, startup_packet

PASSWORD = "correct horse"


def _modes(directory: Path) -> dict[str, int]:
    return {
        str(p.relative_to(directory)): stat.S_IMODE(p.lstat().st_mode)
        for p in [directory, *directory.rglob("*")]
    }


def test_the_data_directory_is_private(server_factory: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = server_factory(data_dir=data)
    with srv.connect() as c:
        c.execute("CREATE TABLE t (v INT)")
        c.execute("INSERT INTO t SELECT * FROM generate_series(1, 1000)")
        modes = _modes(data)  # while it runs: the WAL is there too
    assert srv.stop() == 0
    modes |= _modes(data)
    assert modes["."] == 0o700
    assert {"rivulet.duckdb", "LOCK", "EPOCH"} <= set(modes), modes
    loose = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not loose, loose


def test_a_loose_data_directory_is_tightened_with_a_warning(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = server_factory(data_dir=data)
    with srv.connect() as c:
        c.execute("CREATE TABLE t (v INT)")
        c.execute("INSERT INTO t VALUES (1)")
    assert srv.stop() == 0
    # As an earlier version left it.
    os.chmod(data, 0o755)
    for name in ("rivulet.duckdb", "EPOCH", "LOCK"):
        os.chmod(data / name, 0o644)
    srv = server_factory(data_dir=data)
    assert "was open to other users (mode 755): made private" in srv.wait_output("stop with")
    with srv.connect() as c:
        assert c.execute("SELECT v FROM t").fetchall() == [(1,)]
    assert not {n: m for n, m in _modes(data).items() if m & 0o077}


def _playground(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "RIVULET_PASSWORD"}
    return subprocess.run(
        [sys.executable, "-m", "rivulet", "playground", "--admin-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=base | (env or {}),
    )


def test_help_steers_away_from_a_password_on_the_command_line() -> None:
    out = _playground("--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "Prefer RIVULET_PASSWORD or --password-file" in text
    assert "visible to every local user in the process list" in text
    assert "--insecure" in text


def test_password_file(server_factory: ServerFactory, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    srv = server_factory(args=("--password-file", str(secret)))
    assert "SCRAM-SHA-256 password" in srv.wait_output("stop with")
    with psycopg.connect(srv.dsn(password=PASSWORD), autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(srv.dsn(password="nope"))
    both = _playground("--password-file", str(secret), env={"RIVULET_PASSWORD": "x"})
    assert both.returncode == 2 and "give the password one way" in both.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    out = _playground("--password-file", str(empty), "--port", str(free_port()))
    assert out.returncode == 2 and "the password is empty" in out.stderr


def test_no_open_server_on_the_network_without_a_password() -> None:
    for host in ("0.0.0.0", "::"):
        out = _playground("--host", host, "--port", str(free_port()))
        assert out.returncode == 2, out
        assert f"refusing to listen on {host} without a password" in out.stderr
        assert "--insecure" in out.stderr
        assert "Traceback" not in out.stderr


def _sasl_started(port: int, **params: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(startup_packet(**params))
    assert b"SCRAM-SHA-256" in read_until(sock, b"SCRAM-SHA-256\0")
    return sock


def test_a_cleartext_password_is_never_echoed(server_factory: ServerFactory) -> None:
    srv = server_factory(password=PASSWORD, args=("--log-level", "debug"))
    secret = "hunter2-cleartext"
    # A PasswordMessage where the server asked for SASL.
    with _sasl_started(srv.port) as sock:
        sock.sendall(message(b"p", secret.encode() + b"\0"))
        reply = read_until(sock, b"\0\0")
    fields = error_fields(reply)
    assert fields["S"] == "FATAL" and fields["C"] == "28000", reply
    assert "invalid SASL authentication mechanism" in fields["M"]
    assert secret.encode() not in reply
    # As SASL data, and as startup parameters.
    with _sasl_started(srv.port) as sock:
        body = b"SCRAM-SHA-256\0" + len(secret).to_bytes(4, "big") + secret.encode()
        sock.sendall(message(b"p", body))
        reply = read_until(sock, b"\0\0")
        assert error_fields(reply)["C"] == "28P01" and secret.encode() not in reply
    with _sasl_started(srv.port, password=secret, options=f"-c password={secret}") as sock:
        sock.sendall(message(b"p", secret.encode() + b"\0"))
        assert secret.encode() not in read_until(sock, b"\0\0")
    assert srv.stop() == 0
    assert secret not in srv.output()
    assert PASSWORD not in srv.output()


def test_failed_logins_are_delayed_without_holding_up_others(
    server_factory: ServerFactory,
) -> None:
    srv = server_factory(password=PASSWORD)
    with psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert ("auth_delay_ms", "500", "true") in c.execute("SHOW PARAMETERS").fetchall()
        c.execute("ALTER SYSTEM SET auth_delay_ms = 1500")
    took: list[float] = []

    def wrong() -> None:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(srv.dsn(password="wrong"))
        took.append(time.monotonic() - started)

    threads = [threading.Thread(target=wrong) for _ in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.3)
    # While those wait, a right login and a query go through at once.
    with psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert time.monotonic() - started < 1.4
    for t in threads:
        t.join()
    assert len(took) == 4 and min(took) >= 1.4, took
    # Concurrent, not one after another (that would be 6 s).
    assert time.monotonic() - started < 4.5, took
