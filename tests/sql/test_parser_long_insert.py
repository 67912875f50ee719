"""A long ``INSERT ... VALUES`` of plain literals is read without sqlglot's parser; it
must give exactly the statement (tree, text, position) that the parser gives, and leave
to the parser whatever it does not take."""

from __future__ import annotations

import contextlib
import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivulet.common.errors import Error
from rivulet.sql import parser

items = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["1.5", "-0.25", "2.", "1e5", "3E-2", "00012", "-7", "0"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6).map(
        lambda s: "'" + s.replace("'", "''") + "'"
    ),
    st.sampled_from(["NULL", "null", "TRUE", "false", "True"]),
    # What the scanner leaves to the parser: the two must still agree.
    st.sampled_from(["1 + 2", "now()", "'a'::int", "E'x\\ny'", "- 5", ".5", "DEFAULT", "(1)"]),
)
space = st.sampled_from(["", " ", "  ", "\n", "\t "])


@st.composite
def long_inserts(draw: st.DrawFn) -> str:
    width = draw(st.integers(1, 4))
    rows = draw(st.lists(st.lists(items, min_size=width, max_size=width), min_size=1, max_size=6))
    if draw(st.booleans()):  # a row of another width (read a token at a time)
        other = draw(st.lists(items, min_size=1, max_size=5))
        rows.insert(draw(st.integers(0, len(rows))), other)
    sep = draw(space)
    text = f",{sep}".join("(" + f",{draw(space)}".join(r) + ")" for r in rows)
    target = draw(st.sampled_from(["t", 'public."My T"', "t (a, b)", "T(x)"]))
    head = draw(st.sampled_from(["INSERT INTO", "insert  into", "\n Insert Into"]))
    end = draw(st.sampled_from(["", ";", " ; ", "\n"]))
    return f"{draw(space)}{head} {target} VALUES{draw(space)}{text}{end}"


def _parsed(sql: str, *, fast: bool) -> object:
    saved = parser._LONG_INSERT_CHARS
    parser._LONG_INSERT_CHARS = 0 if fast else 10**12
    try:
        return [(s.tree, s.text, s.start) for s in parser.parse_statements(sql)]
    except parser.Error as exc:
        return ("error", exc.sqlstate, str(exc))
    finally:
        parser._LONG_INSERT_CHARS = saved


@settings(max_examples=400, derandomize=True, deadline=None)
@given(sql=long_inserts())
def test_the_scanner_gives_what_the_parser_gives(sql: str) -> None:
    assert _parsed(sql, fast=True) == _parsed(sql, fast=False)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t VALUES (1 2)",
        "INSERT INTO t VALUES (1),",
        "INSERT INTO t VALUES (1) (2)",
        "INSERT INTO t VALUES (1), (2) x",
        "INSERT INTO t VALUES ()",
        "INSERT INTO t VALUES ('unterminated)",
        "INSERT INTO t VALUES (1); SELECT 1",
        "INSERT INTO t VALUES (1) -- comment",
        "INSERT INTO t VALUES (1), /* c */ (2)",
        "INSERT INTO t VALUES (1,, 2)",
    ],
)
def test_malformed_lists_end_as_the_parser_ends_them(sql: str) -> None:
    assert _parsed(sql, fast=True) == _parsed(sql, fast=False)


def test_a_long_list_takes_the_scanner() -> None:
    sql = "INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}', NULL)" for i in range(2000))
    sql += ", (1, 'a,b)', -2.5e3), (TRUE, '', false)"
    assert parser._scan_literal_insert(sql) is not None
    assert _parsed(sql, fast=True) == _parsed(sql, fast=False)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1000)),
        "INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1000)) + ", (1,, 2)",
        "SELECT " + ", ".join(str(i) for i in range(2000)),
    ],
)
def test_a_long_statement_leaves_garbage_collection_on(sql: str) -> None:
    # Collections pause while a long statement's nodes are made, whatever the outcome.
    with contextlib.suppress(Error):
        parser.parse_statements(sql)
    assert gc.isenabled()
