"""Vault keys and vault-wide keys as stored: rows in, authenticated records out.

A vault key row holds its key only as the key provider wrapped it (the wrap names its
master key in a public header, `providers.blob_header`). Which key is active and which are
retired is believed only with the row's MAC (`integrity.VAULT_KEYS`), and `reconcile`
checks both against the audit chain's `vault_initialized`, `vault_key_added` and
`vault_key_retired` events. A retired row keeps its record but not its key. The vault-wide
keys (fingerprint, audit, state) are rows of `internal_keys`, each wrapped by a vault key.

Every change here is compare-and-set on what was read, so two operators cannot both win.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from toolkit_vault.crypto import FORMAT_VERSION
from toolkit_vault.errors import DecryptionError, StoreError, VaultError
from toolkit_vault.keys.providers import Context, blob_header
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import VAULT_KEYS
from toolkit_vault.store.models import InternalKey, RecoveryKey, VaultKey
from toolkit_vault.store.records import AuditDraft, as_bytes
from toolkit_vault.store.storage import Store

__all__ = [
    "INTERNAL_KEYS",
    "VaultKeyRecord",
    "add_vault_key",
    "internal_keys",
    "next_key_id",
    "read_vault_keys",
    "retire_vault_key",
    "rewrap_internal_keys",
    "set_wrapped_keys",
    "vault_key_context",
    "verified_vault_keys",
]

INTERNAL_KEYS = ("fingerprint", "audit", "state")
_KEY_ID = re.compile(r"vk-([0-9]{1,9})", re.ASCII)


def vault_key_context(key_id: str) -> Context:
    """What the master key wraps a vault key for: a vault key, by id (also the KMS
    encryption context an operator sees in CloudTrail)."""
    return (FORMAT_VERSION, "vault-key", key_id)


def next_key_id(taken: Iterable[str]) -> str:
    numbers = [int(m[1]) for key_id in taken if (m := _KEY_ID.fullmatch(key_id))]
    return f"vk-{max(numbers, default=0) + 1}"


@dataclass(frozen=True, repr=False)
class VaultKeyRecord:
    key_id: str
    wrapped_key: bytes | None  # None once retired: the key itself is gone
    is_active: bool
    created_at: float
    retired_at: float | None
    mac: bytes | None

    def __repr__(self) -> str:
        return f"VaultKeyRecord({self.key_id!r}, active={self.is_active})"

    @property
    def live(self) -> bool:
        return self.retired_at is None and self.wrapped_key is not None

    @property
    def master_key(self) -> str | None:
        """The master key the provider wrapped it under, from the public header."""
        if self.wrapped_key is None:
            return None
        try:
            return blob_header(self.wrapped_key)[1]
        except DecryptionError:
            return None

    def columns(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "is_active": self.is_active,
            "created_at": self.created_at,
            "retired_at": self.retired_at,
            "mac": self.mac,
        }


def read_vault_keys(store: Store) -> list[VaultKeyRecord]:
    """Every vault key record as stored, MAC not yet checked (start-up needs the keys
    before it has the state key that checks them: `verified_vault_keys` follows)."""
    with store.read() as conn:
        rows = conn.execute(select(VaultKey).order_by(VaultKey.created_at, VaultKey.key_id))
        return [
            VaultKeyRecord(
                row.key_id,
                as_bytes(row.wrapped_key),
                bool(row.is_active),
                row.created_at,
                row.retired_at,
                as_bytes(row.mac),
            )
            for row in rows
        ]


def verified_vault_keys(store: Store) -> list[VaultKeyRecord]:
    """Every vault key record, each believed only with its MAC; one that fails stops the
    caller, naming it (a writer without the master key edited which key is active)."""
    records = read_vault_keys(store)
    for record in records:
        if not store.authentic(VAULT_KEYS, record.columns()):
            how = "is unsigned" if record.mac is None else "fails its integrity check"
            raise VaultError(
                f"vault key record {record.key_id} {how}: the database was edited; "
                "run `toolkit-vault audit verify`"
            )
    active = [r for r in records if r.is_active and r.live]
    if records and len(active) != 1:
        raise VaultError("the store has no single active vault key: run `toolkit-vault init`")
    return records


def add_vault_key(
    store: Store,
    conn: Connection,
    key_id: str,
    wrapped: bytes,
    *,
    actor: str,
    action: AuditAction = AuditAction.VAULT_KEY_ADDED,
    details: dict[str, Any] | None = None,
) -> None:
    """Insert a vault key and make it the active one, in the caller's transaction, with
    its audit event; the previous active key stays live until it is retired."""
    for row in conn.execute(select(VaultKey).where(VaultKey.is_active.is_(True))).all():
        _update(store, conn, row._mapping, is_active=False)
    record = {"key_id": key_id, "is_active": True, "created_at": time.time(), "retired_at": None}
    conn.execute(
        insert(VaultKey).values(**record, wrapped_key=wrapped, mac=store.mac(VAULT_KEYS, record))
    )
    event = {"key_id": key_id, "master_key": blob_header(wrapped)[1], **(details or {})}
    store.audit(conn, AuditDraft(actor, action, details=event))


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


def set_wrapped_keys(conn: Connection, moves: list[tuple[str, bytes, bytes]]) -> None:
    """Replace vault keys' wraps (key id, old wrap, new wrap), each only if unchanged since
    read; the MACs stay: the wrap is authenticated by the provider, not the row."""
    for key_id, old, new in moves:
        done = conn.execute(
            update(VaultKey)
            .where(VaultKey.key_id == key_id, VaultKey.wrapped_key == old)
            .values(wrapped_key=new)
        )
        if done.rowcount != 1:
            raise StoreError(f"vault key {key_id} changed meanwhile; run the rotation again")


def retire_vault_key(store: Store, conn: Connection, record: VaultKeyRecord) -> None:
    """Mark a vault key retired and destroy its wrapped key (and its recovery wrap, if the
    recovery shares cover it), with its audit event."""
    _update(store, conn, record.columns(), retired_at=time.time(), wrapped_key=None)
    conn.execute(delete(RecoveryKey).where(RecoveryKey.key_id == record.key_id))
    store.audit(
        conn,
        AuditDraft("operator", AuditAction.VAULT_KEY_RETIRED, details={"key_id": record.key_id}),
    )


def internal_keys(store: Store) -> dict[str, tuple[str, bytes]]:
    """The vault-wide keys as stored: name -> (the vault key id, the wrapped key)."""
    with store.read() as conn:
        rows = conn.execute(select(InternalKey.name, InternalKey.kek_id, InternalKey.wrapped_key))
        return {name: (key_id, bytes(wrapped)) for name, key_id, wrapped in rows}


def rewrap_internal_keys(
    conn: Connection, moves: Sequence[tuple[str, str | None, bytes | None, str, bytes]]
) -> None:
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
