"""Rivulet against a real PostgreSQL 15: the same statements, the same answers (rows as
the servers' text, or the same SQLSTATE when both fail)."""

from __future__ import annotations

import pytest
from postgres_reference import Pair


def test_reference_server_answers(pg_pair: Pair) -> None:
    pg_pair.assert_same("SELECT 1 AS a, 'x'::text AS b, NULL::int AS c")
    pg_pair.assert_same("SELECT 1 / 0")


MATH = [
    "SELECT sqrt(-1)",
    "SELECT sqrt(-1.0)",
    "SELECT sqrt(-1::float8)",
    "SELECT sqrt(16), sqrt(2::float8)",
    "SELECT ln(0)",
    "SELECT ln(0.0)",
    "SELECT ln(-1)",
    "SELECT ln(-1::float8)",
    "SELECT log(0)",
    "SELECT log(-1)",
    "SELECT log10(0)",
    "SELECT log(2, 0)",
    "SELECT log(1, 8)",
    "SELECT 10 ^ 400",
    "SELECT 10::float8 ^ 400",
    "SELECT power(10, 400)",
    "SELECT power(10::float8, 400)",
    "SELECT 0 ^ -1",
    "SELECT (-8) ^ 0.5",
    "SELECT (-8::float8) ^ 0.5",
    "SELECT 2 ^ 10 AS a, (-2) ^ 3 AS b, 4::float8 ^ 0.5 AS c",
    "SELECT exp(1000)",
    "SELECT exp(1000::float8)",
    "SELECT exp(0)",
    "SELECT exp(-1000)",
    "SELECT exp(-1000::float8)",
    "SELECT 10::float8 ^ -400",
    "SELECT power(10, -400)",
    "SELECT octet_length('héllo'), octet_length('\\x0102'::bytea)",
    "SELECT lpad('hi', 5, ''), rpad('hello', 3, ''), lpad('hi', 5, 'ab')",
    "SELECT 'Infinity'::float8 ^ 2 AS a, sqrt('NaN'::float8)",
]


@pytest.mark.parametrize("sql", MATH)
def test_math_errors(pg_pair: Pair, sql: str) -> None:
    pg_pair.assert_same(sql)


TIMEZONE = [
    "SELECT '2024-01-01 00:00:00'::timestamptz, '2024-07-01 00:00:00'::timestamptz",
    "SELECT timestamptz '2024-01-01 00:00:00'",
    "SELECT '2024-06-01 12:00:00 UTC'::timestamptz, '2024-06-01T12:00:00Z'::timestamptz",
    "SELECT '2024-06-01'::timestamptz, '2024-03-10 02:30:00'::timestamptz",
    "SELECT extract(hour from '2024-01-01 12:00:00+00'::timestamptz)",
    "SELECT date_part('hour', '2024-01-01 12:00:00+00'::timestamptz) AS h",
    "SELECT extract(day from '2024-01-01 02:00:00+00'::timestamptz)",
    "SELECT extract(timezone from '2024-01-01 00:00:00+00'::timestamptz)",
    "SELECT extract(timezone_hour from '2024-07-01 00:00:00+00'::timestamptz)",
    "SELECT date_trunc('day', '2024-01-01 02:00:00+00'::timestamptz)",
    "SELECT to_char('2024-01-01 02:00:00+00'::timestamptz, 'YYYY-MM-DD HH24')",
    "SELECT '2024-07-01 00:00:00'::timestamp::timestamptz",
    "SELECT '2024-07-01 00:00:00+02'::timestamptz::timestamp",
    "SELECT '2024-07-01 01:00:00+02'::timestamptz::date",
    "SELECT id, tz, ts, d FROM {t} ORDER BY id",
    "SELECT id, tz::timestamp, tz::date, ts::timestamptz, d::timestamptz, s::timestamptz"
    " FROM {t} ORDER BY id",
    "SELECT id, extract(hour from tz), extract(day from tz), extract(hour from ts),"
    " extract(hour from iv), extract(dow from tz) FROM {t} ORDER BY id",
    "SELECT id, date_trunc('day', tz), date_trunc('hour', tz), date_trunc('day', ts),"
    " date_trunc('month', tz) FROM {t} ORDER BY id",
    "SELECT id, to_char(tz, 'YYYY-MM-DD HH24:MI'), to_char(ts, 'YYYY-MM-DD HH24:MI')"
    " FROM {t} ORDER BY id",
    "SELECT tz AT TIME ZONE 'UTC', ts AT TIME ZONE 'UTC' FROM {t} ORDER BY id",
    "SELECT count(*) FROM {t} WHERE tz::date = '2024-03-10'",
]


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "-5", "+05:30", "UTC"])
@pytest.mark.parametrize("sql", TIMEZONE)
def test_session_timezone(pg_pair: Pair, table_name: str, zone: str, sql: str) -> None:
    if "{t}" in sql:
        pg_pair.setup(
            f"CREATE TABLE {table_name} (id int, ts timestamp, tz timestamptz, d date,"
            " iv interval, s text)",
            f"INSERT INTO {table_name} VALUES"
            " (1, '2024-03-10 12:00:00', '2024-03-10 12:00:00+00', '2024-03-10',"
            " '1 day 02:03:04', '2024-03-10 01:30:00'),"
            " (2, '2024-11-03 01:30:00', '2024-11-03 05:30:00+00', '2024-11-03', '-5 hours',"
            " '2024-11-03 12:00:00-07')",
        )
    pg_pair.setup(f"SET timezone = '{zone}'")
    try:
        pg_pair.assert_same(sql.replace("{t}", table_name))
    finally:
        if "{t}" in sql:
            pg_pair.setup(f"DROP TABLE {table_name}")


