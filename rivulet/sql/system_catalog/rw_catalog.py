"""``rw_catalog``: RisingWave's catalog views (the basics: relations, columns, schemas,
databases, users), reachable unqualified as in RisingWave. Streaming-job views
(``rw_streaming_jobs``, ``rw_fragments``...) belong with the stream runtime."""

from __future__ import annotations

from rivulet.meta.catalog import DEFAULT_DATABASE
from rivulet.sql.system_catalog.base import (
    DATABASE_OID,
    SYS_SCHEMA,
    SystemView,
    sql_str,
    view,
)

S = SYS_SCHEMA

_RELATION = """id:integer, name:varchar, schema_id:integer, owner:integer, definition:varchar,
    acl:varchar[], initialized_at:timestamp with time zone,
    created_at:timestamp with time zone"""


def _relation_select(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "id": "o.id",
        "name": "o.relname",
        "schema_id": "o.relnamespace",
        "owner": "o.relowner",
        "definition": "o.definition",
        "initialized_at": "o.created_at",
        "created_at": "o.created_at",
        **(extra or {}),
    }


def rw_catalog_views() -> list[SystemView]:
    obj = f"{S}.i_obj o"
    return [
        view(
            "rw_catalog",
            "rw_tables",
            "id:integer, name:varchar, schema_id:integer, owner:integer, definition:varchar,"
            " append_only:boolean, acl:varchar[], initialized_at:timestamp with time zone,"
            " created_at:timestamp with time zone",
            _relation_select({"append_only": "false"}),
            f"{obj} WHERE o.kind = 'table'",
        ),
        view(
            "rw_catalog",
            "rw_materialized_views",
            _RELATION,
            _relation_select(),
            f"{obj} WHERE o.kind = 'materialized view'",
        ),
        view(
            "rw_catalog", "rw_views", _RELATION, _relation_select(), f"{obj} WHERE o.kind = 'view'"
        ),
        view(
            "rw_catalog",
            "rw_sources",
            _RELATION,
            _relation_select(),
            f"{obj} WHERE o.kind = 'source'",
        ),
        view(
            "rw_catalog", "rw_sinks", _RELATION, _relation_select(), f"{obj} WHERE o.kind = 'sink'"
        ),
        view(
            "rw_catalog",
            "rw_indexes",
            "id:integer, name:varchar, primary_table_id:integer, key_columns:integer[],"
            " schema_id:integer, owner:integer, definition:varchar, acl:varchar[],"
            " initialized_at:timestamp with time zone, created_at:timestamp with time zone",
        ),
        view(
            "rw_catalog",
            "rw_relations",
            "id:integer, name:varchar, relation_type:varchar, schema_id:integer,"
            " owner:integer, definition:varchar, acl:varchar[]",
            {
                "id": "o.id",
                "name": "o.relname",
                "relation_type": "o.kind",
                "schema_id": "o.relnamespace",
                "owner": "o.relowner",
                "definition": "o.definition",
            },
            obj,
        ),
        view(
            "rw_catalog",
            "rw_columns",
            "relation_id:integer, name:varchar, position:integer, is_hidden:boolean,"
            " is_primary_key:boolean, is_distribution_key:boolean, data_type:varchar",
            {
                "relation_id": "c.object_id",
                "name": "c.name",
                "position": "c.position + 1",
                "is_hidden": "c.hidden",
                "is_primary_key": "list_contains(o.pk, c.position)",
                "is_distribution_key": "list_contains(o.dist_key, c.position)",
                "data_type": """CASE WHEN c.type_name = 'numeric' AND c.type_precision IS NOT NULL
                    THEN 'numeric(' || c.type_precision || ',' || coalesce(c.type_scale, 0) || ')'
                    ELSE c.type_name END""",
            },
            "meta.columns c JOIN meta.objects o ON o.id = c.object_id",
        ),
        view(
            "rw_catalog",
            "rw_schemas",
            "id:integer, name:varchar, owner:integer, acl:varchar[]",
            {"id": "n.oid", "name": "n.nspname", "owner": f"{S}.role_oid(n.owner)"},
            f"{S}.i_nsp n",
        ),
        view(
            "rw_catalog",
            "rw_databases",
            "id:integer, name:varchar, owner:integer, acl:varchar[]",
            {"id": str(DATABASE_OID), "name": sql_str(DEFAULT_DATABASE), "owner": "1"},
        ),
        view(
            "rw_catalog",
            "rw_users",
            "id:integer, name:varchar, is_super:boolean, create_db:boolean,"
            " create_user:boolean, can_login:boolean",
            {
                "id": "r.oid",
                "name": "r.rolname",
                "is_super": "true",
                "create_db": "true",
                "create_user": "true",
                "can_login": "true",
            },
            f"{S}.i_roles r",
        ),
    ]
