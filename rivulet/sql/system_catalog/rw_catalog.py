"""``rw_catalog``: RisingWave's catalog views - relations, columns, schemas, databases,
users, and the streaming dataflow (jobs, fragments, actors, workers) - reachable
unqualified as in RisingWave. RisingWave's columns come first, Rivulet's after."""

from __future__ import annotations

from rivulet.meta.catalog import DEFAULT_DATABASE
from rivulet.sql.functions import (
    ACTOR_PID_FUNCTION,
    WORKER_PID_FUNCTION,
    WORKER_PORT_FUNCTION,
    WORKER_STATE_FUNCTION,
)
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

_RECOVERY_EVENT_COLUMNS = (
    "id started_at reason actor_id fragment_id job_id job_name recovered_epoch attempt"
    " backoff_ms duration_ms scope"
).split()


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
        *streaming_views(),
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


def streaming_views() -> list[SystemView]:
    """Jobs, fragments, actors and workers, from the meta store (committed with the epoch
    that made them true)."""
    policy = "coalesce(json_extract_string(o.properties, '$.parallelism'), 'adaptive')"
    status = "coalesce(json_extract_string(o.properties, '$.status'), 'created')"
    scan = "nullif(json_extract_string(o.properties, '$.backfill_type'), '')"
    return [
        view(
            "rw_catalog",
            "rw_streaming_jobs",
            "id:integer, name:varchar, database_id:integer, status:varchar,"
            " parallelism:varchar, max_parallelism:integer, backfill_parallelism:varchar,"
            " target_parallelism:varchar, reconcile_status:varchar, job_id:integer,"
            " state:varchar",
            {
                "id": "o.id",
                "name": "o.name",
                "database_id": str(DATABASE_OID),
                "status": f"upper({status})",
                "parallelism": policy,
                "backfill_parallelism": "json_extract_string(o.properties,"
                " '$.backfill_parallelism')",
                "max_parallelism": "256",
                "target_parallelism": f"coalesce(json_extract_string(o.properties,"
                f" '$.target_parallelism'), {policy})",
                "reconcile_status": "CASE WHEN json_extract_string(o.properties,"
                " '$.reconcile_note') IS NOT NULL THEN json_extract_string(o.properties,"
                " '$.reconcile_note') WHEN coalesce(json_extract_string(o.properties,"
                f" '$.target_parallelism'), {policy}) <> {policy} THEN 'pending'"
                " ELSE 'in_sync' END",
                "job_id": "o.id",
                "state": f"CASE {status} WHEN 'creating' THEN 'Creating' ELSE 'Created' END",
            },
            "meta.objects o WHERE o.kind IN ('table', 'materialized view', 'sink', 'index')",
        ),
        view(
            "rw_catalog",
            "rw_fragments",
            "fragment_id:integer, table_id:integer, distribution_type:varchar,"
            " state_table_ids:integer[], upstream_fragment_ids:integer[], flags:varchar[],"
            " parallelism:integer, max_parallelism:integer, parallelism_policy:varchar,"
            " scan_type:varchar, online_reschedulable:boolean",
            {
                "fragment_id": "f.fragment_id",
                "table_id": "f.job_id",
                "distribution_type": "f.distribution_type",
                "state_table_ids": "f.state_table_ids",
                "upstream_fragment_ids": "f.upstream_fragment_ids",
                "flags": "f.flags",
                "parallelism": "(SELECT count(*) FROM meta.actors a"
                " WHERE a.fragment_id = f.fragment_id)",
                "max_parallelism": "256",
                "parallelism_policy": f"CASE f.distribution_type WHEN 'SINGLE' THEN 'single'"
                f" ELSE {policy} END",
                "scan_type": "CASE WHEN list_contains(f.flags, 'STREAM_SCAN')"
                f" THEN coalesce({scan}, 'arrangement') END",
                # A creating job's no_shuffle scan is chained to its upstream's actors.
                "online_reschedulable": f"NOT ({status} = 'creating' AND"
                f" list_contains(f.flags, 'STREAM_SCAN') AND {scan} = 'no_shuffle')",
            },
            "meta.fragments f JOIN meta.objects o ON o.id = f.job_id",
        ),
        view(
            "rw_catalog",
            "rw_actors",
            "actor_id:integer, fragment_id:integer, worker_id:integer, state:varchar,"
            " vnode_count:integer, pid:integer",
            {
                "actor_id": "a.actor_id",
                "fragment_id": "a.fragment_id",
                "worker_id": "a.worker_id",
                "state": f"CASE WHEN {ACTOR_PID_FUNCTION}(a.actor_id) IS NULL"
                " THEN 'INACTIVE' ELSE 'RUNNING' END",
                "vnode_count": "a.vnode_count",
                # The process it runs in now: its worker's, or another's while that
                # worker's process is replaced.
                "pid": f"{ACTOR_PID_FUNCTION}(a.actor_id)",
            },
            "meta.actors a",
        ),
        view(
            "rw_catalog",
            "rw_worker_nodes",
            "id:integer, host:varchar, port:integer, type:varchar, state:varchar,"
            " parallelism:integer, is_streaming:boolean, is_serving:boolean, pid:integer",
            {
                "id": "w.id",
                "host": "w.host",
                "port": f"coalesce({WORKER_PORT_FUNCTION}(w.id), w.port)",
                "type": "'WORKER_TYPE_COMPUTE_NODE'",
                "state": f"{WORKER_STATE_FUNCTION}(w.id)",
                "parallelism": "w.slots",
                "is_streaming": "true",
                "is_serving": "true",
                "pid": f"{WORKER_PID_FUNCTION}(w.id)",
            },
            "meta.workers w",
        ),
        view(
            "rw_catalog",
            "rw_stream_errors",
            "job_id:integer, job_name:varchar, fragment_id:integer, operator:varchar,"
            " error_type:varchar, expression:varchar, count:bigint,"
            " last_seen:timestamp with time zone",
            {
                "job_id": "e.job_id",
                "job_name": "o.name",
                "fragment_id": "e.fragment_id",
                "operator": "e.operator",
                "error_type": "e.error_type",
                "expression": "e.expression",
                "count": "e.count",
                "last_seen": "e.last_seen",
            },
            "meta.stream_errors e JOIN meta.objects o ON o.id = e.job_id",
        ),
        view(
            "rw_catalog",
            "rw_ddl_progress",
            "ddl_id:integer, ddl_statement:varchar, create_type:varchar, progress:varchar,"
            " initialized_at:timestamp with time zone, backfill_type:varchar",
            {
                "ddl_id": "p.ddl_id",
                "ddl_statement": "p.ddl_statement",
                "create_type": "p.create_type",
                "progress": "p.progress",
                "initialized_at": "p.initialized_at",
                "backfill_type": "p.backfill_type",
            },
            "meta.ddl_progress p JOIN meta.objects o ON o.id = p.ddl_id",
        ),
        # Every rebuild of the dataflow from the last checkpoint (an actor or a checkpoint
        # failed, a reschedule timed out, RECOVER, a restart), the newest 1000.
        # duration_ms: from the failure (or the store opening) until the rebuilt dataflow
        # committed a checkpoint (NULL until then).
        view(
            "rw_catalog",
            "rw_recovery_events",
            "id:bigint, started_at:timestamp with time zone, reason:varchar,"
            " actor_id:integer, fragment_id:integer, job_id:integer, job_name:varchar,"
            " recovered_epoch:bigint, attempt:integer, backoff_ms:bigint, duration_ms:bigint,"
            " scope:varchar",
            {c: f"r.{c}" for c in _RECOVERY_EVENT_COLUMNS},
            "meta.recovery_events r",
        ),
    ]
