"""Start-up: `init_vault` creates or checks a vault home; `open_vault` refuses a bad one.

A missing or wrong master key stops start-up with a message naming the key and where it was
looked for; a replacement key is never generated in its place. The only time a key is
created is `init` on a store that has none.
"""

from __future__ import annotations

import hmac
import os
import stat
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from . import crypto
from .crypto import KeyRing, SecretBytes, internal_context
from .database import migrate, open_engine, require_current
from .errors import DecryptionError, KeyProviderError, VaultError
from .integrity import MASTER_KEYS, RowAuthenticator
from .keys import KeyProvider, MasterKeys, provider_for
from .reconcile import LOCAL_PRINCIPAL_ID
from .registry import ToolkitRegistry
from .service import Principal, Vault
from .settings import VaultSettings, write_record
from .storage import Store
from .upgrade import authenticate_state

__all__ = [
    "LOCAL_PRINCIPAL",
    "InitReport",
    "init_vault",
    "internal_context",
    "load_ring",
    "open_store",
    "open_vault",
]

LOCAL_PRINCIPAL = Principal(LOCAL_PRINCIPAL_ID, "agent")
INTERNAL_KEYS = ("fingerprint", "audit", "state")


@dataclass(frozen=True)
class InitReport:
    home: str
    database_url: str
    key_provider: str
    key_location: str
    created_key: bool
    upgraded: dict[str, Any] | None = None  # what the authenticated-state upgrade signed


def init_vault(settings: VaultSettings) -> InitReport:
    """Create the home, migrate the database and set up keys; safe to run again. On a vault
    made by an older release it also finishes the upgrade (`upgrade.authenticate_state`)."""
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    _private_home(settings.home)
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
            _use_keys(store, internal)
            store.bootstrap_keys(
                ring.primary_id, ring.check_value(ring.primary_id), wrapped, "init"
            )
        else:
            ring = _records_ring(store, provider)
            internal = _internal_keys(store, ring, create_missing=True)
            _use_keys(store, internal)
        store.ensure_principal(LOCAL_PRINCIPAL.principal_id, "local", LOCAL_PRINCIPAL.role)
        upgraded = authenticate_state(store, ring, internal["fingerprint"], internal["audit"])
        _check_key_records(store)
        load_ring(store, provider)  # every live key is in the provider, and the right one
    finally:
        engine.dispose()
    write_record(settings)
    return InitReport(
        str(settings.home),
        settings.database_url,
        settings.key_provider,
        provider.where,
        created,
        None if upgraded is None or created else upgraded.as_json(),
    )


def _private_home(home: Path) -> None:
    """The home holds the database and perhaps the key file: 0700, whatever it was before."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = home.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(home, 0o700)


def _check_home(home: Path) -> None:
    try:
        mode = stat.S_IMODE(home.stat().st_mode)
    except FileNotFoundError:
        raise VaultError(f"no vault in {home}: run `toolkit-vault init` first") from None
    if mode & 0o077:
        raise VaultError(
            f"{home} has mode {mode:04o}; a vault home must be 0700 "
            f"(chmod 700 {home}, or run `toolkit-vault init`)"
        )


def _internal_keys(
    store: Store, ring: KeyRing, *, create_missing: bool = False
) -> dict[str, SecretBytes]:
    """The vault-wide keys, unwrapped; `init` adds any an older release did not make."""
    internal: dict[str, SecretBytes] = {}
    for name, (kek_id, wrapped) in store.internal_keys().items():
        try:
            internal[name] = ring.unwrap(kek_id, wrapped, internal_context(name))
        except DecryptionError:
            raise KeyProviderError(f"the {name} key does not decrypt: wrong master key") from None
    missing = [name for name in INTERNAL_KEYS if name not in internal]
    if missing and not create_missing:
        raise VaultError(
            f"the store has no {missing[0]} key: it was made by an older release; "
            "run `toolkit-vault init` to upgrade it"
        )
    if missing:  # audited: the chain's key came with the first release
        store.set_keys(partial(crypto.chain_hash, internal["audit"]), None)
    for name in missing:
        internal[name] = crypto.new_key()
        kek_id, wrapped = ring.wrap(internal[name], internal_context(name))
        store.add_internal_key(name, kek_id, wrapped, actor="init")
    return internal


def _use_keys(store: Store, internal: dict[str, SecretBytes]) -> None:
    store.set_keys(
        partial(crypto.chain_hash, internal["audit"]), RowAuthenticator(internal["state"])
    )


def _check_key_records(store: Store) -> None:
    """A master-key record is believed only with its MAC (which key is primary, retired)."""
    for row in store.master_keys():
        if not store.authentic(MASTER_KEYS, row._mapping):
            how = "is unsigned" if row.mac is None else "fails its integrity check"
            raise VaultError(
                f"master key record {row.kek_id} {how}: the database was edited or the "
                "upgrade did not finish; run `toolkit-vault init`, then `toolkit-vault audit "
                "verify`"
            )


def _provider_keys(provider: KeyProvider) -> MasterKeys:
    keys = provider.load()
    if keys is None:
        raise KeyProviderError(
            f"no master key found in {provider.where}; restore it (the vault never creates a "
            "replacement for a key its store already uses)"
        )
    return keys


def _records_ring(store: Store, provider: KeyProvider) -> KeyRing:
    """Every key the provider holds that matches a record's key check value, whatever the
    records say of it: enough to unwrap the state key, which then checks those records."""
    keys = _provider_keys(provider)
    found = {
        row.kek_id: keys.keys[row.kek_id]
        for row in store.master_keys()
        if row.kek_id in keys.keys
        and isinstance(row.check_value, bytes | memoryview)
        and hmac.compare_digest(crypto.key_check_value(keys.keys[row.kek_id]), row.check_value)
    }
    if not found:
        return load_ring(store, provider)  # for its message: no key, or the wrong one
    primary = [row.kek_id for row in store.master_keys() if row.is_primary and row.kek_id in found]
    return KeyRing(found, primary[0] if primary else next(iter(found)))


def load_ring(store: Store, provider: KeyProvider) -> KeyRing:
    """The store's live KEKs from the provider, each checked against its key check value."""
    rows = [row for row in store.master_keys() if row.retired_at is None]
    if not rows:
        raise VaultError("the store has no master key: run `toolkit-vault init`")
    keys = _provider_keys(provider)
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
    _check_home(settings.home)
    engine = open_engine(settings.database_url)
    require_current(engine)
    return Store(engine)


def open_vault(settings: VaultSettings, registry: ToolkitRegistry | None = None) -> Vault:
    """Open an initialized vault, or refuse with one clear reason."""
    if not settings.initialized:
        raise VaultError(f"no vault in {settings.home}: run `toolkit-vault init` first")
    _check_home(settings.home)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    engine = open_engine(settings.database_url)
    require_current(engine)
    store = Store(engine)
    internal = _internal_keys(store, _records_ring(store, provider))
    _use_keys(store, internal)
    _check_key_records(store)
    ring = load_ring(store, provider)
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
        relay_key=crypto.derive_key(internal["state"], "relay"),
        intake_key=crypto.derive_key(internal["state"], "intake"),
    )
