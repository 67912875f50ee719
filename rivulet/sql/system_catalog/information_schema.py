"""``information_schema``: the SQL-standard views, over the same internal views as
``pg_catalog`` so that both always agree. Column names and types are PostgreSQL 15's
(its domains - sql_identifier, character_data, yes_or_no, cardinal_number - stand for
their base types)."""

from __future__ import annotations

from rivulet.meta.catalog import DEFAULT_DATABASE
from rivulet.sql.system_catalog.base import SYS_SCHEMA, SystemView, sql_str, view

S = SYS_SCHEMA
DB = sql_str(DEFAULT_DATABASE)

SPECS: dict[str, str] = {
    "applicable_roles": """
        grantee:sql_identifier, role_name:sql_identifier, is_grantable:yes_or_no,
    """,
    "character_sets": """
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, character_repertoire:sql_identifier,
        form_of_use:sql_identifier, default_collate_catalog:sql_identifier,
        default_collate_schema:sql_identifier, default_collate_name:sql_identifier,
    """,
    "check_constraints": """
        constraint_catalog:sql_identifier, constraint_schema:sql_identifier,
        constraint_name:sql_identifier, check_clause:character_data,
    """,
    "column_privileges": """
        grantor:sql_identifier, grantee:sql_identifier, table_catalog:sql_identifier,
        table_schema:sql_identifier, table_name:sql_identifier, column_name:sql_identifier,
        privilege_type:character_data, is_grantable:yes_or_no,
    """,
    "columns": """
        table_catalog:sql_identifier, table_schema:sql_identifier,
        table_name:sql_identifier, column_name:sql_identifier,
        ordinal_position:cardinal_number, column_default:character_data,
        is_nullable:yes_or_no, data_type:character_data,
        character_maximum_length:cardinal_number, character_octet_length:cardinal_number,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, datetime_precision:cardinal_number,
        interval_type:character_data, interval_precision:cardinal_number,
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, collation_catalog:sql_identifier,
        collation_schema:sql_identifier, collation_name:sql_identifier,
        domain_catalog:sql_identifier, domain_schema:sql_identifier,
        domain_name:sql_identifier, udt_catalog:sql_identifier, udt_schema:sql_identifier,
        udt_name:sql_identifier, scope_catalog:sql_identifier, scope_schema:sql_identifier,
        scope_name:sql_identifier, maximum_cardinality:cardinal_number,
        dtd_identifier:sql_identifier, is_self_referencing:yes_or_no,
        is_identity:yes_or_no, identity_generation:character_data,
        identity_start:character_data, identity_increment:character_data,
        identity_maximum:character_data, identity_minimum:character_data,
        identity_cycle:yes_or_no, is_generated:character_data,
        generation_expression:character_data, is_updatable:yes_or_no,
    """,
    "constraint_column_usage": """
        table_catalog:sql_identifier, table_schema:sql_identifier,
        table_name:sql_identifier, column_name:sql_identifier,
        constraint_catalog:sql_identifier, constraint_schema:sql_identifier,
        constraint_name:sql_identifier,
    """,
    "constraint_table_usage": """
        table_catalog:sql_identifier, table_schema:sql_identifier,
        table_name:sql_identifier, constraint_catalog:sql_identifier,
        constraint_schema:sql_identifier, constraint_name:sql_identifier,
    """,
    "domains": """
        domain_catalog:sql_identifier, domain_schema:sql_identifier,
        domain_name:sql_identifier, data_type:character_data,
        character_maximum_length:cardinal_number, character_octet_length:cardinal_number,
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, collation_catalog:sql_identifier,
        collation_schema:sql_identifier, collation_name:sql_identifier,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, datetime_precision:cardinal_number,
        interval_type:character_data, interval_precision:cardinal_number,
        domain_default:character_data, udt_catalog:sql_identifier,
        udt_schema:sql_identifier, udt_name:sql_identifier, scope_catalog:sql_identifier,
        scope_schema:sql_identifier, scope_name:sql_identifier,
        maximum_cardinality:cardinal_number, dtd_identifier:sql_identifier,
    """,
    "element_types": """
        object_catalog:sql_identifier, object_schema:sql_identifier,
        object_name:sql_identifier, object_type:character_data,
        collection_type_identifier:sql_identifier, data_type:character_data,
        character_maximum_length:cardinal_number, character_octet_length:cardinal_number,
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, collation_catalog:sql_identifier,
        collation_schema:sql_identifier, collation_name:sql_identifier,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, datetime_precision:cardinal_number,
        interval_type:character_data, interval_precision:cardinal_number,
        domain_default:character_data, udt_catalog:sql_identifier,
        udt_schema:sql_identifier, udt_name:sql_identifier, scope_catalog:sql_identifier,
        scope_schema:sql_identifier, scope_name:sql_identifier,
        maximum_cardinality:cardinal_number, dtd_identifier:sql_identifier,
    """,
    "enabled_roles": """
        role_name:sql_identifier,
    """,
    "key_column_usage": """
        constraint_catalog:sql_identifier, constraint_schema:sql_identifier,
        constraint_name:sql_identifier, table_catalog:sql_identifier,
        table_schema:sql_identifier, table_name:sql_identifier, column_name:sql_identifier,
        ordinal_position:cardinal_number, position_in_unique_constraint:cardinal_number,
    """,
    "parameters": """
        specific_catalog:sql_identifier, specific_schema:sql_identifier,
        specific_name:sql_identifier, ordinal_position:cardinal_number,
        parameter_mode:character_data, is_result:yes_or_no, as_locator:yes_or_no,
        parameter_name:sql_identifier, data_type:character_data,
        character_maximum_length:cardinal_number, character_octet_length:cardinal_number,
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, collation_catalog:sql_identifier,
        collation_schema:sql_identifier, collation_name:sql_identifier,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, datetime_precision:cardinal_number,
        interval_type:character_data, interval_precision:cardinal_number,
        udt_catalog:sql_identifier, udt_schema:sql_identifier, udt_name:sql_identifier,
        scope_catalog:sql_identifier, scope_schema:sql_identifier,
        scope_name:sql_identifier, maximum_cardinality:cardinal_number,
        dtd_identifier:sql_identifier, parameter_default:character_data,
    """,
    "referential_constraints": """
        constraint_catalog:sql_identifier, constraint_schema:sql_identifier,
        constraint_name:sql_identifier, unique_constraint_catalog:sql_identifier,
        unique_constraint_schema:sql_identifier, unique_constraint_name:sql_identifier,
        match_option:character_data, update_rule:character_data,
        delete_rule:character_data,
    """,
    "routines": """
        specific_catalog:sql_identifier, specific_schema:sql_identifier,
        specific_name:sql_identifier, routine_catalog:sql_identifier,
        routine_schema:sql_identifier, routine_name:sql_identifier,
        routine_type:character_data, module_catalog:sql_identifier,
        module_schema:sql_identifier, module_name:sql_identifier,
        udt_catalog:sql_identifier, udt_schema:sql_identifier, udt_name:sql_identifier,
        data_type:character_data, character_maximum_length:cardinal_number,
        character_octet_length:cardinal_number, character_set_catalog:sql_identifier,
        character_set_schema:sql_identifier, character_set_name:sql_identifier,
        collation_catalog:sql_identifier, collation_schema:sql_identifier,
        collation_name:sql_identifier, numeric_precision:cardinal_number,
        numeric_precision_radix:cardinal_number, numeric_scale:cardinal_number,
        datetime_precision:cardinal_number, interval_type:character_data,
        interval_precision:cardinal_number, type_udt_catalog:sql_identifier,
        type_udt_schema:sql_identifier, type_udt_name:sql_identifier,
        scope_catalog:sql_identifier, scope_schema:sql_identifier,
        scope_name:sql_identifier, maximum_cardinality:cardinal_number,
        dtd_identifier:sql_identifier, routine_body:character_data,
        routine_definition:character_data, external_name:character_data,
        external_language:character_data, parameter_style:character_data,
        is_deterministic:yes_or_no, sql_data_access:character_data, is_null_call:yes_or_no,
        sql_path:character_data, schema_level_routine:yes_or_no,
        max_dynamic_result_sets:cardinal_number, is_user_defined_cast:yes_or_no,
        is_implicitly_invocable:yes_or_no, security_type:character_data,
        to_sql_specific_catalog:sql_identifier, to_sql_specific_schema:sql_identifier,
        to_sql_specific_name:sql_identifier, as_locator:yes_or_no, created:time_stamp,
        last_altered:time_stamp, new_savepoint_level:yes_or_no, is_udt_dependent:yes_or_no,
        result_cast_from_data_type:character_data, result_cast_as_locator:yes_or_no,
        result_cast_char_max_length:cardinal_number,
        result_cast_char_octet_length:cardinal_number,
        result_cast_char_set_catalog:sql_identifier,
        result_cast_char_set_schema:sql_identifier,
        result_cast_char_set_name:sql_identifier,
        result_cast_collation_catalog:sql_identifier,
        result_cast_collation_schema:sql_identifier,
        result_cast_collation_name:sql_identifier,
        result_cast_numeric_precision:cardinal_number,
        result_cast_numeric_precision_radix:cardinal_number,
        result_cast_numeric_scale:cardinal_number,
        result_cast_datetime_precision:cardinal_number,
        result_cast_interval_type:character_data,
        result_cast_interval_precision:cardinal_number,
        result_cast_type_udt_catalog:sql_identifier,
        result_cast_type_udt_schema:sql_identifier,
        result_cast_type_udt_name:sql_identifier, result_cast_scope_catalog:sql_identifier,
        result_cast_scope_schema:sql_identifier, result_cast_scope_name:sql_identifier,
        result_cast_maximum_cardinality:cardinal_number,
        result_cast_dtd_identifier:sql_identifier,
    """,
    "schemata": """
        catalog_name:sql_identifier, schema_name:sql_identifier,
        schema_owner:sql_identifier, default_character_set_catalog:sql_identifier,
        default_character_set_schema:sql_identifier,
        default_character_set_name:sql_identifier, sql_path:character_data,
    """,
    "sequences": """
        sequence_catalog:sql_identifier, sequence_schema:sql_identifier,
        sequence_name:sql_identifier, data_type:character_data,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, start_value:character_data,
        minimum_value:character_data, maximum_value:character_data,
        increment:character_data, cycle_option:yes_or_no,
    """,
    "table_constraints": """
        constraint_catalog:sql_identifier, constraint_schema:sql_identifier,
        constraint_name:sql_identifier, table_catalog:sql_identifier,
        table_schema:sql_identifier, table_name:sql_identifier,
        constraint_type:character_data, is_deferrable:yes_or_no,
        initially_deferred:yes_or_no, enforced:yes_or_no, nulls_distinct:yes_or_no,
    """,
    "table_privileges": """
        grantor:sql_identifier, grantee:sql_identifier, table_catalog:sql_identifier,
        table_schema:sql_identifier, table_name:sql_identifier,
        privilege_type:character_data, is_grantable:yes_or_no, with_hierarchy:yes_or_no,
    """,
    "tables": """
        table_catalog:sql_identifier, table_schema:sql_identifier,
        table_name:sql_identifier, table_type:character_data,
        self_referencing_column_name:sql_identifier, reference_generation:character_data,
        user_defined_type_catalog:sql_identifier, user_defined_type_schema:sql_identifier,
        user_defined_type_name:sql_identifier, is_insertable_into:yes_or_no,
        is_typed:yes_or_no, commit_action:character_data,
    """,
    "triggers": """
        trigger_catalog:sql_identifier, trigger_schema:sql_identifier,
        trigger_name:sql_identifier, event_manipulation:character_data,
        event_object_catalog:sql_identifier, event_object_schema:sql_identifier,
        event_object_table:sql_identifier, action_order:cardinal_number,
        action_condition:character_data, action_statement:character_data,
        action_orientation:character_data, action_timing:character_data,
        action_reference_old_table:sql_identifier,
        action_reference_new_table:sql_identifier, action_reference_old_row:sql_identifier,
        action_reference_new_row:sql_identifier, created:time_stamp,
    """,
    "usage_privileges": """
        grantor:sql_identifier, grantee:sql_identifier, object_catalog:sql_identifier,
        object_schema:sql_identifier, object_name:sql_identifier,
        object_type:character_data, privilege_type:character_data, is_grantable:yes_or_no,
    """,
    "user_defined_types": """
        user_defined_type_catalog:sql_identifier, user_defined_type_schema:sql_identifier,
        user_defined_type_name:sql_identifier, user_defined_type_category:character_data,
        is_instantiable:yes_or_no, is_final:yes_or_no, ordering_form:character_data,
        ordering_category:character_data, ordering_routine_catalog:sql_identifier,
        ordering_routine_schema:sql_identifier, ordering_routine_name:sql_identifier,
        reference_type:character_data, data_type:character_data,
        character_maximum_length:cardinal_number, character_octet_length:cardinal_number,
        character_set_catalog:sql_identifier, character_set_schema:sql_identifier,
        character_set_name:sql_identifier, collation_catalog:sql_identifier,
        collation_schema:sql_identifier, collation_name:sql_identifier,
        numeric_precision:cardinal_number, numeric_precision_radix:cardinal_number,
        numeric_scale:cardinal_number, datetime_precision:cardinal_number,
        interval_type:character_data, interval_precision:cardinal_number,
        source_dtd_identifier:sql_identifier, ref_dtd_identifier:sql_identifier,
    """,
    "views": """
        table_catalog:sql_identifier, table_schema:sql_identifier,
        table_name:sql_identifier, view_definition:character_data,
        check_option:character_data, is_updatable:yes_or_no, is_insertable_into:yes_or_no,
        is_trigger_updatable:yes_or_no, is_trigger_deletable:yes_or_no,
        is_trigger_insertable_into:yes_or_no,
    """,
}

