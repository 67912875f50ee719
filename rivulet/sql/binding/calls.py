"""Function calls and operators: each checked against the allow-list (``sql/functions.py``)
and rewritten for DuckDB - session functions answered from the session, catalog macros
and PostgreSQL's errors and value limits (max_value_bytes) as ``rw_sys`` macros,
``format`` as ``printf``, PostgreSQL's operators. A mixin of the ``Binder``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from rivulet.common.errors import (
    FEATURE_NOT_SUPPORTED,
    PROGRAM_LIMIT_EXCEEDED,
    UNDEFINED_FUNCTION,
    sql_error,
)
from rivulet.common.types import NUMERIC
from rivulet.sql.binding.base import INTERNAL, BindContext
from rivulet.sql.binding.casts import _bytea_literal, _is_bare_numeric, _read_bc
from rivulet.sql.functions import (
    ALLOWED_ANONYMOUS,
    ALLOWED_NODE_TYPES,
    SESSION_FUNCTIONS,
    SESSION_NODE_NAMES,
    SIGNAL_BACKEND_FUNCTION,
    function_name,
)
from rivulet.sql.parser import position_of
from rivulet.sql.system_catalog import MACRO_NAMES, SYS_SCHEMA
from rivulet.sql.system_catalog.macros import VALUE_LIMIT_HINT


class CallBinding:
    """The ``Binder``'s function calls and operators."""

    ctx: BindContext

    def sys_call(self, name: str, *args: exp.Expr) -> exp.Expr:
        return exp.Dot(
            this=exp.to_identifier(SYS_SCHEMA),
            expression=exp.Anonymous(this=name, expressions=list(args)),
        )

    def _bind_function(self, node: exp.Func) -> exp.Expr:
        if node.meta.get(INTERNAL):  # built by the engine (system_catalog.rewrite)
            return node
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in SESSION_FUNCTIONS:
                return self._session_function(name, node.expressions)
            if name in MACRO_NAMES:
                return self.sys_call(name, *node.expressions)
            if name == "octet_length" and len(node.expressions) == 1:
                return self.sys_call("rw_octet_length", *node.expressions)
            if name in ALLOWED_ANONYMOUS:
                return node
            raise sql_error(
                UNDEFINED_FUNCTION,
                f"function {name}() does not exist",
                hint="No function matches the given name. Rivulet supports PostgreSQL's and"
                " RisingWave's common functions.",
                position=position_of(node),
            )
        if type(node) in SESSION_NODE_NAMES:
            args = node.expressions or (
                [node.this] if isinstance(node.this, exp.Expr) else []
            )  # current_schemas(true) keeps its argument in "this"
            return self._session_function(SESSION_NODE_NAMES[type(node)], args)
        if isinstance(node, exp.Cast) and (literal := _bytea_literal(node)) is not None:
            return literal
        if isinstance(node, exp.Cast):
            _read_bc(node)
        if isinstance(node, exp.Cast) and _is_bare_numeric(node.args.get("to")):
            # DuckDB's bare DECIMAL is DECIMAL(18,3): x::numeric would keep 3 decimals.
            node.set("to", exp.DataType.build(NUMERIC.duckdb, dialect="duckdb"))
        # Rewrites keep the original argument nodes (never copies): they are bound later
        # in the same walk.
        if isinstance(node, exp.Format):
            # PostgreSQL's format('%s', ...) is DuckDB's printf over text arguments.
            args = [
                exp.Coalesce(
                    this=exp.Cast(this=a, to=exp.DataType.build("VARCHAR")),
                    expressions=[exp.Literal.string("")],
                )
                for a in list(node.expressions)
            ]
            _check_format_widths(node.this, self.ctx.max_value_bytes)
            printf = exp.Anonymous(this="printf", expressions=[node.this, *args])
            return self.sys_call("rw_bounded", printf, self._cap(), exp.Literal.string("format()"))
        if isinstance(node, exp.Hex):
            return exp.Lower(this=exp.Hex(this=node.this))  # to_hex(255) is 'ff'
        checked = self._checked_function(node)
        if checked is not None:
            return checked
        if type(node) in ALLOWED_NODE_TYPES:
            return node
        raise sql_error(
            UNDEFINED_FUNCTION,
            f"function {function_name(node)}() is not supported",
            position=position_of(node),
        )

    def _cap(self) -> exp.Expr:
        return exp.Literal.number(self.ctx.max_value_bytes)

    def _checked_function(self, node: exp.Func) -> exp.Expr | None:
        """PostgreSQL's errors where DuckDB returns NaN or an infinity (2201E, 2201F,
        22003), and values bounded by max_value_bytes (54000): the call as a ``rw_sys``
        macro that checks, or None when ``node`` needs no check."""
        if isinstance(node, exp.Sqrt):
            return self.sys_call("rw_sqrt", node.this)
        if isinstance(node, exp.Ln):
            return self.sys_call("rw_ln", node.this)
        if isinstance(node, exp.Log):
            if node.expression is None:
                return self.sys_call("rw_log10", node.this)
            return self.sys_call("rw_log", node.this, node.expression)
        if isinstance(node, exp.Exp):
            return self.sys_call("rw_exp", node.this)
        if isinstance(node, exp.Pow):
            return self.sys_call("rw_pow", node.this, node.expression)
        cap = self._cap()
        if isinstance(node, exp.Repeat):
            return self.sys_call("rw_repeat", node.this, node.args["times"], cap)
        if isinstance(node, exp.Pad):
            fill = node.args.get("fill_pattern") or exp.Literal.string(" ")
            fn = "rw_lpad" if node.args.get("is_left") else "rw_rpad"
            return self.sys_call(fn, node.this, node.expression, fill, cap)
        if isinstance(node, exp.Replace) and node.args.get("replacement") is not None:
            return self.sys_call(
                "rw_replace", node.this, node.expression, node.args["replacement"], cap
            )
        if isinstance(node, exp.Concat | exp.GroupConcat) and not node.meta.get(_BOUNDED):
            # Their size follows their inputs': the result is checked once it is built.
            name = "string_agg()" if isinstance(node, exp.GroupConcat) else "concat()"
            target: exp.Expr = node
            while isinstance(target.parent, exp.Window | exp.Filter | exp.WithinGroup):
                target = target.parent
            parent, key, index = target.parent, target.arg_key, target.index
            wrapper = self.sys_call("rw_bounded", target, cap, exp.Literal.string(name))
            if parent is None:
                return wrapper
            parent.set(key, wrapper, index)
            node.meta[_BOUNDED] = True
        return None

    def _session_function(self, name: str, args: list[exp.Expr]) -> exp.Expr:
        ctx = self.ctx
        aliases = {
            "current_catalog": "current_database",
            "current_role": "current_user",
            "user": "current_user",
        }
        name = aliases.get(name, name)
        if name == "version":
            return exp.Literal.string(ctx.server_version)
        if name == "current_database":
            return exp.Literal.string(ctx.database)
        if name in ("current_user", "session_user"):
            return exp.Literal.string(ctx.user)
        if name == "current_schema":
            path = [s for s in ctx.search_path if s != "$user"]
            return exp.Literal.string(path[0]) if path else exp.null()
        if name == "current_schemas":
            implicit = bool(args and args[0].sql().lower() == "true")
            schemas = [s for s in ctx.search_path if s != "$user"]
            if implicit:
                schemas = ["pg_catalog", *schemas]
            return exp.Array(expressions=[exp.Literal.string(s) for s in schemas])
        if name == "pg_backend_pid":
            return exp.Literal.number(ctx.session_id)
        if name in ("pg_cancel_backend", "pg_terminate_backend"):
            if len(args) != 1:
                raise sql_error(
                    UNDEFINED_FUNCTION,
                    f"function {name}() takes one argument, the pid of a session",
                    hint="pg_stat_activity lists the sessions and their pids.",
                )
            # A DuckDB function with side effects (the engine's), evaluated row by row
            # at run time: ``SELECT pg_cancel_backend(pid) FROM pg_stat_activity ...``.
            call = exp.Anonymous(
                this=SIGNAL_BACKEND_FUNCTION,
                expressions=[
                    exp.Cast(this=args[0], to=exp.DataType.build("INTEGER")),
                    exp.Boolean(this=name == "pg_terminate_backend"),
                ],
            )
            call.meta[INTERNAL] = True
            return call
        if name == "current_setting":
            if not args or not isinstance(args[0], exp.Literal):
                raise sql_error(
                    FEATURE_NOT_SUPPORTED, "current_setting() needs a constant setting name"
                )
            value = ctx.setting(args[0].name.lower())
            if value is None:
                missing_ok = len(args) > 1 and args[1].sql().lower() == "true"
                if missing_ok:
                    return exp.cast(exp.null(), "text")
                raise sql_error("42704", f'unrecognized configuration parameter "{args[0].name}"')
            return exp.Literal.string(value)
        if name in ("inet_server_addr",):
            return exp.Literal.string("127.0.0.1")
        if name in ("inet_server_port",):
            return exp.Literal.number(0)
        if name == "pg_postmaster_start_time":
            return exp.CurrentTimestamp()
        raise sql_error(UNDEFINED_FUNCTION, f"function {name}() does not exist")

    def _bind_operator(self, node: exp.Operator) -> exp.Expr:
        op = str(node.args.get("operator") or "").split(".")[-1].strip()
        left, right = node.this, node.expression
        mapping: dict[str, Callable[[], exp.Expr]] = {
            "~": lambda: exp.RegexpLike(this=left, expression=right),
            "~*": lambda: exp.RegexpILike(this=left, expression=right),
            "!~": lambda: exp.not_(exp.RegexpLike(this=left, expression=right)),
            "!~*": lambda: exp.not_(exp.RegexpILike(this=left, expression=right)),
            "=": lambda: exp.EQ(this=left, expression=right),
            "<>": lambda: exp.NEQ(this=left, expression=right),
            "<": lambda: exp.LT(this=left, expression=right),
            ">": lambda: exp.GT(this=left, expression=right),
            "<=": lambda: exp.LTE(this=left, expression=right),
            ">=": lambda: exp.GTE(this=left, expression=right),
        }
        if op not in mapping:
            raise sql_error(UNDEFINED_FUNCTION, f"operator does not exist: {op}")
        return exp.paren(mapping[op](), copy=False)


# Marks a call whose result is checked already (the binder sees it again inside the check).
_BOUNDED = "rw_bounded"
_FORMAT_WIDTH = re.compile(r"%(?:\d+\$)?-?(\d+)")


def _check_format_widths(fmt: exp.Expr, cap: int) -> None:
    """``format('%2000000000s', ...)`` is refused before it pads anything."""
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        return
    for m in _FORMAT_WIDTH.finditer(fmt.this):
        if int(m.group(1)) > cap:
            raise sql_error(
                PROGRAM_LIMIT_EXCEEDED,
                f"requested length too large: format() width {m.group(1)} is over"
                f" max_value_bytes ({cap})",
                hint=VALUE_LIMIT_HINT,
            )
