"""The statement caches keep repeated statements, and only a few long ones: a long
text's tree is large (a 6,000-row VALUES holds ~30,000 objects), and keeping hundreds of
them held over a GB (120 distinct 6,000-row INSERTs: +1.45 GB before, +138 MB now)."""

from __future__ import annotations

import rivulet
from rivulet.sql.statement_cache import LONG_TEXT_CHARS, StatementCache


def test_least_recently_used_entries_go_first() -> None:
    cache: StatementCache[int] = StatementCache(size=2, long_size=1)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now "b" is the oldest
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3


def test_long_texts_are_bounded_apart_from_short_ones() -> None:
    cache: StatementCache[int] = StatementCache(size=100, long_size=2, text_index=1)
    long_texts = [str(i) * LONG_TEXT_CHARS for i in range(1, 6)]
    cache.put(("query", "SELECT 1"), 0)
    for i, text in enumerate(long_texts):
        cache.put(("query", text), i)
    assert len(cache) == 3
    assert cache.get(("query", "SELECT 1")) == 0
    assert ("query", long_texts[-1]) in cache and ("query", long_texts[-2]) in cache
    assert ("query", long_texts[0]) not in cache


def test_a_session_keeps_few_long_statements_and_repeats_short_ones() -> None:
    with rivulet.connect() as con:
        con.execute("CREATE TABLE t (id BIGINT, v INT)")
        for r in range(12):
            rows = ", ".join(f"({r * 1000 + i}, {i})" for i in range(1000))
            con.execute(f"INSERT INTO t VALUES {rows}")
        for i in range(5):
            con.execute("INSERT INTO t VALUES (%s, %s)", [i, i])
        session = con._session  # type: ignore[attr-defined]
        parsed = session._parse_cache
        long_kept = [k for k in parsed._entries if len(k) >= LONG_TEXT_CHARS]
        assert 0 < len(long_kept) <= parsed.long_size
        assert len(session._bind_cache._long) <= session._bind_cache.long_size
        assert con.execute("SELECT count(*) FROM t").fetchone() == (12_005,)
