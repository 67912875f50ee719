"""The backfill tracker: a job is done only when every current scan actor says so."""

from __future__ import annotations

from rivulet.stream.backfill_tracker import BackfillProgress


def test_done_counts_only_the_current_actors() -> None:
    tracker = BackfillProgress()
    tracker.track(7, [1, 2])
    tracker.report(7, 1, 10, 50, 50, True)
    assert tracker.done_epoch(7) is None  # actor 2 has not reported
    tracker.report(7, 2, 11, 40, 40, True)
    assert tracker.done_epoch(7) == 11
    # A rebuild (reschedule, recovery) replaces the actors: their done must come again.
    tracker.track(7, [3])
    assert tracker.done_epoch(7) is None
    tracker.report(7, 3, 14, 90, 90, False)
    assert tracker.done_epoch(7) is None
    tracker.report(7, 3, 15, 90, 90, True)
    assert tracker.done_epoch(7) == 15
    assert tracker.done_epoch(8) is None  # a job never built
