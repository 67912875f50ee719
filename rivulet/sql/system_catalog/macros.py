"""PostgreSQL's functions that DuckDB lacks or defines differently, as DuckDB macros in
``rw_sys``.

``USER_MACROS`` are the ones a query may call by name (the binder renames the call to
``rw_sys.<name>``); the others are internal - the binder generates calls to them when it
rewrites PostgreSQL syntax (``'t'::regclass``, ``oid::regtype::text``...) - and no user
can name them.

Macro parameters are substituted into the body as written, so a lookup macro's subquery
could capture a column of the caller's query that has the same name as one of its own
(``format_type(oid, NULL)`` inside a subquery over ``i_types``, which has an ``oid``).
Lookups therefore read their relations through columns and aliases prefixed ``_rw_``.
"""

from __future__ import annotations

from rivulet.meta.catalog import DEFAULT_USER
from rivulet.sql.system_catalog.base import ROOT_ROLE_OID, SYS_SCHEMA, sql_str

S = SYS_SCHEMA
# What rw_raise puts before its message (``raised_message`` finds it again).
RAISED_PREFIX = "rivulet raised: "


def _lookup(relation: str, columns: dict[str, str], alias: str = "_rw_r") -> str:
    """``(SELECT col AS _rw_x, ... FROM relation) _rw_r``."""
    cols = ", ".join(f"{expr} AS _rw_{name}" for name, expr in columns.items())
    return f"(SELECT {cols} FROM {S}.{relation}) {alias}"


_REL = _lookup("i_rel", {"oid": "oid", "name": "relname", "nsp": "nspname"})
_TYPES = _lookup("i_types", {"oid": "oid", "name": "typname", "display": "display"}, "_rw_t")
_ROLES = _lookup("i_roles", {"oid": "oid", "name": "rolname"})
_NSP = _lookup("i_nsp", {"oid": "oid", "name": "nspname"})
_PK = _lookup(
    "i_pk",
    {
        "index_oid": "index_oid",
        "con_oid": "con_oid",
        "indexdef": "indexdef",
        "condef": "condef",
        "cols": "colnames",
    },
)
_OBJ = _lookup("i_obj", {"oid": "oid", "kind": "kind", "definition": "definition"})
_TYPE_NAMES = _lookup("i_type_names", {"name": "name", "oid": "oid"}, "_rw_n")  # joined with _TYPES


# A time of day followed by anything but more of it: the text names its own zone or offset
# ('12:00:00+02', '12:00Z', '12:00 America/New_York').
_HAS_ZONE = r"\d:\d\d(:\d\d(\.\d+)?)?\s*[^\s\d:.]"


def _text(arg: str) -> str:
    return f"trim(CAST({arg} AS VARCHAR))"


