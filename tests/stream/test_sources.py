"""Built-in sources (datagen, nexmark): the generators' rules and determinism, and sources
as streaming jobs - tables with a connector, MVs over sources (checked against the batch
oracle), pacing, offsets that survive a restart or recovery, DROP, and bad options."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest
from stream_oracle import differences

import rivulet
from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.errors import Error
from rivulet.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INTEGER,
    NUMERIC,
    SMALLINT,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
)
from rivulet.stream.connectors import ColumnSpec, Connector, open_connector, prepare_source
from rivulet.stream.connectors.nexmark import BASE_TIME_MS, TABLE_COLUMNS
from rivulet.stream.executors.source import SourceExecutor


# ------------------------------------------------------------------- helpers
def connector(
    name: str, options: dict[str, str], columns: list[tuple[str, DataType]] | None = None
) -> tuple[Connector, list[str]]:
    """A validated connector and its column names (``_row_id`` last)."""
    cols, opts = prepare_source(name, {"connector": name, **options}, columns)
    specs = [ColumnSpec(n, t) for n, t in cols] + [ColumnSpec(ROW_ID_COLUMN, BIGINT)]
    return open_connector(name, opts, specs), [s.name for s in specs]


def read_all(conn: Connector, names: list[str], chunk: int = 997) -> pa.Table:
    """Every row of every split, read in odd-sized chunks."""
    parts = []
    for split in range(conn.split_num):
        end = conn.end_offset(split)
        assert end is not None
        offset = 0
        while offset < end:
            batch = conn.read(split, offset, chunk, names)
            parts.append(batch.data)
            offset = batch.next_offset
    return pa.concat_tables(parts).sort_by(ROW_ID_COLUMN)


def nexmark(kind: str, events: int, **extra: str) -> tuple[Connector, list[str]]:
    opts = {"nexmark.table.type": kind, "nexmark.event.num": str(events)}
    return connector("nexmark", {**opts, **extra})


def rows(conn: rivulet.Connection, sql: str) -> list[tuple[object, ...]]:
    return conn.execute(sql).fetchall()


def count(conn: rivulet.Connection, table: str) -> int:
    return int(rows(conn, f"SELECT count(*) FROM {table}")[0][0])


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def multiset(conn: rivulet.Connection, sql: str) -> Counter[tuple[object, ...]]:
    return Counter(rows(conn, sql))


@pytest.fixture
def conn() -> Iterator[rivulet.Connection]:
    c = rivulet.connect(workers=1, slots=2, barrier_interval_ms=250)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[rivulet.Connection]:
    """For statements that must fail and change nothing."""
    c = rivulet.connect(workers=1, slots=2, barrier_interval_ms=50)
    try:
        yield c
    finally:
        c.close()


# ------------------------------------------------------------------- datagen
def test_datagen_sequence_is_split_without_gaps_or_repeats() -> None:
    conn, names = connector(
        "datagen",
        {
            "fields.v.kind": "sequence",
            "fields.v.start": "5",
            "fields.v.end": "104",
            "fields.w.kind": "sequence",
            "fields.w.start": "-3",
            "datagen.split.num": "3",
        },
        [("v", INTEGER), ("w", BIGINT)],
    )
    data = read_all(conn, names)
    assert data.column("v").to_pylist() == list(range(5, 105))
    assert data.column("w").to_pylist() == list(range(-3, 97))
    assert data.column(ROW_ID_COLUMN).to_pylist() == list(range(100))
    assert sum(conn.end_offset(s) or 0 for s in range(3)) == 100


def test_datagen_random_values_are_seeded_bounded_and_replayable() -> None:
    columns = [
        ("i", SMALLINT), ("f", DOUBLE), ("n", NUMERIC), ("s", VARCHAR), ("b", BOOLEAN),
        ("t", TIMESTAMP), ("tz", TIMESTAMPTZ), ("k", BIGINT),
    ]  # fmt: skip
    options = {
        "fields.i.min": "-5", "fields.i.max": "5", "fields.i.seed": "7",
        "fields.f.min": "1.5", "fields.f.max": "2.5",
        "fields.n.min": "0.25", "fields.n.max": "1000",
        "fields.s.length": "13",
        "fields.t.max_past": "1h 30min", "fields.t.basetime": "2024-05-01T12:00:00Z",
        "fields.tz.basetime": "2024-05-01T12:00:00+02:00",
        "fields.k.kind": "sequence", "fields.k.end": "4999",
    }  # fmt: skip
    conn, names = connector("datagen", options, columns)
    data = read_all(conn, names)
    assert data.num_rows == 5000
    i = np.array(data.column("i").to_pylist())
    assert i.min() == -5 and i.max() == 5 and len(set(i)) == 11
    f = np.array(data.column("f").to_pylist())
    assert (f >= 1.5).all() and (f < 2.5).all()
    n = [float(x) for x in data.column("n").to_pylist()]
    assert min(n) >= 0.25 and max(n) <= 1000
    assert {len(s) for s in data.column("s").to_pylist()} == {13}
    assert all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in data.column("s").to_pylist())
    assert 0.4 < np.mean(data.column("b").to_pylist()) < 0.6
    base = np.datetime64("2024-05-01T12:00:00")
    t = np.array(data.column("t").to_pylist(), dtype="datetime64[us]")
    assert (t <= base).all() and (t >= base - np.timedelta64(90, "m")).all()
    tz = data.column("tz").cast(pa.timestamp("us")).to_numpy()
    assert (tz <= np.datetime64("2024-05-01T10:00:00")).all()
    # The same options replay the same rows, whatever the chunking...
    again, _ = connector("datagen", options, columns)
    assert read_all(again, names, chunk=4096).equals(data)
    # ...and another seed draws other values; columns draw independently.
    reseeded, _ = connector("datagen", {**options, "fields.i.seed": "8"}, columns)
    assert read_all(reseeded, names).column("i").to_pylist() != i.tolist()
    assert data.column("i").to_pylist() != data.column("k").to_pylist()


def test_datagen_pacing_shares_the_rate_between_splits() -> None:
    conn, _ = connector(
        "datagen", {"datagen.rows.per.second": "10", "datagen.split.num": "3"}, [("v", INTEGER)]
    )
    # 10 rows/s over 3 splits: 4, 3 and 3 rows a second.
    assert [conn.due_offset(s, 0, 1.0) for s in range(3)] == [4, 3, 3]
    assert conn.due_offset(0, 100, 2.5) == 110
    assert conn.due_time(1, 0, 0) == pytest.approx(1 / 3)
    assert conn.end_offset(0) is None  # no sequence: never ends


# ------------------------------------------------------------------- nexmark
def test_nexmark_schemas_are_risingwaves() -> None:
    def names(kind: str) -> list[tuple[str, str]]:
        return [(n, t.name) for n, t in TABLE_COLUMNS[kind]]

    ts, i64, text = "timestamp without time zone", "bigint", "character varying"
    assert names("Person") == [
        ("id", i64), ("name", text), ("email_address", text), ("credit_card", text),
        ("city", text), ("state", text), ("date_time", ts), ("extra", text),
    ]  # fmt: skip
    assert names("Auction") == [
        ("id", i64), ("item_name", text), ("description", text), ("initial_bid", i64),
        ("reserve", i64), ("date_time", ts), ("expires", ts), ("seller", i64),
        ("category", i64), ("extra", text),
    ]  # fmt: skip
    assert names("Bid") == [
        ("auction", i64), ("bidder", i64), ("price", i64), ("channel", text), ("url", text),
        ("date_time", ts), ("extra", text),
    ]  # fmt: skip


def _event_ms(data: pa.Table) -> np.ndarray:
    return data.column("date_time").cast(pa.int64()).to_numpy() // 1000


def test_nexmark_events_follow_the_generator_rules() -> None:
    events = 20_000
    person, p_names = nexmark("Person", events, **{"nexmark.split.num": "2"})
    auction, a_names = nexmark("Auction", events)
    bid, b_names = nexmark("Bid", events, **{"nexmark.split.num": "3"})
    people, auctions, bids = (read_all(person, p_names), read_all(auction, a_names),
                              read_all(bid, b_names))  # fmt: skip

    # 1 person, 3 auctions, 46 bids in every 50 events; event.num bounds them all.
    assert (people.num_rows, auctions.num_rows, bids.num_rows) == (400, 1200, 18400)
    pn = people.column(ROW_ID_COLUMN).to_numpy()
    an = auctions.column(ROW_ID_COLUMN).to_numpy()
    bn = bids.column(ROW_ID_COLUMN).to_numpy()
    assert (pn % 50 == 0).all() and ((an % 50 >= 1) & (an % 50 <= 3)).all()
    assert (bn % 50 >= 4).all() and bn.max() < events and len(set(bn)) == len(bn)

    # Ids: person 1000 + n // 50; auctions numbered from 1000 in event order.
    assert (people.column("id").to_numpy() == 1000 + pn // 50).all()
    assert auctions.column("id").to_pylist() == list(range(1000, 2200))
    # Event n happens at base time + n * 100 µs (10,000 events per second).
    for data, n in ((people, pn), (auctions, an), (bids, bn)):
        ms = _event_ms(data)
        assert (np.abs(ms - (BASE_TIME_MS + n / 10)) <= 1).all()
        assert (np.diff(ms) >= 0).all()

    # Bids: recent auctions and people, prices from 100 to 100,000,000 cents.
    price = bids.column("price").to_numpy()
    assert price.min() >= 100 and price.max() <= 100_000_000 and price.max() > 1_000_000
    last_auction = (bn // 50) * 3 + 2  # the latest auction id (base 0) at each bid
    auction_ids = bids.column("auction").to_numpy() - 1000
    assert (auction_ids >= 0).all() and (auction_ids <= last_auction + 10).all()
    assert 0.4 < np.mean(auction_ids % 100 == 0) < 0.6  # half go to hot auctions
    bidders = bids.column("bidder").to_numpy() - 1000
    assert (bidders >= 0).all() and (bidders <= bn // 50 + 1 + 10).all()
    channels = Counter(bids.column("channel").to_pylist())
    assert {"Google", "Facebook", "Baidu", "Apple"} <= set(channels)
    assert all(u.startswith("https://www.nexmark.com/") for u in bids.column("url").to_pylist())
    extra = [len(e) for e in bids.column("extra").to_pylist()]
    assert min(extra) >= 54 and max(extra) <= 82

    # Auctions: categories 10..14, reserve above the initial bid, expiry after creation.
    assert set(auctions.column("category").to_pylist()) == {10, 11, 12, 13, 14}
    initial, reserve = auctions.column("initial_bid").to_numpy(), auctions.column("reserve")
    assert (reserve.to_numpy() > initial).all()
    expires = auctions.column("expires").cast(pa.int64()).to_numpy() // 1000
    assert (expires > _event_ms(auctions)).all()
    assert {len(s) for s in auctions.column("item_name").to_pylist()} == {20}
    sellers = auctions.column("seller").to_numpy()
    assert (sellers >= 1000).all() and (sellers <= 1000 + an // 50 + 1 + 10).all()

    # People: names, emails and cards of the generator's shapes.
    assert all(re.fullmatch(r"[a-z]+ [a-z]+", s) for s in people.column("name").to_pylist())
    assert all(
        re.fullmatch(r"[a-z]{7}@[a-z]{5}\.com", s)
        for s in people.column("email_address").to_pylist()
    )
    assert all(
        re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", s)
        for s in people.column("credit_card").to_pylist()
    )
    assert set(people.column("state").to_pylist()) <= {"az", "ca", "id", "or", "wa", "wy"}


def test_nexmark_replays_the_same_events_from_any_offset() -> None:
    bid, names = nexmark("Bid", 5000, **{"nexmark.split.num": "2"})
    whole = bid.read(1, 0, 2000, names).data
    parts, offset = [], 0
    for n in (1, 13, 700, 1286):
        batch = bid.read(1, offset, n, names)
        parts.append(batch.data)
        offset = batch.next_offset
    assert pa.concat_tables(parts).equals(whole)
    # Declared columns are a subset of the type's, in any order.
    subset, sub_names = connector(
        "nexmark",
        {"nexmark.table.type": "bid", "nexmark.split.num": "2"},
        [("price", BIGINT), ("auction", INTEGER)],
    )
    mine = subset.read(1, 0, 2000, sub_names).data
    assert mine.column("price").equals(whole.column("price"))


def test_nexmark_pacing_follows_the_event_gap() -> None:
    bid, _ = nexmark("Bid", 10**9, **{"nexmark.min.event.gap.in.ns": "1000000"})
    # 1,000 events a second, 46 of every 50 bids: about 920 bids after a second.
    assert bid.due_offset(0, 0, 1.0) == pytest.approx(920, abs=2)
    fast, _ = nexmark("Bid", 10**9, **{"nexmark.min.event.gap.in.ns": "0"})
    assert fast.due_offset(0, 0, 1.0) is None


# -------------------------------------------------------------- as jobs: DDL
def test_create_source_is_a_catalog_entry(conn: rivulet.Connection) -> None:
    conn.execute(
        "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid')"
        " FORMAT PLAIN ENCODE JSON"
    )
    conn.execute(
        "CREATE SOURCE IF NOT EXISTS gen (v INT, WATERMARK FOR v AS v - 1) WITH ("
        " connector = 'datagen', fields.v.kind = 'sequence', datagen.rows.per.second = '5')"
    )
    conn.execute("CREATE SOURCE IF NOT EXISTS gen (v INT) WITH (connector = 'datagen')")
    assert rows(conn, "SHOW SOURCES") == [("bid",), ("gen",)]
    assert rows(conn, "SELECT name FROM rw_sources ORDER BY name") == [("bid",), ("gen",)]
    assert [r[0] for r in rows(conn, "SHOW COLUMNS FROM bid")] == [
        "auction", "bidder", "price", "channel", "url", "date_time", "extra",
    ]  # fmt: skip
    assert ("_row_id", "bigint", "true", None) in rows(conn, "DESCRIBE bid")
    with pytest.raises(Error) as err:
        conn.execute("SELECT * FROM bid")
    assert err.value.sqlstate == "0A000" and "materialized view" in (err.value.hint or "")
    with pytest.raises(Error) as err:
        conn.execute("CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid')")
    assert err.value.sqlstate == "42P07"
    assert rows(conn, "SHOW TABLES") == []  # no job, no table: nothing runs for a source


BAD = [
    ("CREATE SOURCE s (v INT) WITH (connector = 'kafkaesque')", "22023", "unknown connector"),
    ("CREATE SOURCE s (v INT)", "42601", "connector"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', datagen.rows.per.secnd = '5')",
     "42601", "datagen.rows.per.secnd"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', datagen.rows.per.second = 'lots')",
     "22023", "datagen.rows.per.second"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', fields.v.kind = 'zigzag')",
     "22023", "fields.v.kind"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', fields.w.kind = 'sequence')",
     "42703", "fields.w.kind"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', fields.v.min = '9', fields.v.max = '1')",
     "22023", "min"),
    ("CREATE SOURCE s (v SMALLINT) WITH (connector = 'datagen', fields.v.max = '70000')",
     "22023", "fields.v.max"),
    ("CREATE SOURCE s (v VARCHAR) WITH (connector = 'datagen', fields.v.kind = 'sequence')",
     "0A000", "sequence"),
    ("CREATE SOURCE s (v INT) WITH (connector = 'datagen', fields.v.length = '3')",
     "0A000", "fields.v.length"),
    ("CREATE SOURCE s (v INTERVAL) WITH (connector = 'datagen')", "0A000", "interval"),
    ("CREATE SOURCE s WITH (connector = 'datagen')", "42601", "column list"),
    ("CREATE SOURCE s WITH (connector = 'nexmark')", "0A000", "nexmark.table.type"),
    ("CREATE SOURCE s WITH (connector = 'nexmark', nexmark.table.type = 'Bidder')",
     "22023", "nexmark.table.type"),
    ("CREATE SOURCE s (price BIGINT, colour VARCHAR) WITH (connector = 'nexmark',"
     " nexmark.table.type = 'Bid')", "42703", "colour"),
    ("CREATE SOURCE s (price TIMESTAMP) WITH (connector = 'nexmark', nexmark.table.type = 'Bid')",
     "42804", "price"),
    ("CREATE SOURCE s WITH (connector = 'nexmark', nexmark.table.type = 'Bid',"
     " nexmark.event.num = '-1')", "22023", "nexmark.event.num"),
    ("CREATE SOURCE s (v INT PRIMARY KEY) WITH (connector = 'datagen')", "0A000", "primary key"),
    ("CREATE TABLE t (v INT) WITH (connector = 'datagen', fields.v.start = '3')",
     "0A000", "fields.v.start"),
    ("CREATE TABLE t (v INT, _row_id BIGINT) WITH (connector = 'datagen')", "42701", "_row_id"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "sqlstate", "named"), BAD)
def test_bad_definitions_are_refused_and_change_nothing(
    shared: rivulet.Connection, sql: str, sqlstate: str, named: str
) -> None:
    with pytest.raises(Error) as err:
        shared.execute(sql)
    assert err.value.sqlstate == sqlstate, err.value
    assert named in str(err.value), err.value
    assert rows(shared, "SHOW SOURCES") == [] and rows(shared, "SHOW TABLES") == []


# ------------------------------------------------------------ as jobs: data
DATAGEN_TABLE = (
    "CREATE TABLE {name} (v BIGINT, r INT, s VARCHAR, t TIMESTAMP) WITH (connector = 'datagen',"
    " fields.v.kind = 'sequence', fields.v.start = '1', fields.v.end = '{end}',"
    " fields.r.min = '0', fields.r.max = '9', fields.r.seed = '42', fields.s.length = '4',"
    " fields.t.basetime = '2024-01-01T00:00:00Z', datagen.rows.per.second = '{rate}',"
    " datagen.split.num = '{splits}')"
)


def test_table_with_connector_holds_exactly_the_generated_rows(conn: rivulet.Connection) -> None:
    conn.execute(DATAGEN_TABLE.format(name="t", end=3000, rate=1_000_000, splits=3))
    wait_until(lambda: count(conn, "t") == 3000)
    conn.execute("FLUSH")
    assert count(conn, "t") == 3000  # and nothing more
    gen, names = connector(
        "datagen",
        {
            "fields.v.kind": "sequence", "fields.v.start": "1", "fields.v.end": "3000",
            "fields.r.min": "0", "fields.r.max": "9", "fields.r.seed": "42",
            "fields.s.length": "4", "fields.t.basetime": "2024-01-01T00:00:00Z",
            "datagen.split.num": "3",
        },
        [("v", BIGINT), ("r", INTEGER), ("s", VARCHAR), ("t", TIMESTAMP)],
    )  # fmt: skip
    expected = read_all(gen, names).drop_columns([ROW_ID_COLUMN])
    assert rows(conn, "SELECT v, r, s, t FROM t ORDER BY v") == [
        tuple(r.values()) for r in expected.to_pylist()
    ]
    with pytest.raises(Error) as err:
        conn.execute("INSERT INTO t VALUES (1, 1, 'x', NULL)")
    assert err.value.sqlstate == "0A000"


def test_an_mv_whose_expression_overflows_on_generated_rows_keeps_running(
    conn: rivulet.Connection,
) -> None:
    """Values that make an MV's expression fail are NULL and counted: the job over the
    source is never recovered (it would replay the same rows and fail again forever)."""
    conn.execute(
        "CREATE SOURCE gen (v INT) WITH (connector = 'datagen', fields.v.kind = 'sequence',"
        " fields.v.start = '2147483000', fields.v.end = '2147483647',"
        " datagen.rows.per.second = '1000000')"
    )
    conn.execute("CREATE MATERIALIZED VIEW doubled AS SELECT v, v * 2 AS w FROM gen")
    conn.execute("CREATE TABLE side (id INT PRIMARY KEY)")
    wait_until(lambda: count(conn, "doubled") == 648)
    conn.execute("INSERT INTO side VALUES (1)")
    assert rows(conn, "SELECT count(*) FROM doubled WHERE w IS NOT NULL") == [(0,)]
    assert rows(conn, "SELECT count(*) FROM rw_recovery_events") == [(0,)]
    assert rows(conn, "SELECT error_type, expression, count FROM rw_stream_errors") == [
        ("numeric value out of range", "v * 2", 648)
    ]


def test_table_with_connector_and_primary_key_keeps_the_last_row_per_key(
    conn: rivulet.Connection,
) -> None:
    conn.execute(
        "CREATE TABLE k (id INT PRIMARY KEY, v INT) WITH (connector = 'datagen',"
        " fields.id.min = '1', fields.id.max = '20', fields.v.kind = 'sequence',"
        " fields.v.end = '999', datagen.rows.per.second = '1000000')"
    )
    wait_until(lambda: rows(conn, "SELECT max(v) FROM k")[0][0] == 999)
    got = dict(rows(conn, "SELECT id, v FROM k"))
    gen, names = connector(
        "datagen",
        {"fields.id.min": "1", "fields.id.max": "20", "fields.v.kind": "sequence",
         "fields.v.end": "999"},
        [("id", INTEGER), ("v", INTEGER)],
    )  # fmt: skip
    last = {}
    for r in read_all(gen, names).to_pylist():
        last[r["id"]] = r["v"]
    assert got == last


@pytest.mark.parametrize("slots", [1, 2])
def test_mvs_over_a_connector_table_match_the_oracle(slots: int) -> None:
    conn = rivulet.connect(workers=1, slots=slots, barrier_interval_ms=250)
    try:
        check_mvs_over_connector_tables(conn, join=slots == 1)
    finally:
        conn.close()


def check_mvs_over_connector_tables(conn: rivulet.Connection, *, join: bool) -> None:
    # 1,000 events a second: the views are checked while the rows keep coming.
    pace = "nexmark.min.event.gap.in.ns = '1000000', nexmark.event.num = '10000'"
    conn.execute(
        "CREATE TABLE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid',"
        f" nexmark.split.num = '2', {pace})"
    )
    conn.execute(
        "CREATE TABLE auction (id BIGINT, category BIGINT, seller BIGINT) WITH ("
        f" connector = 'nexmark', nexmark.table.type = 'Auction', {pace})"
    )
    queries = {
        "cheap": "SELECT auction, bidder, price * 2 AS doubled FROM bid WHERE price < 10000",
        "per_auction": "SELECT auction, count(*) AS n, max(price) AS top, sum(price) AS total "
        "FROM bid GROUP BY auction",
        "per_category": "SELECT a.category, count(*) AS n, max(b.price) AS top "
        "FROM bid b JOIN auction a ON b.auction = a.id GROUP BY a.category",
    }
    if not join:  # the join at parallelism 2 is slow on small machines: its own tests
        del queries["per_category"]
    for name, sql in queries.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    seen = []
    for _ in range(2):
        conn.execute("FLUSH")
        for name, sql in queries.items():
            assert differences(conn, name, sql) == 0, name
        seen.append(count(conn, "bid"))
        time.sleep(0.3)
    assert seen[0] < seen[-1]  # checked while the stream flowed
    if join:
        assert sum(n for _, n, _ in rows(conn, "SELECT * FROM per_category")) > 0


def test_mv_over_a_source_gets_the_same_rows_as_a_table(conn: rivulet.Connection) -> None:
    options = (
        "connector = 'datagen', fields.v.kind = 'sequence', fields.v.end = '1999',"
        " fields.r.max = '99', datagen.rows.per.second = '20000', datagen.split.num = '2'"
    )
    conn.execute(f"CREATE SOURCE s (v INT, r INT) WITH ({options})")
    conn.execute(f"CREATE TABLE t (v INT, r INT) WITH ({options})")
    query = "SELECT v, r + v AS w FROM {} WHERE r % 3 <> 0"
    conn.execute(f"CREATE MATERIALIZED VIEW m AS {query.format('s')}")
    wait_until(lambda: count(conn, "t") == 2000)
    expected = multiset(conn, query.format("t"))
    wait_until(lambda: multiset(conn, "SELECT * FROM m") == expected)


def test_sources_pace_themselves(conn: rivulet.Connection) -> None:
    created = time.monotonic()
    conn.execute(
        "CREATE TABLE slow (v INT) WITH (connector = 'datagen', datagen.rows.per.second = '300')"
    )
    conn.execute(
        "CREATE TABLE bids (price BIGINT) WITH (connector = 'nexmark',"
        " nexmark.table.type = 'Bid', nexmark.min.event.gap.in.ns = '2000000')"
    )
    rates = {"slow": 300, "bids": 460}  # 500 events/s, 46 in 50 are bids

    def produced() -> tuple[float, dict[str, int]]:
        """Rows produced by now: FLUSH's barrier follows them all."""
        now = time.monotonic()
        conn.execute("FLUSH")
        return now, {t: count(conn, t) for t in rates}

    wait_until(lambda: all(count(conn, t) > 0 for t in rates))
    t0, n0 = produced()
    time.sleep(2.0)
    t1, n1 = produced()
    for table, rate in rates.items():
        # Never ahead of the pace (a barrier's worth of slack), and not far behind.
        assert n1[table] <= rate * (time.monotonic() - created) + rate * 0.2, table
        assert (n1[table] - n0[table]) / (t1 - t0) >= rate * 0.5, (table, n0, n1)