COPY_INPUTS = [
    ("text", b"1\tok\n2\tok\n"),
    ("text", b"1\tab\x00c\n"),
    ("text", b"1\tok\n2\tab\x00c\n"),
    ("text", b"1\tok\n2\t\xff\xfe\n"),
    ("text", b"1\tabc\\\n"),
    ("text", b"1\tok\n2\tabc\\"),
    ("text", b"1\tok\n2\tline\\\nbreak\n"),
    ("text", b"1\tok\n2\tok\n3\tabc\\\n4\tx\n"),
    ("text", b"1\tok\nx\tok\n"),
    ("text", b"1\tok\n12\tok\n2\n"),
    ("text", b"1\tok\n2\tok\tmore\n"),
    ("text", b"1\ta\\\\\n2\t\\\\\n3\tx\\\\\\"),
    ("csv", b'1,"abc\n2,x\n'),
    ("csv", b'1,"a\nb"\n2,"c""d"\n'),
    ("csv", b"1,ok\nx,ok\n"),
    ("csv", b'1,"a\x00b"\n'),
    ("csv", b"1,ok\n2\n"),
]


@pytest.mark.parametrize(
    ("fmt", "data"), COPY_INPUTS, ids=[f"{f}-{d[:24]!r}" for f, d in COPY_INPUTS]
)
def test_copy_from_errors(pg_pair: Pair, table_name: str, fmt: str, data: bytes) -> None:
    """COPY FROM refuses what PostgreSQL refuses, with its SQLSTATE, message and the line
    in the context; what it accepts reads the same."""
    pg_pair.setup(f"CREATE TABLE {table_name} (a int, b text)")
    try:
        options = " WITH (FORMAT csv)" if fmt == "csv" else ""
        pg_pair.assert_same(f"COPY {table_name} FROM STDIN{options}", copy_data=data, messages=True)
        pg_pair.assert_same(f"SELECT a, b FROM {table_name} ORDER BY a")
    finally:
        pg_pair.setup(f"DROP TABLE {table_name}")


def test_copy_unterminated_quote_names_the_line(pg_pair: Pair, table_name: str) -> None:
    """The record that opens the quote is named (PostgreSQL names the line after it when
    the data ends right after that record's first line)."""
    pg_pair.setup(f"CREATE TABLE {table_name} (a int, b text)")
    try:
        ours, theirs = pg_pair.run(
            f"COPY {table_name} FROM STDIN WITH (FORMAT csv)", copy_data=b'1,ok\n2,ok\n3,"abc\n'
        )
        assert (ours.sqlstate, ours.message) == (theirs.sqlstate, theirs.message)
        assert ours.context == f'COPY {table_name}, line 3: "3,"abc\n"'
    finally:
        pg_pair.setup(f"DROP TABLE {table_name}")


