"""Executors one at a time, each fed a scripted input of chunks and barriers
(``executor_harness``): what each does with inserts, deletes and update pairs, that every
barrier passes once and in order, and that a stateful executor rebuilt over its committed
state (after a recovery or a reschedule) goes on where the committed epochs left off.

Rows are written ``"<op> <values>"``: ``+`` Insert, ``-`` Delete, ``U-``/``U+`` an update
pair. ``Harness.run`` checks every output for whole update pairs, increasing epochs and
the executor's column types.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from executor_harness import Barrier, Harness, Rows, consolidate, exprs, unordered

from rivulet.common.types import BIGINT, INTEGER, VARCHAR, DataType
from rivulet.storage.state_table import StateTable, StateTableSchema
from rivulet.stream.barrier_align import BarrierMisaligned
from rivulet.stream.builder import EXECUTOR_BUILDERS, LeafInputs
from rivulet.stream.executor import Executor
from rivulet.stream.executors.aggregate.hash_agg import HashAggExecutor
from rivulet.stream.executors.aggregate.simple_agg import SimpleAggExecutor
from rivulet.stream.executors.filter import FilterExecutor
from rivulet.stream.executors.project import ProjectExecutor
from rivulet.stream.executors.top_n import TopNExecutor
from rivulet.stream.message import Message, StopActors
from rivulet.stream.plan import (
    AggCall,
    HashAggNode,
    HashJoinNode,
    JoinKind,
    PlanNode,
    SimpleAggNode,
)
from rivulet.stream.state_layouts import agg_state_schemas, join_state_schema, topn_state_schema

HUGEINT = DataType.from_duckdb("HUGEINT")  # the type of sum(BIGINT)

KV = Rows(k=VARCHAR, v=BIGINT)


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness() as harness:
        yield harness


def where(h: Harness, condition: str, *script: Message) -> FilterExecutor:
    """``SELECT * FROM kv WHERE condition`` over a scripted input."""
    return FilterExecutor(h.ctx(), KV.schema, h.script(KV, *script), exprs(condition))


# ------------------------------------------------------------------ filter
def test_filter_keeps_the_rows_that_match_whatever_their_op(h: Harness) -> None:
    f = where(h, "c1 > 1", KV("+ a 1", "+ b 2", "- c 3", "- d 0"), Barrier(1))
    assert h.run(f, 1).epoch(1) == ["+ b 2", "- c 3"]


def test_filter_drops_rows_whose_predicate_is_null(h: Harness) -> None:
    """WHERE keeps a row only where the predicate is true: NULL is not true."""
    f = where(h, "c1 > 1", KV("+ a NULL", "+ b 5", "- c NULL"), Barrier(1))
    assert h.run(f, 1).epoch(1) == ["+ b 5"]


def test_filter_passes_an_update_pair_whole_when_both_halves_match(h: Harness) -> None:
    f = where(h, "c1 > 1", KV("U- a 2", "U+ a 3", "+ x 0"), Barrier(1))
    assert h.run(f, 1).epoch(1) == ["U- a 2", "U+ a 3"]


def test_filter_turns_a_half_matching_update_pair_into_a_delete_or_an_insert(
    h: Harness,
) -> None:
    """A row updated into the filter is inserted into its result, one updated out of
    it deleted: downstream never sees half a pair."""
    f = where(
        h,
        "c1 > 1",
        KV("U- a 1", "U+ a 5", "U- b 7", "U+ b 0", "U- c 0", "U+ c 0", "U- d 4", "U+ d 6"),
        Barrier(1),
    )
    assert h.run(f, 1).epoch(1) == ["+ a 5", "- b 7", "U- d 4", "U+ d 6"]


def test_filter_that_drops_every_row_of_an_epoch_still_passes_its_barrier(h: Harness) -> None:
    f = where(h, "c1 > 100", KV("+ a 1"), Barrier(1), KV("+ b 200", "- a 1"), Barrier(2))
    out = h.run(f, 2)
    assert out.trace() == ["| 1", "+ b 200", "| 2"]  # and no empty chunk before barrier 1


# ----------------------------------------------------------------- project
def test_project_computes_each_row_and_keeps_its_op(h: Harness) -> None:
    """Retractions and update pairs come out as they went in, with the projected
    values: a delete retracts exactly the projected row the insert added."""
    out_rows = Rows(k=VARCHAR, v10=BIGINT, big=INTEGER)
    src = h.script(KV, KV("+ a 1", "- b 2", "U- c 3", "U+ c 40", "+ d NULL"), Barrier(1))
    p = ProjectExecutor(h.ctx(), out_rows.schema, src, exprs("upper(c0)", "c1 * 10", "c1 > 2"))
    assert h.run(p, 1).epoch(1) == [
        "+ A 10 0",
        "- B 20 0",
        "U- C 30 1",
        "U+ C 400 1",
        "+ D NULL NULL",
    ]


def test_project_keeps_an_update_pair_whose_projected_halves_are_equal(h: Harness) -> None:
    """An update of a column the projection drops still comes out as a pair (it is not
    Project's to drop it, and the pair stays whole)."""
    src = h.script(KV, KV("U- a 1", "U+ a 2"), Barrier(1))
    p = ProjectExecutor(h.ctx(), Rows(k=VARCHAR).schema, src, exprs("c0"))
    assert h.run(p, 1).epoch(1) == ["U- a", "U+ a"]


# ---------------------------------------------------------- hash aggregation
# SELECT k, count(*), sum(v), max(v) FROM kv GROUP BY k: output rows "k count sum max".
AGGS = [
    AggCall("count_star", (), BIGINT),
    AggCall("sum", (1,), HUGEINT),
    AggCall("max", (1,), BIGINT),  # keeps its groups' values: the input may delete
]


def group_by_k(h: Harness, *, simple: bool = False) -> HashAggNode:
    """The plan node, state table layouts included; build as many executors (actors,
    one after the other) from it as a test needs: they share its state tables."""
    group_key = [] if simple else [0]
    keys = [] if simple else [("g0", VARCHAR)]
    out = Rows(**dict(keys), a0=BIGINT, a1=HUGEINT, a2=BIGINT)
    node_type = SimpleAggNode if simple else HashAggNode
    return node_type(
        out.schema,
        list(range(len(keys))),
        inputs=[PlanNode(KV.schema, [])],
        group_key=group_key,
        aggs=AGGS,
        state_tables=h.table_ids(agg_state_schemas(KV.schema, group_key, AGGS, False)),
    )


def hash_agg(h: Harness, node: HashAggNode, *script: Message) -> HashAggExecutor:
    executor = SimpleAggExecutor if isinstance(node, SimpleAggNode) else HashAggExecutor
    return executor(h.ctx(), node, h.script(KV, *script), h.wait_committed)


def test_hash_agg_inserts_a_new_group_updates_a_changed_one_and_deletes_an_empty_one(
    h: Harness,
) -> None:
    agg = hash_agg(
        h,
        group_by_k(h),
        KV("+ a 1", "+ b 2", "+ a 5"),
        Barrier(1),
        KV("- a 5", "+ c 3", "- b 2"),
        Barrier(2),
    )
    out = h.run(agg, 2)
    assert out.changes(1) == unordered("+ a 2 6 5", "+ b 1 2 2")
    assert out.changes(2) == unordered("a 2 6 5 -> a 1 1 1", "- b 1 2 2", "+ c 1 3 3")
    assert consolidate(out) == ["a 1 1 1", "c 1 3 3"]


def test_hash_agg_emits_each_changed_group_once_per_epoch(h: Harness) -> None:
    """However many chunks touch a group in an epoch, downstream gets one change for
    it, at the barrier, from the group's value at the epoch before."""
    agg = hash_agg(
        h,
        group_by_k(h),
        KV("+ a 1"),
        Barrier(1),
        KV("+ a 2"),
        KV("U- a 2", "U+ a 7"),
        KV("+ a 3", "+ b 1"),
        Barrier(2),
    )
    assert h.run(agg, 2).changes(2) == unordered("a 1 1 1 -> a 3 11 7", "+ b 1 1 1")


def test_hash_agg_emits_nothing_for_changes_that_cancel_within_an_epoch(h: Harness) -> None:
    agg = hash_agg(
        h,
        group_by_k(h),
        KV("+ a 1"),
        Barrier(1),
        KV("+ a 9", "+ new 4"),
        KV("- a 9", "- new 4"),
        Barrier(2),
    )
    out = h.run(agg, 2)
    assert out.epoch(2) == []


def test_hash_agg_recomputes_max_when_the_max_is_deleted(h: Harness) -> None:
    agg = hash_agg(
        h,
        group_by_k(h),
        KV("+ a 3", "+ a 9", "+ a 5"),
        Barrier(1),
        KV("- a 9"),
        Barrier(2),
        KV("U- a 5", "U+ a 1"),
        Barrier(3),
    )
    out = h.run(agg, 3)
    assert out.changes(2) == ["a 3 17 9 -> a 2 8 5"]
    assert out.changes(3) == ["a 2 8 5 -> a 2 4 3"]


def test_hash_agg_counts_a_null_key_as_one_group_of_its_own(h: Harness) -> None:
    agg = hash_agg(
        h,
        group_by_k(h),
        KV("+ NULL 1", "+ NULL 2", "+ a NULL"),
        Barrier(1),
        KV("- NULL 1"),
        Barrier(2),
    )
    out = h.run(agg, 2)
    assert out.changes(1) == unordered("+ NULL 2 3 2", "+ a 1 NULL NULL")
    assert out.changes(2) == ["NULL 2 3 2 -> NULL 1 2 2"]


def test_hash_agg_moves_a_row_between_groups_as_a_change_of_each(h: Harness) -> None:
    """An update of the group key is a pair upstream but changes two groups: the old
    one loses the row, the new one gains it (no pair spans two groups)."""
    agg = hash_agg(
        h, group_by_k(h), KV("+ a 1", "+ a 2"), Barrier(1), KV("U- a 2", "U+ b 2"), Barrier(2)
    )
    assert h.run(agg, 2).changes(2) == unordered("a 2 3 2 -> a 1 1 1", "+ b 1 2 2")


def test_hash_agg_updates_a_group_whose_rows_were_all_replaced_within_an_epoch(
    h: Harness,
) -> None:
    """The group never went away as far as downstream is concerned: an update pair,
    not a delete and an insert."""
    agg = hash_agg(h, group_by_k(h), KV("+ a 1"), Barrier(1), KV("- a 1", "+ a 4"), Barrier(2))
    assert h.run(agg, 2).epoch(2) == ["U- a 1 1 1", "U+ a 1 4 4"]


def test_hash_agg_rebuilt_over_committed_state_continues_from_it(h: Harness) -> None:
    """A rebuilt actor (same state tables, nothing in memory) retracts the group values
    the old one emitted, and the consolidated output of both is the aggregate of all
    the input: no group restarted from zero, none counted twice."""
    node = group_by_k(h)
    first = h.run(
        hash_agg(
            h, node, KV("+ a 1", "+ a 9", "+ b 2"), Barrier(1), KV("- b 2", "+ c 4"), Barrier(2)
        ),
        2,
    )
    # Recovery injects a barrier first; the input then goes on.
    rebuilt = hash_agg(h, node, Barrier(3), KV("- a 9", "+ b 5", "+ c 6"), Barrier(4))
    second = h.run(rebuilt, 2)
    assert second.epoch(3) == []
    assert second.changes(4) == unordered("a 2 10 9 -> a 1 1 1", "+ b 1 5 5", "c 1 4 4 -> c 2 10 6")
    assert consolidate(first, second) == ["a 1 1 1", "b 1 5 5", "c 2 10 6"]


def test_hash_agg_rebuilt_after_a_crash_sees_only_the_committed_epochs(h: Harness) -> None:
    """The old actor's last epoch never committed (its barrier never came): its rows
    are not in the state the rebuilt actor reads. The input replays them from the last
    committed position, and each counts once."""
    node = group_by_k(h)
    first = h.run(hash_agg(h, node, KV("+ a 1"), Barrier(1), KV("+ a 2", "+ b 3")), 1)
    rebuilt = hash_agg(h, node, Barrier(2), KV("+ a 2", "+ b 3"), Barrier(3))
    second = h.run(rebuilt, 2)
    assert second.changes(3) == unordered("a 1 1 1 -> a 2 3 2", "+ b 1 3 3")
    assert consolidate(first, second) == ["a 2 3 2", "b 1 3 3"]


def test_hash_agg_rebuilt_deletes_a_group_it_never_saw_in_memory(h: Harness) -> None:
    node = group_by_k(h)
    first = h.run(hash_agg(h, node, KV("+ a 1", "+ b 2"), Barrier(1)), 1)
    second = h.run(hash_agg(h, node, Barrier(2), KV("- a 1"), Barrier(3)), 2)
    assert second.changes(3) == ["- a 1 1 1"]
    assert consolidate(first, second) == ["b 1 2 2"]


def test_hash_agg_rebuilt_recreates_a_group_the_old_actor_deleted(h: Harness) -> None:
    node = group_by_k(h)
    first = h.run(hash_agg(h, node, KV("+ a 1"), Barrier(1), KV("- a 1"), Barrier(2)), 2)
    second = h.run(hash_agg(h, node, Barrier(3), KV("+ a 4"), Barrier(4)), 2)
    assert second.epoch(4) == ["+ a 1 4 4"]
    assert consolidate(first, second) == ["a 1 4 4"]


def test_hash_agg_rebuilt_twice_keeps_max_values_across_rebuilds(h: Harness) -> None:
    """max is recomputed from the stored values when the max goes: the values written
    by each actor must be there for the next one."""
    node = group_by_k(h)
    outs = [h.run(hash_agg(h, node, KV("+ a 3", "+ a 9"), Barrier(1)), 1)]
    outs.append(h.run(hash_agg(h, node, Barrier(2), KV("+ a 7"), Barrier(3)), 2))
    outs.append(h.run(hash_agg(h, node, Barrier(4), KV("- a 9"), Barrier(5)), 2))
    assert outs[2].changes(5) == ["a 3 19 9 -> a 2 10 7"]
    assert consolidate(*outs) == ["a 2 10 7"]


# -------------------------------------------------------- simple aggregation
def test_simple_agg_has_its_row_from_the_first_barrier_and_never_deletes_it(
    h: Harness,
) -> None:
    """SELECT count(*), sum(v), max(v) FROM kv: one row, also over an empty input."""
    agg = hash_agg(
        h,
        group_by_k(h, simple=True),
        Barrier(1),
        KV("+ a 2", "+ b 5"),
        Barrier(2),
        KV("- a 2", "- b 5"),
        Barrier(3),
    )
    out = h.run(agg, 3)
    assert out.epoch(1) == ["+ 0 NULL NULL"]
    assert out.changes(2) == ["0 NULL NULL -> 2 7 5"]
    assert out.changes(3) == ["2 7 5 -> 0 NULL NULL"]
    assert consolidate(out) == ["0 NULL NULL"]


def test_simple_agg_rebuilt_updates_its_committed_row_rather_than_adding_one(
    h: Harness,
) -> None:
    node = group_by_k(h, simple=True)
    first = h.run(hash_agg(h, node, KV("+ a 2"), Barrier(1)), 1)
    second = h.run(hash_agg(h, node, Barrier(2), KV("+ b 3"), Barrier(3)), 2)
    assert second.epoch(2) == []
    assert second.changes(3) == ["1 2 2 -> 2 5 3"]
    assert consolidate(first, second) == ["2 5 3"]


# ------------------------------------------------------------------- top-n
def top_n_state(h: Harness) -> StateTableSchema:
    """The state layout of a top-N over kv (stream key k)."""
    return h.table_ids([topn_state_schema(PlanNode(KV.schema, [0]))])[0]


def top_2(h: Harness, state: StateTableSchema, *script: Message) -> TopNExecutor:
    """``SELECT * FROM kv ORDER BY v DESC LIMIT 2`` (ties: k ascending)."""
    return TopNExecutor(
        h.ctx(),
        KV.schema,
        h.script(KV, *script),
        StateTable(state),
        [(1, False, True)],
        2,
        0,
        [],
        append_only=False,
        wait_committed=h.wait_committed,
    )


def test_top_n_replaces_the_last_row_when_a_better_one_comes(h: Harness) -> None:
    top = top_2(
        h, top_n_state(h), KV("+ a 1", "+ b 5", "+ c 3"), Barrier(1), KV("+ d 4"), Barrier(2)
    )
    out = h.run(top, 2)
    assert out.changes(1) == unordered("+ b 5", "+ c 3")
    assert out.changes(2) == unordered("- c 3", "+ d 4")


def test_top_n_updates_a_row_that_changes_but_stays_in_the_top(h: Harness) -> None:
    top = top_2(
        h,
        top_n_state(h),
        KV("+ a 1", "+ b 5", "+ c 3"),
        Barrier(1),
        KV("U- c 3", "U+ c 4"),
        Barrier(2),
    )
    assert h.run(top, 2).epoch(2) == ["U- c 3", "U+ c 4"]


def test_top_n_breaks_ties_by_the_stream_key(h: Harness) -> None:
    """Always the same answer among the valid ones: equal values rank by k."""
    top = top_2(
        h, top_n_state(h), KV("+ c 5", "+ a 5", "+ b 5"), Barrier(1), KV("- a 5"), Barrier(2)
    )
    out = h.run(top, 2)
    assert out.changes(1) == unordered("+ a 5", "+ b 5")
    assert out.changes(2) == unordered("- a 5", "+ c 5")


def test_top_n_rebuilt_pulls_up_rows_from_committed_state(h: Harness) -> None:
    """A rebuilt actor has no cache: when a top row goes, the next comes from the
    committed state, rows that never were in the top included."""
    state = top_n_state(h)
    first = h.run(
        top_2(h, state, KV("+ a 1", "+ b 5", "+ c 3"), Barrier(1), KV("+ d 4"), Barrier(2)), 2
    )
    second = h.run(
        top_2(h, state, Barrier(3), KV("- b 5"), Barrier(4), KV("- d 4", "- c 3"), Barrier(5)), 3
    )
    assert second.changes(4) == unordered("- b 5", "+ c 3")
    assert second.changes(5) == unordered("- c 3", "- d 4", "+ a 1")
    assert consolidate(first, second) == ["a 1"]


# --------------------------------------------------------------- hash join
# SELECT * FROM l [LEFT] JOIN r ON l.k = r.k: left rows "id k a", right rows "id k b"
# (each side's stream key is its id), output rows "id k a id k b": the left columns,
# then the right ones (NULL for a left row padded by an outer join).
L = Rows(id=BIGINT, k=VARCHAR, a=BIGINT)
R = Rows(id=BIGINT, k=VARCHAR, b=BIGINT)
LR = Rows(lid=BIGINT, lk=VARCHAR, a=BIGINT, rid=BIGINT, rk=VARCHAR, b=BIGINT)
# The barrier that starts a new job's actors, on both sides; its commit creates the job's
# state tables. The rows come in the epochs after it.
START = Barrier(1)


def join_on_k(h: Harness, kind: JoinKind = JoinKind.INNER) -> HashJoinNode:
    """The plan node, both sides' state layouts included (a side that the join
    preserves keeps its rows' degrees); build as many executors (actors, one after the
    other) from it as a test needs: they share its state tables."""
    left, right = PlanNode(L.schema, [0]), PlanNode(R.schema, [0])
    preserved = {
        JoinKind.INNER: (False, False),
        JoinKind.LEFT: (True, False),
        JoinKind.RIGHT: (False, True),
        JoinKind.FULL: (True, True),
    }[kind]
    layouts = [join_state_schema(s, [1], degree) for s, degree in zip((left, right), preserved)]
    return HashJoinNode(
        LR.schema,
        [0, 3],
        inputs=[left, right],
        kind=kind,
        left_key=[1],
        right_key=[1],
        state_tables=h.table_ids(layouts),
    )


def hash_join(
    h: Harness, node: HashJoinNode, left: Sequence[Message], right: Sequence[Message]
) -> Executor:
    """The join's actor as the builder makes it, each side fed its own script."""
    inputs = [h.script(L, *left), h.script(R, *right)]
    return EXECUTOR_BUILDERS[HashJoinNode](node, h.ctx(), inputs, LeafInputs())


@pytest.mark.parametrize("first", ["left", "right"])
def test_inner_join_emits_the_joined_rows_when_the_second_side_arrives(
    h: Harness, first: str
) -> None:
    """Whichever side comes first is only stored; the other side's rows meet it an
    epoch later, each with every stored row of its key, none with another key's."""
    lefts, rights = L("+ 1 a 10", "+ 2 a 20", "+ 3 b 30"), R("+ 7 a 70", "+ 8 c 80")
    now, later = [START, lefts, Barrier(2), Barrier(3)], [START, Barrier(2), rights, Barrier(3)]
    if first == "right":
        now, later = [START, rights, Barrier(2), Barrier(3)], [START, Barrier(2), lefts, Barrier(3)]
    left, right = (now, later) if first == "left" else (later, now)
    out = h.run(hash_join(h, join_on_k(h), left, right), 3)
    assert out.epoch(2) == []
    assert out.changes(3) == unordered("+ 1 a 10 7 a 70", "+ 2 a 20 7 a 70")


def test_inner_join_of_rows_arriving_in_one_epoch_emits_each_pair_once(h: Harness) -> None:
    left = [START, L("+ 1 a 10"), L("+ 2 a 20"), Barrier(2)]
    right = [START, R("+ 7 a 70"), R("+ 8 a 80"), Barrier(2)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 2)
    assert out.changes(2) == unordered(
        "+ 1 a 10 7 a 70", "+ 1 a 10 8 a 80", "+ 2 a 20 7 a 70", "+ 2 a 20 8 a 80"
    )


def test_inner_join_retracts_the_joined_rows_of_a_deleted_row(h: Harness) -> None:
    """A delete on either side retracts exactly the rows its insert joined into."""
    left = [START, L("+ 1 a 10", "+ 2 a 20"), Barrier(2), L("- 1 a 10"), Barrier(3), Barrier(4)]
    right = [START, R("+ 7 a 70", "+ 8 a 80"), Barrier(2), Barrier(3), R("- 8 a 80"), Barrier(4)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 4)
    assert len(out.changes(2)) == 4
    assert out.changes(3) == unordered("- 1 a 10 7 a 70", "- 1 a 10 8 a 80")
    assert out.changes(4) == ["- 2 a 20 8 a 80"]
    assert consolidate(out) == ["2 a 20 7 a 70"]


def test_inner_join_emits_an_update_of_a_non_key_column_as_deletes_then_inserts(
    h: Harness,
) -> None:
    """The join's contract: an update leaves as a Delete of each joined row with the
    old values, then an Insert of each with the new ones (in the input's order), never
    as an update pair; on either side."""
    left = [START, L("+ 1 a 10"), Barrier(2), L("U- 1 a 10", "U+ 1 a 11"), Barrier(3)]
    left.append(Barrier(4))
    right = [START, R("+ 7 a 70", "+ 8 a 80"), Barrier(2), Barrier(3)]
    right += [R("U- 7 a 70", "U+ 7 a 71"), Barrier(4)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 4)
    three = out.epoch(3)
    assert sorted(three[:2]) == ["- 1 a 10 7 a 70", "- 1 a 10 8 a 80"]
    assert sorted(three[2:]) == ["+ 1 a 11 7 a 70", "+ 1 a 11 8 a 80"]
    assert out.epoch(4) == ["- 1 a 11 7 a 70", "+ 1 a 11 7 a 71"]
    assert consolidate(out) == ["1 a 11 7 a 71", "1 a 11 8 a 80"]


def test_inner_join_moves_a_row_whose_key_is_updated_to_the_new_keys_matches(
    h: Harness,
) -> None:
    left = [START, L("+ 1 a 10"), Barrier(2), L("U- 1 a 10", "U+ 1 b 10"), Barrier(3)]
    right = [START, R("+ 7 a 70", "+ 8 b 80"), Barrier(2), Barrier(3)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 3)
    assert out.epoch(3) == ["- 1 a 10 7 a 70", "+ 1 b 10 8 b 80"]
    assert consolidate(out) == ["1 b 10 8 b 80"]


def test_inner_join_never_matches_a_null_key(h: Harness) -> None:
    """ON l.k = r.k is not true for NULL = NULL: a NULL key joins nothing, and its
    delete retracts nothing."""
    left = [START, L("+ 1 NULL 10", "+ 2 a 20"), Barrier(2), L("- 1 NULL 10"), Barrier(3)]
    right = [START, R("+ 7 NULL 70", "+ 8 a 80"), Barrier(2), R("+ 9 NULL 90"), Barrier(3)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 3)
    assert out.epoch(2) == ["+ 2 a 20 8 a 80"]
    assert out.epoch(3) == []


def test_left_join_pads_an_unmatched_row_until_it_has_a_match(h: Harness) -> None:
    """A left row without a match comes out NULL-padded; its first match retracts the
    padded row (before the joined row comes), further matches only add joined rows, and
    when its last match goes the padded row comes back (after the retractions)."""
    left = [START, L("+ 1 a 10", "+ 2 b 20"), Barrier(2), Barrier(3), Barrier(4), Barrier(5)]
    right = [
        START,
        Barrier(2),
        R("+ 7 a 70"),
        Barrier(3),
        R("+ 8 a 80"),
        Barrier(4),
        R("- 7 a 70", "- 8 a 80"),
        Barrier(5),
    ]
    out = h.run(hash_join(h, join_on_k(h, JoinKind.LEFT), left, right), 5)
    assert out.epoch(2) == ["+ 1 a 10 NULL NULL NULL", "+ 2 b 20 NULL NULL NULL"]
    assert out.epoch(3) == ["- 1 a 10 NULL NULL NULL", "+ 1 a 10 7 a 70"]
    assert out.epoch(4) == ["+ 1 a 10 8 a 80"]
    five = out.epoch(5)
    assert sorted(five[:2]) == ["- 1 a 10 7 a 70", "- 1 a 10 8 a 80"]
    assert five[2:] == ["+ 1 a 10 NULL NULL NULL"]
    assert consolidate(out) == ["1 a 10 NULL NULL NULL", "2 b 20 NULL NULL NULL"]


def test_left_join_pads_only_left_rows_and_retracts_what_it_emitted(h: Harness) -> None:
    """A left row that arrives to a match is not padded; an unmatched right row is not
    emitted at all; a deleted left row takes its padded row with it."""
    left = [START, Barrier(2), L("+ 1 a 10", "+ 2 b 20"), Barrier(3)]
    left += [L("- 2 b 20", "- 1 a 10"), Barrier(4)]
    right = [START, R("+ 7 a 70", "+ 8 c 80"), Barrier(2), Barrier(3), Barrier(4)]
    out = h.run(hash_join(h, join_on_k(h, JoinKind.LEFT), left, right), 4)
    assert out.epoch(2) == []
    assert out.epoch(3) == ["+ 1 a 10 7 a 70", "+ 2 b 20 NULL NULL NULL"]
    assert out.epoch(4) == ["- 2 b 20 NULL NULL NULL", "- 1 a 10 7 a 70"]
    assert consolidate(out) == []


def test_left_join_pads_a_null_key_row_and_no_null_key_unpads_it(h: Harness) -> None:
    left = [START, L("+ 1 NULL 10"), Barrier(2), Barrier(3), L("- 1 NULL 10"), Barrier(4)]
    right = [START, Barrier(2), R("+ 7 NULL 70"), Barrier(3), Barrier(4)]
    out = h.run(hash_join(h, join_on_k(h, JoinKind.LEFT), left, right), 4)
    assert out.epoch(2) == ["+ 1 NULL 10 NULL NULL NULL"]
    assert out.epoch(3) == []
    assert out.epoch(4) == ["- 1 NULL 10 NULL NULL NULL"]


def test_hash_join_passes_a_barrier_once_both_sides_delivered_it(h: Harness) -> None:
    """The left side delivers barrier 2 early and has its next epoch's row ready; the
    right side's rows before its barrier 2 still join in epoch 2, and the left's next
    row is not read before the barrier has passed: it joins in epoch 3, with them."""
    left = [START, L("+ 1 a 10"), Barrier(2), L("+ 2 a 20"), Barrier(3)]
    right = [START, R("+ 7 a 70"), R("+ 8 b 80"), R("+ 9 a 90"), R("+ 6 a 60"), Barrier(2)]
    right.append(Barrier(3))
    out = h.run(hash_join(h, join_on_k(h), left, right), 3)
    assert out.epochs == [1, 2, 3]
    assert out.changes(2) == unordered("+ 1 a 10 6 a 60", "+ 1 a 10 7 a 70", "+ 1 a 10 9 a 90")
    assert out.changes(3) == unordered("+ 2 a 20 6 a 60", "+ 2 a 20 7 a 70", "+ 2 a 20 9 a 90")


def test_hash_join_holds_a_barrier_only_one_side_delivered(h: Harness) -> None:
    """Barrier 3 came from the left only: it does not pass (the run waits for it in
    vain), though barrier 2, from both, did."""
    left = [START, L("+ 1 a 10"), Barrier(2), Barrier(3)]
    right = [START, R("+ 7 a 70"), Barrier(2), R("+ 8 a 80")]
    with pytest.raises(AssertionError, match=r"3 barriers expected within .*, got \[1, 2\]"):
        h.run(hash_join(h, join_on_k(h), left, right), 3, timeout=0.5)


def test_hash_join_fails_when_its_sides_deliver_different_epochs(h: Harness) -> None:
    """A barrier lost on one side fails the actor rather than mixing two epochs."""
    left = [START, L("+ 1 a 10"), Barrier(2), Barrier(3)]
    right = [START, R("+ 7 a 70"), Barrier(3)]
    with pytest.raises(BarrierMisaligned):
        h.run(hash_join(h, join_on_k(h), left, right), 3)


def test_hash_join_of_a_new_job_joins_rows_before_its_first_epoch_is_committed(
    h: Harness,
) -> None:
    """Actors go on with the next epoch while the barrier manager commits the one
    before: a new job's join gets rows before its state tables exist in DuckDB."""
    left = [START, L("+ 1 a 10"), Barrier(2)]
    right = [START, R("+ 7 a 70"), Barrier(2)]
    out = h.run(hash_join(h, join_on_k(h), left, right), 2, commit=False)
    assert out.epoch(2) == ["+ 1 a 10 7 a 70"]


def test_hash_join_rebuilt_matches_new_rows_with_committed_ones(h: Harness) -> None:
    """A rebuilt actor (same state tables, empty caches) finds the rows both sides
    committed: new rows of either side join them, and a delete of a committed row
    retracts the joined rows the old actor emitted."""
    node = join_on_k(h)
    left = [START, L("+ 1 a 10", "+ 2 b 20"), Barrier(2)]
    first = h.run(hash_join(h, node, left, [START, R("+ 7 a 70"), Barrier(2)]), 2)
    assert first.epoch(2) == ["+ 1 a 10 7 a 70"]
    # Recovery injects a barrier first; the inputs then go on.
    left = [Barrier(3), Barrier(4), L("+ 3 b 30"), Barrier(5)]
    right = [Barrier(3), R("+ 8 b 80", "- 7 a 70"), Barrier(4), Barrier(5)]
    second = h.run(hash_join(h, node, left, right), 3)
    assert second.epoch(3) == []
    assert second.epoch(4) == ["+ 2 b 20 8 b 80", "- 1 a 10 7 a 70"]
    assert second.epoch(5) == ["+ 3 b 30 8 b 80"]
    assert consolidate(first, second) == ["2 b 20 8 b 80", "3 b 30 8 b 80"]


def test_left_join_rebuilt_knows_the_committed_degrees(h: Harness) -> None:
    """The rebuilt actor reads how many matches each committed left row has: the last
    one going brings back the padded row, the next one retracts it again."""
    node = join_on_k(h, JoinKind.LEFT)
    left, right = [START, L("+ 1 a 10"), Barrier(2)], [START, R("+ 7 a 70"), Barrier(2)]
    first = h.run(hash_join(h, node, left, right), 2)
    assert consolidate(first) == ["1 a 10 7 a 70"]
    left = [Barrier(3), Barrier(4), Barrier(5)]
    right = [Barrier(3), R("- 7 a 70"), Barrier(4), R("+ 8 a 80"), Barrier(5)]
    second = h.run(hash_join(h, node, left, right), 3)
    assert second.epoch(4) == ["- 1 a 10 7 a 70", "+ 1 a 10 NULL NULL NULL"]
    assert second.epoch(5) == ["- 1 a 10 NULL NULL NULL", "+ 1 a 10 8 a 80"]
    assert consolidate(first, second) == ["1 a 10 8 a 80"]


def test_hash_join_rebuilt_after_a_crash_sees_only_the_committed_epochs(h: Harness) -> None:
    """The old actor's rows of an epoch whose barrier never came are not in the state:
    the input replays them, and each joins once."""
    node = join_on_k(h)
    left = [START, L("+ 1 a 10"), Barrier(2), L("+ 2 a 20")]
    first = h.run(hash_join(h, node, left, [START, Barrier(2)]), 2)
    assert first.epoch(2) == []
    left = [Barrier(3), L("+ 2 a 20"), Barrier(4), Barrier(5)]
    right = [Barrier(3), Barrier(4), R("+ 7 a 70"), Barrier(5)]
    second = h.run(hash_join(h, node, left, right), 3)
    assert second.changes(5) == unordered("+ 1 a 10 7 a 70", "+ 2 a 20 7 a 70")


# ---------------------------------------------------------------- barriers
SCRIPT: list[Message] = [
    KV("+ a 1", "+ b 5"),
    Barrier(1),
    Barrier(2),  # an empty epoch
    KV("U- b 5", "U+ b 6"),
    KV("+ c 7"),
    Barrier(3, checkpoint=False),
    KV("- a 1"),
    Barrier(4, mutation=StopActors(frozenset({99}))),
]
BARRIERS = [m for m in SCRIPT if isinstance(m, Barrier)]


def executors(h: Harness) -> dict[str, Executor]:
    src = h.script(KV, *SCRIPT)
    ctx = h.ctx()
    return {
        "filter": FilterExecutor(ctx, KV.schema, src, exprs("c1 > 2")),
        "project": ProjectExecutor(ctx, KV.schema, src, exprs("c0", "c1 + 1")),
        "hash_agg": HashAggExecutor(ctx, group_by_k(h), src, h.wait_committed),
        "simple_agg": SimpleAggExecutor(ctx, group_by_k(h, simple=True), src, h.wait_committed),
        "top_n": top_2(h, top_n_state(h), *SCRIPT),
        "chain": HashAggExecutor(
            ctx,
            group_by_k(h),
            ProjectExecutor(
                ctx,
                KV.schema,
                FilterExecutor(ctx, KV.schema, src, exprs("c1 > 2")),
                exprs("c0", "c1"),
            ),
            h.wait_committed,
        ),
    }


@pytest.mark.parametrize("name", ["filter", "project", "hash_agg", "simple_agg", "top_n", "chain"])
def test_every_barrier_passes_once_in_order_and_unchanged(h: Harness, name: str) -> None:
    """The same barriers, in order, none lost or doubled (the runner stops at the
    fourth; a doubled one fails its epoch check), with their checkpoint flag and
    mutation: an actor downstream acts on them."""
    out = h.run(executors(h)[name], len(BARRIERS))
    assert out.barriers == BARRIERS
    assert all(got is sent for got, sent in zip(out.barriers, BARRIERS))


@pytest.mark.parametrize(
    ("name", "trace"),
    [
        ("filter", ["+ b 5", "| 1", "| 2", "U- b 5", "U+ b 6", "+ c 7", "| 3", "| 4"]),
        (
            "project",
            ["+ a 2", "+ b 6", "| 1", "| 2", "U- b 6", "U+ b 7", "+ c 8", "| 3", "- a 2", "| 4"],
        ),
    ],
)
def test_stateless_executors_keep_rows_in_the_epoch_they_came_in(
    h: Harness, name: str, trace: list[str]
) -> None:
    assert h.run(executors(h)[name], len(BARRIERS)).trace() == trace


def test_hash_agg_emits_an_epochs_changes_before_its_barrier(h: Harness) -> None:
    """Behind a filter and a project: epochs whose rows were all filtered out, and
    empty ones, pass with no change."""
    out = h.run(executors(h)["chain"], len(BARRIERS))
    assert out.changes(1) == ["+ b 1 5 5"]
    assert out.changes(2) == []
    assert out.changes(3) == unordered("b 1 5 5 -> b 1 6 6", "+ c 1 7 7")
    assert out.changes(4) == []
