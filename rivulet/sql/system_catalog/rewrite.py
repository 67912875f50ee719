"""PostgreSQL syntax that catalog queries use and DuckDB reads differently, translated
before the binder checks a query (``Binder.prepare`` calls ``rewrite_pg_syntax``).

* ``pg_catalog.f(...)``: the qualifier goes (the function is then checked as any other);
  any other qualifier is refused, so that no query reaches a function of DuckDB's own
  schemas (``main``, ``pg_catalog``) or of ``rw_sys``.
* ``pg_catalog.pg_class.relname``: column references lose their schema (the relation is
  aliased by its name).
* ``x::regclass`` / ``::regtype`` / ``::regnamespace`` / ``::regrole``: a name becomes
  the OID it names (looked up along the search path), a number stays an OID; such a
  value cast to text, or shown as a result column, becomes the name again (as
  PostgreSQL prints these types). ``::oid`` is an unsigned integer. ``::regproc`` values
  are function names (Rivulet lists no functions by OID).
* ``to_regclass(...)`` and friends: as the casts, NULL when nothing matches.
* ``pg_table_is_visible(oid)``: the macro also gets the search path.
* PostgreSQL-only types (``name``, ``"char"``, ``int2vector``, ``xid``...) become their
  DuckDB stand-ins; ``'{a,b}'::text[]`` array literals become lists.
* ``COLLATE pg_catalog.default`` (any collation) is dropped.
* ``pg_settings`` / ``pg_stat_activity``: rows built from the session.
* ``json_build_object`` -> DuckDB's ``json_object``; ``current_setting($1)`` (a name
  known only at execution) -> a CASE over the session's settings.

Nodes built here that call internal macros are marked trusted (``TRUSTED`` in their
meta): the binder lets them through; everything they wrap is still checked.
"""

from __future__ import annotations

from sqlglot import exp

from rivulet.common.errors import UNDEFINED_FUNCTION, sql_error
from rivulet.sql.scope import names_a_cte
from rivulet.sql.system_catalog.base import SYS_SCHEMA, SessionView

# The meta key the binder reads to leave an engine-built node alone (binder.INTERNAL).
TRUSTED = "rw_internal"
# Meta key: the OID-valued expression stands for a value of this reg* type.
_REG_KIND = "rw_reg_kind"

_OID_TYPES = {"oid", "regclass", "regtype", "regnamespace", "regrole"}
_PROC_TYPES = {"regproc", "regprocedure", "regoper", "regoperator", "regconfig", "regcollation"}
# PostgreSQL types with no DuckDB counterpart -> the DuckDB type standing for them.
_STAND_INS = {
    "name": "VARCHAR",
    '"char"': "VARCHAR",
    "char": "VARCHAR",
    "bpchar": "VARCHAR",
    "text": "VARCHAR",
    "varchar": "VARCHAR",
    "xid": "UINTEGER",
    "xid8": "UBIGINT",
    "cid": "UINTEGER",
    "tid": "VARCHAR",
    "aclitem": "VARCHAR",
    "pg_node_tree": "VARCHAR",
    "pg_lsn": "VARCHAR",
    "int2vector": "SMALLINT[]",
    "oidvector": "UINTEGER[]",
    "sql_identifier": "VARCHAR",
    "character_data": "VARCHAR",
    "yes_or_no": "VARCHAR",
    "cardinal_number": "INTEGER",
    "time_stamp": "TIMESTAMPTZ",
    "int2": "SMALLINT",
    "int4": "INTEGER",
    "int8": "BIGINT",
    "float4": "FLOAT",
    "float8": "DOUBLE",
    "bool": "BOOLEAN",
    "numeric": "DECIMAL(38,10)",
    "timestamptz": "TIMESTAMPTZ",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
    "jsonb": "JSON",
    "json": "JSON",
    "bytea": "BLOB",
    "inet": "VARCHAR",
    "unknown": "VARCHAR",
    "anyarray": "VARCHAR[]",
}
_STRING_TYPES = {
    exp.DType.TEXT,
    exp.DType.VARCHAR,
    exp.DType.CHAR,
    exp.DType.NCHAR,
    exp.DType.NVARCHAR,
    exp.DType.NAME,
}
_RENAMES = {
    "json_build_object": "json_object",
    "jsonb_build_object": "json_object",
    "json_build_array": "json_array",
    "jsonb_build_array": "json_array",
}
# Functions that return a name (text) PostgreSQL then casts to regclass and friends.
_TEXT_FUNCTIONS = {
    "pg_get_serial_sequence",
    "quote_ident",
    "format",
    "concat",
    "lower",
    "upper",
    "current_schema",
    "current_user",
}


