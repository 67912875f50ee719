"""HOP and TUMBLE window MVs against an oracle computed in plain Python from the base
table's rows, after every statement, at parallelism 1 and 4.

RisingWave's semantics: windows start at multiples of the slide (TUMBLE: of the size,
plus the offset) counted from 1970-01-01 00:00:00 (UTC for timestamptz); a row belongs to
every window with ``window_start <= t < window_start + size``; HOP drops rows whose time
is NULL, TUMBLE keeps them with NULL windows. The oracle enumerates candidate windows by
brute force rather than computing the first one, so it shares no formula with the executor.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_oracle import sorted_rows

import rivulet
from rivulet.common.errors import DatabaseError

EPOCH = dt.datetime(1970, 1, 1)
US = dt.timedelta(microseconds=1)
MIN = 60_000_000

TABLES = {
    "t": "CREATE TABLE t (id BIGINT PRIMARY KEY, ts TIMESTAMP, v INT)",
    "z": "CREATE TABLE z (id BIGINT PRIMARY KEY, ts TIMESTAMPTZ, v INT)",
    "d": "CREATE TABLE d (id BIGINT PRIMARY KEY, day DATE, v INT)",
}

# name -> (query, table, kind, slide or size (us), size (us), offset (us), columns of the
# row kept, filter on v)
WINDOWS = {
    "hop": ("SELECT * FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '3' MINUTE)",
            "t", "hop", MIN, 3 * MIN, 0),
    "hop_tz": ("SELECT * FROM HOP(z, ts, INTERVAL '90' SECOND, INTERVAL '270' SECOND)",
               "z", "hop", 90_000_000, 270_000_000, 0),
    "hop_date": ("SELECT * FROM HOP(d, day, INTERVAL '1' DAY, INTERVAL '7' DAY)",
                 "d", "hop", 86_400 * 10**6, 7 * 86_400 * 10**6, 0),
    "hop_offset": ("SELECT * FROM HOP(t, ts, INTERVAL '2' MINUTE, INTERVAL '6' MINUTE,"
                   " INTERVAL '45' SECOND)", "t", "hop", 2 * MIN, 6 * MIN, 45_000_000),
    "hop_tz_offset": ("SELECT * FROM HOP(z, ts, INTERVAL '1' HOUR, INTERVAL '2' HOUR,"
                      " INTERVAL '-10' MINUTE)", "z", "hop", 60 * MIN, 120 * MIN, -10 * MIN),
    "tumble": ("SELECT * FROM TUMBLE(t, ts, INTERVAL '7' MINUTE)", "t", "tumble", 7 * MIN,
               7 * MIN, 0),
    "tumble_offset": ("SELECT * FROM TUMBLE(t, ts, INTERVAL '10' MINUTE, INTERVAL '3' MINUTE)",
                      "t", "tumble", 10 * MIN, 10 * MIN, 3 * MIN),
    "tumble_tz": ("SELECT * FROM TUMBLE(z, ts, INTERVAL '1' HOUR)", "z", "tumble", 60 * MIN,
                  60 * MIN, 0),
    "tumble_date": ("SELECT * FROM TUMBLE(d, day, INTERVAL '7' DAY)", "d", "tumble",
                    7 * 86_400 * 10**6, 7 * 86_400 * 10**6, 0),
}  # fmt: skip


# The random scripts check a subset (every statement costs a checkpoint per MV).
RANDOM_WINDOWS = {
    k: WINDOWS[k] for k in ("hop", "hop_tz", "hop_date", "hop_offset", "tumble_offset")
}


def _micros(t: dt.datetime | dt.date) -> int:
    if isinstance(t, dt.datetime) and t.tzinfo is not None:
        return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // US
    if not isinstance(t, dt.datetime):
        t = dt.datetime(t.year, t.month, t.day)
    return (t - EPOCH) // US


def _from_micros(us: int, like: object) -> dt.datetime:
    t = EPOCH + dt.timedelta(microseconds=us)
    if isinstance(like, dt.datetime) and like.tzinfo is not None:
        return t.replace(tzinfo=dt.UTC).astimezone(like.tzinfo)
    return t


def expected(base: list[tuple], kind: str, slide: int, size: int, offset: int) -> list[tuple]:
    """The windowed rows, by brute force over candidate window numbers."""
    out = []
    for row in base:
        t = row[1]
        if t is None:
            if kind == "tumble":
                out.append((*row, None, None))
            continue
        us = _micros(t)
        first = (us - size - offset) // slide - 1
        for k in range(first, first + size // slide + 3):
            start = k * slide + offset
            if start <= us < start + size:
                out.append((*row, _from_micros(start, t), _from_micros(start + size, t)))
    return sorted(out, key=repr)


def _setup(con: rivulet.Connection, windows: dict = WINDOWS) -> rivulet.Cursor:
    cur = con.cursor()
    cur.execute("SET TimeZone = 'UTC'")
    for ddl in TABLES.values():
        cur.execute(ddl)
    for name, (q, *_) in windows.items():
        cur.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {q}")
    return cur


def _check(cur: rivulet.Cursor, after: str, windows: dict = WINDOWS) -> None:
    for name, (q, table, kind, slide, size, offset) in windows.items():
        got = sorted_rows(cur, f"SELECT * FROM mv_{name}")
        want = expected(sorted_rows(cur, f"SELECT * FROM {table}"), kind, slide, size, offset)
        assert got == want, f"mv_{name} differs after {after!r}"
        # The same query as a batch SELECT (the binder's rewrite) gives the same rows.
        assert sorted_rows(cur, q) == want, f"batch {q!r} differs after {after!r}"


@pytest.fixture
def con():  # type: ignore[no-untyped-def]
    """Four actors per hash fragment (2 workers x 2 slots): the scripted tests run in
    parallel; the random tests run at parallelism 1 and 4."""
    c = rivulet.connect(workers=2, slots=2)
    yield c
    c.close()


def test_windows_follow_a_fixed_script(con: rivulet.Connection) -> None:
    cur = _setup(con)
    on_mv = "SELECT id, window_start, v * 2 AS v2 FROM mv_hop WHERE v > 1"
    cur.execute(f"CREATE MATERIALIZED VIEW mv_on_hop AS {on_mv}")
    top = "SELECT id, window_start FROM mv_hop ORDER BY window_start DESC, id LIMIT 4"
    cur.execute(f"CREATE MATERIALIZED VIEW mv_top_hop AS {top}")
    # The classic use: an aggregate per window, straight over HOP.
    per_window = (
        "SELECT window_start, count(*) AS n, sum(v) AS s "
        "FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '3' MINUTE) GROUP BY window_start"
    )
    cur.execute(f"CREATE MATERIALIZED VIEW mv_per_window AS {per_window}")
    script = [
        "INSERT INTO t VALUES (1, '2020-01-01 00:00:00', 1), (2, '2020-01-01 00:01:30', 2), "
        "(3, NULL, 3), (4, '1969-12-31 23:59:59.5', 4), (5, '2020-01-01 00:02:59.999999', 5)",
        "INSERT INTO z VALUES (1, '2020-01-01 00:00:00+02', 1), (2, NULL, 2), "
        "(3, '1969-12-31 23:00:00-03', 3)",
        "INSERT INTO d VALUES (1, '2020-01-01', 1), (2, '1969-12-25', 2), (3, NULL, 3)",
        "UPDATE t SET v = 10 WHERE id = 2",  # same windows: update pairs per window
        "UPDATE t SET ts = ts + INTERVAL '1' MINUTE WHERE id = 1",  # windows shift by one
        "UPDATE t SET ts = ts + INTERVAL '1' HOUR WHERE id = 2",  # no window in common
        "UPDATE t SET ts = NULL WHERE id = 5",  # leaves every window
        "UPDATE t SET ts = '2020-01-01 00:00:00' WHERE id = 3",  # enters
        "UPDATE z SET ts = ts - INTERVAL '45' SECOND",
        "UPDATE d SET day = day + 3",
        "DELETE FROM t WHERE id IN (1, 4)",
        "DELETE FROM z WHERE id = 3",
    ]
    for stmt in script:
        cur.execute(stmt)
        _check(cur, stmt)
        # mv_hop itself was just checked against the Python oracle.
        assert sorted_rows(cur, "SELECT * FROM mv_on_hop") == sorted_rows(cur, on_mv), stmt
        assert sorted_rows(cur, "SELECT * FROM mv_top_hop") == sorted_rows(
            cur,
            "SELECT id, window_start FROM mv_hop ORDER BY window_start DESC, id LIMIT 4",
        ), stmt
        hop_rows = expected(sorted_rows(cur, "SELECT * FROM t"), "hop", MIN, 3 * MIN, 0)
        counts: dict = {}
        for row in hop_rows:
            n, total = counts.get(row[3], (0, 0))
            counts[row[3]] = (n + 1, total + (row[2] or 0))
        want = sorted(((w, n, total) for w, (n, total) in counts.items()), key=repr)
        got = [
            (w, n, int(total)) for w, n, total in sorted_rows(cur, "SELECT * FROM mv_per_window")
        ]
        assert got == want, stmt


def test_window_arguments_are_checked() -> None:
    con = rivulet.connect(workers=1, slots=1)
    try:
        cur = con.cursor()
        cur.execute(TABLES["t"])
        bad = [
            ("SELECT * FROM HOP(t, ts, INTERVAL '2' MINUTE, INTERVAL '3' MINUTE)", "22023"),
            ("SELECT * FROM HOP(t, ts, INTERVAL '0' MINUTE, INTERVAL '3' MINUTE)", "22023"),
            ("SELECT * FROM TUMBLE(t, v, INTERVAL '1' MINUTE)", "42883"),
            ("SELECT * FROM HOP(t, ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE, "
             "INTERVAL '1' SECOND, INTERVAL '1' SECOND)", "42601"),
            ("SELECT * FROM TUMBLE(t, ts, 5)", "42601"),
            ("SELECT * FROM TUMBLE(t, nope, INTERVAL '1' MINUTE)", "42703"),
            ("SELECT * FROM TUMBLE(nope, ts, INTERVAL '1' MINUTE)", "42P01"),
        ]  # fmt: skip
        for q, state in bad:
            # A materialized view and a batch query refuse it alike (sql/windows.py).
            with pytest.raises(DatabaseError) as err:
                cur.execute(f"CREATE MATERIALIZED VIEW m AS {q}")
            assert err.value.sqlstate == state, q
            with pytest.raises(DatabaseError) as batch_err:
                cur.execute(q)
            assert str(batch_err.value) == str(err.value), q
            assert batch_err.value.sqlstate == state, q
    finally:
        con.close()


BASE = dt.datetime(2020, 1, 1)


@st.composite
def statements(draw: st.DrawFn) -> str:
    table = draw(st.sampled_from(["t", "t", "z", "d"]))
    col = "day" if table == "d" else "ts"
    ident = draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["insert", "insert", "move", "value", "delete"]))
    if kind == "insert":
        rows = draw(st.lists(st.tuples(st.integers(1, 6), _times(table)), min_size=1, max_size=4))
        values = ", ".join(f"({i}, {t}, {i * 3 % 5})" for i, t in rows)
        return f"INSERT INTO {table} VALUES {values}"
    if kind == "move":
        return f"UPDATE {table} SET {col} = {draw(_times(table))} WHERE id = {ident}"
    if kind == "value":
        return f"UPDATE {table} SET v = v + 1 WHERE id = {ident}"
    return f"DELETE FROM {table} WHERE id = {ident}"


def _times(table: str) -> st.SearchStrategy[str]:
    if table == "d":
        days = st.integers(-20, 20).map(lambda n: f"DATE '2020-01-01' + {n}")
        return st.one_of(st.just("NULL"), days)
    secs = st.integers(-600, 600).map(
        lambda s: (
            f"'{(BASE + dt.timedelta(seconds=s * 7.5)).isoformat(sep=' ')}"
            + ("+00'" if table == "z" else "'")
        )
    )
    return st.one_of(st.just("NULL"), secs)


@pytest.mark.parametrize("parallel", [False, True], ids=["p1", "p4"])
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=st.lists(statements(), min_size=6, max_size=12))
def test_random_changes_match_the_oracle(parallel: bool, script: list[str]) -> None:
    con = rivulet.connect(workers=2, slots=2) if parallel else rivulet.connect(workers=1, slots=1)
    try:
        cur = _setup(con, RANDOM_WINDOWS)
        for stmt in script:
            cur.execute(stmt)
            _check(cur, stmt, RANDOM_WINDOWS)
    finally:
        con.close()


# ---------------------------------------------------- the executor on its own chunks
@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    chunks=st.lists(
        st.lists(
            st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-40, 40))),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=6,
    ),
    units=st.integers(1, 4),
    offset=st.sampled_from([0, 0, 3_000_000, -11_000_000]),
)
def test_executor_output_replays_to_the_windows(chunks: list, units: int, offset: int) -> None:
    """Chunks of inserts, deletes and update pairs (times may move, appear or vanish):
    replaying the output keyed by (id, window_start) gives every row's windows."""
    import numpy as np
    import pyarrow as pa

    from rivulet.common.chunk import Op, StreamChunk
    from rivulet.common.types import BIGINT, TIMESTAMP
    from rivulet.stream.executor import Field, Schema
    from rivulet.stream.executors.hop_window import HopWindowExecutor

    slide = 7 * 1_000_000
    schema = Schema(
        [Field("id", BIGINT), Field("ts", TIMESTAMP)]
        + [Field("window_start", TIMESTAMP), Field("window_end", TIMESTAMP)]
    )
    ex = HopWindowExecutor(None, schema, None, 1, slide, units * slide, offset)  # type: ignore[arg-type]
    rows: dict[int, int | None] = {}
    out_state: dict[tuple, tuple] = {}
    for changes in chunks:
        ops, ids, times = [], [], []
        for ident, secs in changes:
            t = None if secs is None else secs * 1_000_000
            if ident in rows:
                if secs is not None and secs % 3 == 0:
                    ops += [Op.DELETE]
                    ids += [ident]
                    times += [rows.pop(ident)]
                    continue
                ops += [Op.UPDATE_DELETE, Op.UPDATE_INSERT]
                ids += [ident, ident]
                times += [rows[ident], t]
            else:
                ops += [Op.INSERT]
                ids += [ident]
                times += [t]
            rows[ident] = t
        data = pa.table(
            {"id": pa.array(ids, pa.int64()), "ts": pa.array(times, pa.timestamp("us"))}
        )
        out = ex.apply(StreamChunk(data, np.array(ops, np.int8)))
        out_ops = out.ops.tolist()
        for i, (op, row) in enumerate(zip(out_ops, out.data.to_pylist())):
            if op == Op.UPDATE_DELETE:  # pairs stay adjacent, on one key
                assert out_ops[i + 1] == Op.UPDATE_INSERT
                nxt = out.data.slice(i + 1, 1).to_pylist()[0]
                assert (nxt["id"], nxt["window_start"]) == (row["id"], row["window_start"])
            key = (row["id"], row["window_start"])
            if op in (Op.DELETE, Op.UPDATE_DELETE):
                assert out_state.pop(key) == (row["ts"], row["window_end"])
            else:
                assert key not in out_state
                out_state[key] = (row["ts"], row["window_end"])
        want = {}
        for ident, t in rows.items():
            if t is None:
                continue
            for k in range(t // slide - units - 2, t // slide + 3):
                if k * slide + offset <= t < k * slide + offset + units * slide:
                    start = EPOCH + dt.timedelta(microseconds=k * slide + offset)
                    end = start + dt.timedelta(microseconds=units * slide)
                    want[(ident, start)] = (EPOCH + dt.timedelta(microseconds=t), end)
        assert out_state == want
