"""Vault keys and vault-wide keys as stored: rows in, records out, changes by
compare-and-set.

A vault key row holds its key only as the key provider wrapped it. Which key is active and
which are retired is believed only with the row's MAC (`integrity.VAULT_KEYS`, checked by
`keys.keystore.verified_vault_keys`), and `reconcile` checks both against the audit chain's
`vault_initialized`, `vault_key_added` and `vault_key_retired` events. A retired row keeps
its record but not its key. The vault-wide keys (fingerprint, audit, state, recovery) are
rows of `internal_keys`, each wrapped by a vault key. Before the key hierarchy, master keys
had rows too (`master_keys`: an id and a key check value), read only by the upgrade.

Each change here is one named write transaction with its audit event; every update is
compare-and-set on what was read, so two operators cannot both win. The crypto (wrapping,
unwrapping) is the caller's, in `keys`: these take and give wrapped bytes only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, delete, func, insert, select, update

from toolkit_vault.errors import StoreError
from toolkit_vault.store import recovery_keys
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.data_keys import not_under
from toolkit_vault.store.integrity import VAULT_KEYS
from toolkit_vault.store.models import (
    AuditEvent,
    ConfigVersion,
    InternalKey,
    MasterKey,
    RecoveryKey,
    VaultKey,
)
from toolkit_vault.store.records import AuditDraft, as_bytes
from toolkit_vault.store.storage import Store

__all__ = [
    "InternalMove",
    "LegacyMasterKey",
    "NewVaultKey",
    "StoredVaultKey",
    "VaultKeyMove",
    "add_vault_key",
    "any_pending",
    "internal_keys",
    "legacy_master_keys",
    "legacy_upgrade_pending",
    "pending_rewraps",
    "read_vault_keys",
    "record_key_event",
    "retire_vault_key",
    "rewrap_internal_keys",
    "rewrap_vault_keys",
    "wrapped_key_counts",
]


@dataclass(frozen=True, repr=False)
class StoredVaultKey:
    key_id: str
    wrapped_key: bytes | None  # None once retired: the key itself is gone
    is_active: bool
    created_at: float
    retired_at: float | None
    mac: bytes | None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key_id!r}, active={self.is_active})"

    @property
    def live(self) -> bool:
        return self.retired_at is None and self.wrapped_key is not None

    def columns(self) -> dict[str, Any]:
        """What its MAC covers, as signed."""
        return {
            "key_id": self.key_id,
            "is_active": self.is_active,
            "created_at": self.created_at,
            "retired_at": self.retired_at,
            "mac": self.mac,
        }


Record = TypeVar("Record", bound=StoredVaultKey)


@dataclass(frozen=True, repr=False)
class NewVaultKey:
    """A vault key to add and make active: its wrap, the master key that wrapped it (named
    in its audit event), and the event's actor, action and further details."""

    key_id: str
    wrapped: bytes
    master_key: str
    actor: str
    action: AuditAction = AuditAction.VAULT_KEY_ADDED
    details: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"NewVaultKey({self.key_id!r}, master_key={self.master_key!r})"


VaultKeyMove = tuple[str, bytes, bytes]  # key id, old wrap, new wrap
InternalMove = tuple[str, str | None, bytes | None, str, bytes]
# name, old vault key id, old wrap (None: a new one), new vault key id, new wrap


def read_vault_keys(store: Store, record: type[Record] = StoredVaultKey) -> list[Record]:  # type: ignore[assignment]
    """Every vault key record as stored, oldest first, MAC not yet checked (start-up needs
    the keys before it has the state key that checks them)."""
    with store.read() as conn:
        rows = conn.execute(select(VaultKey).order_by(VaultKey.created_at, VaultKey.key_id))
        return [
            record(
                row.key_id,
                as_bytes(row.wrapped_key),
                bool(row.is_active),
                row.created_at,
                row.retired_at,
                as_bytes(row.mac),
            )
            for row in rows
        ]


def add_vault_key(
    store: Store,
    key: NewVaultKey,
    *,
    internal: Sequence[InternalMove] = (),
    cover: recovery_keys.Cover | None = None,
    events: Sequence[AuditDraft] = (),
) -> None:
    """Insert a vault key and make it the active one, with its audit event, in one
    transaction; the previous active key stays live until it is retired. In the same
    transaction: the vault-wide keys move (`internal`), the recovery shares cover the new
    key (`cover`, when there are shares) and `events` are audited after its own."""

    def work(conn: Connection) -> None:
        for row in conn.execute(select(VaultKey).where(VaultKey.is_active.is_(True))).all():
            _update(store, conn, row._mapping, is_active=False)
        now = time.time()
        record = {"key_id": key.key_id, "is_active": True, "created_at": now, "retired_at": None}
        conn.execute(
            insert(VaultKey).values(
                **record, wrapped_key=key.wrapped, mac=store.mac(VAULT_KEYS, record)
            )
        )
        event = {"key_id": key.key_id, "master_key": key.master_key, **(key.details or {})}
        store.audit(conn, AuditDraft(key.actor, key.action, details=event))
        if cover is not None:
            recovery_keys.cover(conn, key.key_id, cover)
        _rewrap_internal(conn, internal)
        for draft in events:
            store.audit(conn, draft)

    store.transact(work)


def _update(store: Store, conn: Connection, row: Any, **changes: Any) -> None:
    """Change a record as read (compare-and-set on its MAC) and sign it again."""
    signed = {**row, **changes}
    done = conn.execute(
        update(VaultKey)
        .where(VaultKey.key_id == row["key_id"], VaultKey.mac == row["mac"])
        .values(**changes, mac=store.mac(VAULT_KEYS, signed))
    )
    if done.rowcount != 1:
        raise StoreError(f"vault key {row['key_id']} changed meanwhile; nothing was written")