def test_a_source_waits_for_the_commit_instead_of_running_ahead() -> None:
    """While commits stall, a fast source stops after a couple of epochs (its rows
    wait at the source, not in memory) and passes barriers on; it resumes once they
    commit, and the table holds every row once."""
    conn = rivulet.connect(workers=1, slots=1, barrier_interval_ms=20)
    try:
        engine = conn._thread.engine  # type: ignore[attr-defined]
        store = engine.store
        gate = threading.Event()
        gate.set()
        commit_epoch = store.commit_epoch

        def gated_commit(*args: object, **kwargs: object) -> None:
            gate.wait()
            commit_epoch(*args, **kwargs)

        store.commit_epoch = gated_commit
        conn.execute(DATAGEN_TABLE.format(name="t", end=50_000_000, rate=5_000_000, splits=1))
        sources = [
            actor.root
            for job in engine.runtime.jobs.values()
            for actor in job.actors.values()
            if isinstance(actor.root, SourceExecutor)
        ]
        assert len(sources) == 1
        source = sources[0]
        wait_until(lambda: source.rows_emitted > 0)
        gate.clear()
        time.sleep(1.0)
        stalled = source.rows_emitted
        injected = engine.barrier.write_epoch
        time.sleep(1.0)
        assert source.rows_emitted == stalled
        assert engine.barrier.write_epoch > injected + 5  # barriers went on meanwhile
        gate.set()
        wait_until(lambda: source.rows_emitted > stalled)
        wait_until(lambda: count(conn, "t") > stalled)
        conn.execute("FLUSH")
        assert rows(conn, "SELECT count(*) = count(DISTINCT v), min(v) FROM t") == [(True, 1)]
    finally:
        gate.set()
        conn.close()


