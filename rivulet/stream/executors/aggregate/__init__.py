"""Aggregation: HashAgg (GROUP BY, DISTINCT) and SimpleAgg (no GROUP BY) over one core.

An aggregation keeps, per group, the *intermediate* state of every aggregate (counts,
128-bit sums as 32-bit limbs, current min/max, true/false counts...) plus the group's row
count. It lives in memory as columns indexed by a *slot* per group (numpy arrays, polars
series), in front of the result state table (one row per group: keys, state, row count).

Aggregates that cannot be kept from a running summary - DISTINCT ones always, and min,
max and string_agg when the input may delete rows - also keep a *value table* per
aggregate: ``(group keys, value) -> count``, the multiset of the group's values; their
result is recomputed from it for the groups an epoch touched. An append-only input never
needs that for min/max/string_agg, so its state holds aggregates only, never input rows.

The work per chunk is a handful of vectorized calls: one polars group-by computes every
aggregate's signed partial per group, the group index maps the chunk's groups to slots
(a sorted array of 64-bit key hashes, verified against the stored keys), and numpy merges
the partials into the slots. Outputs and state rows are produced once per epoch, at the
barrier, for the groups the epoch changed.

Modules: ``rivulet.stream.state_layouts`` (the state tables' layout, shared with the
planner), ``accumulators`` (running summaries), ``wide_sum`` (exact 128-bit sums),
``value_state`` (value multisets), ``group_index`` (keys -> slots), ``core`` (``AggCore``:
chunks, barriers, loading), ``hash_agg`` and ``simple_agg`` (the executors).
"""
