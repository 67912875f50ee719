"""The executor harness's own checks: what it reports as broken must be broken."""

from __future__ import annotations

import pytest
from executor_harness import Harness, Rows, Scripted, consolidate, update_pairs_broken

from rivulet.common.types import BIGINT, BOOLEAN, VARCHAR
from rivulet.stream.message import Barrier

KV = Rows(k=VARCHAR, v=BIGINT, b=BOOLEAN)


def test_literals_read_back_as_written() -> None:
    lines = ["+ a 1 true", "- b NULL false", "U- NULL 3 NULL", "U+ c -4 true"]
    with Harness() as h:
        out = h.run(Scripted(h.ctx(), KV.schema, [KV(*lines), Barrier(1)]), 1)
    assert out.epoch(1) == lines


def test_a_half_pair_is_reported() -> None:
    assert update_pairs_broken([KV("U- a 1 true", "+ a 2 true")]) != []
    assert update_pairs_broken([KV("U- a 1 true"), KV("U+ a 2 true")]) != []  # across chunks
    assert update_pairs_broken([KV("+ x 0 true", "U- a 1 true", "U+ a 2 true")]) == []


def test_the_runner_fails_an_output_with_a_broken_pair() -> None:
    with Harness() as h, pytest.raises(AssertionError, match="update pairs broken"):
        h.run(Scripted(h.ctx(), KV.schema, [KV("U+ a 1 true"), Barrier(1)]), 1)


def test_the_runner_fails_when_the_barriers_do_not_come() -> None:
    with Harness() as h, pytest.raises(AssertionError, match=r"2 barriers expected .* got \[1\]"):
        h.run(Scripted(h.ctx(), KV.schema, [Barrier(1)]), 2, timeout=0.2)


def test_consolidate_applies_retractions_and_refuses_deleting_what_is_absent() -> None:
    assert consolidate([KV("+ a 1 true", "+ a 1 true", "U- a 1 true", "U+ b 2 false")]) == [
        "a 1 true",
        "b 2 false",
    ]
    with pytest.raises(AssertionError, match="deleted but not present"):
        consolidate([KV("+ a 1 true", "- a 2 true")])