# Macros that read no relation (created before the views, which may use them).
PURE: dict[str, str] = {
    # Raises ``msg`` (as RAISED_PREFIX + msg in a conversion error) where DuckDB's error()
    # would: error() is volatile, and DuckDB's TRY, which streaming jobs use to turn a
    # failing value into NULL, refuses volatile functions; this is a plain cast. (The
    # catalog lookups keep error(): DuckDB folds a constant rw_raise in them when the
    # statement has parameters, and they are never part of a streaming job.)
    "rw_raise": f"(msg) AS (CASE WHEN CAST('{RAISED_PREFIX}' || msg AS INTEGER) IS NULL THEN NULL END)",
    # A role's OID: root is 1; other owners get a stable number from their name.
    "role_oid": f"""(role_name) AS CASE WHEN role_name = {sql_str(DEFAULT_USER)}
        THEN {ROOT_ROLE_OID}::UINTEGER
        ELSE (md5_number(role_name) % 1000000000 + 16384)::UINTEGER END""",
    "quote_ident": """(s) AS CASE WHEN regexp_full_match(s, '[a-z_][a-z0-9_$]*') THEN s
        ELSE '"' || replace(s, '"', '""') || '"' END""",
    # The parts of a possibly qualified, possibly quoted name ('public."T"' -> [public, T]).
    "parse_ident": """(s) AS list_transform(
        regexp_extract_all(trim(CAST(s AS VARCHAR)), '("([^"]|"")*"|[^."]+)'),
        lambda p: CASE WHEN starts_with(trim(p), '"')
            THEN replace(trim(p)[2:-2], '""', '"') ELSE lower(trim(p)) END)""",
    # PostgreSQL raises on division by zero where DuckDB yields NULL.
    # DuckDB may evaluate a CASE branch for every row of a vector: the divisor is never 0.
    "rw_div": f"(a, b) AS CASE WHEN b = 0 THEN {S}.rw_raise('division by zero') ELSE a / nullif(b, 0) END",
    "rw_mod": f"(a, b) AS CASE WHEN b = 0 THEN {S}.rw_raise('division by zero') ELSE a % nullif(b, 0) END",
    # PostgreSQL raises where DuckDB returns NaN or an infinity. Each check guards an
    # argument (or tests the result) and raises with PostgreSQL's message; ERROR_STATES
    # gives each message its SQLSTATE.
    "rw_sqrt": "(x) AS sqrt(CASE WHEN x < 0"
    f" THEN {S}.rw_raise('cannot take square root of a negative number') ELSE x END)",
    "rw_log_arg": f"(x) AS CASE WHEN x = 0 THEN {S}.rw_raise('cannot take logarithm of zero')"
    f" WHEN x < 0 THEN {S}.rw_raise('cannot take logarithm of a negative number') ELSE x END",
    "rw_ln": f"(x) AS ln({S}.rw_log_arg(x))",
    "rw_log10": f"(x) AS log10({S}.rw_log_arg(x))",
    "rw_log": f"(b, x) AS log(CASE WHEN b = 1 THEN {S}.rw_raise('division by zero')"
    f" ELSE {S}.rw_log_arg(b) END, {S}.rw_log_arg(x))",
    # PostgreSQL computes numeric ^ and exp exactly, where a tiny result is no error.
    "rw_is_numeric": "(x) AS typeof(x) LIKE 'DECIMAL%'",
    "rw_pow_base": "(a, b) AS CASE"
    f" WHEN a = 0 AND b < 0 THEN {S}.rw_raise('zero raised to a negative power is undefined')"
    " WHEN a < 0 AND b <> floor(b)"
    f" THEN {S}.rw_raise('a negative number raised to a non-integer power yields a complex result')"
    " ELSE a END",
    "rw_pow": f"""(a, b) AS CASE WHEN isinf(power({S}.rw_pow_base(a, b), b))
            AND NOT isinf(CAST(a AS DOUBLE)) AND NOT isinf(CAST(b AS DOUBLE))
        THEN {S}.rw_raise('value out of range: overflow')
        WHEN power({S}.rw_pow_base(a, b), b) = 0 AND a <> 0 AND NOT isinf(CAST(b AS DOUBLE))
            AND NOT {S}.rw_is_numeric(a) AND NOT {S}.rw_is_numeric(b)
        THEN {S}.rw_raise('value out of range: underflow')
        ELSE power({S}.rw_pow_base(a, b), b) END""",
    "rw_exp": f"""(x) AS CASE WHEN isinf(exp(x)) AND NOT isinf(CAST(x AS DOUBLE))
        THEN {S}.rw_raise('value out of range: overflow')
        WHEN exp(x) = 0 AND NOT isinf(CAST(x AS DOUBLE)) AND NOT {S}.rw_is_numeric(x)
        THEN {S}.rw_raise('value out of range: underflow')
        ELSE exp(x) END""",
    # octet_length of text (DuckDB's takes bytes only).
    "rw_octet_length": "(x) AS CASE WHEN typeof(x) = 'BLOB' THEN octet_length(CAST(x AS BLOB))"
    " ELSE strlen(CAST(x AS VARCHAR)) END",
    # Values are bounded (max_value_bytes, passed as ``cap``): ``rw_len_ok`` is ``v``, or an
    # error when the value about to be built would have ``n`` bytes, over the cap. Guards
    # wrap the argument that sets the size, so nothing oversized is ever allocated; the
    # functions whose size follows their inputs (string_agg, concat) check their result.
    "rw_len_ok": "(v, n, cap, fn) AS CASE WHEN n > cap"
    f" THEN {S}.rw_raise('requested length too large: ' || fn || ' would build a value of '"
    " || printf('%.0f', CAST(n AS DOUBLE)) || ' bytes, over max_value_bytes (' || cap || ')')"
    " ELSE v END",
    "rw_repeat": f"(s, n, cap) AS repeat(s, {S}.rw_len_ok(n,"
    " CAST(strlen(s) AS DOUBLE) * n, cap, 'repeat()'))",
    "rw_pad_len": f"(s, n, fill, cap, fn) AS {S}.rw_len_ok(n, CAST(n AS DOUBLE) * greatest("
    " strlen(fill) / greatest(length(fill), 1), strlen(s) / greatest(length(s), 1), 1),"
    " cap, fn)",
    # An empty fill pads nothing (PostgreSQL), where DuckDB raises.
    "rw_lpad": f"""(s, n, fill, cap) AS CASE WHEN fill = '' THEN left(s, greatest(n, 0))
        ELSE lpad(s, {S}.rw_pad_len(s, n, fill, cap, 'lpad()'), nullif(fill, '')) END""",
    "rw_rpad": f"""(s, n, fill, cap) AS CASE WHEN fill = '' THEN left(s, greatest(n, 0))
        ELSE rpad(s, {S}.rw_pad_len(s, n, fill, cap, 'rpad()'), nullif(fill, '')) END""",
    "rw_replace": f"(s, f, t, cap) AS replace(s, f, {S}.rw_len_ok(t, CASE"
    " WHEN strlen(t) <= strlen(f) THEN 0"
    " ELSE strlen(s) + (strlen(s) - strlen(replace(s, f, ''))) // greatest(strlen(f), 1)"
    " * CAST(strlen(t) - strlen(f) AS DOUBLE) END, cap, 'replace()'))",
    "rw_concat_op": f"(a, b, cap) AS a || {S}.rw_len_ok(b, CAST(strlen(CAST(a AS VARCHAR)) AS"
    " DOUBLE) + strlen(CAST(b AS VARCHAR)), cap, '||')",
    "rw_bounded": f"(v, cap, fn) AS {S}.rw_len_ok(v, strlen(CAST(v AS VARCHAR)), cap, fn)",
    # The session's time zone applied to timestamptz (sql/timezones.py). The wall-clock time of an instant in ``zone`` (a TIMESTAMP). Through text so that
    # the macro also binds for arguments of other types (in branches that never run).
    "rw_wall_clock": "(x, zone) AS timezone(zone, CAST(CAST(x AS VARCHAR) AS TIMESTAMPTZ))",
    # CAST(x AS timestamptz): a text without a zone, a timestamp or a date is read in zone.
    "rw_to_tstz": f"""(x, zone) AS CASE WHEN typeof(x) IN ('TIMESTAMP', 'DATE')
        OR (typeof(x) = 'VARCHAR' AND NOT regexp_matches(CAST(x AS VARCHAR), '{_HAS_ZONE}'))
        THEN timezone(zone, CAST(CAST(x AS VARCHAR) AS TIMESTAMP))
        ELSE CAST(x AS TIMESTAMPTZ) END""",
    # date_trunc keeps its argument's type: the truncation is a shift of it, computed on
    # the wall clock for a timestamptz: the wall clock's own shift below a day (exact when
    # a daylight-saving change repeats an hour), the zone's midnight from a day up.
    "rw_date_trunc": f"""(unit, x, zone) AS x + CASE
        WHEN typeof(x) <> 'TIMESTAMP WITH TIME ZONE'
        THEN date_trunc(unit, CAST(x AS TIMESTAMP)) - CAST(x AS TIMESTAMP)
        WHEN lower(unit) IN ('microseconds', 'milliseconds', 'second', 'minute', 'hour')
        THEN date_trunc(unit, {S}.rw_wall_clock(x, zone)) - {S}.rw_wall_clock(x, zone)
        ELSE timezone(zone, date_trunc(unit, {S}.rw_wall_clock(x, zone)))
            - CAST(CAST(x AS VARCHAR) AS TIMESTAMPTZ) END""",
    # The zone's offset from UTC at an instant, in seconds (extract(timezone from x)).
    "rw_zone_offset": f"""(x, zone) AS CAST(epoch({S}.rw_wall_clock(x, zone))
        - epoch(CAST(CAST(x AS VARCHAR) AS TIMESTAMPTZ)) AS BIGINT)""",
    # The argument of jsonb_each (an object) or jsonb_array_elements (an array).
    "rw_json_kind": f"""(j, kind, fn) AS CASE WHEN j IS NULL OR json_type(j) = kind THEN j
        WHEN kind = 'OBJECT' THEN {S}.rw_raise('cannot call ' || fn || ' on a non-object')
        WHEN json_type(j) = 'OBJECT' THEN {S}.rw_raise('cannot extract elements from an object')
        ELSE {S}.rw_raise('cannot extract elements from a scalar') END""",
    # Streaming jobs: a row's error yields NULL instead of failing the job.
    "rw_div_safe": "(a, b) AS a / nullif(b, 0)",
    "rw_mod_safe": "(a, b) AS a % nullif(b, 0)",
    "pg_type_is_visible": "(type_oid) AS true",
    "pg_function_is_visible": "(fn_oid) AS true",
    "pg_collation_is_visible": "(coll_oid) AS true",
    "pg_opclass_is_visible": "(opc_oid) AS true",
    "pg_opfamily_is_visible": "(opf_oid) AS true",
    "pg_ts_dict_is_visible": "(dict_oid) AS true",
    "pg_ts_parser_is_visible": "(prs_oid) AS true",
    "pg_ts_template_is_visible": "(tmpl_oid) AS true",
    "pg_operator_is_visible": "(op_oid) AS true",
    "pg_conversion_is_visible": "(conv_oid) AS true",
    "pg_statistics_obj_is_visible": "(stat_oid) AS true",
    "pg_ts_config_is_visible": "(cfg_oid) AS true",
    "obj_description": "(obj_oid) AS NULL::VARCHAR, (obj_oid, catalog_name) AS NULL::VARCHAR",
    "col_description": "(rel_oid, col_num) AS NULL::VARCHAR",
    "shobj_description": "(obj_oid, catalog_name) AS NULL::VARCHAR",
    # Rivulet keeps no expression trees: every pg_node_tree column is NULL.
    "pg_get_expr": "(expr, rel_oid) AS CAST(expr AS VARCHAR),"
    " (expr, rel_oid, pretty) AS CAST(expr AS VARCHAR)",
    "pg_get_statisticsobjdef_columns": "(stat_oid) AS NULL::VARCHAR",
    "pg_get_statisticsobjdef": "(stat_oid) AS NULL::VARCHAR",
    "pg_get_function_result": "(fn_oid) AS NULL::VARCHAR",
    "pg_get_function_arguments": "(fn_oid) AS NULL::VARCHAR",
    "pg_get_function_identity_arguments": "(fn_oid) AS NULL::VARCHAR",
    "pg_get_functiondef": "(fn_oid) AS NULL::VARCHAR",
    "pg_get_triggerdef": "(tg_oid) AS NULL::VARCHAR, (tg_oid, pretty) AS NULL::VARCHAR",
    "pg_get_ruledef": "(rule_oid) AS NULL::VARCHAR, (rule_oid, pretty) AS NULL::VARCHAR",
    "pg_get_partkeydef": "(rel_oid) AS NULL::VARCHAR",
    "pg_get_partition_constraintdef": "(rel_oid) AS NULL::VARCHAR",
    "pg_get_serial_sequence": "(rel_name, col_name) AS NULL::VARCHAR",
    "pg_get_publication_tables": "(pub_name) AS NULL::VARCHAR",
    "pg_relation_is_publishable": "(rel_oid) AS false",
    "pg_encoding_to_char": """(enc) AS CASE enc WHEN 6 THEN 'UTF8' WHEN 0 THEN 'SQL_ASCII'
        ELSE '' END""",
    "pg_char_to_encoding": "(name) AS CASE upper(name) WHEN 'UTF8' THEN 6 WHEN 'SQL_ASCII'"
    " THEN 0 ELSE -1 END",
    "pg_is_in_recovery": "() AS false",
    "getdatabaseencoding": "() AS 'UTF8'",
    "pg_my_temp_schema": "() AS 0::UINTEGER",
    "pg_is_other_temp_schema": "(nsp_oid) AS false",
    "pg_tablespace_location": "(spc_oid) AS ''",
    "has_table_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_schema_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_database_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_column_privilege": "(a, b, c) AS true, (a, b, c, d) AS true",
    "has_any_column_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_function_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_sequence_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_type_privilege": "(a, b) AS true, (a, b, c) AS true",
    "has_tablespace_privilege": "(a, b) AS true, (a, b, c) AS true",
    "pg_has_role": "(a, b) AS true, (a, b, c) AS true",
    "pg_relation_size": "(rel_oid) AS 0::BIGINT, (rel_oid, fork) AS 0::BIGINT",
    "pg_total_relation_size": "(rel_oid) AS 0::BIGINT",
    "pg_table_size": "(rel_oid) AS 0::BIGINT",
    "pg_indexes_size": "(rel_oid) AS 0::BIGINT",
    "pg_database_size": "(db) AS 0::BIGINT",
    "pg_tablespace_size": "(spc) AS 0::BIGINT",
    "pg_size_pretty": """(n) AS CASE WHEN abs(n) < 10240 THEN n::BIGINT || ' bytes'
        WHEN abs(n) < 10240 * 1024 THEN round(n / 1024.0)::BIGINT || ' kB'
        WHEN abs(n) < 10240 * 1024 * 1024 THEN round(n / 1048576.0)::BIGINT || ' MB'
        ELSE round(n / 1073741824.0)::BIGINT || ' GB' END""",
    "quote_literal": """(s) AS '''' || replace(s::VARCHAR, '''', '''''') || ''''""",
    "every": "(x) AS bool_and(x)",
    "jsonb_typeof": "(j) AS lower(json_type(j))",
    "jsonb_array_length": "(j) AS json_array_length(j)",
    "jsonb_extract_path": "(j, p) AS json_extract(j, p)",
    "jsonb_extract_path_text": "(j, p) AS json_extract_string(j, p)",
    "jsonb_pretty": "(j) AS j::VARCHAR",
    "to_jsonb": "(x) AS to_json(x)",
    "jsonb_agg": "(x) AS to_json(list(x))",
    "regexp_match": "(s, p) AS CASE WHEN regexp_matches(s, p)"
    " THEN regexp_extract(s, p, 0)::VARCHAR[] END",
    # A type name as ``regtype`` input reads it: lower case, no pg_catalog qualifier, no
    # typmod, single spaces ('pg_catalog.NUMERIC(10, 2)[]' -> 'numeric[]').
    "type_name_norm": r"""(s) AS regexp_replace(regexp_replace(regexp_replace(
        lower(trim(CAST(s AS VARCHAR))), '^pg_catalog\.', ''), '\s*\([^)]*\)', '', 'g'),
        '\s+', ' ', 'g')""",
    "regproc_out": "(o) AS CASE WHEN o IS NULL THEN NULL WHEN o = 0 THEN '-'"
    " ELSE CAST(o AS VARCHAR) END",
    # pg_proc lists no function: only a number is a function OID.
    "regproc_in": rf"""(s, strict) AS CASE WHEN s IS NULL THEN NULL
        WHEN regexp_full_match({_text("s")}, '[0-9]+') THEN CAST({_text("s")} AS UINTEGER)
        WHEN {_text("s")} = '-' THEN 0::UINTEGER
        WHEN strict THEN CAST(error('function "' || {_text("s")} || '" does not exist')
            AS UINTEGER) END""",
}