_TABLE_TYPE = """CASE r.relkind WHEN 'r' THEN 'BASE TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW'
    ELSE 'VIEW' END"""

# Numeric facts of a column of type ``t`` with typmod ``a.atttypmod``.
_NUM_PRECISION = """CASE t.typname WHEN 'int2' THEN 16 WHEN 'int4' THEN 32 WHEN 'int8' THEN 64
    WHEN 'float4' THEN 24 WHEN 'float8' THEN 53 WHEN 'numeric' THEN
    CASE WHEN a.atttypmod > 4 THEN (a.atttypmod - 4) // 65536 END END"""
_NUM_RADIX = """CASE WHEN t.typname IN ('int2', 'int4', 'int8', 'float4', 'float8') THEN 2
    WHEN t.typname = 'numeric' THEN 10 END"""
_NUM_SCALE = """CASE WHEN t.typname IN ('int2', 'int4', 'int8') THEN 0
    WHEN t.typname = 'numeric' AND a.atttypmod > 4 THEN (a.atttypmod - 4) % 65536 END"""
_DT_PRECISION = """CASE WHEN t.typname IN ('time', 'timetz', 'timestamp', 'timestamptz',
    'interval') THEN 6 WHEN t.typname = 'date' THEN 0 END"""

_COLUMNS_FROM = f"""{S}.i_att a JOIN {S}.i_rel r ON r.oid = a.attrelid AND r.relkind IN ('r', 'v', 'm')
    LEFT JOIN {S}.i_types t ON t.oid = a.atttypid"""
