"""The sqllogictest runner itself: a runner that cannot fail would prove nothing."""

from __future__ import annotations

import datetime as dt
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from slt.runner import (
    Connection,
    Driver,
    Instance,
    Outcome,
    Runner,
    SltFailure,
    SltParseError,
    SqlError,
    format_value,
    parse_file,
    split_copy,
)


class FakeConnection(Connection):
    def __init__(self, answers: dict[str, Any], log: list[tuple[str, str | None]]) -> None:
        self.answers = answers
        self.log = log

    def run(self, sql: str, copy_data: str | None = None) -> Outcome:
        self.log.append((sql, copy_data))
        answer = self.answers.get(sql, Outcome(None, [], 0))
        if isinstance(answer, SqlError):
            raise answer
        return answer


class FakeDriver(Driver):
    name = "fake"

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.log: list[tuple[str, str | None]] = []
        self.connections = 0

    def open(self) -> Instance:
        driver = self

        class _Instance(Instance):
            def connect(self) -> Connection:
                driver.connections += 1
                return FakeConnection(driver.answers, driver.log)

        return _Instance()


def rows(*data: tuple[Any, ...], types: tuple[int | None, ...] | None = None) -> Outcome:
    width = len(data[0]) if data else (len(types) if types else 1)
    codes = types or (None,) * width
    return Outcome([(f"c{i}", codes[i]) for i in range(width)], list(data), len(data))


def write(tmp_path: Path, text: str, name: str = "t.slt") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def run(tmp_path: Path, text: str, answers: dict[str, Any]) -> FakeDriver:
    driver = FakeDriver(answers)
    Runner(driver).run_file(write(tmp_path, text))
    return driver


# ----------------------------------------------------------------------- passing


def test_statements_and_queries(tmp_path: Path) -> None:
    driver = run(
        tmp_path,
        """
        # a comment
        statement ok
        CREATE TABLE t (a INT)

        statement count 2
        INSERT INTO t
        VALUES (1), (2)

        query IT
        SELECT a, s FROM t
        ----
        1 x
        2 NULL
        """,
        {
            "INSERT INTO t\nVALUES (1), (2)": Outcome(None, [], 2),
            "SELECT a, s FROM t": rows((1, "x"), (2, None)),
        },
    )
    assert [s for s, _ in driver.log] == [
        "CREATE TABLE t (a INT)",
        "INSERT INTO t\nVALUES (1), (2)",
        "SELECT a, s FROM t",
    ]


def test_conditions_connections_and_halt(tmp_path: Path) -> None:
    driver = run(
        tmp_path,
        """
        skipif fake
        statement ok
        SKIPPED 1

        onlyif other
        statement ok
        SKIPPED 2

        onlyif fake
        statement ok
        RUN 1

        connection second
        statement ok
        RUN 2

        statement ok
        RUN 3

        halt

        statement ok
        NEVER
        """,
        {},
    )
    assert [s for s, _ in driver.log] == ["RUN 1", "RUN 2", "RUN 3"]
    assert driver.connections == 2


def test_include_and_sortmode(tmp_path: Path) -> None:
    write(tmp_path, "statement ok\nINCLUDED\n", name="_part.slt")
    driver = run(
        tmp_path,
        """
        include _part.slt

        control sortmode rowsort

        query I
        Q
        ----
        2
        1
        """,
        {"Q": rows((1,), (2,))},
    )
    # The included file ran in place, before the query; the query's rows (1, 2) matched
    # the record's (2, 1) only because rowsort sorted both.
    assert driver.log == [("INCLUDED", None), ("Q", None)]
    text = failure(
        tmp_path, "include _part.slt\n\nquery I\nQ\n----\n2\n1\n", {"Q": rows((1,), (2,))}
    )
    assert "mismatch" in text


def test_copy_data_is_split_off(tmp_path: Path) -> None:
    driver = run(
        tmp_path,
        "statement ok\nCOPY t FROM STDIN;\n1\ta\n2\tb\n\\.\n",
        {},
    )
    assert driver.log == [("COPY t FROM STDIN", "1\ta\n2\tb\n")]
    assert split_copy("COPY t FROM STDIN") == ("COPY t FROM STDIN", None)
    assert split_copy("SELECT 1; SELECT 2") == ("SELECT 1; SELECT 2", None)


# ----------------------------------------------------------------------- failing


def failure(tmp_path: Path, text: str, answers: dict[str, Any]) -> str:
    with pytest.raises(SltFailure) as info:
        run(tmp_path, text, answers)
    return str(info.value)


def test_a_result_mismatch_reports_file_line_sql_expected_and_actual(tmp_path: Path) -> None:
    text = failure(
        tmp_path,
        """
        statement ok
        CREATE TABLE t (a INT)

        query I
        SELECT a FROM t
        ----
        1
        """,
        {"SELECT a FROM t": rows((2,))},
    )
    assert text.splitlines()[0].startswith(f"{tmp_path / 't.slt'}:4: query result mismatch")
    assert "[SQL]\nSELECT a FROM t" in text
    assert "[expected]\n1" in text
    assert "[actual]\n2" in text