# Macros that read the system views (created after them).
LOOKUP: dict[str, str] = {
    "pg_table_is_visible": f"""(rel_oid, path) AS coalesce((
        SELECT list_contains(path, _rw_r._rw_nsp) AND NOT EXISTS (
            SELECT 1 FROM {_lookup("i_rel", {"name": "relname", "nsp": "nspname"}, "_rw_x")}
            WHERE _rw_x._rw_name = _rw_r._rw_name
              AND list_position(path, _rw_x._rw_nsp) < list_position(path, _rw_r._rw_nsp))
        FROM {_REL} WHERE _rw_r._rw_oid = rel_oid), false)""",
    "pg_get_userbyid": f"""(role_oid) AS coalesce(
        (SELECT _rw_r._rw_name FROM {_ROLES} WHERE _rw_r._rw_oid = role_oid),
        'unknown (OID=' || role_oid || ')')""",
    "format_type": f"""(type_oid, typemod) AS CASE WHEN type_oid IS NULL THEN NULL
        WHEN type_oid = 0 THEN '-' ELSE coalesce((
        SELECT CASE
            WHEN _rw_t._rw_name = 'numeric' AND typemod > 4
              THEN 'numeric(' || ((typemod - 4) // 65536) || ',' || ((typemod - 4) % 65536) || ')'
            WHEN _rw_t._rw_name = '_numeric' AND typemod > 4
              THEN 'numeric(' || ((typemod - 4) // 65536) || ',' || ((typemod - 4) % 65536) || ')[]'
            WHEN _rw_t._rw_name IN ('varchar', 'bpchar') AND typemod > 4
              THEN _rw_t._rw_display || '(' || (typemod - 4) || ')'
            WHEN _rw_t._rw_name = 'bpchar' AND typemod IS NULL THEN 'bpchar'
            ELSE _rw_t._rw_display END
        FROM {_TYPES} WHERE _rw_t._rw_oid = type_oid), '???') END""",
    "pg_get_indexdef": f"""(idx_oid) AS (
            SELECT _rw_r._rw_indexdef FROM {_PK} WHERE _rw_r._rw_index_oid = idx_oid),
        (idx_oid, col, pretty) AS (
            SELECT CASE WHEN col = 0 THEN _rw_r._rw_indexdef
                        ELSE {S}.quote_ident(_rw_r._rw_cols[col]) END
            FROM {_PK} WHERE _rw_r._rw_index_oid = idx_oid)""",
    "pg_get_constraintdef": f"""(cons_oid) AS (
            SELECT _rw_r._rw_condef FROM {_PK} WHERE _rw_r._rw_con_oid = cons_oid),
        (cons_oid, pretty) AS (
            SELECT _rw_r._rw_condef FROM {_PK} WHERE _rw_r._rw_con_oid = cons_oid)""",
    "view_query": rf"""(view_oid) AS (
        SELECT regexp_replace(_rw_r._rw_definition, '^\s*create\s.*?\sas\s+', '', 'is')
        FROM {_OBJ} WHERE _rw_r._rw_oid = view_oid AND _rw_r._rw_kind IN ('view', 'materialized view'))""",
    "pg_get_viewdef": f"""(view_oid) AS {S}.view_query(view_oid),
        (view_oid, pretty) AS {S}.view_query(view_oid)""",
    # regclass: a relation name (resolved along the search path) <-> its OID.
    "regclass_in": rf"""(s, path, strict) AS CASE WHEN s IS NULL THEN NULL
        WHEN regexp_full_match({_text("s")}, '[0-9]+') THEN CAST({_text("s")} AS UINTEGER)
        ELSE coalesce((
            SELECT _rw_r._rw_oid FROM {_REL}
            WHERE _rw_r._rw_name = {S}.parse_ident(s)[-1]
              AND CASE WHEN len({S}.parse_ident(s)) > 1
                  THEN _rw_r._rw_nsp = {S}.parse_ident(s)[-2]
                  ELSE list_contains(path, _rw_r._rw_nsp) END
            ORDER BY list_position(path, _rw_r._rw_nsp) LIMIT 1),
          CASE WHEN strict THEN CAST(error('relation "' || {_text("s")} || '" does not exist')
            AS UINTEGER) END) END""",
    "regclass_out": f"""(rel_oid, path) AS CASE WHEN rel_oid IS NULL THEN NULL
        WHEN rel_oid = 0 THEN '-' ELSE coalesce((
            SELECT CASE WHEN list_contains(path, _rw_r._rw_nsp) THEN {S}.quote_ident(_rw_r._rw_name)
                ELSE {S}.quote_ident(_rw_r._rw_nsp) || '.' || {S}.quote_ident(_rw_r._rw_name) END
            FROM {_REL} WHERE _rw_r._rw_oid = rel_oid LIMIT 1), CAST(rel_oid AS VARCHAR)) END""",
    # regtype: a type name <-> its OID.
    "regtype_in": rf"""(s, strict) AS CASE WHEN s IS NULL THEN NULL
        WHEN regexp_full_match({_text("s")}, '[0-9]+') THEN CAST({_text("s")} AS UINTEGER)
        ELSE coalesce((
            SELECT CASE WHEN regexp_matches({S}.type_name_norm(s), '\[\d*\]$')
                        THEN _rw_t._rw_array ELSE _rw_t._rw_oid END
            FROM {_TYPE_NAMES}
            JOIN {_lookup("i_types", {"oid": "oid", "array": "typarray"}, "_rw_t")}
              ON _rw_t._rw_oid = _rw_n._rw_oid
            WHERE _rw_n._rw_name = trim(regexp_replace({S}.type_name_norm(s), '(\s*\[\d*\])+$', ''))
            LIMIT 1),
          CASE WHEN strict THEN CAST(error('type "' || {_text("s")} || '" does not exist')
            AS UINTEGER) END) END""",
    "regtype_out": f"(type_oid) AS {S}.format_type(type_oid, NULL)",
    "regnamespace_in": rf"""(s, strict) AS CASE WHEN s IS NULL THEN NULL
        WHEN regexp_full_match({_text("s")}, '[0-9]+') THEN CAST({_text("s")} AS UINTEGER)
        ELSE coalesce(
          (SELECT _rw_r._rw_oid FROM {_NSP} WHERE _rw_r._rw_name = {S}.parse_ident(s)[-1]),
          CASE WHEN strict THEN CAST(error('schema "' || {_text("s")} || '" does not exist')
            AS UINTEGER) END) END""",
    "regnamespace_out": f"""(nsp_oid) AS CASE WHEN nsp_oid IS NULL THEN NULL
        WHEN nsp_oid = 0 THEN '-' ELSE coalesce(
          (SELECT {S}.quote_ident(_rw_r._rw_name) FROM {_NSP} WHERE _rw_r._rw_oid = nsp_oid),
          CAST(nsp_oid AS VARCHAR)) END""",
    "regrole_in": rf"""(s, strict) AS CASE WHEN s IS NULL THEN NULL
        WHEN regexp_full_match({_text("s")}, '[0-9]+') THEN CAST({_text("s")} AS UINTEGER)
        ELSE coalesce(
          (SELECT _rw_r._rw_oid FROM {_ROLES} WHERE _rw_r._rw_name = {S}.parse_ident(s)[-1]),
          CASE WHEN strict THEN CAST(error('role "' || {_text("s")} || '" does not exist')
            AS UINTEGER) END) END""",
    "regrole_out": f"""(role_oid) AS CASE WHEN role_oid IS NULL THEN NULL
        WHEN role_oid = 0 THEN '-' ELSE coalesce(
          (SELECT {S}.quote_ident(_rw_r._rw_name) FROM {_ROLES} WHERE _rw_r._rw_oid = role_oid),
          CAST(role_oid AS VARCHAR)) END""",
}

