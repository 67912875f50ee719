"""Parameters: ``%s`` / ``?`` placeholders numbered as ``$n``, and each ``$n`` given the
type PostgreSQL would infer from its surroundings (a cast, LIMIT, a comparison with a
column of a user table). A mixin of the ``Binder``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from rivulet.common.errors import SYNTAX_ERROR, sql_error
from rivulet.common.types import DataType, type_from_name
from rivulet.meta.catalog import TableCatalog
from rivulet.sql.binding.casts import _type_of_datatype
from rivulet.sql.parser import position_of


class ParameterBinding:
    """The ``Binder``'s parameters: their numbering and inferred types."""

    scope: dict[str, TableCatalog]
    _param_types: dict[int, DataType | None]
    _placeholders: int
    _dollar_params: int

    if TYPE_CHECKING:
        # RelationBinding's: a column's type is its table's.
        def lookup_table(self, schema: str | None, name: str) -> TableCatalog | None: ...

    # ------------------------------------------------------------ parameters
    def number_parameters(self, ast: exp.Expr) -> None:
        """``%s`` / ``?`` placeholders become ``$1, $2, ...``; the two styles don't mix.
        Idempotent: call it early when parameter types are noted before ``prepare``."""
        for node in ast.find_all(exp.Parameter):
            try:
                n = int(node.name)
            except ValueError:
                raise sql_error(
                    SYNTAX_ERROR, f"bad parameter ${node.name}", position=position_of(node)
                ) from None
            self._dollar_params = max(self._dollar_params, n)
        # Depth-first is text order (sqlglot keeps no position for placeholder tokens).
        placeholders = list(ast.find_all(exp.Placeholder, bfs=False))
        if placeholders and self._dollar_params:
            raise sql_error(SYNTAX_ERROR, "a statement cannot mix %s and $n parameters")
        placeholders.sort(key=lambda p: _first_start(p))
        for i, node in enumerate(placeholders, start=1):
            node.replace(exp.Parameter(this=exp.Literal.number(i)))
        self._placeholders = max(self._placeholders, len(placeholders))
        self._dollar_params = max(self._dollar_params, self._placeholders)

    @property
    def param_count(self) -> int:
        return max(self._placeholders, self._dollar_params)

    def param_type_list(self) -> list[DataType | None]:
        return [self._param_types.get(i) for i in range(1, self.param_count + 1)]

    def note_param_type(self, node: exp.Expr, dtype: DataType | None) -> None:
        if isinstance(node, exp.Parameter) and dtype is not None:
            self._param_types.setdefault(int(node.name), dtype)

    def _infer_parameter_types(self, ast: exp.Expr) -> None:
        """Give each ``$n`` the type PostgreSQL would infer from its surroundings."""
        for param in ast.find_all(exp.Parameter):
            parent = param.parent
            if isinstance(parent, exp.Cast):
                to = parent.args.get("to")
                if isinstance(to, exp.DataType):
                    self.note_param_type(param, _type_of_datatype(to))
            elif isinstance(parent, exp.Limit | exp.Offset | exp.Fetch):
                self.note_param_type(param, type_from_name("bigint"))
            elif isinstance(parent, exp.Binary | exp.In | exp.Between):
                other = [
                    c
                    for c in parent.iter_expressions()
                    if c is not param and isinstance(c, exp.Column)
                ]
                if other:
                    self.note_param_type(param, self.column_type(ast, other[0]))

    def column_type(self, ast: exp.Expr, column: exp.Column) -> DataType | None:
        """The type of a column reference, when it names a column of a user table in
        ``ast``'s FROM clauses (before they are rewritten)."""
        qualifier = column.table
        for alias, t in self.scope.items():
            if (not qualifier or qualifier == alias) and t.column(column.name) is not None:
                return t.column(column.name).type  # type: ignore[union-attr]
        for table in ast.find_all(exp.Table):
            if not isinstance(table.this, exp.Identifier):
                continue
            if qualifier and qualifier not in (table.alias_or_name, table.name):
                continue
            t = self.lookup_table(table.db or None, table.name)
            if t is None:
                continue
            col = t.column(column.name)
            if col is not None:
                return col.type
        return None


def _first_start(node: exp.Expr) -> int:
    meta = getattr(node, "_meta", None) or {}
    return int(meta.get("start", 0))