def test_offsets_survive_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "data"
    conn = rivulet.connect(path, barrier_interval_ms=250)
    try:
        conn.execute(DATAGEN_TABLE.format(name="t", end=3000, rate=1000, splits=2))
        conn.execute(
            "CREATE SOURCE s (v BIGINT) WITH (connector = 'datagen', fields.v.kind = 'sequence',"
            " fields.v.start = '1', fields.v.end = '3000', datagen.rows.per.second = '1000')"
        )
        conn.execute("CREATE MATERIALIZED VIEW m AS SELECT v FROM s")
        wait_until(lambda: count(conn, "t") > 0)
        before = count(conn, "t")
    finally:
        conn.close()
    assert 0 < before < 3000
    conn = rivulet.connect(path, barrier_interval_ms=250)
    try:
        assert count(conn, "t") >= before
        wait_until(lambda: count(conn, "t") == 3000 and count(conn, "m") == 3000)
        conn.execute("FLUSH")
        for table in ("t", "m"):
            assert rows(
                conn, f"SELECT count(*), count(DISTINCT v), min(v), max(v) FROM {table}"
            ) == [(3000, 3000, 1, 3000)]
    finally:
        conn.close()


def test_recovery_replays_from_the_committed_offsets(conn: rivulet.Connection) -> None:
    conn.execute(DATAGEN_TABLE.format(name="t", end=4000, rate=4000, splits=2))
    conn.execute(
        "CREATE SOURCE s (v BIGINT) WITH (connector = 'datagen', fields.v.kind = 'sequence',"
        " fields.v.start = '1', fields.v.end = '4000', datagen.rows.per.second = '4000')"
    )
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT v FROM s WHERE v % 2 = 0")
    wait_until(lambda: count(conn, "t") > 200)
    conn.execute("RECOVER")
    wait_until(lambda: count(conn, "t") > 2000)
    conn.execute("RECOVER")
    wait_until(lambda: count(conn, "t") == 4000 and count(conn, "m") == 2000)
    conn.execute("FLUSH")
    assert rows(conn, "SELECT count(*), count(DISTINCT v), max(v) FROM t") == [(4000, 4000, 4000)]
    assert rows(conn, "SELECT count(*), count(DISTINCT v), max(v) FROM m") == [(2000, 2000, 4000)]


