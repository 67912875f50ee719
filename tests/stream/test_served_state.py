"""Actors whose committed state is served over a socket (``state_reads="served"``, the
path of actors on compute nodes in other processes) keep their MVs exact, and really
read through the service. The whole cross-shape oracle also runs this way
(``test_oracle.py``, ``p3-served``)."""

from __future__ import annotations

import pytest

import rivulet
from rivulet.engine import Engine, EngineOptions


def test_mvs_read_their_state_through_the_service_and_stay_exact() -> None:
    con = rivulet.connect(slots=2, deterministic=True, state_reads="served")
    try:
        engine = con._thread.engine  # type: ignore[attr-defined]
        service = engine.state_service.service
        con.execute("CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT)")
        con.execute("CREATE TABLE b (k INT PRIMARY KEY, name VARCHAR)")
        views = {
            "per_k": "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM a GROUP BY k",
            "joined": "SELECT a.id, a.v, b.name FROM a JOIN b ON a.k = b.k",
            "top": "SELECT id, v FROM a ORDER BY v DESC, id LIMIT 3",
        }
        for name, query in views.items():
            con.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        before = service.requests
        con.execute("INSERT INTO b VALUES (1, 'one'), (2, 'two')")
        con.execute("INSERT INTO a SELECT i, i % 3, i * 7 % 11 FROM generate_series(1, 60) t(i)")
        con.execute("UPDATE a SET v = v + 100, k = (k + 1) % 3 WHERE id % 4 = 0")
        con.execute("DELETE FROM a WHERE id % 5 = 0")
        con.execute("UPDATE b SET name = 'uno' WHERE k = 1")
        con.execute("FLUSH")
        # The epochs after the first read committed rows: through the service.
        assert service.requests > before
        for name, query in views.items():
            got = sorted(con.execute(f"SELECT * FROM {name}").fetchall())
            want = sorted(con.execute(query).fetchall())
            assert got == want, name
    finally:
        con.close()


def test_an_unknown_state_read_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="state_reads"):
        Engine(None, EngineOptions(state_reads="remote"))
