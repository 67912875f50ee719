"""The ``rivulet`` command line.

``rivulet playground`` runs an embedded instance that serves the PostgreSQL protocol.
Further command groups (``rivulet ctl ...``) hang off the same ``cli`` group.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING, NoReturn

import click
from rich.console import Console
from rich.panel import Panel

from rivulet.common.version import __version__

if TYPE_CHECKING:
    from rivulet.engine import Engine

console = Console(stderr=False, highlight=False)
_background: set[asyncio.Task[None]] = set()

# ``--demo``: the Nexmark auction streams (1,000 events a second each; event time runs ten
# times faster than the clock, so windows close every second) and views over them.
_DEMO_GAP = "nexmark.min.event.gap.in.ns = '1000000'"
DEMO_SETUP = [
    f"CREATE SOURCE IF NOT EXISTS person WITH (connector = 'nexmark',"
    f" nexmark.table.type = 'Person', {_DEMO_GAP})",
    f"CREATE SOURCE IF NOT EXISTS auction WITH (connector = 'nexmark',"
    f" nexmark.table.type = 'Auction', {_DEMO_GAP})",
    f"CREATE SOURCE IF NOT EXISTS bid WITH (connector = 'nexmark',"
    f" nexmark.table.type = 'Bid', {_DEMO_GAP})",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS bids_per_auction AS"
    " SELECT auction, count(*) AS bids, max(price) AS top_price FROM bid GROUP BY auction",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS top_bidders AS"
    " SELECT bidder, count(*) AS bids FROM bid GROUP BY bidder ORDER BY bids DESC LIMIT 10",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS category_prices AS"
    " SELECT a.category, count(*) AS bids, avg(b.price)::BIGINT AS avg_price,"
    " max(b.price) AS max_price FROM bid b JOIN auction a ON b.auction = a.id"
    " GROUP BY a.category",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS auctions_by_state AS"
    " SELECT p.state, count(*) AS auctions FROM auction a JOIN person p ON a.seller = p.id"
    " GROUP BY p.state",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS bids_per_window AS"
    " SELECT window_start, count(*) AS bids, max(price) AS top_price"
    " FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start",
]
DEMO_QUERIES = [
    "SELECT * FROM bids_per_auction ORDER BY bids DESC LIMIT 5;",
    "SELECT * FROM top_bidders ORDER BY bids DESC;",
    "SELECT * FROM category_prices ORDER BY category;",
    "SELECT * FROM auctions_by_state ORDER BY auctions DESC;",
    "SELECT * FROM bids_per_window ORDER BY window_start DESC LIMIT 5;",
    "SHOW MATERIALIZED VIEWS;",
]


async def setup_demo(engine: Engine) -> list[str]:
    """Create the demo's sources and views (existing ones are kept). Returns a line per
    statement that failed; the others stand."""
    session = engine.new_session()
    failures = []
    try:
        for sql in DEMO_SETUP:
            try:
                await session.execute(sql)
            except Exception as exc:  # report and go on: the rest of the demo still works
                failures.append(f"{sql.split(' AS ')[0]}: {exc}")
    finally:
        session.close()
    return failures


async def _announce_demo(engine: Engine, connect: str) -> None:
    failures = await setup_demo(engine)
    for line in failures:
        console.print(f"[yellow]demo:[/yellow] {line}")
    queries = "\n".join(f"  [cyan]{q}[/cyan]" for q in DEMO_QUERIES)
    console.print(
        Panel.fit(
            "Nexmark auctions are streaming into sources [bold]person[/bold], [bold]auction[/bold]"
            " and [bold]bid[/bold];\nmaterialized views over them update every second.\n\n"
            f"connect with  [cyan]{connect}[/cyan]\nand try:\n{queries}",
            title="demo",
        )
    )
    sys.stdout.flush()


def _fail(error: Exception) -> NoReturn:
    """Report an error the user can act on - one line, then its hint - and exit 1 (no
    traceback: it is not a bug)."""
    from rivulet.common.errors import Error

    message = error.message if isinstance(error, Error) else str(error)
    click.echo(f"error: {' '.join(message.split())}", err=True)
    hint = error.hint if isinstance(error, Error) else None
    if hint:
        click.echo(f"hint: {' '.join(hint.split())}", err=True)
    raise SystemExit(1)


def _read_password_file(path: str) -> str:
    """The first line of a password file (a trailing newline is not part of it)."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--password-file"
        ) from None
    return line.rstrip("\r\n")


def _is_loopback(host: str) -> bool:
    """Whether every address ``host`` stands for is a loopback one (127.0.0.0/8, ::1)."""
    import ipaddress
    import socket

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rivulet")
def cli() -> None:
    """Rivulet: a streaming SQL database with online-reschedulable materialized views."""