def trusted_call(name: str, *args: exp.Expr) -> exp.Expr:
    """``rw_sys.name(args)``, marked as built by the engine."""
    fn = exp.Anonymous(this=name, expressions=list(args))
    fn.meta[TRUSTED] = True
    return exp.Dot(this=exp.to_identifier(SYS_SCHEMA), expression=fn)


def search_path_list(ctx: SessionView) -> list[str]:
    """The schemas unqualified names resolve in: pg_catalog, then the search path."""
    path = [ctx.user if s == "$user" else s for s in ctx.search_path]
    if "pg_catalog" not in path:
        path = ["pg_catalog", *path]
    return path


def _path_literal(ctx: SessionView) -> exp.Expr:
    return exp.Array(expressions=[exp.Literal.string(s) for s in search_path_list(ctx)])


def rewrite_pg_syntax(ast: exp.Expr, ctx: SessionView) -> exp.Expr:
    """Translate the PostgreSQL syntax of ``ast`` (in place; returns the root)."""
    ast = _strip_function_qualifiers(ast)
    for column in list(ast.find_all(exp.Column)):
        if column.args.get("db") is not None or column.args.get("catalog") is not None:
            column.set("db", None)
            column.set("catalog", None)
    ast = _rewrite_functions(ast, ctx)
    _rewrite_tableoid(ast, ctx)
    _inline_session_relations(ast, ctx)
    # PostgreSQL's collations (pg_catalog.default, "C", ...) mean nothing to DuckDB.
    for collate in list(ast.find_all(exp.Collate)):
        if collate is ast:
            ast = collate.this
        else:
            collate.replace(collate.this)
    casts = [c for c in ast.find_all(exp.Cast) if not c.meta.get(TRUSTED)]
    # Deepest first, so that an outer cast sees what the inner one became.
    casts.sort(key=lambda c: -c.depth)
    for cast in casts:
        replacement = _rewrite_cast(cast, ctx)
        if replacement is not cast:
            if cast is ast:
                ast = replacement
            else:
                cast.replace(replacement)
    _name_reg_outputs(ast, ctx)
    return ast


# ------------------------------------------------------------------ functions


def _strip_function_qualifiers(ast: exp.Expr) -> exp.Expr:
    for dot in list(ast.find_all(exp.Dot)):
        fn = dot.expression
        if not isinstance(fn, exp.Func) or fn.meta.get(TRUSTED):
            continue
        qualifier = dot.this.sql(dialect="postgres").lower()
        if qualifier not in ("pg_catalog", '"pg_catalog"'):
            raise sql_error(
                UNDEFINED_FUNCTION,
                f"function {qualifier}.{fn.sql_name().lower() if not isinstance(fn, exp.Anonymous) else fn.name}() does not exist",
            )
        if dot is ast:
            ast = fn
        else:
            dot.replace(fn)
    # Table functions: FROM pg_catalog.unnest(...) s(x).
    for table in ast.find_all(exp.Table):
        if isinstance(table.this, exp.Func) and (table.args.get("db") or table.args.get("catalog")):
            qualifier = table.args.get("db")
            if table.args.get("catalog") is not None or qualifier.name.lower() != "pg_catalog":
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"function {table.sql(dialect='postgres').split('(')[0].lower()}() does not exist",
                )
            table.set("db", None)
    return ast


