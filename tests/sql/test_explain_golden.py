"""Golden EXPLAIN files for the streaming planner: for each representative
materialized-view query, ``EXPLAIN CREATE MATERIALIZED VIEW m AS <query>`` is compared,
line for line, with ``tests/sql/explain/<case>.txt`` (a header of ``--`` lines naming the
settings and the statement, then the plan).

A deliberate planner change is one command, which rewrites every golden file (and
removes those of cases that no longer exist) instead of comparing::

    RIVULET_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/sql/test_explain_golden.py

Read the diff of the rewritten files before committing them.

The output is deterministic without any normalisation: EXPLAIN numbers fragments within
the plan (the materializing fragment 0) rather than by the ids the job would get, and
names tables and sources rather than giving their ids. The one input that depends on
the machine is the default (adaptive) parallelism, one actor per slot, a slot per core:
the engine is opened with a fixed number of slots so that it is the same everywhere.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rivulet

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "sql" / "explain"
UPDATE = os.environ.get("RIVULET_UPDATE_GOLDEN") == "1"
UPDATE_COMMAND = (
    "RIVULET_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/sql/test_explain_golden.py"
)

# The default parallelism is the cluster's slot count: pinned (see the module docstring).
SLOTS = 2

# Two tables with primary keys (rows can be updated and deleted), one without (keyed by a
# hidden _row_id), a nexmark source, and an MV for the MV-on-MV case.
SETUP = [
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id INT, amount INT,"
    " status VARCHAR, ts TIMESTAMP)",
    "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR, region VARCHAR)",
    "CREATE TABLE events (user_id INT, kind VARCHAR, v INT, ts TIMESTAMP)",
    "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid',"
    " nexmark.event.num = '10')",
    "CREATE MATERIALIZED VIEW order_totals AS"
    " SELECT customer_id, sum(amount) AS total, count(*) AS n FROM orders GROUP BY customer_id",
]


@dataclass(frozen=True)
class Case:
    name: str
    query: str
    settings: tuple[str, ...] = ()  # SET statements run before the EXPLAIN (undone after)


CASES = [
    Case("project_filter", "SELECT id, amount * 2 AS doubled FROM orders WHERE status = 'open'"),
    # orders has a primary key, so its rows can be deleted: min/max cannot just keep the
    # current extreme, string_agg and count DISTINCT need their values.
    Case(
        "group_by_aggregates",
        "SELECT status, count(*) AS n, sum(amount) AS total, min(amount) AS lo,"
        " max(amount) AS hi, string_agg(status, ',') AS statuses,"
        " count(DISTINCT customer_id) AS customers FROM orders GROUP BY status",
    ),
    Case(
        "global_aggregate",
        "SELECT count(*) AS n, sum(amount) AS total, max(amount) AS hi FROM orders",
    ),
    Case(
        "inner_join",
        "SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON o.customer_id = c.id",
    ),
    Case(
        "left_join",
        "SELECT o.id, o.amount, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id",
    ),
    Case(
        "join_then_aggregate",
        "SELECT c.region, count(*) AS n, sum(o.amount) AS total FROM orders o"
        " JOIN customers c ON o.customer_id = c.id GROUP BY c.region",
    ),
    Case("distinct", "SELECT DISTINCT kind, user_id FROM events"),
    Case(
        "union_all",
        "SELECT user_id AS id, v FROM events UNION ALL"
        " SELECT customer_id AS id, amount AS v FROM orders",
    ),
    Case("top_n", "SELECT id, amount FROM orders ORDER BY amount DESC LIMIT 10"),
    Case(
        "group_top_n",
        "SELECT id, customer_id, amount FROM (SELECT id, customer_id, amount,"
        " row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn"
        " FROM orders) WHERE rn <= 3",
    ),
    Case(
        "group_top_n_with_rank",
        "SELECT * FROM (SELECT id, customer_id, amount,"
        " row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn"
        " FROM orders) WHERE rn <= 3",
    ),
    Case(
        "tumble_window_aggregate",
        "SELECT window_start, window_end, count(*) AS n, sum(v) AS total"
        " FROM TUMBLE(events, ts, INTERVAL '10' MINUTE) GROUP BY window_start, window_end",
    ),
    Case(
        "over_window",
        "SELECT id, customer_id, amount,"
        " sum(amount) OVER (PARTITION BY customer_id ORDER BY id) AS running,"
        " lag(amount) OVER (PARTITION BY customer_id ORDER BY id) AS prev FROM orders",
    ),
    Case("mv_on_mv", "SELECT customer_id, total FROM order_totals WHERE n > 1"),
    Case(
        "source_aggregate",
        "SELECT auction, count(*) AS n, max(price) AS top FROM bid GROUP BY auction",
    ),
    # An explicit parallelism sets the actors of every hash fragment; a singleton fragment
    # (the top-n over all groups) keeps one.
    Case(
        "parallelism_4",
        "SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id"
        " ORDER BY total DESC LIMIT 5",
        settings=("SET streaming_parallelism = 4",),
    ),
]


@pytest.fixture(scope="module")
def con() -> Iterator[rivulet.Connection]:
    # Deterministic: no timer barriers or worker threads (EXPLAIN only plans; nothing runs).
    with rivulet.connect(deterministic=True, slots=SLOTS) as c:
        for statement in SETUP:
            c.execute(statement)
        yield c


def statement(case: Case) -> str:
    return f"EXPLAIN CREATE MATERIALIZED VIEW m AS {case.query}"


def explain(con: rivulet.Connection, case: Case) -> list[str]:
    """The golden text of ``case``: its header, then the plan, one line per row."""
    for setting in case.settings:
        con.execute(setting)
    try:
        rows = con.execute(statement(case)).fetchall()
    finally:
        for setting in case.settings:
            name = setting.split()[1]
            con.execute(f"SET {name} = DEFAULT")
    header = [f"-- {setting}" for setting in case.settings] + [f"-- {statement(case)}"]
    return header + [line for (line,) in rows]


def check_golden(path: Path, actual: list[str]) -> None:
    """Compare ``actual`` with the golden file (or rewrite it in update mode)."""
    text = "\n".join(actual) + "\n"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; create it with:\n  {UPDATE_COMMAND}")
    expected = path.read_text().splitlines()
    if expected != actual:
        diff = "\n".join(
            difflib.unified_diff(
                expected,
                actual,
                fromfile=str(path.relative_to(REPO)),
                tofile="EXPLAIN output",
                lineterm="",
            )
        )
        pytest.fail(
            f"EXPLAIN differs from {path.name}:\n{diff}\n\n"
            f"If the planner change is deliberate, update the golden files with:\n"
            f"  {UPDATE_COMMAND}",
            pytrace=False,
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_explain_matches_golden(con: rivulet.Connection, case: Case) -> None:
    check_golden(GOLDEN_DIR / f"{case.name}.txt", explain(con, case))


def test_every_golden_file_has_a_case() -> None:
    names = {c.name for c in CASES}
    assert len(names) == len(CASES), "two cases share a golden file"
    orphans = sorted(p for p in GOLDEN_DIR.glob("*.txt") if p.stem not in names)
    if UPDATE:
        for p in orphans:
            p.unlink()
        return
    assert not orphans, (
        f"golden files without a case: {[p.name for p in orphans]}; remove them with:\n"
        f"  {UPDATE_COMMAND}"
    )


def test_explain_does_not_depend_on_earlier_jobs() -> None:
    """Object and fragment ids differ when other jobs were created first: the text does
    not (this is why the golden files need no normalisation)."""
    case = next(c for c in CASES if c.name == "join_then_aggregate")
    with rivulet.connect(deterministic=True, slots=SLOTS) as fresh:
        fresh.execute("CREATE TABLE other (k INT PRIMARY KEY, v INT)")
        fresh.execute(
            "CREATE MATERIALIZED VIEW other_mv AS SELECT v, count(*) AS n FROM other GROUP BY v"
        )
        for statement_text in SETUP:
            fresh.execute(statement_text)
        shifted = explain(fresh, case)
    path = GOLDEN_DIR / f"{case.name}.txt"
    if not UPDATE:
        assert shifted == path.read_text().splitlines()
