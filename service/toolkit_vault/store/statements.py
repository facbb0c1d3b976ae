"""Every SQL statement the store sends, in one file to review: built once, with bound
parameters, at import.

Building them per call cost more CPU than the rest of a configure (benchmarks/); the hot
ones are sent on the driver's own cursor (`driver`). Transaction control (BEGIN, the
savepoints of a group commit) stays with `transactions`. The names keep their leading
underscore: they are private to `store`, imported only by the `Store`'s parts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, func, insert, literal, select, update

from toolkit_vault.store.chain import AUDIT_FIELDS
from toolkit_vault.store.driver import _OnDriver
from toolkit_vault.store.models import (
    AuditEvent,
    AuditHead,
    ConfigVersion,
    CurrentConfig,
    ImportedToolkitRow,
    PrincipalRow,
    SessionRow,
    VaultKey,
)
from toolkit_vault.store.notices import STATE_CHANNEL
from toolkit_vault.store.scopes import PREFIX

_PG_LOCK = 0x746B76  # "tkv"
# A PostgreSQL write's first round trip: the chain's lock, and the notice its commit sends
# to every process's `notices`, carrying this process's token (two statements, sent at
# once: no parameters; the token is hex).
_PG_BEGIN_WRITE = f"SELECT pg_advisory_xact_lock({_PG_LOCK}); NOTIFY {STATE_CHANNEL}, '{{}}'"

# The statements of every configure and audit write, built once with bound parameters:
# building them per call cost more CPU than the rest of a configure (benchmarks/).
_LATEST_VERSION = select(func.coalesce(func.max(ConfigVersion.version), 0)).where(
    ConfigVersion.session_id == bindparam("session_id"),
    ConfigVersion.toolkit_name == bindparam("toolkit_name"),
)
_PRIMARY_KEK = select(VaultKey.key_id).where(VaultKey.is_active.is_(True))  # the active vault key
_VERSION_COLUMNS = (
    "session_id",
    "toolkit_name",
    "version",
    "status",
    "message",
    "actor",
    "created_at",
    "schema_digest",
    "public_config",
    "secret_fingerprints",
    "sealed_secrets",
    "dek_id",
    "kek_id",
    "wrapped_dek",
    "mac",
)
_INSERT_VERSION = _OnDriver(
    insert(ConfigVersion).values({c: bindparam(c) for c in _VERSION_COLUMNS})
)
_POINTER_KEY = (  # not named like a column: an UPDATE reserves those names for its SET
    CurrentConfig.session_id == bindparam("key_session"),
    CurrentConfig.toolkit_name == bindparam("key_toolkit"),
)
_CURRENT_POINTER = select(CurrentConfig.version).where(*_POINTER_KEY)
_INSERT_POINTER = _OnDriver(
    insert(CurrentConfig).values(
        session_id=bindparam("key_session"),
        toolkit_name=bindparam("key_toolkit"),
        version=bindparam("new_version"),
        updated_at=bindparam("now"),
        mac=bindparam("pointer_mac"),
    )
)
_MOVE_POINTER = _OnDriver(
    update(CurrentConfig)
    .where(*_POINTER_KEY, CurrentConfig.version == bindparam("expected"))
    .values(
        version=bindparam("new_version"), updated_at=bindparam("now"), mac=bindparam("pointer_mac")
    )
)
_EVENT_COLUMNS = (*AUDIT_FIELDS, "details", "mac")
_INSERT_EVENT = _OnDriver(insert(AuditEvent).values({c: bindparam(c) for c in _EVENT_COLUMNS}))
_INSERT_HEAD = _OnDriver(
    insert(AuditHead).values(
        id=1, seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head")
    )
)
_MOVE_HEAD = _OnDriver(
    update(AuditHead)
    .where(AuditHead.id == 1)
    .values(seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head"))
)
_CHAIN_END_COLUMNS = (  # the head's columns, then the last event's
    *(
        select(column).where(AuditHead.id == 1).scalar_subquery()
        for column in (AuditHead.seq, AuditHead.mac, AuditHead.head_mac)
    ),
    *(
        select(column).order_by(AuditEvent.seq.desc()).limit(1).scalar_subquery()
        for column in (AuditEvent.seq, AuditEvent.mac)
    ),
)
_CHAIN_END = _OnDriver(select(*_CHAIN_END_COLUMNS))
_WRITE_STATE = _OnDriver(  # one round trip: latest version, primary KEK, pointer, chain end
    select(
        _LATEST_VERSION.scalar_subquery(),
        _PRIMARY_KEK.scalar_subquery(),
        _CURRENT_POINTER.scalar_subquery(),
        *_CHAIN_END_COLUMNS,
    )
)

# A principal's revocation and expiry (`Store._principal_ended`).
_PRINCIPAL_STANDING = _OnDriver(
    select(PrincipalRow.revoked_at, PrincipalRow.expires_at).where(
        PrincipalRow.principal_id == bindparam("principal_id")
    )
)
# An imported toolkit's package digest (`Store._check_imported`).
_IMPORTED = _OnDriver(
    select(ImportedToolkitRow.package_digest).where(
        ImportedToolkitRow.name == bindparam("toolkit_name")
    )
)
# PostgreSQL: `_WRITE_STATE` for each (scope, toolkit) of a group of appends, one row each,
# led by its key and ended by the toolkit's `_IMPORTED` (`Store._read_ahead`).
_PG_GROUP_STATE = (
    "SELECT k.s, k.t,"
    " (SELECT coalesce(max(v.version), 0) FROM config_versions v"
    "  WHERE v.session_id = k.s AND v.toolkit_name = k.t),"
    " (SELECT key_id FROM vault_keys WHERE is_active),"
    " (SELECT c.version FROM current_configs c WHERE c.session_id = k.s AND c.toolkit_name = k.t),"
    " h.seq, h.mac, h.head_mac, e.seq, e.mac,"
    " (SELECT i.package_digest FROM imported_toolkits i WHERE i.name = k.t)"
    " FROM unnest(%s::text[], %s::text[]) AS k(s, t)"
    " LEFT JOIN audit_head h ON h.id = 1"
    " LEFT JOIN (SELECT seq, mac FROM audit_events ORDER BY seq DESC LIMIT 1) e ON true"
)

_CURRENT_VERSIONS = (  # a session's current versions and their pointers
    select(
        ConfigVersion,
        CurrentConfig.version.label("pointer_version"),
        CurrentConfig.mac.label("pointer_mac"),
    )
    .join(
        CurrentConfig,
        (CurrentConfig.session_id == ConfigVersion.session_id)
        & (CurrentConfig.toolkit_name == ConfigVersion.toolkit_name)
        & (CurrentConfig.version == ConfigVersion.version),
    )
    .where(CurrentConfig.session_id.in_(bindparam("scopes", expanding=True)))
    .order_by(ConfigVersion.toolkit_name)
)
# A list's only query, run on the driver directly (`Store.fetch`): through SQLAlchemy's
# Core it cost most of a list's CPU, as a plain DBAPI statement a small part (BENCHMARKS.md).
_CURRENT_POINTERS = (
    "SELECT session_id, toolkit_name, version FROM current_configs WHERE session_id IN (?, ?)"
)


# The chain head, then the events a process has not followed yet: one statement, so one
# snapshot on either database (the first row is the head's, with NULL event columns).
_HEAD_ROW = (
    "SELECT 0, seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM audit_head WHERE id = 1"
)
_EVENTS_AFTER = (
    "SELECT 1, seq, ts, actor, action, session_id, toolkit_name, version, details, mac"
    " FROM audit_events WHERE seq > ?"
)
_FOLLOW = f"{_HEAD_ROW} UNION ALL {_EVENTS_AFTER} ORDER BY 1, 2"
# PostgreSQL: the same, and a session's pointers as `_CURRENT_POINTERS` gives them (kind 2,
# in the scope, toolkit and version columns): a list's read of the store in one statement.
_FOLLOW_AND_POINTERS = _FOLLOW.replace(
    " ORDER BY 1, 2",
    " UNION ALL SELECT 2, 0, NULL, NULL, NULL, session_id, toolkit_name, version, NULL, NULL"
    " FROM current_configs WHERE session_id IN (?, ?) ORDER BY 1, 2",
)
# `_FOLLOW`, at most `FOLLOW_BATCH` events at a time (`Store._follow`).
_FOLLOW_BATCH = (
    f"{_HEAD_ROW} UNION ALL SELECT * FROM ({_EVENTS_AFTER} ORDER BY seq LIMIT ?) AS batch"  # noqa: S608
    " ORDER BY 1, 2"
)


def _prefixed_insert(table: Any, columns: Iterable[str], prefix: str) -> Any:
    return insert(table).values(
        {name: bindparam(prefix + name, type_=table.c[name].type) for name in columns}
    )


def _pg_append(pointer: str | None) -> Any:
    """PostgreSQL: a configure's four writes (version, pointer, audit event, head) as one
    statement of data-modifying CTEs, one round trip instead of four; it returns how many
    pointer rows it wrote (1 for no pointer), which compare-and-set checks as before."""
    ctes = [
        _prefixed_insert(ConfigVersion.__table__, _VERSION_COLUMNS, "v_").cte("new_version"),
        _prefixed_insert(AuditEvent.__table__, _EVENT_COLUMNS, "e_").cte("new_event"),
        _MOVE_HEAD.statement.returning(AuditHead.id).cte("new_head"),
    ]
    if pointer is None:
        return select(literal(1)).add_cte(*ctes)
    write = _INSERT_POINTER if pointer == "insert" else _MOVE_POINTER
    moved = write.statement.returning(CurrentConfig.version).cte("new_pointer")
    return select(func.count()).select_from(moved).add_cte(*ctes)


_PG_APPEND = {pointer: _OnDriver(_pg_append(pointer)) for pointer in (None, "insert", "update")}


# The other reads and writes, run through SQLAlchemy (none of them is on a hot path).
# SQLite's commit counter, read on the watching connection (`Store._exact_mark`).
_DATA_VERSION = "PRAGMA data_version"
# The chain's last stored event and an event's link (`Store.behind_witness`).
_LAST_EVENT_SEQ = select(func.max(AuditEvent.seq))
_EVENT_MAC = select(AuditEvent.mac).where(AuditEvent.seq == bindparam("seq"))
# One version's row (`Store.version_if_latest`).
_VERSION_ROW = select(ConfigVersion).where(
    ConfigVersion.session_id == bindparam("session_id"),
    ConfigVersion.toolkit_name == bindparam("toolkit_name"),
    ConfigVersion.version == bindparam("version"),
)
# How many versions there are, and how many of them principal scopes hold (`check`).
_VERSIONS_BY_SCOPE = select(
    select(func.count()).select_from(ConfigVersion).scalar_subquery(),
    select(func.count())
    .where(ConfigVersion.session_id.startswith(PREFIX, autoescape=True))
    .scalar_subquery(),
)
# Principals and sessions (`Store.ensure_principal`, `create_session`, `ensure_scope`,
# `session_owned_by`): a row's columns are given at execution, its MAC among them.
_PRINCIPAL_ID = select(PrincipalRow.principal_id).where(
    PrincipalRow.principal_id == bindparam("principal_id")
)
_INSERT_PRINCIPAL = insert(PrincipalRow)
_SESSION_ID = select(SessionRow.session_id).where(SessionRow.session_id == bindparam("session_id"))
_SESSION_ROW = select(SessionRow).where(SessionRow.session_id == bindparam("session_id"))
_INSERT_SESSION = insert(SessionRow)
