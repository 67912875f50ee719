"""A throwaway PostgreSQL to compare Rivulet with, and the helper that compares them.

``start_postgres`` runs ``initdb`` into a fresh temporary directory and starts ``postgres``
listening on 127.0.0.1 only (a free port, unix sockets in that directory, fsync off unless
asked for);
``PostgresServer.stop`` shuts it down and removes the directory. PostgreSQL refuses to run
as root: as root, both run as the ``postgres`` user (``setpriv``), who owns the directory.

``run_both`` sends the same statements to Rivulet and to PostgreSQL over two psycopg
connections and returns each side's outcome: the rows as the server's text (every type is
read as text, so ``2024-01-01 00:00:00-05`` is compared as written, not as an instant), or
the SQLSTATE, message and context of the error. ``assert_same`` checks that the last
statement's outcomes agree.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.types.string import TextLoader

PG_MAJOR = "15"
_START_TIMEOUT = 30.0
_UNPRIVILEGED_USER = "postgres"


def find_pg_bin() -> Path | None:
    """The directory of PostgreSQL 15's server programs (Debian's layout first)."""
    candidates = [
        f"/usr/lib/postgresql/{PG_MAJOR}/bin",
        *sorted(glob.glob("/usr/lib/postgresql/*/bin")),
    ]
    for d in candidates:
        if os.access(os.path.join(d, "initdb"), os.X_OK):
            return Path(d)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class PostgresServer:
    proc: subprocess.Popen[bytes]
    port: int
    base_dir: Path
    user: str
    host: str = "127.0.0.1"

    def dsn(self, **extra: str) -> str:
        return psycopg.conninfo.make_conninfo(
            host=self.host,
            port=str(self.port),
            user=self.user,
            dbname="postgres",
            connect_timeout="10",
            **extra,
        )

    def connect(self, **kwargs: object) -> psycopg.Connection:
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn(), **kwargs)  # type: ignore[arg-type]

    def asyncpg_args(self) -> dict[str, object]:
        """Keyword arguments of ``asyncpg.connect`` for this server."""
        return {"host": self.host, "port": self.port, "user": self.user, "database": "postgres"}

    def log(self) -> str:
        path = self.base_dir / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then remove the directory."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)


def _as_user(user: str | None) -> list[str]:
    """The prefix that runs a program as ``user`` (nothing when not root)."""
    if user is None:
        return []
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]


def start_postgres(port: int, *, durable: bool = False) -> PostgresServer:
    """A fresh PostgreSQL cluster on 127.0.0.1:``port``. Raises ``RuntimeError`` with the
    reason when PostgreSQL is not installed or does not start. ``durable``: commits are
    synced (PostgreSQL's defaults, for benchmarks), else not (tests)."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on PATH);"
            " install the distribution's postgresql package"
        )
    run_as = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_UNPRIVILEGED_USER)
        except KeyError:
            raise RuntimeError(
                f"running as root and there is no {_UNPRIVILEGED_USER!r} user to run PostgreSQL as"
            ) from None
        run_as = _UNPRIVILEGED_USER
    # Not under pytest's tmp dir: that is private to root, and postgres must reach it.
    base = Path(tempfile.mkdtemp(prefix="rivulet-pg-"))
    data = base / "data"
    try:
        if run_as is not None:
            info = pwd.getpwnam(run_as)
            os.chown(base, info.pw_uid, info.pw_gid)
        superuser = run_as or pwd.getpwuid(os.geteuid()).pw_name
        env = {**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}
        init = subprocess.run(
            [
                *_as_user(run_as),
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                superuser,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            ],
            capture_output=True,
            env=env,
            cwd=base,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.decode(errors='replace')}")
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(port),
            "unix_socket_directories": str(base),
            "fsync": "on" if durable else "off",
            "synchronous_commit": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off",
            "timezone": "UTC",
            "datestyle": "ISO, MDY",
            "lc_messages": "C",
            "max_connections": "40",
            "shared_buffers": "16MB",
        }
        cmd = [*_as_user(run_as), str(bin_dir / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            cmd += ["-c", f"{name}={value}"]
        with open(base / "postgres.log", "wb") as log:
            # setpriv execs postgres: the child is the postmaster itself.
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=base)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    server = PostgresServer(proc, port, base, superuser)
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if proc.poll() is not None:
            log_text = server.log()
            server.stop()
            raise RuntimeError(f"postgres exited with {proc.returncode}:\n{log_text}")
        with contextlib.suppress(psycopg.OperationalError), server.connect():
            return server
        if time.monotonic() > deadline:
            log_text = server.log()
            server.stop()
            raise RuntimeError(
                f"postgres did not accept connections in {_START_TIMEOUT}s:\n{log_text}"
            )
        time.sleep(0.1)


# ----------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Outcome:
    """What one statement did: its columns and rows as text, or its error."""

    columns: tuple[str, ...] | None = None
    rows: tuple[tuple[str | None, ...], ...] | None = None
    sqlstate: str | None = None
    message: str | None = None
    context: str | None = None

    @property
    def failed(self) -> bool:
        return self.sqlstate is not None

    def __str__(self) -> str:
        if self.failed:
            ctx = f" (context: {self.context})" if self.context else ""
            return f"ERROR {self.sqlstate}: {self.message}{ctx}"
        return f"{self.columns} {self.rows}"


def read_as_text(conn: psycopg.Connection, oids: Sequence[int]) -> None:
    """Make ``conn`` return every value of these types as the server's text."""
    for oid in oids:
        conn.adapters.register_loader(oid, TextLoader)


def pg_type_oids(pg: psycopg.Connection) -> list[int]:
    return [int(r[0]) for r in pg.execute("SELECT oid FROM pg_type").fetchall()]


def run_statement(
    conn: psycopg.Connection,
    sql: str,
    *,
    copy_data: bytes | None = None,
) -> Outcome:
    """Run one statement (``COPY ... FROM STDIN`` with ``copy_data``) and say what it did."""
    try:
        with conn.cursor() as cur:
            if copy_data is not None:
                with cur.copy(sql) as copy:
                    copy.write(copy_data)
                return Outcome(columns=(), rows=((str(cur.rowcount),),))
            cur.execute(sql)
            if cur.description is None:
                return Outcome(columns=(), rows=())
            columns = tuple(d.name for d in cur.description)
            return Outcome(columns=columns, rows=tuple(tuple(r) for r in cur.fetchall()))
    except psycopg.Error as exc:
        diag = exc.diag
        return Outcome(
            sqlstate=diag.sqlstate or "?????",
            message=diag.message_primary or str(exc),
            context=diag.context,
        )


@dataclass
class Pair:
    """A Rivulet connection and a PostgreSQL connection driven in step."""

    rivulet: psycopg.Connection
    postgres: psycopg.Connection

    def run(self, sql: str, *, copy_data: bytes | None = None) -> tuple[Outcome, Outcome]:
        return (
            run_statement(self.rivulet, sql, copy_data=copy_data),
            run_statement(self.postgres, sql, copy_data=copy_data),
        )

    def setup(self, *statements: str) -> None:
        """Statements both sides must accept (a failure on either is a test error)."""
        for sql in statements:
            ours, theirs = self.run(sql)
            assert not ours.failed and not theirs.failed, (
                f"setup statement failed: {sql}\n  rivulet:    {ours}\n  postgresql: {theirs}"
            )

    def assert_same(
        self,
        sql: str,
        *,
        copy_data: bytes | None = None,
        messages: bool = False,
        normalize: Callable[[Outcome], Outcome] | None = None,
    ) -> Outcome:
        """Run ``sql`` on both; the rows (and column names) must be equal, or both must fail
        with the same SQLSTATE (and, with ``messages``, the same message and context).
        Returns Rivulet's outcome."""
        ours, theirs = self.run(sql, copy_data=copy_data)
        if normalize is not None:
            ours, theirs = normalize(ours), normalize(theirs)
        report = f"{sql}\n  rivulet:    {ours}\n  postgresql: {theirs}"
        if ours.failed or theirs.failed:
            assert ours.sqlstate == theirs.sqlstate, report
            if messages:
                assert ours.message == theirs.message, report
                assert (ours.context or "") == (theirs.context or ""), report
        else:
            assert ours.rows == theirs.rows, report
            assert ours.columns == theirs.columns, report
        return ours
