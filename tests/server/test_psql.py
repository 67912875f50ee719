"""psql 15 driven non-interactively: -c commands and a client-side \\copy."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PSQL = shutil.which("psql") or "/usr/bin/psql"
pytestmark = pytest.mark.skipif(not os.path.exists(PSQL), reason="psql is not installed")


def psql(server, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    env.pop("PGPASSWORD", None)
    cmd = [PSQL, "-h", server.host, "-p", str(server.port), "-U", "root", "-d", "dev"]
    cmd += ["-X", "-v", "ON_ERROR_STOP=1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, input=stdin, env=env, timeout=60)


def test_select_one(server) -> None:  # type: ignore[no-untyped-def]
    out = psql(server, "-c", "select 1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["?column?", "----------", "1", "(1", "row)"]


def test_unaligned_output_and_types(server) -> None:  # type: ignore[no-untyped-def]
    out = psql(
        server,
        "-A",
        "-t",
        "-c",
        "select 1.5::double precision, true, interval '1 day 2 hours', 'a'::varchar",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.5|t|1 day 02:00:00|a"


def test_error_shows_message_and_hint(server) -> None:  # type: ignore[no-untyped-def]
    out = psql(server, "-c", "pragma version")
    assert out.returncode != 0
    assert "ERROR:  PRAGMA is not a Rivulet statement" in out.stderr
    assert "HINT:  Use SET and SHOW for session settings." in out.stderr


def test_script_on_stdin(server, table_name: str) -> None:  # type: ignore[no-untyped-def]
    script = (
        f"create table {table_name} (id int, name varchar);\n"
        f"insert into {table_name} values (1, 'x'), (2, 'y');\n"
        f"select name from {table_name} order by id;\n"
    )
    out = psql(server, "-A", "-t", stdin=script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CREATE_TABLE", "INSERT", "0", "2", "x", "y"]


def test_client_side_copy_from_file(server, table_name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "rows.csv"
    path.write_text('id,name\n1,alpha\n2,"be,ta"\n3,\n')
    out = psql(server, "-c", f"create table {table_name} (id int, name varchar)")
    assert out.returncode == 0, out.stderr
    out = psql(server, "-c", f"\\copy {table_name} from '{path}' with (format csv, header)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "COPY 3"
    out = psql(server, "-A", "-t", "-c", f"select id, name from {table_name} order by id")
    assert out.stdout.strip().splitlines() == ["1|alpha", "2|be,ta", "3|"]
    dest = tmp_path / "out.txt"
    out = psql(server, "-c", f"\\copy (select * from {table_name} order by id) to '{dest}'")
    assert out.returncode == 0, out.stderr
    assert dest.read_text() == "1\talpha\n2\tbe,ta\n3\t\\N\n"
