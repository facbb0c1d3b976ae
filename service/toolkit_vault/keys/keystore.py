"""Vault keys as the keys package sees them: records with the master key that wraps each,
believed only with their MACs, and the ids and contexts they are wrapped under.

The rows and every change to them are `store.vault_keys` (named write transactions, each
with its audit event); here a record gains the master key its wrap names in its public
header (`providers.blob_header`), and `verified_vault_keys` refuses a record whose MAC
(`integrity.VAULT_KEYS`) fails: a writer without the master key edited which key is active.
The vault-wide keys (fingerprint, audit, state) are rows of `internal_keys`, each wrapped by
a vault key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from toolkit_vault.crypto import FORMAT_VERSION
from toolkit_vault.errors import DecryptionError, VaultError
from toolkit_vault.keys.providers import Context, blob_header
from toolkit_vault.store import vault_keys
from toolkit_vault.store.integrity import VAULT_KEYS
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import StoredVaultKey, internal_keys

__all__ = [
    "INTERNAL_KEYS",
    "VaultKeyRecord",
    "internal_keys",
    "next_key_id",
    "read_vault_keys",
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
class VaultKeyRecord(StoredVaultKey):
    """A vault key record as stored, with the master key its wrap names."""

    @property
    def master_key(self) -> str | None:
        """The master key the provider wrapped it under, from the public header."""
        if self.wrapped_key is None:
            return None
        try:
            return blob_header(self.wrapped_key)[1]
        except DecryptionError:
            return None


def read_vault_keys(store: Store) -> list[VaultKeyRecord]:
    """Every vault key record as stored, MAC not yet checked (start-up needs the keys
    before it has the state key that checks them: `verified_vault_keys` follows)."""
    return vault_keys.read_vault_keys(store, VaultKeyRecord)


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
