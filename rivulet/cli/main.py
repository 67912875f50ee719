"""The ``rivulet`` command line.

``rivulet playground`` runs an embedded instance that serves the PostgreSQL protocol.
Further command groups (``rivulet ctl ...``) hang off the same ``cli`` group.
"""

from __future__ import annotations

import logging
import sys

import click
from rich.console import Console
from rich.panel import Panel

from rivulet.common.version import __version__

console = Console(stderr=False, highlight=False)


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
    help="Require this password (SCRAM-SHA-256); also read from RIVULET_PASSWORD.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
)
def playground(
    data_dir: str | None, host: str, port: int, password: str | None, log_level: str
) -> None:
    """Run an embedded instance serving the PostgreSQL protocol (Ctrl-C stops it)."""
    from rivulet.server.pgwire import PgServer, run_playground

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    def ready(server: PgServer) -> None:
        bound_host, bound_port = server.address
        where = data_dir if data_dir else "in memory (nothing is kept after exit)"
        auth = "SCRAM-SHA-256 password" if password else "none (trust)"
        console.print(
            Panel.fit(
                f"[bold]Rivulet {__version__}[/bold] playground\n"
                f"listening on  {bound_host}:{bound_port}\n"
                f"data          {where}\n"
                f"auth          {auth}\n\n"
                f"connect with  [cyan]psql -h {bound_host} -p {bound_port} -U root -d dev[/cyan]\n"
                "stop with     Ctrl-C",
                title="rivulet",
            )
        )
        sys.stdout.flush()

    try:
        run_playground(data_dir, host, port, password, on_ready=ready)
    except OSError as exc:
        console.print(f"[red]error:[/red] cannot serve on {host}:{port}: {exc.strerror or exc}")
        raise SystemExit(1) from None
    except Exception as exc:  # a bad data directory and the like: say it plainly
        from rivulet.common.errors import Error

        if isinstance(exc, Error):
            console.print(f"[red]error:[/red] {exc}")
            raise SystemExit(1) from None
        raise
    console.print("rivulet stopped")


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
