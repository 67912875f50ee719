"""INSERT ... VALUES of parameters and plain literals is built without DuckDB; whatever it
takes must end exactly as the general path (DuckDB evaluating VALUES, PostgreSQL's
casts) would end it: the same stored value, or the same error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import rivulet
from rivulet.common.types import BIGINT, INTEGER, VARCHAR
from rivulet.sql.handlers.literal_rows import LiteralRows, literal_rows_of
from rivulet.sql.parser import parse_one

TYPES = ["smallint", "integer", "bigint", "double precision", "varchar", "text", "boolean"]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([0, 32767, 32768, -32768, -32769, 2**31 - 1, 2**31, -(2**31) - 1, 2**53]),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["12", " 7 ", "1e3", "true", "t", "no", "", "3.5", "-0"]),
)


@pytest.fixture(scope="module")
def con() -> Iterator[rivulet.Connection]:
    with rivulet.connect() as c:
        for i, t in enumerate(TYPES):
            c.execute(f"CREATE TABLE fast_{i} (id INT, v {t})")
            c.execute(f"CREATE TABLE general_{i} (id INT, v {t})")
        yield c


def outcome(con: rivulet.Connection, sql: str, params: list[object], table: str) -> object:
    try:
        con.execute(sql, params)
    except rivulet.Error as exc:
        return ("error", exc.sqlstate)
    rows = con.execute(f"SELECT v FROM {table} WHERE id = %s", [params[0]]).fetchall()
    return ("stored", rows)


_ids = iter(range(10**9))


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(type_index=st.integers(0, len(TYPES) - 1), value=values)
def test_a_parameter_ends_as_the_general_path_ends_it(
    con: rivulet.Connection, type_index: int, value: object
) -> None:
    row = next(_ids)
    fast = outcome(
        con, f"INSERT INTO fast_{type_index} VALUES (%s, %s)", [row, value], f"fast_{type_index}"
    )
    # A parenthesised item is an expression: it takes the general path.
    general = outcome(
        con,
        f"INSERT INTO general_{type_index} VALUES (%s, (%s))",
        [row, value],
        f"general_{type_index}",
    )
    assert fast == general, (TYPES[type_index], value)


@pytest.mark.parametrize(
    ("literal", "type_index"),
    [("-32768", 0), ("32768", 0), ("2147483648", 1), ("-9223372036854775808", 2), ("'x'", 4),
     ("NULL", 6), ("TRUE", 6), ("'true'", 6), ("12", 3), ("'12'", 1), ("1.5", 1)],
)  # fmt: skip
def test_a_literal_ends_as_the_general_path_ends_it(
    con: rivulet.Connection, literal: str, type_index: int
) -> None:
    row = next(_ids)
    fast = outcome(
        con, f"INSERT INTO fast_{type_index} VALUES (%s, {literal})", [row], f"fast_{type_index}"
    )
    general = outcome(
        con,
        f"INSERT INTO general_{type_index} VALUES (%s, ({literal}))",
        [row],
        f"general_{type_index}",
    )
    assert fast == general


@pytest.mark.parametrize(
    ("literal", "type_index"),
    [("-32768", 0), ("32768", 0), ("2147483648", 1), ("-9223372036854775808", 2), ("'x'", 4),
     ("NULL", 6), ("TRUE", 6), ("'true'", 6), ("12", 3), ("'12'", 1), ("1.5", 1), ("7", 5)],
)  # fmt: skip
def test_a_list_of_literals_only_ends_as_the_general_path_ends_it(
    con: rivulet.Connection, literal: str, type_index: int
) -> None:
    # Built column by column, once (``LiteralRows.literals``), not item by item.
    row = next(_ids)
    outcomes = []
    for table, item in ((f"fast_{type_index}", literal), (f"general_{type_index}", f"({literal})")):
        try:
            con.execute(f"INSERT INTO {table} VALUES ({row}, {item}), ({row}, NULL)")
        except rivulet.Error as exc:
            outcomes.append(("error", exc.sqlstate))
            continue
        stored = con.execute(f"SELECT v FROM {table} WHERE id = {row} ORDER BY v NULLS LAST")
        outcomes.append(("stored", stored.fetchall()))
    assert outcomes[0] == outcomes[1]


def test_which_values_lists_take_the_fast_path() -> None:
    def recipe(sql: str, types: list[object]) -> object:
        values = parse_one(sql).tree.expression
        assert isinstance(values, exp.Values)
        return literal_rows_of(values, [f"c{i}" for i in range(len(types))], types)

    assert recipe("INSERT INTO t VALUES ($1, 'a'), ($2, NULL)", [INTEGER, VARCHAR]) is not None
    assert recipe("INSERT INTO t VALUES (-5, $1)", [BIGINT, VARCHAR]) is not None
    literals = recipe("INSERT INTO t VALUES (-5, 'a'), (7, NULL)", [BIGINT, VARCHAR])
    assert isinstance(literals, LiteralRows) and literals.literals is not None
    assert literals.build([]).to_pylist() == [{"c0": -5, "c1": "a"}, {"c0": 7, "c1": None}]
    # An expression, DEFAULT, or a literal needing a cast: the general path.
    assert recipe("INSERT INTO t VALUES ($1 + 1)", [INTEGER]) is None
    assert recipe("INSERT INTO t VALUES (DEFAULT)", [INTEGER]) is None
    assert recipe("INSERT INTO t VALUES ('5')", [INTEGER]) is None
    assert recipe("INSERT INTO t VALUES (99999999999)", [INTEGER]) is None


def test_missing_target_columns_are_null_on_the_fast_path(con: rivulet.Connection) -> None:
    con.execute("CREATE TABLE wide (a INT, b VARCHAR, c DOUBLE PRECISION)")
    con.execute("INSERT INTO wide (c, a) VALUES (%s, %s), (%s, NULL)", [1.5, 1, 2.5])
    assert sorted(con.execute("SELECT * FROM wide").fetchall(), key=repr) == [
        (1, None, 1.5),
        (None, None, 2.5),
    ]


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    type_index=st.integers(0, len(TYPES) - 1),
    param_sets=st.lists(st.tuples(values, values), min_size=1, max_size=6),
)
def test_many_parameter_sets_build_what_each_builds(
    type_index: int, param_sets: list[tuple[object, object]]
) -> None:
    """A driver's executemany builds its rows at once: the same table as each set built
    alone, one after the other, or None when any of them needs the general path."""
    from rivulet.common.types import BOOLEAN, DOUBLE, SMALLINT, TEXT

    dtype = [SMALLINT, INTEGER, BIGINT, DOUBLE, VARCHAR, TEXT, BOOLEAN][type_index]
    values_list = parse_one("INSERT INTO t VALUES ($1, 7, $2)").tree.expression
    rows = literal_rows_of(values_list, ["a", "b", "c"], [dtype, INTEGER, dtype])
    assert rows is not None
    sets = [list(s) for s in param_sets]
    each = [rows.build(s) for s in sets]
    many = rows.build_many(sets)
    if any(t is None for t in each):
        assert many is None
    else:
        import pyarrow as pa

        assert many is not None and many.equals(pa.concat_tables(each))
