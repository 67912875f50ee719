"""The PostgreSQL wire protocol (v3) server, written on asyncio.

``serve(engine, host, port, password)`` starts a server on a running loop;
``run_playground(...)`` runs an engine and a server until SIGINT/SIGTERM.
"""

from rivulet.server.pgwire.server import PgServer, run_playground, serve

__all__ = ["PgServer", "run_playground", "serve"]