VALUE_LIMIT_HINT = (
    "A value may hold at most max_value_bytes bytes (SHOW PARAMETERS);"
    " ALTER SYSTEM SET max_value_bytes = ... raises the limit, up to 1 GB."
)


def raised_message(text: str) -> str | None:
    """The message ``rw_raise`` raised, from DuckDB's error text (None: not one)."""
    start = text.find(f"'{RAISED_PREFIX}")
    if start < 0:
        return None
    body = text[start + len(RAISED_PREFIX) + 1 :]
    end = body.rfind("' to INT32")
    return body[:end] if end >= 0 else body


# The SQLSTATE of each error the macros raise, by the start of its message.
ERROR_STATES: dict[str, str] = {
    "cannot take square root of a negative number": "2201F",
    "zero raised to a negative power is undefined": "2201F",
    "a negative number raised to a non-integer power yields a complex result": "2201F",
    "cannot take logarithm of": "2201E",
    "value out of range:": "22003",
    "requested length too large": "54000",
}

# Functions a query may call by name.
USER_MACROS = frozenset(
    name
    for name in [*PURE, *LOOKUP]
    if not name.startswith("rw_")
    and name
    not in (
        "role_oid",
        "parse_ident",
        "type_name_norm",
        "regproc_out",
        "regproc_in",
        "view_query",
        "regclass_in",
        "regclass_out",
        "regtype_in",
        "regtype_out",
        "regnamespace_in",
        "regnamespace_out",
        "regrole_in",
        "regrole_out",
        # Answered by the binder, which passes the search path.
        "pg_table_is_visible",
    )
)
