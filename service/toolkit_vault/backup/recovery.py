"""`keys recovery init|unseal|status` for a vault home: the key work is `keys.recovery`;
this opens the home's store and provider, and after an unseal records the new provider in
the home, so every later command finds the new master key."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from toolkit_vault.bootstrap import open_provider, open_store
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.hierarchy import VaultKeys
from toolkit_vault.keys.recovery import RecoverySet, init_recovery, recovery_status, unseal
from toolkit_vault.settings import VaultSettings, write_record
from toolkit_vault.store.storage import Store

__all__ = ["init_shares", "share_status", "unseal_vault"]


@contextmanager
def _store(settings: VaultSettings) -> Iterator[Store]:
    store = open_store(settings)
    try:
        yield store
    finally:
        if store.witness is not None:
            store.witness.flush()
        store.close_watch()
        store.engine.dispose()


def init_shares(settings: VaultSettings, *, shares: int, threshold: int) -> RecoverySet:
    """A new share set for the vault (the master key must still open it)."""
    provider = open_provider(settings)
    with _store(settings) as store:
        VaultKeys(store, provider).open()
        if (failure := store.state_failure()) is not None:
            raise VaultError(f"the vault's state is not believed: {failure}")
        return init_recovery(store, provider, shares=shares, threshold=threshold)


def share_status(settings: VaultSettings) -> dict[str, Any]:
    with _store(settings) as store:
        return recovery_status(store)


def unseal_vault(settings: VaultSettings, shares: list[str], new: VaultSettings) -> dict[str, Any]:
    """Re-establish the vault of `settings` under the master key of `new`'s provider, from
    K shares; the home then records `new`'s provider."""
    provider = open_provider(new)
    with _store(settings) as store:
        result = unseal(store, shares, provider)
        if (failure := store.state_failure()) is not None:
            raise VaultError(f"the vault's state is not believed: {failure}")
    write_record(dataclasses.replace(new, key_options=provider.recorded_options()))
    return result