_PK_COLUMNS_FROM = f"""(SELECT k.*, unnest(k.colnames) AS column_name,
        generate_subscripts(k.colnames, 1) AS ordinal_position FROM {S}.i_pk k) k"""

_CONTENT: dict[str, tuple[dict[str, str], str]] = {
    "tables": (
        {
            "table_catalog": DB,
            "table_schema": "r.nspname",
            "table_name": "r.relname",
            "table_type": _TABLE_TYPE,
            "is_insertable_into": "CASE WHEN r.relkind = 'r' THEN 'YES' ELSE 'NO' END",
            "is_typed": "'NO'",
        },
        f"{S}.i_rel r WHERE r.relkind IN ('r', 'v', 'm')",
    ),
    "columns": (
        {
            "table_catalog": DB,
            "table_schema": "r.nspname",
            "table_name": "r.relname",
            "column_name": "a.attname",
            "ordinal_position": "a.attnum",
            "is_nullable": "CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END",
            "data_type": "CASE WHEN t.typcategory = 'A' THEN 'ARRAY' ELSE t.display END",
            "numeric_precision": _NUM_PRECISION,
            "numeric_precision_radix": _NUM_RADIX,
            "numeric_scale": _NUM_SCALE,
            "datetime_precision": _DT_PRECISION,
            "udt_catalog": DB,
            "udt_schema": "'pg_catalog'",
            "udt_name": "t.typname",
            "dtd_identifier": "a.attnum::VARCHAR",
            "is_self_referencing": "'NO'",
            "is_identity": "'NO'",
            "identity_cycle": "'NO'",
            "is_generated": "'NEVER'",
            "is_updatable": "CASE WHEN r.relkind = 'r' THEN 'YES' ELSE 'NO' END",
        },
        _COLUMNS_FROM,
    ),
    "schemata": (
        {
            "catalog_name": DB,
            "schema_name": "n.nspname",
            "schema_owner": "n.owner",
        },
        f"{S}.i_nsp n",
    ),
    "views": (
        {
            "table_catalog": DB,
            "table_schema": "r.nspname",
            "table_name": "r.relname",
            "view_definition": r"regexp_replace(r.definition, '^\s*create\s.*?\sas\s+', '', 'is')",
            "check_option": "'NONE'",
            "is_updatable": "'NO'",
            "is_insertable_into": "'NO'",
            "is_trigger_updatable": "'NO'",
            "is_trigger_deletable": "'NO'",
            "is_trigger_insertable_into": "'NO'",
        },
        f"{S}.i_rel r WHERE r.relkind = 'v'",
    ),
    "table_constraints": (
        {
            "constraint_catalog": DB,
            "constraint_schema": "k.nspname",
            "constraint_name": "k.index_name",
            "table_catalog": DB,
            "table_schema": "k.nspname",
            "table_name": "k.relname",
            "constraint_type": "'PRIMARY KEY'",
            "is_deferrable": "'NO'",
            "initially_deferred": "'NO'",
            "enforced": "'YES'",
            "nulls_distinct": "'YES'",
        },
        f"{S}.i_pk k",
    ),
    "key_column_usage": (
        {
            "constraint_catalog": DB,
            "constraint_schema": "k.nspname",
            "constraint_name": "k.index_name",
            "table_catalog": DB,
            "table_schema": "k.nspname",
            "table_name": "k.relname",
            "column_name": "k.column_name",
            "ordinal_position": "k.ordinal_position",
        },
        _PK_COLUMNS_FROM,
    ),
    "constraint_column_usage": (
        {
            "table_catalog": DB,
            "table_schema": "k.nspname",
            "table_name": "k.relname",
            "column_name": "k.column_name",
            "constraint_catalog": DB,
            "constraint_schema": "k.nspname",
            "constraint_name": "k.index_name",
        },
        _PK_COLUMNS_FROM,
    ),
    "constraint_table_usage": (
        {
            "table_catalog": DB,
            "table_schema": "k.nspname",
            "table_name": "k.relname",
            "constraint_catalog": DB,
            "constraint_schema": "k.nspname",
            "constraint_name": "k.index_name",
        },
        f"{S}.i_pk k",
    ),
    "enabled_roles": ({"role_name": "r.rolname"}, f"{S}.i_roles r"),
}


def information_schema_views() -> list[SystemView]:
    out = []
    for name, spec in SPECS.items():
        select, from_ = _CONTENT.get(name, (None, ""))
        out.append(view("information_schema", name, spec, select, from_))
    return out