JSON_TABLES = [
    """SELECT * FROM jsonb_each('{"a":1,"b":"x","c":null,"d":[1,2],"e":{"f":true}}'::jsonb)
       ORDER BY key""",
    """SELECT * FROM jsonb_each_text('{"a":1,"b":"x","c":null,"d":true}'::jsonb) ORDER BY key""",
    """SELECT * FROM json_each('{"a":1,"b":"x"}'::json) ORDER BY key""",
    """SELECT * FROM json_each_text('{"a":1,"b":"x"}'::json) ORDER BY key""",
    """SELECT e.k, e.v FROM jsonb_each('{"a":1}'::jsonb) AS e(k, v)""",
    """SELECT jsonb_each.key FROM jsonb_each('{"a":1}'::jsonb)""",
    "SELECT * FROM jsonb_each('[1,2]'::jsonb)",
    "SELECT * FROM jsonb_each(NULL::jsonb)",
    """SELECT * FROM jsonb_array_elements('[1,"a",null,{"b":2}]'::jsonb)""",
    """SELECT * FROM jsonb_array_elements_text('[1,"a",null]'::jsonb)""",
    """SELECT * FROM jsonb_array_elements('{"a":1}'::jsonb)""",
    "SELECT * FROM jsonb_array_elements('1'::jsonb)",
    "SELECT id, key, value FROM {t}, jsonb_each({t}.j) ORDER BY id, key",
    "SELECT id, e.key, e.value FROM {t} CROSS JOIN LATERAL jsonb_each_text({t}.j) AS e"
    " ORDER BY id, e.key",
    "SELECT id, k FROM {t}, jsonb_each(j) AS x(k, v) WHERE v::text = '2'",
]


@pytest.mark.parametrize("sql", JSON_TABLES)
def test_json_table_functions(pg_pair: Pair, table_name: str, sql: str) -> None:
    pg_pair.setup(
        f"CREATE TABLE {table_name} (id int, j jsonb)",
        f"""INSERT INTO {table_name} VALUES (1, '{{"a":1,"b":2}}'), (2, '{{"c":"z"}}')""",
    )
    try:
        pg_pair.assert_same(sql.replace("{t}", table_name))
    finally:
        pg_pair.setup(f"DROP TABLE {table_name}")


DATE_RANGE = [
    "SELECT '5874897-12-31'::date + 1",
    "SELECT '5874897-12-31'::date",
    "SELECT '5874898-01-01'::date",
    "SELECT '2024-01-01'::date + 100000000",
    "SELECT '2024-01-01'::date + 2000000000",
    "SELECT '2024-01-01'::date - 3000000",
    "SELECT '5874897-12-31'::date + interval '1 day'",
    "SELECT '294000-01-01'::timestamp + interval '1000 years'",
    "SELECT '0001-01-01'::date - 1",
    "SELECT '4713-11-24 BC'::date, date '0044-03-15 BC', '0001-01-01 BC'::date + 1",
    "SELECT '4714-11-23 BC'::date",
    "SELECT '12000-01-01'::date, '12000-01-01 10:00:00'::timestamp",
    "SELECT d FROM (VALUES ('2024-01-01'::date), ('9999-12-31'::date + 5)) v(d) ORDER BY d",
]


@pytest.mark.parametrize("sql", DATE_RANGE)
def test_date_range(pg_pair: Pair, sql: str) -> None:
    pg_pair.assert_same(sql)


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago"])
def test_today_is_the_sessions(pg_pair: Pair, zone: str) -> None:
    """current_date and localtimestamp are the session's (these zones are 25 hours apart:
    at any instant at least one of them has another date than UTC)."""
    pg_pair.setup(f"SET timezone = '{zone}'")
    pg_pair.assert_same(
        f"SELECT current_date = (now() AT TIME ZONE '{zone}')::date AS today,"
        f" localtimestamp - (now() AT TIME ZONE '{zone}') < interval '1 minute' AS now,"
        " pg_typeof(current_date) AS t1, pg_typeof(localtimestamp) AS t2"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT repeat('x', 2000000000)",
        "SELECT lpad('x', 2000000000)",
        "SELECT rpad('x', 2000000000, 'ab')",
        "SELECT repeat('ab', 3), repeat('x', -1), lpad('7', 3, '0')",
    ],
)
def test_oversized_values(pg_pair: Pair, sql: str) -> None:
    """PostgreSQL refuses these past its 1 GB field limit, Rivulet past max_value_bytes:
    both with 54000."""
    pg_pair.assert_same(sql)
