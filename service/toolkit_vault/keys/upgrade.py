"""Upgrading a vault made before the key hierarchy: a keyed, resumable step of `init`.

Before schema 0003 the master keys (`master_keys`, `kek-N`) wrapped each data key directly.
Migration 0003 adds `vault_keys`; this step, which needs the keys, then

1. creates the first vault key, wrapped by the provider's current master key (the key
   document's primary key, in its new role), and moves the vault-wide keys under it, in
   one transaction with its audit event;
2. moves every data key from its master key to that vault key, in batches, each row by
   compare-and-set on the wrapped key as read. The old wrap binds its record, so each row's
   context is rebuilt; no value is opened (`check` proves values);
3. records `key_hierarchy_upgraded`. Until then the vault refuses to open.

A killed run is finished by running `init` again: step 1 is atomic and found done, step 2
takes up the rows still under a master key. A row whose data key does not open stays as it
is and is named (as `check` names it). Vaults before 0003 only ever had the local providers
(file, keyring, env): the upgrade reads their key document, checked against each record's
key check value.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, SecretBytes
from toolkit_vault.errors import DecryptionError, KeyProviderError, VaultError
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.keys.providers.local import LocalProvider
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.data_keys import Rewrap, move_data_keys, scan_versions
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import (
    legacy_master_keys,
    legacy_upgrade_pending,
    record_key_event,
)

__all__ = ["HierarchyReport", "finish_upgrade", "legacy_keys", "legacy_pending"]

BATCH_SIZE = 500


@dataclass
class HierarchyReport:
    vault_key: str
    rewrapped: int = 0
    failed: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"vault_key": self.vault_key, "rewrapped": self.rewrapped, "failed": self.failed}


def legacy_pending(store: Store) -> bool:
    """A vault made before the hierarchy whose upgrade has not finished."""
    return legacy_upgrade_pending(store)


def legacy_keys(store: Store, provider: KeyProvider) -> dict[str, SecretBytes]:
    """The master keys that may still wrap data keys, from the key document, each checked
    against its record's key check value."""
    if not isinstance(provider, LocalProvider):
        raise VaultError(
            f"this vault was made before the key hierarchy with a local key provider; "
            f"upgrade it with that provider (the {provider.name} provider cannot read its "
            "master keys), then move to another provider"
        )
    document = provider.load()
    if document is None:
        raise KeyProviderError(f"no master key found in {provider.where}; restore it")
    keys = {}
    for row in legacy_master_keys(store):
        key = document.keys.get(row.kek_id)
        if key is None:
            raise KeyProviderError(f"master key {row.kek_id} is missing from {provider.where}")
        check = row.check_value
        if check is None or not hmac.compare_digest(crypto.key_check_value(key), check):
            raise KeyProviderError(
                f"master key {row.kek_id} in {provider.where} does not match the store "
                "(key check value differs): wrong key"
            )
        keys[row.kek_id] = key
    return keys


def finish_upgrade(store: Store, ring: KeyRing, legacy: dict[str, SecretBytes]) -> HierarchyReport:
    """Move every data key still under a legacy master key to the active vault key, then
    record that the upgrade is done."""
    report = HierarchyReport(ring.primary_id)
    failed: set[int] = set()
    for rows in scan_versions(store, BATCH_SIZE, under=legacy):
        updates: list[Rewrap] = []
        for row in rows:
            record = row.record
            try:
                context, sealed = record.sealed()
                wrap_context = context.wrap_context(sealed.dek_id, sealed.envelopes)
                new_id, new = ring.rewrap(sealed.kek_id, sealed.wrapped_dek, wrap_context)
            except DecryptionError:
                failed.add(row.row_id)
                if len(report.failed) < 100:
                    where = f"{record.session_id}/{record.toolkit_name} v{record.version}"
                    report.failed.append(where)
                continue
            updates.append((row.row_id, sealed.kek_id, sealed.wrapped_dek, new_id, new))
        if updates:
            move_data_keys(store, updates)
        report.rewrapped += len(updates)
    details = {"vault_key": ring.primary_id, "rewrapped": report.rewrapped, "failed": len(failed)}
    record_key_event(store, AuditDraft("init", AuditAction.KEY_HIERARCHY_UPGRADED, details=details))
    return report