def _rewrite_functions(ast: exp.Expr, ctx: SessionView) -> exp.Expr:
    for fn in list(ast.find_all(exp.Anonymous)):
        if fn.meta.get(TRUSTED):
            continue
        name = fn.name.lower()
        args = fn.expressions
        replacement: exp.Expr | None = None
        if name in _RENAMES:
            replacement = exp.Anonymous(this=_RENAMES[name], expressions=args)
            replacement.meta[TRUSTED] = True
        elif name == "pg_table_is_visible" and len(args) == 1:
            replacement = trusted_call("pg_table_is_visible", args[0], _path_literal(ctx))
        elif name == "to_regclass" and len(args) == 1:
            replacement = _reg_in("regclass", args[0], ctx, strict=False)
        elif name in ("to_regtype", "to_regnamespace", "to_regrole") and len(args) == 1:
            replacement = _reg_in(name[3:], args[0], ctx, strict=False)
        elif name in ("to_regproc", "to_regprocedure") and len(args) == 1:
            replacement = exp.cast(exp.null(), "VARCHAR")
        elif name == "current_setting" and args and not isinstance(args[0], exp.Literal):
            replacement = _dynamic_setting(args, ctx)
        if replacement is not None:
            if fn is ast:
                ast = replacement
            else:
                fn.replace(replacement)
    return ast


def _rewrite_tableoid(ast: exp.Expr, ctx: SessionView) -> None:
    """The system column ``tableoid`` (psql's ``\\dd`` reads it): the OID of the relation
    a row comes from, for system relations and tables that have no such column."""
    from rivulet.meta.catalog import SYSTEM_SCHEMAS
    from rivulet.sql.system_catalog import REL_OIDS

    for column in list(ast.find_all(exp.Column)):
        if column.name != "tableoid":
            continue
        select = column.find_ancestor(exp.Select)
        if select is None:
            continue
        tables = [
            t
            for t in select.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier) and t.find_ancestor(exp.Select) is select
        ]
        if column.table:
            tables = [t for t in tables if t.alias_or_name == column.table]
        if len(tables) != 1:
            continue
        table = tables[0]
        oid: int | None = None
        for schema in [table.db] if table.db else search_path_list(ctx):
            if schema in SYSTEM_SCHEMAS:
                oid = REL_OIDS.get((schema, table.name))
            else:
                user = ctx.catalog.get_table(schema, table.name)
                if user is not None and user.column("tableoid") is None:
                    oid = user.id
            if oid is not None:
                break
        if oid is not None:
            column.replace(_as_oid(exp.Literal.number(oid)))


def _inline_session_relations(ast: exp.Expr, ctx: SessionView) -> None:
    """pg_settings and pg_stat_activity show the session's own values: their rows are
    built here, as a subquery, rather than read from a view."""
    import sqlglot

    from rivulet.sql.system_catalog.pg_catalog import session_relation_sql

    for table in list(ast.find_all(exp.Table)):
        name = table.name
        if (
            name not in ("pg_settings", "pg_stat_activity")
            or not isinstance(table.this, exp.Identifier)
            or table.args.get("catalog") is not None
            or (table.db and table.db != "pg_catalog")
            or (not table.db and names_a_cte(table))
        ):
            continue
        sql = session_relation_sql(name, ctx)
        if sql is None:
            continue
        sub = sqlglot.parse_one(sql, dialect="duckdb").subquery()
        sub.set("alias", table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name)))
        table.replace(sub)


def _dynamic_setting(args: list[exp.Expr], ctx: SessionView) -> exp.Expr:
    """``current_setting(expr)``: the session's value of every setting, picked at
    execution (NULL for an unknown name, as with ``missing_ok``)."""
    from rivulet.sql.session_config import VARIABLES

    case = exp.Case(this=exp.Lower(this=args[0]))
    for name in VARIABLES:
        value = ctx.setting(name)
        if value is not None:
            case = case.when(exp.Literal.string(name), exp.Literal.string(value))
    return case.else_(exp.cast(exp.null(), "VARCHAR"))


