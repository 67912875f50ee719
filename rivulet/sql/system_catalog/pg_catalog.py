"""``pg_catalog``: PostgreSQL's system catalogs as Rivulet shows them.

The catalogs describing relations, columns, types, namespaces, keys and roles are views
over the meta tables (through the ``i_*`` views of ``internal``); the rest are empty, as
PostgreSQL's would be for objects Rivulet does not have (triggers, rules, policies,
publications, sequences, inheritance...). Column names and types are PostgreSQL 15's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from rivulet.meta.catalog import DEFAULT_DATABASE, SCHEMA_OIDS
from rivulet.sql.session_config import VARIABLES
from rivulet.sql.system_catalog.base import (
    BTREE_AM_OID,
    C_COLLATION_OID,
    DATABASE_OID,
    DEFAULT_COLLATION_OID,
    DEFAULT_TABLESPACE_OID,
    HEAP_AM_OID,
    META,
    PK_CONSTRAINT_OID_BASE,
    PK_INDEX_OID_BASE,
    ROOT_ROLE_OID,
    SYS_SCHEMA,
    SessionView,
    SystemView,
    sql_str,
    values,
    view,
)

S = SYS_SCHEMA
PG_CATALOG_OID = SCHEMA_OIDS["pg_catalog"]

SPECS: dict[str, str] = {
    "pg_aggregate": """
        aggfnoid:regproc, aggkind:"char", aggnumdirectargs:smallint, aggtransfn:regproc,
        aggfinalfn:regproc, aggcombinefn:regproc, aggserialfn:regproc,
        aggdeserialfn:regproc, aggmtransfn:regproc, aggminvtransfn:regproc,
        aggmfinalfn:regproc, aggfinalextra:boolean, aggmfinalextra:boolean,
        aggfinalmodify:"char", aggmfinalmodify:"char", aggsortop:oid, aggtranstype:oid,
        aggtransspace:integer, aggmtranstype:oid, aggmtransspace:integer, agginitval:text,
        aggminitval:text,
    """,
    "pg_am": """
        oid:oid, amname:name, amhandler:regproc, amtype:"char",
    """,
    "pg_amop": """
        oid:oid, amopfamily:oid, amoplefttype:oid, amoprighttype:oid,
        amopstrategy:smallint, amoppurpose:"char", amopopr:oid, amopmethod:oid,
        amopsortfamily:oid,
    """,
    "pg_amproc": """
        oid:oid, amprocfamily:oid, amproclefttype:oid, amprocrighttype:oid,
        amprocnum:smallint, amproc:regproc,
    """,
    "pg_attrdef": """
        oid:oid, adrelid:oid, adnum:smallint, adbin:pg_node_tree,
    """,
    "pg_attribute": """
        attrelid:oid, attname:name, atttypid:oid, attstattarget:integer, attlen:smallint,
        attnum:smallint, attndims:integer, attcacheoff:integer, atttypmod:integer,
        attbyval:boolean, attalign:"char", attstorage:"char", attcompression:"char",
        attnotnull:boolean, atthasdef:boolean, atthasmissing:boolean, attidentity:"char",
        attgenerated:"char", attisdropped:boolean, attislocal:boolean, attinhcount:integer,
        attcollation:oid, attacl:aclitem[], attoptions:text[], attfdwoptions:text[],
        attmissingval:anyarray,
    """,
    "pg_auth_members": """
        roleid:oid, member:oid, grantor:oid, admin_option:boolean,
    """,
    "pg_authid": """
        oid:oid, rolname:name, rolsuper:boolean, rolinherit:boolean, rolcreaterole:boolean,
        rolcreatedb:boolean, rolcanlogin:boolean, rolreplication:boolean,
        rolbypassrls:boolean, rolconnlimit:integer, rolpassword:text,
        rolvaliduntil:timestamp with time zone,
    """,
    "pg_available_extensions": """
        name:name, default_version:text, installed_version:text, comment:text,
    """,
    "pg_cast": """
        oid:oid, castsource:oid, casttarget:oid, castfunc:oid, castcontext:"char",
        castmethod:"char",
    """,
    "pg_class": """
        oid:oid, relname:name, relnamespace:oid, reltype:oid, reloftype:oid, relowner:oid,
        relam:oid, relfilenode:oid, reltablespace:oid, relpages:integer, reltuples:real,
        relallvisible:integer, reltoastrelid:oid, relhasindex:boolean, relisshared:boolean,
        relpersistence:"char", relkind:"char", relnatts:smallint, relchecks:smallint,
        relhasrules:boolean, relhastriggers:boolean, relhassubclass:boolean,
        relrowsecurity:boolean, relforcerowsecurity:boolean, relispopulated:boolean,
        relreplident:"char", relispartition:boolean, relrewrite:oid, relfrozenxid:xid,
        relminmxid:xid, relacl:aclitem[], reloptions:text[], relpartbound:pg_node_tree,
    """,
    "pg_collation": """
        oid:oid, collname:name, collnamespace:oid, collowner:oid, collprovider:"char",
        collisdeterministic:boolean, collencoding:integer, collcollate:text,
        collctype:text, colliculocale:text, collversion:text,
    """,
    "pg_constraint": """
        oid:oid, conname:name, connamespace:oid, contype:"char", condeferrable:boolean,
        condeferred:boolean, convalidated:boolean, conrelid:oid, contypid:oid,
        conindid:oid, conparentid:oid, confrelid:oid, confupdtype:"char",
        confdeltype:"char", confmatchtype:"char", conislocal:boolean, coninhcount:integer,
        connoinherit:boolean, conkey:smallint[], confkey:smallint[], conpfeqop:oid[],
        conppeqop:oid[], conffeqop:oid[], confdelsetcols:smallint[], conexclop:oid[],
        conbin:pg_node_tree,
    """,
    "pg_conversion": """
        oid:oid, conname:name, connamespace:oid, conowner:oid, conforencoding:integer,
        contoencoding:integer, conproc:regproc, condefault:boolean,
    """,
    "pg_database": """
        oid:oid, datname:name, datdba:oid, encoding:integer, datlocprovider:"char",
        datistemplate:boolean, datallowconn:boolean, datconnlimit:integer,
        datfrozenxid:xid, datminmxid:xid, dattablespace:oid, datcollate:text,
        datctype:text, daticulocale:text, datcollversion:text, datacl:aclitem[],
    """,
    "pg_db_role_setting": """
        setdatabase:oid, setrole:oid, setconfig:text[],
    """,
    "pg_user_mappings": """
        umid:oid, srvid:oid, srvname:name, umuser:oid, usename:name, umoptions:text[],
    """,
    "pg_default_acl": """
        oid:oid, defaclrole:oid, defaclnamespace:oid, defaclobjtype:"char",
        defaclacl:aclitem[],
    """,
    "pg_depend": """
        classid:oid, objid:oid, objsubid:integer, refclassid:oid, refobjid:oid,
        refobjsubid:integer, deptype:"char",
    """,
    "pg_description": """
        objoid:oid, classoid:oid, objsubid:integer, description:text,
    """,
    "pg_enum": """
        oid:oid, enumtypid:oid, enumsortorder:real, enumlabel:name,
    """,
    "pg_event_trigger": """
        oid:oid, evtname:name, evtevent:name, evtowner:oid, evtfoid:oid, evtenabled:"char",
        evttags:text[],
    """,
    "pg_extension": """
        oid:oid, extname:name, extowner:oid, extnamespace:oid, extrelocatable:boolean,
        extversion:text, extconfig:oid[], extcondition:text[],
    """,
    "pg_file_settings": """
        sourcefile:text, sourceline:integer, seqno:integer, name:text, setting:text,
        applied:boolean, error:text,
    """,
    "pg_foreign_data_wrapper": """
        oid:oid, fdwname:name, fdwowner:oid, fdwhandler:oid, fdwvalidator:oid,
        fdwacl:aclitem[], fdwoptions:text[],
    """,
    "pg_foreign_server": """
        oid:oid, srvname:name, srvowner:oid, srvfdw:oid, srvtype:text, srvversion:text,
        srvacl:aclitem[], srvoptions:text[],
    """,
    "pg_foreign_table": """
        ftrelid:oid, ftserver:oid, ftoptions:text[],
    """,
    "pg_group": """
        groname:name, grosysid:oid, grolist:oid[],
    """,
    "pg_index": """
        indexrelid:oid, indrelid:oid, indnatts:smallint, indnkeyatts:smallint,
        indisunique:boolean, indnullsnotdistinct:boolean, indisprimary:boolean,
        indisexclusion:boolean, indimmediate:boolean, indisclustered:boolean,
        indisvalid:boolean, indcheckxmin:boolean, indisready:boolean, indislive:boolean,
        indisreplident:boolean, indkey:int2vector, indcollation:oidvector,
        indclass:oidvector, indoption:int2vector, indexprs:pg_node_tree,
        indpred:pg_node_tree,
    """,
    "pg_indexes": """
        schemaname:name, tablename:name, indexname:name, tablespace:name, indexdef:text,
    """,
    "pg_inherits": """
        inhrelid:oid, inhparent:oid, inhseqno:integer, inhdetachpending:boolean,
    """,
    "pg_init_privs": """
        objoid:oid, classoid:oid, objsubid:integer, privtype:"char", initprivs:aclitem[],
    """,
    "pg_language": """
        oid:oid, lanname:name, lanowner:oid, lanispl:boolean, lanpltrusted:boolean,
        lanplcallfoid:oid, laninline:oid, lanvalidator:oid, lanacl:aclitem[],
    """,
    "pg_largeobject_metadata": """
        oid:oid, lomowner:oid, lomacl:aclitem[],
    """,
    "pg_locks": """
        locktype:text, database:oid, relation:oid, page:integer, tuple:smallint,
        virtualxid:text, transactionid:xid, classid:oid, objid:oid, objsubid:smallint,
        virtualtransaction:text, pid:integer, mode:text, granted:boolean, fastpath:boolean,
        waitstart:timestamp with time zone,
    """,
    "pg_matviews": """
        schemaname:name, matviewname:name, matviewowner:name, tablespace:name,
        hasindexes:boolean, ispopulated:boolean, definition:text,
    """,
    "pg_namespace": """
        oid:oid, nspname:name, nspowner:oid, nspacl:aclitem[],
    """,
    "pg_opclass": """
        oid:oid, opcmethod:oid, opcname:name, opcnamespace:oid, opcowner:oid,
        opcfamily:oid, opcintype:oid, opcdefault:boolean, opckeytype:oid,
    """,
    "pg_operator": """
        oid:oid, oprname:name, oprnamespace:oid, oprowner:oid, oprkind:"char",
        oprcanmerge:boolean, oprcanhash:boolean, oprleft:oid, oprright:oid, oprresult:oid,
        oprcom:oid, oprnegate:oid, oprcode:regproc, oprrest:regproc, oprjoin:regproc,
    """,
    "pg_opfamily": """
        oid:oid, opfmethod:oid, opfname:name, opfnamespace:oid, opfowner:oid,
    """,
    "pg_partitioned_table": """
        partrelid:oid, partstrat:"char", partnatts:smallint, partdefid:oid,
        partattrs:int2vector, partclass:oidvector, partcollation:oidvector,
        partexprs:pg_node_tree,
    """,
    "pg_policy": """
        oid:oid, polname:name, polrelid:oid, polcmd:"char", polpermissive:boolean,
        polroles:oid[], polqual:pg_node_tree, polwithcheck:pg_node_tree,
    """,
    "pg_prepared_xacts": """
        transaction:xid, gid:text, prepared:timestamp with time zone, owner:name,
        database:name,
    """,
    "pg_proc": """
        oid:oid, proname:name, pronamespace:oid, proowner:oid, prolang:oid, procost:real,
        prorows:real, provariadic:oid, prosupport:regproc, prokind:"char",
        prosecdef:boolean, proleakproof:boolean, proisstrict:boolean, proretset:boolean,
        provolatile:"char", proparallel:"char", pronargs:smallint,
        pronargdefaults:smallint, prorettype:oid, proargtypes:oidvector,
        proallargtypes:oid[], proargmodes:"char"[], proargnames:text[],
        proargdefaults:pg_node_tree, protrftypes:oid[], prosrc:text, probin:text,
        prosqlbody:pg_node_tree, proconfig:text[], proacl:aclitem[],
    """,
    "pg_publication": """
        oid:oid, pubname:name, pubowner:oid, puballtables:boolean, pubinsert:boolean,
        pubupdate:boolean, pubdelete:boolean, pubtruncate:boolean, pubviaroot:boolean,
    """,
    "pg_publication_namespace": """
        oid:oid, pnpubid:oid, pnnspid:oid,
    """,
    "pg_publication_rel": """
        oid:oid, prpubid:oid, prrelid:oid, prqual:pg_node_tree, prattrs:int2vector,
    """,
    "pg_range": """
        rngtypid:oid, rngsubtype:oid, rngmultitypid:oid, rngcollation:oid, rngsubopc:oid,
        rngcanonical:regproc, rngsubdiff:regproc,
    """,
    "pg_rewrite": """
        oid:oid, rulename:name, ev_class:oid, ev_type:"char", ev_enabled:"char",
        is_instead:boolean, ev_qual:pg_node_tree, ev_action:pg_node_tree,
    """,
    "pg_roles": """
        rolname:name, rolsuper:boolean, rolinherit:boolean, rolcreaterole:boolean,
        rolcreatedb:boolean, rolcanlogin:boolean, rolreplication:boolean,
        rolconnlimit:integer, rolpassword:text, rolvaliduntil:timestamp with time zone,
        rolbypassrls:boolean, rolconfig:text[], oid:oid,
    """,
    "pg_seclabel": """
        objoid:oid, classoid:oid, objsubid:integer, provider:text, label:text,
    """,
    "pg_sequence": """
        seqrelid:oid, seqtypid:oid, seqstart:bigint, seqincrement:bigint, seqmax:bigint,
        seqmin:bigint, seqcache:bigint, seqcycle:boolean,
    """,
    "pg_sequences": """
        schemaname:name, sequencename:name, sequenceowner:name, data_type:regtype,
        start_value:bigint, min_value:bigint, max_value:bigint, increment_by:bigint,
        cycle:boolean, cache_size:bigint, last_value:bigint,
    """,
    "pg_settings": """
        name:text, setting:text, unit:text, category:text, short_desc:text,
        extra_desc:text, context:text, vartype:text, source:text, min_val:text,
        max_val:text, enumvals:text[], boot_val:text, reset_val:text, sourcefile:text,
        sourceline:integer, pending_restart:boolean,
    """,
    "pg_shadow": """
        usename:name, usesysid:oid, usecreatedb:boolean, usesuper:boolean, userepl:boolean,
        usebypassrls:boolean, passwd:text, valuntil:timestamp with time zone,
        useconfig:text[],
    """,
    "pg_shdescription": """
        objoid:oid, classoid:oid, description:text,
    """,
    "pg_shseclabel": """
        objoid:oid, classoid:oid, provider:text, label:text,
    """,
    "pg_stat_activity": """
        datid:oid, datname:name, pid:integer, leader_pid:integer, usesysid:oid,
        usename:name, application_name:text, client_addr:inet, client_hostname:text,
        client_port:integer, backend_start:timestamp with time zone,
        xact_start:timestamp with time zone, query_start:timestamp with time zone,
        state_change:timestamp with time zone, wait_event_type:text, wait_event:text,
        state:text, backend_xid:xid, backend_xmin:xid, query_id:bigint, query:text,
        backend_type:text,
    """,
    "pg_stat_all_tables": """
        relid:oid, schemaname:name, relname:name, seq_scan:bigint, seq_tup_read:bigint,
        idx_scan:bigint, idx_tup_fetch:bigint, n_tup_ins:bigint, n_tup_upd:bigint,
        n_tup_del:bigint, n_tup_hot_upd:bigint, n_live_tup:bigint, n_dead_tup:bigint,
        n_mod_since_analyze:bigint, n_ins_since_vacuum:bigint,
        last_vacuum:timestamp with time zone, last_autovacuum:timestamp with time zone,
        last_analyze:timestamp with time zone, last_autoanalyze:timestamp with time zone,
        vacuum_count:bigint, autovacuum_count:bigint, analyze_count:bigint,
        autoanalyze_count:bigint,
    """,
    "pg_stat_user_tables": """
        relid:oid, schemaname:name, relname:name, seq_scan:bigint, seq_tup_read:bigint,
        idx_scan:bigint, idx_tup_fetch:bigint, n_tup_ins:bigint, n_tup_upd:bigint,
        n_tup_del:bigint, n_tup_hot_upd:bigint, n_live_tup:bigint, n_dead_tup:bigint,
        n_mod_since_analyze:bigint, n_ins_since_vacuum:bigint,
        last_vacuum:timestamp with time zone, last_autovacuum:timestamp with time zone,
        last_analyze:timestamp with time zone, last_autoanalyze:timestamp with time zone,
        vacuum_count:bigint, autovacuum_count:bigint, analyze_count:bigint,
        autoanalyze_count:bigint,
    """,
    "pg_statio_user_tables": """
        relid:oid, schemaname:name, relname:name, heap_blks_read:bigint,
        heap_blks_hit:bigint, idx_blks_read:bigint, idx_blks_hit:bigint,
        toast_blks_read:bigint, toast_blks_hit:bigint, tidx_blks_read:bigint,
        tidx_blks_hit:bigint,
    """,
    "pg_statistic_ext": """
        oid:oid, stxrelid:oid, stxname:name, stxnamespace:oid, stxowner:oid,
        stxstattarget:integer, stxkeys:int2vector, stxkind:"char"[], stxexprs:pg_node_tree,
    """,
    "pg_statistic_ext_data": """
        stxoid:oid, stxdinherit:boolean, stxdndistinct:bytea, stxddependencies:bytea,
        stxdmcv:bytea, stxdexpr:text[],
    """,
    "pg_stats": """
        schemaname:name, tablename:name, attname:name, inherited:boolean, null_frac:real,
        avg_width:integer, n_distinct:real, most_common_vals:anyarray,
        most_common_freqs:real[], histogram_bounds:anyarray, correlation:real,
        most_common_elems:anyarray, most_common_elem_freqs:real[],
        elem_count_histogram:real[],
    """,
    "pg_subscription": """
        oid:oid, subdbid:oid, subskiplsn:pg_lsn, subname:name, subowner:oid,
        subenabled:boolean, subbinary:boolean, substream:boolean, subtwophasestate:"char",
        subdisableonerr:boolean, subconninfo:text, subslotname:name, subsynccommit:text,
        subpublications:text[],
    """,
    "pg_tables": """
        schemaname:name, tablename:name, tableowner:name, tablespace:name,
        hasindexes:boolean, hasrules:boolean, hastriggers:boolean, rowsecurity:boolean,
    """,
    "pg_tablespace": """
        oid:oid, spcname:name, spcowner:oid, spcacl:aclitem[], spcoptions:text[],
    """,
    "pg_timezone_names": """
        name:text, abbrev:text, utc_offset:interval, is_dst:boolean,
    """,
    "pg_transform": """
        oid:oid, trftype:oid, trflang:oid, trffromsql:regproc, trftosql:regproc,
    """,
    "pg_trigger": """
        oid:oid, tgrelid:oid, tgparentid:oid, tgname:name, tgfoid:oid, tgtype:smallint,
        tgenabled:"char", tgisinternal:boolean, tgconstrrelid:oid, tgconstrindid:oid,
        tgconstraint:oid, tgdeferrable:boolean, tginitdeferred:boolean, tgnargs:smallint,
        tgattr:int2vector, tgargs:bytea, tgqual:pg_node_tree, tgoldtable:name,
        tgnewtable:name,
    """,
    "pg_ts_config": """
        oid:oid, cfgname:name, cfgnamespace:oid, cfgowner:oid, cfgparser:oid,
    """,
    "pg_ts_dict": """
        oid:oid, dictname:name, dictnamespace:oid, dictowner:oid, dicttemplate:oid,
        dictinitoption:text,
    """,
    "pg_ts_parser": """
        oid:oid, prsname:name, prsnamespace:oid, prsstart:regproc, prstoken:regproc,
        prsend:regproc, prsheadline:regproc, prslextype:regproc,
    """,
    "pg_ts_template": """
        oid:oid, tmplname:name, tmplnamespace:oid, tmplinit:regproc, tmpllexize:regproc,
    """,
    "pg_type": """
        oid:oid, typname:name, typnamespace:oid, typowner:oid, typlen:smallint,
        typbyval:boolean, typtype:"char", typcategory:"char", typispreferred:boolean,
        typisdefined:boolean, typdelim:"char", typrelid:oid, typsubscript:regproc,
        typelem:oid, typarray:oid, typinput:regproc, typoutput:regproc, typreceive:regproc,
        typsend:regproc, typmodin:regproc, typmodout:regproc, typanalyze:regproc,
        typalign:"char", typstorage:"char", typnotnull:boolean, typbasetype:oid,
        typtypmod:integer, typndims:integer, typcollation:oid, typdefaultbin:pg_node_tree,
        typdefault:text, typacl:aclitem[],
    """,
    "pg_user": """
        usename:name, usesysid:oid, usecreatedb:boolean, usesuper:boolean, userepl:boolean,
        usebypassrls:boolean, passwd:text, valuntil:timestamp with time zone,
        useconfig:text[],
    """,
    "pg_user_mapping": """
        oid:oid, umuser:oid, umserver:oid, umoptions:text[],
    """,
    "pg_views": """
        schemaname:name, viewname:name, viewowner:name, definition:text,
    """,
}

# The text of a view's query, from the statement that created it.
_VIEW_QUERY = r"regexp_replace(o.definition, '^\s*create\s.*?\sas\s+', '', 'is')"

_ROLE = {
    "rolname": "r.rolname",
    "rolsuper": "true",
    "rolinherit": "true",
    "rolcreaterole": "true",
    "rolcreatedb": "true",
    "rolcanlogin": "true",
    "rolreplication": "false",
    "rolconnlimit": "-1",
    "rolbypassrls": "true",
    "oid": "r.oid",
}
_USER = {
    "usename": "r.rolname",
    "usesysid": "r.oid",
    "usecreatedb": "true",
    "usesuper": "true",
    "userepl": "false",
    "usebypassrls": "true",
}


def _settings_rows(setting: Callable[[str], str | None] = lambda _name: None) -> str:
    """VALUES of every session setting; ``setting`` gives a session's value (default:
    the default)."""
    rows = []
    for v in VARIABLES.values():
        check = getattr(v.check, "__name__", "")
        vartype = {"_bool": "bool", "_int": "integer", "_nonneg_int": "integer"}.get(
            check, "string"
        )
        context = "internal" if v.read_only else "user"
        value = setting(v.name)
        source = "default" if value is None or value == v.default else "session"
        rows.append(
            (v.name, v.default if value is None else value, v.default, v.description or None,
             context, vartype, source)
        )  # fmt: skip
    return values(
        rows, ["name", "setting", "boot_val", "short_desc", "context", "vartype", "source"]
    )


_SETTINGS_SELECT = {
    "name": "v.name",
    "setting": "v.setting",
    "category": "'Rivulet'",
    "short_desc": "v.short_desc",
    "context": "v.context",
    "vartype": "v.vartype",
    "source": "v.source",
    "boot_val": "v.boot_val",
    "reset_val": "v.boot_val",
    "pending_restart": "false",
}


def session_relation_sql(name: str, ctx: SessionView) -> str | None:
    """The query standing for a relation whose rows depend on the session (its settings,
    itself): ``pg_settings``, ``pg_stat_activity``."""
    if name == "pg_settings":
        return view(
            "pg_catalog", name, SPECS[name], _SETTINGS_SELECT, _settings_rows(ctx.setting)
        ).sql
    if name == "pg_stat_activity":
        return _activity_sql(ctx)
    return None


_ACTIVITY_COLUMNS = [
    "pid", "usename", "datname", "application_name", "client_addr", "client_port",
    "backend_start", "xact_start", "query_start", "state_change", "state", "query",
]  # fmt: skip


def _activity_sql(ctx: SessionView) -> str:
    """pg_stat_activity: a row per client session, as they are now."""
    rows = [
        (
            a.pid, a.user, a.database, a.application_name, a.client_addr, a.client_port,
            _timestamp(a.backend_start), _timestamp(a.xact_start), _timestamp(a.query_start),
            _timestamp(a.state_change), a.state, a.query,
        )
        for a in ctx.activity()
    ]  # fmt: skip
    if not rows:
        return view("pg_catalog", "pg_stat_activity", SPECS["pg_stat_activity"]).sql
    select = {c: f"v.{c}" for c in _ACTIVITY_COLUMNS}
    select.update(
        {
            "datid": str(DATABASE_OID),
            "usesysid": "(SELECT oid FROM pg_catalog.pg_roles WHERE rolname = v.usename)",
            "backend_type": "'client backend'",
        }
    )
    return view(
        "pg_catalog",
        "pg_stat_activity",
        SPECS["pg_stat_activity"],
        select,
        values(rows, _ACTIVITY_COLUMNS),
    ).sql


def _timestamp(value: dt.datetime | None) -> str | None:
    return value.isoformat(sep=" ") if value is not None else None


# Populated catalogs: column -> expression, and the FROM clause.
_CONTENT: dict[str, tuple[dict[str, str], str]] = {
    "pg_namespace": (
        {"oid": "n.oid", "nspname": "n.nspname", "nspowner": f"{S}.role_oid(n.owner)"},
        f"{S}.i_nsp n",
    ),
    "pg_class": (
        {
            "oid": "r.oid",
            "relname": "r.relname",
            "relnamespace": "r.relnamespace",
            "reltype": "0",
            "reloftype": "0",
            "relowner": "r.relowner",
            "relam": "r.relam",
            "relfilenode": "CASE WHEN r.relkind IN ('r', 'm', 'i') THEN r.oid ELSE 0 END",
            "reltablespace": "0",
            "relpages": "0",
            "reltuples": "-1",
            "relallvisible": "0",
            "reltoastrelid": "0",
            "relhasindex": "r.relhasindex",
            "relisshared": "false",
            "relpersistence": "'p'",
            "relkind": "r.relkind",
            "relnatts": "r.relnatts",
            "relchecks": "0",
            "relhasrules": "r.relkind = 'v'",
            "relhastriggers": "false",
            "relhassubclass": "false",
            "relrowsecurity": "false",
            "relforcerowsecurity": "false",
            "relispopulated": "true",
            "relreplident": "CASE WHEN r.relkind = 'r' THEN 'd' ELSE 'n' END",
            "relispartition": "false",
            "relrewrite": "0",
            "relfrozenxid": "0",
            "relminmxid": "0",
        },
        f"{S}.i_rel r",
    ),
    "pg_attribute": (
        {
            "attrelid": "a.attrelid",
            "attname": "a.attname",
            "atttypid": "a.atttypid",
            "attstattarget": "-1",
            "attlen": "coalesce(t.typlen, -1)",
            "attnum": "a.attnum",
            "attndims": "CASE WHEN t.typcategory = 'A' THEN 1 ELSE 0 END",
            "attcacheoff": "-1",
            "atttypmod": "a.atttypmod",
            "attbyval": "coalesce(t.typbyval, false)",
            "attalign": "coalesce(t.typalign, 'i')",
            "attstorage": "coalesce(t.typstorage, 'p')",
            "attcompression": "''",
            "attnotnull": "a.attnotnull",
            "atthasdef": "false",
            "atthasmissing": "false",
            "attidentity": "''",
            "attgenerated": "''",
            "attisdropped": "false",
            "attislocal": "true",
            "attinhcount": "0",
            "attcollation": "coalesce(t.typcollation, 0)",
        },
        f"{S}.i_att a LEFT JOIN {S}.i_types t ON t.oid = a.atttypid",
    ),
    "pg_type": (
        {
            "oid": "t.oid",
            "typname": "t.typname",
            "typnamespace": str(PG_CATALOG_OID),
            "typowner": str(ROOT_ROLE_OID),
            "typlen": "t.typlen",
            "typbyval": "t.typbyval",
            "typtype": "t.typtype",
            "typcategory": "t.typcategory",
            "typispreferred": "t.typispreferred",
            "typisdefined": "true",
            "typdelim": "','",
            "typrelid": "0",
            "typsubscript": "CASE WHEN t.typelem <> 0 AND t.typlen = -1"
            " THEN 'array_subscript_handler' ELSE '-' END",
            "typelem": "t.typelem",
            "typarray": "t.typarray",
            "typinput": "t.typinput",
            "typoutput": "t.typoutput",
            "typreceive": "t.typreceive",
            "typsend": "t.typsend",
            "typmodin": "'-'",
            "typmodout": "'-'",
            "typanalyze": "'-'",
            "typalign": "t.typalign",
            "typstorage": "t.typstorage",
            "typnotnull": "false",
            "typbasetype": "0",
            "typtypmod": "-1",
            "typndims": "0",
            "typcollation": "t.typcollation",
        },
        f"{S}.i_types t",
    ),
    "pg_database": (
        {
            "oid": str(DATABASE_OID),
            "datname": sql_str(DEFAULT_DATABASE),
            "datdba": str(ROOT_ROLE_OID),
            "encoding": "6",
            "datlocprovider": "'c'",
            "datistemplate": "false",
            "datallowconn": "true",
            "datconnlimit": "-1",
            "datfrozenxid": "0",
            "datminmxid": "1",
            "dattablespace": str(DEFAULT_TABLESPACE_OID),
            "datcollate": "'C'",
            "datctype": "'C'",
        },
        "",
    ),
    "pg_index": (
        {
            "indexrelid": "k.index_oid",
            "indrelid": "k.oid",
            "indnatts": "len(k.pkey)",
            "indnkeyatts": "len(k.pkey)",
            "indisunique": "true",
            "indnullsnotdistinct": "false",
            "indisprimary": "true",
            "indisexclusion": "false",
            "indimmediate": "true",
            "indisclustered": "false",
            "indisvalid": "true",
            "indcheckxmin": "false",
            "indisready": "true",
            "indislive": "true",
            "indisreplident": "false",
            "indkey": "k.pkey",
            "indcollation": "list_transform(k.pkey, lambda x: 0)",
            "indclass": "list_transform(k.pkey, lambda x: 0)",
            "indoption": "list_transform(k.pkey, lambda x: 0)",
        },
        f"{S}.i_pk k",
    ),
    "pg_constraint": (
        {
            "oid": "k.con_oid",
            "conname": "k.index_name",
            "connamespace": "k.relnamespace",
            "contype": "'p'",
            "condeferrable": "false",
            "condeferred": "false",
            "convalidated": "true",
            "conrelid": "k.oid",
            "contypid": "0",
            "conindid": "k.index_oid",
            "conparentid": "0",
            "confrelid": "0",
            "confupdtype": "' '",
            "confdeltype": "' '",
            "confmatchtype": "' '",
            "conislocal": "true",
            "coninhcount": "0",
            "connoinherit": "true",
            "conkey": "k.pkey",
        },
        f"{S}.i_pk k",
    ),
    "pg_am": (
        {"oid": "v.oid", "amname": "v.amname", "amhandler": "v.amhandler", "amtype": "v.amtype"},
        values(
            [
                (HEAP_AM_OID, "heap", "heap_tableam_handler", "t"),
                (BTREE_AM_OID, "btree", "bthandler", "i"),
            ],
            ["oid", "amname", "amhandler", "amtype"],
        ),
    ),
    "pg_collation": (
        {
            "oid": "v.oid",
            "collname": "v.collname",
            "collnamespace": str(PG_CATALOG_OID),
            "collowner": str(ROOT_ROLE_OID),
            "collprovider": "v.provider",
            "collisdeterministic": "true",
            "collencoding": "v.encoding",
            "collcollate": "v.coll",
            "collctype": "v.coll",
        },
        values(
            [
                (DEFAULT_COLLATION_OID, "default", "d", -1, None),
                (C_COLLATION_OID, "C", "c", -1, "C"),
                (C_COLLATION_OID + 1, "POSIX", "c", -1, "POSIX"),
            ],
            ["oid", "collname", "provider", "encoding", "coll"],
        ),
    ),
    "pg_roles": ({**_ROLE, "rolpassword": "'********'"}, f"{S}.i_roles r"),
    "pg_authid": (
        {k: v for k, v in _ROLE.items() if k not in ("rolconfig",)},
        f"{S}.i_roles r",
    ),
    "pg_user": ({**_USER, "passwd": "'********'"}, f"{S}.i_roles r"),
    "pg_shadow": (_USER, f"{S}.i_roles r"),
    "pg_tablespace": (
        {"oid": "v.oid", "spcname": "v.spcname", "spcowner": str(ROOT_ROLE_OID)},
        values(
            [(DEFAULT_TABLESPACE_OID, "pg_default"), (DEFAULT_TABLESPACE_OID + 1, "pg_global")],
            ["oid", "spcname"],
        ),
    ),
    "pg_tables": (
        {
            "schemaname": "o.nspname",
            "tablename": "o.relname",
            "tableowner": "o.owner",
            "hasindexes": "o.pkey IS NOT NULL",
            "hasrules": "false",
            "hastriggers": "false",
            "rowsecurity": "false",
        },
        f"{S}.i_obj o WHERE o.kind = 'table'",
    ),
    "pg_views": (
        {
            "schemaname": "o.nspname",
            "viewname": "o.relname",
            "viewowner": "o.owner",
            "definition": _VIEW_QUERY,
        },
        # User views and, as on PostgreSQL, the system views (their text is not shown).
        f"{S}.i_rel o WHERE o.relkind = 'v'",
    ),
    "pg_matviews": (
        {
            "schemaname": "o.nspname",
            "matviewname": "o.relname",
            "matviewowner": "o.owner",
            "hasindexes": "false",
            "ispopulated": "true",
            "definition": _VIEW_QUERY,
        },
        f"{S}.i_obj o WHERE o.kind = 'materialized view'",
    ),
    "pg_indexes": (
        {
            "schemaname": "k.nspname",
            "tablename": "k.relname",
            "indexname": "k.index_name",
            "indexdef": "k.indexdef",
        },
        f"{S}.i_pk k",
    ),
    "pg_settings": (_SETTINGS_SELECT, _settings_rows()),
}


def pg_catalog_views() -> list[SystemView]:
    out = []
    for name, spec in SPECS.items():
        select, from_ = _CONTENT.get(name, (None, ""))
        out.append(view("pg_catalog", name, spec, select, from_))
    return out


def pk_view() -> str:
    """``i_pk``: one row per table with a primary key, with its index and constraint."""
    cols = f"array_to_string(list_transform(k.colnames, lambda n: {S}.quote_ident(n)), ', ')"
    return f"""SELECT k.*,
            'CREATE UNIQUE INDEX ' || {S}.quote_ident(k.index_name) || ' ON '
              || {S}.quote_ident(k.nspname) || '.' || {S}.quote_ident(k.relname)
              || ' USING btree (' || {cols} || ')' AS indexdef,
            'PRIMARY KEY (' || {cols} || ')' AS condef
        FROM (SELECT o.id, o.oid, ({PK_INDEX_OID_BASE} + o.id)::UINTEGER AS index_oid,
                     ({PK_CONSTRAINT_OID_BASE} + o.id)::UINTEGER AS con_oid,
                     o.relnamespace, o.nspname, o.relname, o.relname || '_pkey' AS index_name,
                     o.pkey, list(c.name ORDER BY o.i) AS colnames
              FROM (SELECT *, unnest(pkey) AS attnum, generate_subscripts(pkey, 1) AS i
                    FROM {S}.i_obj WHERE pkey IS NOT NULL) o
              JOIN {META}.columns c ON c.object_id = o.id AND c.position + 1 = o.attnum
              GROUP BY o.id, o.oid, o.relnamespace, o.nspname, o.relname, o.pkey) k"""