def rewrap_vault_keys(store: Store, moves: Sequence[VaultKeyMove], event: AuditDraft) -> None:
    """Replace vault keys' wraps, each only if unchanged since read, with `event`, in one
    transaction; the MACs stay: the wrap is authenticated by the provider, not the row."""

    def work(conn: Connection) -> None:
        for key_id, old, new in moves:
            done = conn.execute(
                update(VaultKey)
                .where(VaultKey.key_id == key_id, VaultKey.wrapped_key == old)
                .values(wrapped_key=new)
            )
            if done.rowcount != 1:
                raise StoreError(f"vault key {key_id} changed meanwhile; run the rotation again")
        store.audit(conn, event)

    store.transact(work)


def retire_vault_key(store: Store, record: StoredVaultKey, actor: str = "operator") -> None:
    """Mark a vault key retired and destroy its wrapped key (and its recovery wrap, if the
    recovery shares cover it), with its audit event."""

    def work(conn: Connection) -> None:
        _update(store, conn, record.columns(), retired_at=time.time(), wrapped_key=None)
        conn.execute(delete(RecoveryKey).where(RecoveryKey.key_id == record.key_id))
        details = {"key_id": record.key_id}
        store.audit(conn, AuditDraft(actor, AuditAction.VAULT_KEY_RETIRED, details=details))

    store.transact(work)


def internal_keys(store: Store) -> dict[str, tuple[str, bytes]]:
    """The vault-wide keys as stored: name -> (the vault key id, the wrapped key)."""
    with store.read() as conn:
        rows = conn.execute(select(InternalKey.name, InternalKey.kek_id, InternalKey.wrapped_key))
        return {name: (key_id, bytes(wrapped)) for name, key_id, wrapped in rows}


def rewrap_internal_keys(store: Store, moves: Sequence[InternalMove]) -> None:
    """Write vault-wide keys in one transaction (`_rewrap_internal`)."""
    store.transact(lambda conn: _rewrap_internal(conn, moves))


def _rewrap_internal(conn: Connection, moves: Sequence[InternalMove]) -> None:
    """Write vault-wide keys (name, old key id, old wrap, new key id, new wrap): a new one
    when there was none, else only over the wrap as read."""
    for name, old_id, old, new_id, new in moves:
        if old is None:
            conn.execute(insert(InternalKey).values(name=name, kek_id=new_id, wrapped_key=new))
            continue
        done = conn.execute(
            update(InternalKey)
            .where(
                InternalKey.name == name,
                InternalKey.kek_id == old_id,
                InternalKey.wrapped_key == old,
            )
            .values(kek_id=new_id, wrapped_key=new)
        )
        if done.rowcount != 1:
            raise StoreError(f"the {name} key changed meanwhile; nothing was written")


def wrapped_key_counts(store: Store) -> dict[str, int]:
    """Wrapped keys per key id (what a retirement must wait for): data keys, and the
    vault-wide keys."""
    with store.read() as conn:
        by_key = (
            select(ConfigVersion.kek_id, func.count())
            .where(ConfigVersion.kek_id.is_not(None))
            .group_by(ConfigVersion.kek_id)
        )
        counts: dict[str, int] = {str(k): n for k, n in conn.execute(by_key)}
    for key_id, _ in internal_keys(store).values():
        counts[key_id] = counts.get(key_id, 0) + 1
    return counts


def pending_rewraps(store: Store, active: str) -> int:
    """Wrapped keys (data keys and vault-wide keys) not under the active vault key."""
    with store.read() as conn:
        versions = conn.execute(select(func.count()).where(not_under(active))).scalar_one()
        internal = conn.execute(
            select(func.count()).where(InternalKey.kek_id != active)
        ).scalar_one()
    return int(versions) + int(internal)


def any_pending(store: Store, active: str) -> bool:
    """Whether any wrapped key is not under the active vault key (a rotation to finish)."""
    with store.read() as conn:
        found = conn.execute(select(ConfigVersion.id).where(not_under(active)).limit(1)).first()
        inner = conn.execute(select(InternalKey.name).where(InternalKey.kek_id != active)).first()
    return found is not None or inner is not None


def record_key_event(store: Store, draft: AuditDraft) -> None:
    """An audit event that is the whole of its write (a rotation done, a master key retired
    in its provider, an upgrade finished)."""
    store.transact(lambda conn: store.audit(conn, draft))


# -- before the key hierarchy: master keys with rows ----------------------------------------


@dataclass(frozen=True)
class LegacyMasterKey:
    """A master key's record from before the key hierarchy: its id and key check value."""

    kek_id: str
    check_value: bytes | None  # None: not bytes as stored (edited)


def legacy_upgrade_pending(store: Store) -> bool:
    """A vault made before the hierarchy whose upgrade has not finished: it has master key
    rows and no `key_hierarchy_upgraded` event."""
    with store.read() as conn:
        legacy = conn.execute(select(MasterKey.kek_id).limit(1)).first()
        done = conn.execute(
            select(AuditEvent.seq)
            .where(AuditEvent.action == AuditAction.KEY_HIERARCHY_UPGRADED)
            .limit(1)
        ).first()
    return legacy is not None and done is None


def legacy_master_keys(store: Store) -> list[LegacyMasterKey]:
    """The master keys not retired before the hierarchy, with their key check values."""
    with store.read() as conn:
        rows = conn.execute(select(MasterKey).where(MasterKey.retired_at.is_(None))).all()
    return [LegacyMasterKey(row.kek_id, as_bytes(row.check_value)) for row in rows]
