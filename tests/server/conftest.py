"""Fixtures that run the real server: ``python -m rivulet playground`` in a subprocess.

``start_server`` is importable by other test modules that need a server of their own
(with a password, a data directory, or one they may kill).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from postgres_reference import Pair, PostgresServer, pg_type_oids, read_as_text, start_postgres
from psycopg.conninfo import make_conninfo

_START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """A playground server running as a child process."""

    proc: subprocess.Popen[bytes]
    port: int
    host: str = "127.0.0.1"
    password: str | None = None
    data_dir: str | None = None
    log_path: Path | None = field(default=None)

    def dsn(self, user: str = "root", dbname: str = "dev", **extra: str) -> str:
        parts = {
            "host": self.host,
            "port": str(self.port),
            "user": user,
            "dbname": dbname,
            "connect_timeout": "10",
            **extra,
        }
        if self.password is not None and "password" not in extra:
            parts["password"] = self.password
        return make_conninfo(**parts)

    def url(self, driver: str = "postgresql+psycopg") -> str:
        auth = f"root:{self.password}" if self.password else "root"
        return f"{driver}://{auth}@{self.host}:{self.port}/dev"

    def connect(self, **kwargs: object) -> psycopg.Connection:
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn(), **kwargs)  # type: ignore[arg-type]

    def asyncpg_args(self) -> dict[str, object]:
        """Keyword arguments of ``asyncpg.connect`` for this server."""
        return {"host": self.host, "port": self.port, "user": "root", "database": "dev",
                "password": self.password}  # fmt: skip

    def output(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def wait_output(self, text: str, timeout: float = 10.0) -> str:
        """The output once it contains ``text`` (the banner is printed just after the
        socket starts listening)."""
        deadline = time.monotonic() + timeout
        while text not in (out := self.output()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the server and wait for it; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(
                    f"server did not exit within {timeout}s of signal {sig}\n{self.output()}"
                ) from None
        return int(self.proc.returncode)


def _accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def start_server(
    tmp_dir: Path,
    *,
    password: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    port: int | None = None,
    args: tuple[str, ...] = (),
    preexec_fn: Callable[[], None] | None = None,
) -> ServerProcess:
    """Start ``rivulet playground`` and wait until it accepts connections.

    The password goes through ``RIVULET_PASSWORD`` so that it stays out of the process list.
    ``preexec_fn`` runs in the child before it starts (resource limits, say).
    """
    port = port or free_port()
    cmd = [sys.executable, "-m", "rivulet", "playground", "--port", str(port)]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    cmd += args
    if "--admin-port" not in args:  # tests start many servers: only those that ask get one
        cmd += ["--admin-port", "0"]
    env = {k: v for k, v in os.environ.items() if k != "RIVULET_PASSWORD"}
    if password is not None:
        env["RIVULET_PASSWORD"] = password
    tmp_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp_dir / f"server-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec_fn
        )
    server = ServerProcess(
        proc,
        port,
        password=password,
        data_dir=str(data_dir) if data_dir is not None else None,
        log_path=log_path,
    )
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}:\n{server.output()}")
        if _accepts(server.host, port):
            return server
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"server did not start within {_START_TIMEOUT}s:\n{server.output()}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One trust-auth, in-memory server shared by the whole session."""
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    code = srv.stop()
    assert code == 0, srv.output()


@pytest.fixture
def conn(server: ServerProcess) -> Iterator[psycopg.Connection]:
    """An autocommit psycopg connection to the shared server."""
    with server.connect() as c:
        yield c


_table_ids = iter(range(1, 1_000_000))


@pytest.fixture
def table_name() -> str:
    """A table name no other test uses (the shared server keeps every table)."""
    return f"t_{os.getpid()}_{next(_table_ids)}"


class ServerFactory:
    """Starts servers (``factory(password=..., data_dir=...)``) and stops the ones still
    running at teardown (SIGTERM, then SIGKILL)."""

    def __init__(self, tmp_dir: Path) -> None:
        self.tmp_dir = tmp_dir
        self.started: list[ServerProcess] = []

    def __call__(
        self,
        *,
        password: str | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        args: tuple[str, ...] = (),
        preexec_fn: Callable[[], None] | None = None,
    ) -> ServerProcess:
        srv = start_server(
            self.tmp_dir / f"srv{len(self.started)}",
            password=password,
            data_dir=data_dir,
            args=args,
            preexec_fn=preexec_fn,
        )
        self.started.append(srv)
        return srv

    def stop_all(self) -> None:
        for srv in self.started:
            if srv.proc.poll() is None:
                with contextlib.suppress(AssertionError):
                    srv.stop(timeout=10)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Servers of the test's own, stopped when the test ends."""
    factory = ServerFactory(tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def session_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerFactory]:
    """Servers that module-scoped fixtures share, stopped at the end of the session."""
    factory = ServerFactory(tmp_path_factory.mktemp("servers"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL 15 (``postgres_reference``), for the whole session; the
    tests that compare with it skip when PostgreSQL is not installed."""
    try:
        pg = start_postgres(free_port())
    except RuntimeError as exc:
        pytest.skip(f"no PostgreSQL to compare with: {exc}")
    yield pg
    pg.stop()


@pytest.fixture
def pg_pair(server: ServerProcess, postgres: PostgresServer) -> Iterator[Pair]:
    """A fresh connection to Rivulet and one to PostgreSQL, both reading values as text."""
    with server.connect() as ours, postgres.connect() as theirs:
        oids = pg_type_oids(theirs)
        read_as_text(ours, oids)
        read_as_text(theirs, oids)
        yield Pair(ours, theirs)
