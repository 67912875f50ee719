"""Name resolution for stream planning: which input column a column reference means."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from rivulet.common.errors import AMBIGUOUS_COLUMN, UNDEFINED_COLUMN, UNDEFINED_TABLE, sql_error
from rivulet.common.types import DataType
from rivulet.sql.parser import position_of
from rivulet.stream.plan import PlanNode


@dataclass(frozen=True, slots=True)
class ScopeColumn:
    """An input column: the relation alias it belongs to, its name, its type. Hidden
    columns (keys the plan carries for itself) resolve by name but stay out of ``*``."""

    qualifier: str | None
    name: str
    type: DataType
    hidden: bool = False


class Scope:
    def __init__(self, columns: list[ScopeColumn]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def types(self) -> list[DataType]:
        return [c.type for c in self.columns]

    def concat(self, other: Scope) -> Scope:
        return Scope(self.columns + other.columns)

    def requalified(self, qualifier: str | None) -> Scope:
        return Scope([ScopeColumn(qualifier, c.name, c.type, c.hidden) for c in self.columns])

    def resolve(self, column: exp.Column) -> int:
        """The index a column reference names (42703 / 42702 / 42P01 otherwise)."""
        name = column.name
        qualifier = column.table or None
        if qualifier is not None and not any(c.qualifier == qualifier for c in self.columns):
            raise sql_error(
                UNDEFINED_TABLE,
                f'missing FROM-clause entry for table "{qualifier}"',
                position=position_of(column),
            )
        hits = [
            i
            for i, c in enumerate(self.columns)
            if c.name == name and (qualifier is None or c.qualifier == qualifier)
        ]
        if not hits:
            shown = f"{qualifier}.{name}" if qualifier else name
            raise sql_error(
                UNDEFINED_COLUMN, f'column "{shown}" does not exist', position=position_of(column)
            )
        if len(hits) > 1:
            raise sql_error(
                AMBIGUOUS_COLUMN,
                f'column reference "{name}" is ambiguous',
                position=position_of(column),
            )
        return hits[0]

    def star(self, qualifier: str | None = None) -> list[int]:
        """The columns ``*`` (or ``qualifier.*``) expands to."""
        if qualifier is not None and not any(c.qualifier == qualifier for c in self.columns):
            raise sql_error(UNDEFINED_TABLE, f'missing FROM-clause entry for table "{qualifier}"')
        return [
            i
            for i, c in enumerate(self.columns)
            if not c.hidden and (qualifier is None or c.qualifier == qualifier)
        ]


@dataclass
class Planned:
    """A planned relation: its node, its scope, and the input columns rows are spread over
    actors by (None: not known from the output, e.g. after an expression replaced them)."""

    node: PlanNode
    scope: Scope
    dist: list[int] | None
