"""Start-up: `init_vault` creates or checks a vault home; `open_vault` refuses a bad one.

A missing or wrong master key stops start-up with a message naming the key and where it was
looked for; a replacement key is never generated in its place. The only time a key is
created is `init` on a store that has none.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import partial

from . import crypto
from .crypto import FORMAT_VERSION, KeyRing, SecretBytes
from .database import migrate, open_engine, require_current
from .errors import DecryptionError, KeyProviderError, VaultError
from .keys import KeyProvider, MasterKeys, provider_for
from .registry import ToolkitRegistry
from .service import Principal, Vault
from .settings import VaultSettings, write_record
from .storage import Store

__all__ = [
    "LOCAL_PRINCIPAL",
    "InitReport",
    "init_vault",
    "internal_context",
    "load_ring",
    "open_store",
    "open_vault",
]

LOCAL_PRINCIPAL = Principal("local", "agent")
INTERNAL_KEYS = ("fingerprint", "audit")


@dataclass(frozen=True)
class InitReport:
    home: str
    database_url: str
    key_provider: str
    key_location: str
    created_key: bool


def internal_context(name: str) -> tuple[str | int, ...]:
    return (FORMAT_VERSION, "internal", name)


def init_vault(settings: VaultSettings) -> InitReport:
    """Create the home, migrate the database and set up keys; safe to run again."""
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = open_engine(settings.database_url)
    try:
        migrate(engine)
        store = Store(engine)
        created = False
        if not store.master_keys():
            keys = provider.load()
            if keys is None:
                keys, created = MasterKeys.first(), True
                provider.store(keys)
            ring = keys.ring()
            internal = {name: crypto.new_key() for name in INTERNAL_KEYS}
            wrapped = {
                name: ring.wrap(key, internal_context(name))[1] for name, key in internal.items()
            }
            store.set_signer(partial(crypto.chain_hash, internal["audit"]))
            store.bootstrap_keys(
                ring.primary_id, ring.check_value(ring.primary_id), wrapped, "init"
            )
        else:
            load_ring(store, provider)
        store.ensure_principal(LOCAL_PRINCIPAL.principal_id, "local", LOCAL_PRINCIPAL.role)
    finally:
        engine.dispose()
    write_record(settings)
    return InitReport(
        str(settings.home),
        settings.database_url,
        settings.key_provider,
        provider.where,
        created,
    )


def load_ring(store: Store, provider: KeyProvider) -> KeyRing:
    """The store's live KEKs from the provider, each checked against its key check value."""
    rows = [row for row in store.master_keys() if row.retired_at is None]
    if not rows:
        raise VaultError("the store has no master key: run `toolkit-vault init`")
    keys = provider.load()
    if keys is None:
        raise KeyProviderError(
            f"no master key found in {provider.where}; restore it (the vault never creates a "
            "replacement for a key its store already uses)"
        )
    ring_keys: dict[str, SecretBytes] = {}
    for row in rows:
        key = keys.keys.get(row.kek_id)
        if key is None:
            raise KeyProviderError(f"master key {row.kek_id} is missing from {provider.where}")
        if not hmac.compare_digest(crypto.key_check_value(key), bytes(row.check_value)):
            raise KeyProviderError(
                f"master key {row.kek_id} in {provider.where} does not match the store "
                "(key check value differs): wrong key"
            )
        ring_keys[row.kek_id] = key
    primary = next(row.kek_id for row in rows if row.is_primary)
    return KeyRing(ring_keys, primary)


def open_store(settings: VaultSettings) -> Store:
    """The store alone, for read-only auditor commands: no master key, nothing decrypts."""
    if not settings.initialized:
        raise VaultError(f"no vault in {settings.home}: run `toolkit-vault init` first")
    engine = open_engine(settings.database_url)
    require_current(engine)
    return Store(engine)


def open_vault(settings: VaultSettings, registry: ToolkitRegistry | None = None) -> Vault:
    """Open an initialized vault, or refuse with one clear reason."""
    if not settings.initialized:
        raise VaultError(f"no vault in {settings.home}: run `toolkit-vault init` first")
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    engine = open_engine(settings.database_url)
    require_current(engine)
    store = Store(engine)
    ring = load_ring(store, provider)
    internal: dict[str, SecretBytes] = {}
    for name, (kek_id, wrapped) in store.internal_keys().items():
        try:
            internal[name] = ring.unwrap(kek_id, wrapped, internal_context(name))
        except DecryptionError:
            raise KeyProviderError(f"the {name} key does not decrypt: wrong master key") from None
    if set(internal) != set(INTERNAL_KEYS):
        raise VaultError("the store is missing its internal keys: run `toolkit-vault init`")
    store.set_signer(partial(crypto.chain_hash, internal["audit"]))
    if registry is None:
        registry = ToolkitRegistry.default()
        registry.load_imported(store)  # `toolkits import`: shared by every process via the store
    return Vault(
        store,
        ring,
        internal["fingerprint"],
        registry,
        reload_keys=lambda: load_ring(store, provider),
        audit_key=internal["audit"],
    )
