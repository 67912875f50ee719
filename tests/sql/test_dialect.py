"""The statements the Rivulet dialect parses itself: each becomes its own node, so that
handlers dispatch on what a statement is, never on words found in its text."""

from __future__ import annotations

import pytest
from sqlglot import exp

from rivulet.common.errors import Error
from rivulet.sql import dialect
from rivulet.sql.parser import parse_statements


def tree(sql: str) -> exp.Expression:
    (stmt,) = parse_statements(sql)
    return stmt.tree


@pytest.mark.parametrize(
    ("sql", "kind", "name", "setting", "value", "deferred"),
    [
        ("ALTER TABLE t SET PARALLELISM = 2", "TABLE", "t", "parallelism", "2", False),
        ("alter materialized view s.m set parallelism to adaptive", "MATERIALIZED VIEW",
         "s.m", "parallelism", "adaptive", False),
        ("ALTER MATERIALIZED VIEW m SET PARALLELISM = 'bounded(2)' DEFERRED",
         "MATERIALIZED VIEW", "m", "parallelism", "bounded(2)", True),
        ("ALTER MATERIALIZED VIEW m SET PARALLELISM = DEFAULT", "MATERIALIZED VIEW", "m",
         "parallelism", None, False),
        ("ALTER MATERIALIZED VIEW m SET PARALLELISM = -1", "MATERIALIZED VIEW", "m",
         "parallelism", "-1", False),
        ("ALTER MATERIALIZED VIEW \"My MV\" SET BACKFILL_PARALLELISM = 3", "MATERIALIZED VIEW",
         '"My MV"', "backfill_parallelism", "3", False),
        ("ALTER MATERIALIZED VIEW m SET BACKFILL_RATE_LIMIT TO 0;", "MATERIALIZED VIEW", "m",
         "backfill_rate_limit", "0", False),
        ("ALTER SINK k /* c */ SET PARALLELISM = 1 -- end", "SINK", "k", "parallelism", "1",
         False),
    ],
)  # fmt: skip
def test_alter_job_setting(
    sql: str, kind: str, name: str, setting: str, value: str | None, deferred: bool
) -> None:
    node = tree(sql)
    assert isinstance(node, dialect.AlterJobSetting)
    assert node.args["kind"] == kind
    assert node.this.sql(dialect="postgres", comments=False) == name
    assert node.args["setting"] == setting
    assert node.args.get("value") == value
    assert bool(node.args.get("deferred")) is deferred


@pytest.mark.parametrize(
    "sql",
    [
        # A setting's word inside a name or another clause is only a word.
        "ALTER TABLE parallelism RENAME TO backfill_rate_limit",
        "ALTER TABLE t ADD COLUMN parallelism INT",
        "ALTER TABLE t RENAME COLUMN a TO parallelism",
    ],
)
def test_other_alters_stay_sqlglots(sql: str) -> None:
    node = tree(sql)
    assert isinstance(node, exp.Alter)


@pytest.mark.parametrize(
    ("sql", "name", "value"),
    [
        ("ALTER SYSTEM SET barrier_interval_ms = 200", "barrier_interval_ms", "200"),
        ("alter system set barrier_interval_ms to '300'", "barrier_interval_ms", "300"),
        ("ALTER SYSTEM SET x = 'it''s'", "x", "it's"),
        ("ALTER SYSTEM SET x = -5", "x", "-5"),
        ("ALTER SYSTEM SET x = on", "x", "on"),
        ("ALTER SYSTEM SET a.b = DEFAULT", "a.b", None),
        ("ALTER SYSTEM SET x = 'DEFAULT'", "x", "DEFAULT"),  # a string, not the keyword
    ],
)
def test_alter_system(sql: str, name: str, value: str | None) -> None:
    node = tree(sql)
    assert isinstance(node, dialect.AlterSystem)
    assert node.this == name
    assert node.args.get("value") == value


@pytest.mark.parametrize(
    ("sql", "name", "quoted"),
    [
        ("DEALLOCATE p1", "p1", False),
        ("deallocate prepare P1", "P1", False),
        ('DEALLOCATE "Mixed Case"', "Mixed Case", True),
        ("DEALLOCATE ALL", None, None),
        ("DEALLOCATE PREPARE ALL;", None, None),
    ],
)
def test_deallocate(sql: str, name: str | None, quoted: bool | None) -> None:
    node = tree(sql)
    assert isinstance(node, dialect.DeallocateStatement)
    if name is None:
        assert node.this is None
    else:
        assert (node.this.name, node.this.quoted) == (name, quoted)


@pytest.mark.parametrize(
    ("sql", "message", "position"),
    [
        ("ALTER MATERIALIZED VIEW m SET PARALLELISM", "syntax error at end of input", 42),
        ("ALTER MATERIALIZED VIEW m SET PARALLELISM =", "syntax error at end of input", 44),
        ("ALTER TABLE t SET PARALLELISM = 1 2", 'syntax error at or near "2"', 35),
        ("ALTER SYSTEM SET", "syntax error at end of input", 17),
        ("ALTER SYSTEM barrier_interval_ms = 1", 'syntax error at or near "barrier_interval_ms"',
         14),
        ("DEALLOCATE", "syntax error at end of input", 11),
    ],
)  # fmt: skip
def test_syntax_errors_name_their_place(sql: str, message: str, position: int) -> None:
    with pytest.raises(Error) as info:
        parse_statements(sql)
    assert info.value.sqlstate == "42601"
    assert info.value.message == message
    assert info.value.position == position