@cli.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory to persist to (in memory when omitted).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=4566, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--password",
    envvar="RIVULET_PASSWORD",
    default=None,
    help="Require this password (SCRAM-SHA-256). Prefer RIVULET_PASSWORD or --password-file:"
    " a password on the command line is visible to every local user in the process list.",
)
@click.option(
    "--password-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Require the password written in this file (its first line).",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=False,
    help="Allow listening on a non-loopback address without a password.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Compute workers [default: 1, or as stored in the data dir].",
)
@click.option(
    "--slots",
    type=click.IntRange(1, 256),
    default=None,
    help="Slots per worker [default: the CPU cores, or as stored in the data dir].",
)
@click.option(
    "--compute",
    type=click.Choice(["in-process", "processes"]),
    default="in-process",
    show_default=True,
    help="Where the workers run: in this process, or each in a compute node process of its own.",
)
@click.option(
    "--admin-port",
    type=int,
    default=5691,
    show_default=True,
    help="Port of the admin endpoint on 127.0.0.1 that `rivulet ctl` talks to (0: off).",
)
@click.option(
    "--demo",
    is_flag=True,
    default=False,
    help="Create nexmark sources and a few materialized views over them, live at once.",
)
def playground(
    data_dir: str | None,
    host: str,
    port: int,
    password: str | None,
    password_file: str | None,
    insecure: bool,
    log_level: str,
    workers: int | None = None,
    slots: int | None = None,
    compute: str = "in-process",
    admin_port: int = 5691,
    demo: bool = False,
) -> None:
    """Run an embedded instance serving the PostgreSQL protocol (Ctrl-C stops it)."""
    from rivulet.engine import EngineOptions
    from rivulet.server.pgwire import PgServer, run_playground

    if password_file is not None:
        if password is not None:
            raise click.UsageError(
                "give the password one way: --password-file, or --password/RIVULET_PASSWORD"
            )
        password = _read_password_file(password_file)
    if password is not None and not password:
        raise click.UsageError("the password is empty")
    if password is None and not insecure and not _is_loopback(host):
        raise click.UsageError(
            f"refusing to listen on {host} without a password: anyone who can reach it could"
            " read and change every table.\nSet RIVULET_PASSWORD or --password-file, listen on"
            " 127.0.0.1, or pass --insecure if this network is trusted."
        )

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    def ready(server: PgServer) -> None:
        bound_host, bound_port = server.address
        where = data_dir if data_dir else "in memory (nothing is kept after exit)"
        auth = "SCRAM-SHA-256 password" if password else "none (trust)"
        nodes = server.engine.cluster.workers
        cluster = f"{len(nodes)} worker(s) x {nodes[0].slots} slot(s)" if nodes else "none"
        if compute == "processes":
            cluster += ", one process each"
        endpoint = getattr(server.admin, "address", None)
        admin = f"http://{endpoint[0]}:{endpoint[1]} (rivulet ctl)" if endpoint else "off"
        token = getattr(server.admin, "token_path", None)
        console.print(
            Panel.fit(
                f"[bold]Rivulet {__version__}[/bold] playground\n"
                f"listening on  {bound_host}:{bound_port}\n"
                f"data          {where}\n"
                f"auth          {auth}\n"
                f"compute       {cluster}\n"
                f"admin         {admin}\n\n"
                f"connect with  [cyan]psql -h {bound_host} -p {bound_port} -U root -d dev[/cyan]\n"
                "stop with     Ctrl-C",
                title="rivulet",
            )
        )
        if token is not None:  # unwrapped, to be copied whole
            console.print(f"admin token: {token}", soft_wrap=True)
        sys.stdout.flush()
        if demo:
            task = asyncio.get_running_loop().create_task(
                _announce_demo(
                    server.engine, f"psql -h {bound_host} -p {bound_port} -U root -d dev"
                )
            )
            _background.add(task)
            task.add_done_callback(_background.discard)

    try:
        run_playground(
            data_dir, host, port, password, on_ready=ready,
            options=EngineOptions(workers=workers, slots=slots, compute=compute),
            admin_port=admin_port or None,
        )  # fmt: skip
    except OSError as exc:
        console.print(f"[red]error:[/red] cannot serve on {host}:{port}: {exc.strerror or exc}")
        raise SystemExit(1) from None
    except Exception as exc:  # a bad data directory and the like: say it plainly
        from rivulet.common.errors import Error

        if isinstance(exc, Error):
            _fail(exc)
        raise
    console.print("rivulet stopped")


