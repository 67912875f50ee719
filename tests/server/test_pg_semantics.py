"""Rivulet against a real PostgreSQL 15: the same statements, the same answers."""

from __future__ import annotations

from postgres_reference import Pair


def test_reference_server_answers(pg_pair: Pair) -> None:
    pg_pair.assert_same("SELECT 1 AS a, 'x'::text AS b, NULL::int AS c")
    pg_pair.assert_same("SELECT 1 / 0")
