"""Reschedule pause: ALTER MATERIALIZED VIEW ... SET PARALLELISM while a source streams.

    python bench/reschedule.py [--groups 10000 1000000] [--rounds 5]

For each group count: a ``datagen`` table streaming 20,000 rows/s, an aggregation MV
over it with that many groups of state (filled first), then ALTERs 1 -> 2 -> 1 ...
``--rounds`` times each. Printed: the ALTER's latency (statement start to its return,
the new layout committed) p50/max; the longest gap between two chunks the source
emitted around each ALTER (ingestion stalls while the dataflow is rebuilt) next to the
source's usual gap (it emits about every 0.5 s at this rate); and the rows ingested in
the 5 s after each ALTER as a share of the 5 s before it (the throughput dip). State is
read lazily by vnode, so the figures should not grow with the group count.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import rivulet
from rivulet.stream.executors.source import SourceExecutor

_emitted: list[tuple[float, int]] = []  # (when, rows) per chunk the source emitted
_original_emit = SourceExecutor._emit


async def _timed_emit(self, plan, **kwargs):  # type: ignore[no-untyped-def]
    chunk = await _original_emit(self, plan, **kwargs)
    _emitted.append((time.perf_counter(), chunk.num_rows))
    return chunk


def _rows_between(start: float, end: float) -> int:
    return sum(n for t, n in _emitted if start <= t < end)


def _longest_gap(start: float, end: float) -> float:
    around = [t for t, _ in _emitted if start <= t <= end]
    return max((b - a for a, b in itertools.pairwise(around)), default=0.0)


SourceExecutor._emit = _timed_emit  # type: ignore[method-assign]


def run(groups: int, rounds: int) -> dict[str, list[float]]:
    con = rivulet.connect(workers=1, slots=2)
    # The state: one group per k, filled before the clock starts.
    con.execute("CREATE TABLE seed (k BIGINT, v BIGINT)")
    con.execute(
        "CREATE TABLE s (k BIGINT, v BIGINT) WITH (connector = 'datagen',"
        " datagen.rows.per.second = '20000', fields.k.min = '0',"
        f" fields.k.max = '{groups - 1}', fields.v.min = '0', fields.v.max = '1000')"
    )
    con.execute(f"INSERT INTO seed SELECT i, i FROM generate_series(0, {groups - 1}) AS g(i)")
    con.execute(
        "CREATE MATERIALIZED VIEW m AS SELECT k, count(*) AS n, sum(v) AS total"
        " FROM (SELECT k, v FROM s UNION ALL SELECT k, v FROM seed) AS x GROUP BY k"
    )
    con.execute("ALTER MATERIALIZED VIEW m SET PARALLELISM = 1")
    time.sleep(5.0)
    figures: dict[str, list[float]] = {"latency": [], "gap": [], "usual_gap": [], "dip": []}
    for i in range(2 * rounds):
        before = time.perf_counter()
        con.execute(f"ALTER MATERIALIZED VIEW m SET PARALLELISM = {2 if i % 2 == 0 else 1}")
        after = time.perf_counter()
        time.sleep(5.0)
        figures["latency"].append(after - before)
        figures["gap"].append(_longest_gap(before - 1.0, after + 1.0))
        steady = [b - a for (a, _), (b, _) in itertools.pairwise(_emitted) if b < before - 1.0]
        figures["usual_gap"].append(statistics.median(steady[-20:]))
        rows_before = _rows_between(before - 5.0, before)
        figures["dip"].append(_rows_between(after, after + 5.0) / max(rows_before, 1))
    n = con.execute("SELECT count(*) FROM m").fetchone()
    assert n is not None and n[0] == groups
    con.close()
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--groups", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    base = None
    for groups in args.groups:
        f = run(groups, args.rounds)
        p50 = statistics.median(f["latency"])
        base = base or p50
        print(
            f"{groups:>9,} groups: ALTER p50 {p50 * 1000:4.0f} ms, max"
            f" {max(f['latency']) * 1000:4.0f} ms (x{p50 / base:.2f} the first);"
            f" longest ingestion gap p50 {statistics.median(f['gap']) * 1000:4.0f} ms,"
            f" max {max(f['gap']) * 1000:4.0f} ms (usual gap"
            f" {statistics.median(f['usual_gap']) * 1000:.0f} ms); rows ingested in the 5 s"
            f" after vs before: p50 {statistics.median(f['dip']):.0%}, min {min(f['dip']):.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