class AdminTarget:
    """Where the admin endpoint is, and where its token is read from."""

    def __init__(self, url: str, token_file: str, *, explicit: bool) -> None:
        self.url = url
        self.token_file = token_file
        self.explicit = explicit

    def token(self) -> str | None:
        try:
            with open(self.token_file, encoding="ascii") as f:
                return f.read().strip() or None
        except FileNotFoundError:
            if self.explicit:
                _fail(RuntimeError(f"the token file {self.token_file} does not exist"))
            return None
        except (OSError, UnicodeDecodeError) as exc:
            _fail(RuntimeError(f"cannot read the token file {self.token_file}: {exc}"))


@cli.group()
@click.option(
    "--admin",
    "admin_url",
    default="http://127.0.0.1:5691",
    show_default=True,
    envvar="RIVULET_ADMIN",
    help="The admin endpoint of the running server (also RIVULET_ADMIN).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="RIVULET_ADMIN_TOKEN_FILE",
    help="The server's admin token file (its banner shows the path; also"
    " RIVULET_ADMIN_TOKEN_FILE). Default: the one in --data-dir, else the one an in-memory"
    " server on that port writes.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The data directory of the server: its admin token is read from there.",
)
@click.pass_context
def ctl(ctx: click.Context, admin_url: str, token_file: str | None, data_dir: str | None) -> None:
    """Operate a running server (`rivulet playground`). Requests carry the server's admin
    token, read from a file only its owner can read."""
    from urllib.parse import urlsplit

    from rivulet.server.admin import token_path

    url = admin_url.rstrip("/")
    if token_file is not None:
        path = token_file
    else:
        try:
            port = urlsplit(url).port or 80
        except ValueError:
            raise click.BadParameter(f"not a URL: {admin_url}", param_hint="--admin") from None
        path = str(token_path(data_dir, port))
    ctx.obj = AdminTarget(url, path, explicit=token_file is not None)


@ctl.group()
def worker() -> None:
    """Compute workers: list, add, remove (jobs are rescheduled online)."""


def _admin_call(
    target: AdminTarget, path: str, method: str, body: dict[str, object] | None = None
) -> object:
    import json
    import urllib.error
    import urllib.request

    url = f"{target.url}{path}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    token = target.token()
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            payload = json.loads(exc.read() or b"{}")
        except ValueError:
            payload = {}
        if exc.code == 401:
            found = "was not accepted" if token else "was not found"
            console.print(
                f"[red]error:[/red] the admin endpoint at {target.url} requires the server's"
                f" admin token; the one in {target.token_file} {found}\n"
                'HINT: the server\'s banner shows its token file ("admin token"): pass it'
                " with --token-file, or --data-dir for a server with a data directory.",
                soft_wrap=True,
            )
            raise SystemExit(1) from None
        message = payload.get("error", str(exc))
        if payload.get("sqlstate"):
            message = f"{payload['sqlstate']}: {message}"
        if payload.get("hint"):
            message += f"\nHINT: {payload['hint']}"
        console.print(f"[red]error:[/red] {message}")
        raise SystemExit(1) from None
    except OSError as exc:
        console.print(f"[red]error:[/red] cannot reach the admin endpoint at {url}: {exc}")
        raise SystemExit(1) from None


def _print_workers(workers: object) -> None:
    from rich.table import Table

    table = Table("id", "host", "slots", "actors")
    for w in workers:  # type: ignore[attr-defined]
        table.add_row(str(w["id"]), w["host"], str(w["slots"]), str(w["actors"]))
    console.print(table)


@worker.command("list")
@click.pass_obj
def worker_list(target: AdminTarget) -> None:
    """The workers, their slots and how many actors each runs."""
    _print_workers(_admin_call(target, "/workers", "GET"))


@worker.command("add")
@click.option("--slots", type=click.IntRange(1, 256), required=True, help="Slots it offers.")
@click.pass_obj
def worker_add(target: AdminTarget, slots: int) -> None:
    """Add a worker; adaptive jobs spread onto it."""
    with console.status("rescheduling jobs onto the new worker..."):
        result = _admin_call(target, "/workers", "POST", {"slots": slots})
    console.print(f"worker {result['id']} added")  # type: ignore[index]
    _print_workers(result["workers"])  # type: ignore[index]


@worker.command("remove")
@click.argument("worker_id", type=int)
@click.pass_obj
def worker_remove(target: AdminTarget, worker_id: int) -> None:
    """Remove a worker; its actors move to the others."""
    with console.status(f"moving the actors of worker {worker_id}..."):
        result = _admin_call(target, f"/workers/{worker_id}", "DELETE")
    console.print(f"worker {worker_id} removed")
    _print_workers(result["workers"])  # type: ignore[index]


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