def test_order_matters_without_rowsort(tmp_path: Path) -> None:
    text = failure(tmp_path, "query I\nQ\n----\n2\n1\n", {"Q": rows((1,), (2,))})
    assert "mismatch" in text


def test_an_unexpected_error_fails(tmp_path: Path) -> None:
    text = failure(
        tmp_path, "statement ok\nBAD\n", {"BAD": SqlError("42601", "syntax error", hint="fix it")}
    )
    assert ":1: unexpected error" in text
    assert "42601: syntax error\nHINT: fix it" in text


def test_an_expected_error_that_does_not_happen_fails(tmp_path: Path) -> None:
    text = failure(tmp_path, "statement error boom\nOK\n", {})
    assert "expected an error, but the statement succeeded" in text


def test_the_error_must_match(tmp_path: Path) -> None:
    text = failure(
        tmp_path, "statement error 22012\nQ\n", {"Q": SqlError("42P01", "no such relation")}
    )
    assert "the error does not match" in text
    text = failure(
        tmp_path,
        "query error\nQ\n----\n42P01: other message\n\n\n",
        {"Q": SqlError("42P01", "no such relation")},
    )
    assert "wrong error" in text


def test_the_column_count_must_match(tmp_path: Path) -> None:
    text = failure(tmp_path, "query II\nQ\n----\n1\n", {"Q": rows((1,))})
    assert "returned 1 columns, the record declares 2" in text


def test_a_query_needs_rows(tmp_path: Path) -> None:
    text = failure(tmp_path, "query I\nQ\n----\n1\n", {})
    assert "needs a statement that returns rows" in text


def test_statement_count_must_match(tmp_path: Path) -> None:
    text = failure(tmp_path, "statement count 3\nQ\n", {"Q": Outcome(None, [], 2)})
    assert "wrong row count" in text


def test_a_wrong_hash_fails(tmp_path: Path) -> None:
    text = failure(
        tmp_path,
        "hash-threshold 1\n\nquery I\nQ\n----\n2 values hashing to 00000000000000000000000000000000\n",
        {"Q": rows((1,), (2,))},
    )
    assert "result hash differs" in text


# ----------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, message",
    [
        ("statement maybe\nSELECT 1\n", "bad statement header"),
        ("statement ok\n\n", "needs SQL"),
        ("query\nSELECT 1\n", "needs its column types"),
        ("query I sideways\nSELECT 1\n", "unknown sort mode"),
        ("system ok\nls\n", "unknown record 'system'"),
        ("include nothing_*.slt\n", "no file matches"),
        ("statement error (unclosed\nSELECT 1\n", "bad error regex"),
        ("control sortmode sideways\n", "unknown sort mode"),
        ("statement ok\nSELECT 1\n----\n", "only 'statement error' may have '----'"),
        ("sleep forever\n", "sleep needs a duration"),
    ],
)
def test_parse_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SltParseError) as info:
        parse_file(path)
    assert f"{path}:" in str(info.value)
    assert message in str(info.value)


# -------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    "value, type_code, text",
    [
        (None, None, "NULL"),
        (True, 16, "t"),
        (False, 16, "f"),
        ("", 25, "(empty)"),
        ("a b", 25, "a b"),
        (42, 23, "42"),
        (2.5, 701, "2.5"),
        (3.0, 701, "3"),
        (1e-10, 701, "1e-10"),
        (float("nan"), 701, "NaN"),
        (float("-inf"), 701, "-Infinity"),
        (1.100000023841858, 700, "1.1"),
        (Decimal("3.000"), 1700, "3"),
        (Decimal("30"), 1700, "30"),
        (Decimal("0.3300"), 1700, "0.33"),
        (dt.date(2024, 2, 29), 1082, "2024-02-29"),
        (dt.time(1, 2, 3, 500000), 1083, "01:02:03.5"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), 1114, "2024-01-02 03:04:05"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), 1184, "2024-01-02 03:04:05+00"),
        (
            dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
            1184,
            "2024-01-02 00:00:00+05:30",
        ),
        (dt.timedelta(days=1, hours=2), 1186, "1 day 02:00:00"),
        (dt.timedelta(days=3), 1186, "3 days"),
        (dt.timedelta(seconds=-1), 1186, "-00:00:01"),
        (dt.timedelta(days=-1), 1186, "-1 days"),
        (dt.timedelta(0), 1186, "00:00:00"),
        (b"\x01\xff", 17, "\\x01ff"),
        ({"a": [1, None]}, 3802, '{"a": [1, null]}'),
        ("str", 3802, '"str"'),
        ([1, 2], 1007, "{1,2}"),
        (["a b", None, ""], 1015, '{"a b",NULL,""}'),
    ],
)
def test_format_value(value: Any, type_code: int | None, text: str) -> None:
    assert format_value(value, type_code) == text
