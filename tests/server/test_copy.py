"""COPY FROM STDIN and COPY TO STDOUT through psycopg's copy support."""

from __future__ import annotations

import psycopg
import pytest


def test_copy_from_stdin_text_format(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int, name varchar, note varchar)")
    data = (
        "1\tplain\t\\N\n2\ttab\\there\tnew\\nline\n3\tback\\\\slash\t\n4\t\\N\tcarriage\\rreturn\n"
    )
    with conn.cursor() as cur:
        with cur.copy(f"copy {table_name} from stdin") as copy:
            # Sent in uneven pieces: rows may straddle CopyData messages.
            for i in range(0, len(data), 7):
                copy.write(data[i : i + 7])
        assert cur.rowcount == 4
        rows = cur.execute(f"select id, name, note from {table_name} order by id").fetchall()
    assert rows == [
        (1, "plain", None),
        (2, "tab\there", "new\nline"),
        (3, "back\\slash", ""),
        (4, None, "carriage\rreturn"),
    ]


def test_copy_from_stdin_csv(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int, name varchar, price numeric)")
    data = 'id,name,price\n1,"a, b",1.50\n2,,2\n3,"say ""hi""",\n4,"",0\n'
    with conn.cursor() as cur:
        with cur.copy(f"copy {table_name} from stdin with (format csv, header true)") as copy:
            copy.write(data.encode())
        rows = cur.execute(f"select id, name, price from {table_name} order by id").fetchall()
    assert [r[:2] for r in rows] == [(1, "a, b"), (2, None), (3, 'say "hi"'), (4, "")]
    assert [None if r[2] is None else float(r[2]) for r in rows] == [1.5, 2.0, None, 0.0]


def test_copy_rows_via_write_row(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id bigint, v varchar)")
    with conn.cursor() as cur:
        with cur.copy(f"copy {table_name} (id, v) from stdin") as copy:
            for i in range(5000):
                copy.write_row((i, None if i % 10 == 0 else f"v\t{i}"))
        assert cur.execute(f"select count(*), count(v) from {table_name}").fetchone() == (
            5000,
            4500,
        )
        assert cur.execute(f"select v from {table_name} where id = 7").fetchone() == ("v\t7",)


def test_copy_bad_data_reports_error(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int)")
    with pytest.raises(psycopg.errors.DataError):  # noqa: SIM117
        with conn.cursor() as cur, cur.copy(f"copy {table_name} from stdin") as copy:
            copy.write("1\nnot a number\n")
    assert conn.execute(f"select count(*) from {table_name}").fetchone() == (0,)
    assert conn.execute("select 1").fetchone() == (1,)


def test_copy_aborted_by_client(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int)")

    class Abort(Exception):
        pass

    with pytest.raises(Abort):  # noqa: SIM117
        with conn.cursor() as cur, cur.copy(f"copy {table_name} from stdin") as copy:
            copy.write("1\n")
            raise Abort()  # psycopg sends CopyFail
    assert conn.execute(f"select count(*) from {table_name}").fetchone() == (0,)


def test_copy_to_stdout_text_and_csv(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int, name varchar, flag boolean)")
    conn.execute(
        f"insert into {table_name} values (1, 'a\tb', true), (2, null, false), (3, 'x,\"y\"', null)"
    )
    with conn.cursor() as cur:
        out = bytearray()
        with cur.copy(f"copy (select * from {table_name} order by id) to stdout") as copy:
            for block in copy:
                out += block
        assert out.decode() == '1\ta\\tb\tt\n2\t\\N\tf\n3\tx,"y"\t\\N\n'
        out = bytearray()
        query = f"copy (select * from {table_name} order by id) to stdout with (format csv, header)"
        with cur.copy(query) as copy:
            for block in copy:
                out += block
        assert out.decode() == 'id,name,flag\n1,a\tb,t\n2,,f\n3,"x,""y""",\n'


def test_copy_to_stdout_rows_parsed_by_client(conn: psycopg.Connection, table_name: str) -> None:
    conn.execute(f"create table {table_name} (id int, v double precision)")
    conn.execute(f"insert into {table_name} values (1, 0.5), (2, null)")
    with conn.cursor() as cur, cur.copy(f"copy {table_name} to stdout") as copy:
        copy.set_types(["int4", "float8"])
        rows = sorted(copy.rows(), key=lambda r: r[0])
    assert rows == [(1, 0.5), (2, None)]