def test_drop_source_needs_cascade_while_read(conn: rivulet.Connection) -> None:
    conn.execute(
        "CREATE SOURCE s (v INT) WITH (connector = 'datagen', datagen.rows.per.second = '100')"
    )
    conn.execute("CREATE MATERIALIZED VIEW m AS SELECT v FROM s")
    conn.execute("CREATE MATERIALIZED VIEW m2 AS SELECT v FROM m WHERE v > 10")
    with pytest.raises(Error) as err:
        conn.execute("DROP SOURCE s")
    assert err.value.sqlstate == "2BP01"
    with pytest.raises(Error) as err:
        conn.execute("DROP TABLE s")
    assert err.value.sqlstate == "42809"
    assert rows(conn, "SHOW SOURCES") == [("s",)]
    conn.execute("DROP SOURCE s CASCADE")
    assert rows(conn, "SHOW SOURCES") == [] and rows(conn, "SHOW MATERIALIZED VIEWS") == []
    conn.execute("DROP SOURCE IF EXISTS s")
    conn.execute(DATAGEN_TABLE.format(name="t", end=10**6, rate=1000, splits=2))
    wait_until(lambda: count(conn, "t") > 0)
    conn.execute("DROP TABLE t")
    assert rows(conn, "SELECT count(*) FROM rw_actors") == [(0,)]
    conn.execute("FLUSH")


def test_playground_demo_plans_its_views(conn: rivulet.Connection) -> None:
    """The demo's statements are valid: its sources are created, its views planned (they
    run in the slow test and in ``rivulet playground --demo``)."""
    from rivulet.cli.main import DEMO_SETUP

    for sql in DEMO_SETUP:
        if sql.startswith("CREATE SOURCE"):
            conn.execute(sql)
        else:
            assert conn.execute(f"EXPLAIN {sql}").fetchall()
    assert rows(conn, "SHOW SOURCES") == [("auction",), ("bid",), ("person",)]


@pytest.mark.slow
def test_playground_demo_views_all_fill(conn: rivulet.Connection) -> None:
    from rivulet.cli.main import DEMO_QUERIES, setup_demo

    thread = conn._thread  # the embedded engine the demo is set up in
    assert thread.run(setup_demo(thread.engine)) == []
    views = [r[0] for r in rows(conn, "SHOW MATERIALIZED VIEWS")]
    assert len(views) == 5
    wait_until(lambda: all(count(conn, v) > 0 for v in views), timeout=120)
    for query in DEMO_QUERIES:
        conn.execute(query).fetchall()
    assert thread.run(setup_demo(thread.engine)) == []  # again: everything exists already