# ---------------------------------------------------------------------- casts


def _pg_type_name(to: exp.Expr) -> tuple[str | None, int]:
    """(PostgreSQL type name of a cast target when it is one sqlglot does not model,
    array dimensions)."""
    dims = 0
    while isinstance(to, exp.DataType) and to.this == exp.DType.ARRAY and to.expressions:
        dims += 1
        to = to.expressions[0]
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower(), dims
    if isinstance(to, exp.DataType):
        if to.this == exp.DType.NAME:
            return "name", dims
        if to.this == exp.DType.USERDEFINED:
            kind = to.args.get("kind")
            if isinstance(kind, exp.Dot):
                kind = kind.expression
            if isinstance(kind, exp.Identifier):
                if kind.quoted and kind.name == "char":
                    return '"char"', dims
                return kind.name.lower(), dims
            if kind is not None:
                return str(kind).strip('"').lower(), dims
    return None, dims


def _is_text(node: exp.Expr) -> bool:
    """Whether an expression is (most likely) a name rather than an OID."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Literal):
        return node.is_string
    if isinstance(node, exp.ByteString | exp.DPipe | exp.Concat | exp.Parameter | exp.Null):
        return True
    if isinstance(node, exp.Cast):
        to = node.args.get("to")
        return isinstance(to, exp.DataType) and to.this in _STRING_TYPES
    if isinstance(node, exp.Anonymous):
        return node.name.lower() in _TEXT_FUNCTIONS
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous):
        return node.expression.name in ("regclass_out", "regtype_out", "format_type")
    return False


def _reg_in(kind: str, arg: exp.Expr, ctx: SessionView, *, strict: bool) -> exp.Expr:
    strict_lit = exp.true() if strict else exp.false()
    if kind == "regclass":
        node = trusted_call("regclass_in", arg, _path_literal(ctx), strict_lit)
    else:
        node = trusted_call(f"{kind}_in", arg, strict_lit)
    node.meta[_REG_KIND] = kind
    return node


def _reg_out(kind: str, value: exp.Expr, ctx: SessionView) -> exp.Expr:
    if kind == "regclass":
        return trusted_call("regclass_out", value, _path_literal(ctx))
    return trusted_call(f"{kind}_out", value)


def _as_oid(value: exp.Expr) -> exp.Expr:
    cast = exp.Cast(this=value, to=exp.DataType.build("UINTEGER", dialect="duckdb"))
    cast.meta[TRUSTED] = True
    return cast


def _duckdb_type(name: str, dims: int) -> exp.DataType | None:
    stand_in = _STAND_INS.get(name)
    if stand_in is None:
        return None
    return exp.DataType.build(stand_in + "[]" * dims, dialect="duckdb")


def _rewrite_cast(cast: exp.Cast, ctx: SessionView) -> exp.Expr:
    operand = cast.this
    reg_kind = operand.meta.get(_REG_KIND)
    to = cast.args.get("to")
    name, dims = _pg_type_name(to) if to is not None else (None, 0)
    if name is None:
        # A type sqlglot knows. A reg* value cast to text is its name.
        if (
            reg_kind
            and reg_kind != "regproc"
            and dims == 0
            and isinstance(to, exp.DataType)
            and to.this in _STRING_TYPES
        ):
            return _reg_out(reg_kind, operand, ctx)
        if dims and isinstance(operand, exp.Literal) and operand.is_string:
            return _array_literal(operand.name, to)
        return cast
    if dims == 0 and name in _OID_TYPES and reg_kind == "regproc":
        # A function name (the text form regproc values keep) to its OID.
        return trusted_call("regproc_in", operand, exp.true())
    if dims == 0 and name in _OID_TYPES:
        if reg_kind or not _is_text(operand) or name == "oid":
            node = _as_oid(operand)
            if name != "oid":
                node.meta[_REG_KIND] = name
            return node
        return _reg_in(name, operand, ctx, strict=True)
    if dims == 0 and name in _PROC_TYPES:
        node = (
            exp.cast(operand, "VARCHAR")
            if _is_text(operand) or reg_kind == "regproc"
            else trusted_call("regproc_out", operand)
        )
        node.meta[_REG_KIND] = "regproc"  # already text: only ::oid reads it back
        return node
    if name in _OID_TYPES or name in _PROC_TYPES:
        target = exp.DataType.build(
            ("UINTEGER" if name in _OID_TYPES else "VARCHAR") + "[]" * dims, dialect="duckdb"
        )
    else:
        target = _duckdb_type(name, dims)
        if target is None:
            return cast  # DuckDB reports the unknown type
    if dims and isinstance(operand, exp.Literal) and operand.is_string:
        return _array_literal(operand.name, target)
    new = exp.Cast(this=operand, to=target)
    new.meta[TRUSTED] = True
    return new


def _array_literal(text: str, to: exp.Expr) -> exp.Expr:
    """``'{a,"b c",NULL}'::T[]`` -> ``CAST(['a', 'b c', NULL] AS T[])``."""
    items = _parse_pg_array(text)
    elements: list[exp.Expr] = [
        exp.null() if item is None else exp.Literal.string(item) for item in items
    ]
    cast = exp.Cast(this=exp.Array(expressions=elements), to=to)
    cast.meta[TRUSTED] = True
    return cast


def _parse_pg_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal."""
    from rivulet.common.errors import INVALID_TEXT_REPRESENTATION

    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise sql_error(
            INVALID_TEXT_REPRESENTATION,
            f'malformed array literal: "{text}"',
            detail='Array value must start with "{" or dimension information.',
        )
    body = s[1:-1]
    items: list[str | None] = []
    i = 0
    while i < len(body):
        while i < len(body) and body[i] == " ":
            i += 1
        if i >= len(body):
            break
        if body[i] == '"':
            i += 1
            buf = []
            while i < len(body) and body[i] != '"':
                if body[i] == "\\" and i + 1 < len(body):
                    i += 1
                buf.append(body[i])
                i += 1
            i += 1
            items.append("".join(buf))
        else:
            j = body.find(",", i)
            j = len(body) if j < 0 else j
            raw = body[i:j].strip()
            items.append(None if raw.upper() == "NULL" else raw)
            i = j
        while i < len(body) and body[i] in " ,":
            if body[i] == ",":
                i += 1
                break
            i += 1
    return items


# -------------------------------------------------------------------- outputs


def _name_reg_outputs(ast: exp.Expr, ctx: SessionView) -> None:
    """A reg* value shown as a result column prints as the name it stands for."""
    for select in _output_selects(ast):
        new = []
        changed = False
        for e in select.expressions:
            target = e.this if isinstance(e, exp.Alias) else e
            kind = target.meta.get(_REG_KIND) if isinstance(target, exp.Expr) else None
            if kind and kind != "regproc":
                out = _reg_out(kind, target.copy(), ctx)
                if isinstance(e, exp.Alias):
                    e.set("this", out)
                else:
                    e = exp.alias_(out, exp.to_identifier(target.sql_name().lower()))
                changed = True
            new.append(e)
        if changed:
            select.set("expressions", new)


def _output_selects(ast: exp.Expr) -> list[exp.Select]:
    out: list[exp.Select] = []
    node = ast
    if isinstance(node, exp.Subquery):
        node = node.unnest()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, exp.SetOperation):
            stack.extend([n.this, n.expression])
        elif isinstance(n, exp.Subquery):
            stack.append(n.this)
        elif isinstance(n, exp.Select):
            out.append(n)
    return out
