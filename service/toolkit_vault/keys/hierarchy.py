"""The key hierarchy at run time: master key (provider) -> vault keys -> data keys -> values.

A process asks the key provider once per live vault key, at start (`VaultKeys.open`), and
then holds the unwrapped vault keys in a `crypto.KeyRing`: configure, list and resume never
call the provider, so a provider outage after start stops nothing but rotation. When the
store names a vault key this process has not loaded (another process rotated), `reload`
unwraps that one key; the keys it already holds are kept.

The vault-wide keys (fingerprint, audit, state) are wrapped by a vault key, like data keys,
so they cost no provider call either, and a master key rotation touches vault keys only.

A master key move (`keys.move`) rewraps the vault keys under another provider's key; a
process started before it, or while the home still records the move as under way, finds
the provider that holds a vault key through `follow` (the home's pin, then the move's
target, read when asked), as it finds a vault key another process added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, SecretBytes, internal_context
from toolkit_vault.errors import DecryptionError, KeyProviderError, VaultError
from toolkit_vault.keys.keystore import (
    INTERNAL_KEYS,
    VaultKeyRecord,
    read_vault_keys,
    vault_key_context,
    verified_vault_keys,
)
from toolkit_vault.keys.providers import KeyProvider, blob_header
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import RowAuthenticator
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import NewVaultKey, add_vault_key, internal_keys

__all__ = ["VaultKeys", "create_hierarchy", "unwrap_internal_keys", "use_keys"]

FIRST_KEY = "vk-1"


def use_keys(store: Store, internal: dict[str, SecretBytes]) -> None:
    """Give the store the audit key (chain links) and the state key (row MACs)."""
    store.set_keys(
        partial(crypto.chain_hash, internal["audit"]), RowAuthenticator(internal["state"])
    )


def unwrap_vault_key(provider: KeyProvider, record: VaultKeyRecord) -> SecretBytes:
    """One provider call: the vault key, or a clear error naming the provider."""
    if record.wrapped_key is None:
        raise VaultError(f"vault key {record.key_id} is retired")
    try:
        return provider.unwrap(record.wrapped_key, vault_key_context(record.key_id))
    except DecryptionError:
        raise KeyProviderError(
            f"vault key {record.key_id} does not open with {provider.where} (key provider "
            f"{provider.name}): wrong master key, or its record was edited"
        ) from None


def unwrap_internal_keys(store: Store, ring: KeyRing) -> dict[str, SecretBytes]:
    internal: dict[str, SecretBytes] = {}
    for name, (key_id, wrapped) in internal_keys(store).items():
        try:
            internal[name] = ring.unwrap(key_id, wrapped, internal_context(name))
        except DecryptionError:
            raise KeyProviderError(
                f"the {name} key does not open under vault key {key_id}: the row was edited"
            ) from None
    missing = [name for name in INTERNAL_KEYS if name not in internal]
    if missing:
        raise VaultError(
            f"the store has no {missing[0]} key: it was made by an older release; "
            "run `toolkit-vault init` to upgrade it"
        )
    return internal


Follow = Callable[[], Sequence[KeyProvider]]  # the providers the home names now


class VaultKeys:
    """One process's vault keys: unwrapped at start, reloaded when the store has more."""

    def __init__(self, store: Store, provider: KeyProvider, follow: Follow | None = None) -> None:
        self.store = store
        self.provider = provider
        self.follow = follow

    def unwrap(self, record: VaultKeyRecord) -> SecretBytes:
        """One vault key, from the provider that held the last one; when it does not open
        there (the master key moved), from the first provider the home names now that
        opens it, which is then kept. The first provider's error when none does."""
        try:
            return unwrap_vault_key(self.provider, record)
        except KeyProviderError as exc:
            if self.follow is None:
                raise
            first = exc
        for provider in self.follow():
            try:
                key = unwrap_vault_key(provider, record)
            except KeyProviderError:
                continue
            self.provider = provider
            return key
        raise first

    def open(
        self, legacy: dict[str, SecretBytes] | None = None
    ) -> tuple[KeyRing, dict[str, SecretBytes]]:
        """Unwrap every live vault key (one provider call each), then the vault-wide keys
        under them, then check every vault key record with the state key just opened.
        `legacy`: master keys that still wrap data keys (an upgrade under way)."""
        held = [r for r in read_vault_keys(self.store) if r.wrapped_key is not None]
        if not held:
            raise VaultError("the store has no vault key: run `toolkit-vault init`")
        keys = {r.key_id: self.unwrap(r) for r in held}
        active = [r.key_id for r in held if r.is_active] or [held[-1].key_id]
        internal = unwrap_internal_keys(self.store, KeyRing(keys, active[0], legacy))
        use_keys(self.store, internal)
        records = verified_vault_keys(self.store)  # which is active or retired, believed now
        live = {r.key_id: keys[r.key_id] for r in records if r.live}
        active = [r.key_id for r in records if r.live and r.is_active]
        return KeyRing(live, active[0], legacy), internal

    def reload(self, ring: KeyRing) -> KeyRing:
        """`ring` with the vault keys added since it was loaded, and the store's active key
        made active: one provider call per new key, none when nothing changed."""
        records = [r for r in verified_vault_keys(self.store) if r.live]
        new = {r.key_id: self.unwrap(r) for r in records if r.key_id not in ring}
        active = next(r.key_id for r in records if r.is_active)
        return ring.with_keys(new, active)


def create_hierarchy(
    store: Store, provider: KeyProvider, legacy: dict[str, SecretBytes] | None = None
) -> tuple[KeyRing, dict[str, SecretBytes]]:
    """The first vault key, wrapped by the provider's master key, and the vault-wide keys
    wrapped under it, in one transaction with its audit event. A fresh vault gets new
    vault-wide keys; one made before the hierarchy keeps its own (as stored under its
    `legacy` master keys), and gets any an older release did not make."""
    vault_key = crypto.new_key()
    ring = KeyRing({FIRST_KEY: vault_key}, FIRST_KEY, legacy)
    stored = internal_keys(store)
    internal = {}
    for name, (key_id, wrapped) in stored.items():
        try:
            internal[name] = ring.unwrap(key_id, wrapped, internal_context(name))
        except DecryptionError:
            raise KeyProviderError(f"the {name} key does not open: wrong master key") from None
    added = [name for name in INTERNAL_KEYS if name not in internal]
    internal.update({name: crypto.new_key() for name in added})
    moves = [
        (name, *stored.get(name, (None, None)), *ring.wrap(key, internal_context(name)))
        for name, key in internal.items()
    ]
    wrapped_key = provider.wrap(vault_key, vault_key_context(FIRST_KEY))
    use_keys(store, internal)
    fresh = legacy is None
    action = AuditAction.VAULT_INITIALIZED if fresh else AuditAction.VAULT_KEY_ADDED
    first = NewVaultKey(
        FIRST_KEY,
        wrapped_key,
        blob_header(wrapped_key)[1],
        actor="init",
        action=action,
        details={"provider": provider.name},
    )
    events = [  # the chain's key came with the first release
        AuditDraft("init", AuditAction.INTERNAL_KEY_ADDED, details={"name": name})
        for name in ([] if fresh else added)
    ]
    add_vault_key(store, first, internal=moves, events=events)
    return ring, internal
