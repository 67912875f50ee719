"""SimpleAgg: aggregates without GROUP BY - always exactly one output row.

The same machinery as HashAgg over a single group with no key, except that the row
exists from the job's first barrier on, also while the input is empty (count 0, sum
NULL, ...), and is updated in place - never deleted - as rows come and go. It runs in a
single actor (the planner puts a simple exchange in front of it).
"""

from __future__ import annotations

from rivulet.stream.executors.aggregate.hash_agg import HashAggExecutor


class SimpleAggExecutor(HashAggExecutor):
    always_present = True
