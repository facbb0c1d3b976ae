"""Operators' view of the key hierarchy: both layers' status, retirement of either kind of
key, and a dry run that says what a rotation would rewrap and how long it would take.

Retirement refuses while anything depends on the key: a vault key while any data key or
vault-wide key is wrapped under it (or it is active); a master key while any live vault
key is wrapped under it (or it is the provider's current one, or a data key of a vault not
yet fully upgraded still names it). A retired vault key's wrap is destroyed with it.
"""

from __future__ import annotations

import time
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing
from toolkit_vault.errors import KeyProviderError, VaultError
from toolkit_vault.keys.keystore import VaultKeyRecord, vault_key_context, verified_vault_keys
from toolkit_vault.keys.providers import KeyProvider, ProviderStatus
from toolkit_vault.keys.rotation import pending_rewraps
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.data_keys import Rewrap, data_key_batches, move_data_keys_rolled_back
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import record_key_event, retire_vault_key, wrapped_key_counts

__all__ = ["key_status", "plan_rotation", "retire_key"]


def _wrapped_counts(store: Store) -> dict[str, int]:
    """Wrapped keys per key id: data keys, and the vault-wide keys."""
    return wrapped_key_counts(store)


def _count(count: int, noun: str) -> str:
    """`1 wrapped key`, `2 wrapped keys`."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def _named(noun: str, ids: list[str]) -> str:
    """`vault key vk-1`, `vault keys vk-1, vk-2`."""
    return f"{noun if len(ids) == 1 else noun + 's'} {', '.join(ids)}"


def _provider_status(provider: KeyProvider) -> tuple[ProviderStatus | None, str | None]:
    try:
        return provider.status(), None
    except KeyProviderError as exc:  # status is an operator's question: answer it anyway
        return None, exc.message


def key_status(store: Store, provider: KeyProvider) -> dict[str, Any]:
    """Both layers: the master keys (in the provider) and the vault keys (in the store),
    with what each protects. Works with the provider unreachable (`reachable: false`)."""
    records = verified_vault_keys(store)
    counts = _wrapped_counts(store)
    status, error = _provider_status(provider)
    held = set(status.key_ids) if status else set()
    masters = sorted(held | {str(r.master_key) for r in records if r.live})
    vault_keys = [
        {
            "key_id": r.key_id,
            "active": r.is_active,
            "created_at": r.created_at,
            "retired_at": r.retired_at,
            "master_key": r.master_key,
            "wrapped_keys": counts.get(r.key_id, 0),
        }
        for r in records
    ]
    return {
        "provider": {
            "name": provider.name,
            "where": provider.where,
            "reachable": status is not None,
            "error": error,
        },
        "master_keys": [
            {
                "key_id": master,
                "current": status is not None and master == status.current,
                "in_provider": (master in held) if status else None,
                "vault_keys": [r.key_id for r in records if r.live and r.master_key == master],
                "legacy_data_keys": counts.get(master, 0),  # a vault not fully upgraded
            }
            for master in masters
        ],
        "vault_keys": vault_keys,
        "keys": [  # the shape `keys status --json` had before the hierarchy (kept stable)
            {
                "kek_id": v["key_id"],
                "primary": v["active"],
                "created_at": v["created_at"],
                "retired_at": v["retired_at"],
                "wrapped_keys": v["wrapped_keys"],
                "in_provider": (v["master_key"] in held) if status else None,
            }
            for v in vault_keys
        ],
    }


def retire_key(
    store: Store, provider: KeyProvider, key_id: str, *, actor: str = "operator"
) -> dict[str, Any]:
    """Retire a vault key (`vk-N`) or a master key (the provider's id) nothing uses."""
    records = {r.key_id: r for r in verified_vault_keys(store)}
    if key_id in records:
        return _retire_vault_key(store, records[key_id], actor)
    if key_id == provider.status().current:
        provider.retire(key_id)  # every provider refuses its current key, saying why
        raise VaultError(f"{key_id} is the current master key; rotate the master key first")
    live = [r for r in records.values() if r.live]
    users = [r.key_id for r in live if r.master_key == key_id]
    if users:
        raise VaultError(
            f"master key {key_id} still wraps {_named('vault key', users)}: run "
            "`toolkit-vault keys rotate` first"
        )
    legacy = _wrapped_counts(store).get(key_id, 0)
    if legacy:
        raise VaultError(
            f"master key {key_id} still wraps {_count(legacy, 'data key')}: run `init`"
        )
    provider.retire(key_id)  # refuses the current key, and keys it does not hold
    details = {"master_key": key_id}
    record_key_event(store, AuditDraft(actor, AuditAction.MASTER_KEY_RETIRED, details=details))
    return {"kek_id": key_id, "kind": "master", "retired": True, "removed_from_provider": True}


def _retire_vault_key(store: Store, record: VaultKeyRecord, actor: str) -> dict[str, Any]:
    result = {"kek_id": record.key_id, "kind": "vault", "retired": True}
    if record.retired_at is not None:
        return {**result, "removed_from_provider": False}
    if record.is_active:
        raise VaultError(
            f"{record.key_id} is the active vault key; run `toolkit-vault keys rotate "
            "--vault-key` first"
        )
    in_use = _wrapped_counts(store).get(record.key_id, 0)
    if in_use:
        raise VaultError(
            f"{record.key_id} still protects {_count(in_use, 'wrapped key')}: run "
            "`toolkit-vault keys rotate --vault-key`"
        )
    retire_vault_key(store, record, actor)
    return {**result, "removed_from_provider": False}


def plan_rotation(
    store: Store, provider: KeyProvider, ring: KeyRing, *, vault_key: bool, batch_size: int
) -> dict[str, Any]:
    """What `keys rotate` (or `--vault-key`) would do, and a time estimate from a measured
    batch: for the master key, one unwrap and one wrap of a vault key by the provider; for a
    vault key, one batch rewrapped and written in a transaction that is rolled back."""
    records = verified_vault_keys(store)
    live = [r for r in records if r.live]
    counts = _wrapped_counts(store)
    status, error = _provider_status(provider)
    if status is None:
        raise KeyProviderError(str(error))
    plan: dict[str, Any] = {
        "dry_run": True,
        "kind": "vault-key" if vault_key else "master",
        "provider": provider.name,
        "master_key": status.current,
        "wrapped_keys": {r.key_id: counts.get(r.key_id, 0) for r in live},
        "vault_keys": {r.key_id: r.master_key for r in live},
    }
    if not vault_key:
        behind = [r.key_id for r in live if r.master_key != status.current]
        started = time.perf_counter()
        record = live[0]
        assert record.wrapped_key is not None
        key = provider.unwrap(record.wrapped_key, vault_key_context(record.key_id))
        provider.wrap(key, vault_key_context(record.key_id))
        measured = time.perf_counter() - started
        plan |= {
            "rotates_in_provider": not behind,
            "would_rewrap": len(live),
            "measured": {"rows": 1, "seconds": measured},
            "estimate_seconds": measured * len(live),
        }
        return plan
    active = next(r.key_id for r in live if r.is_active)
    pending = pending_rewraps(store, active)
    would = pending or sum(counts.get(r.key_id, 0) for r in live)
    rows, seconds = _measure_batch(store, ring, active, bool(pending), batch_size)
    plan |= {
        "active": active,
        "new_vault_key": not pending,
        "would_rewrap": would,
        "measured": {"rows": rows, "seconds": seconds},
        "estimate_seconds": seconds / rows * would if rows else 0.0,
    }
    return plan


def _measure_batch(
    store: Store, ring: KeyRing, active: str, pending: bool, batch_size: int
) -> tuple[int, float]:
    """Read, rewrap (under a scratch key: nothing is kept) and write one batch, then roll the
    write back; the rows, and the seconds it took. The batch is of the data keys a rotation
    would move: those not under the active vault key while any are pending, else its own."""
    scratch = ring.with_keys({"vk-dry-run": crypto.new_key()}, "vk-dry-run")
    started = time.perf_counter()
    source = {"not_under_key": active} if pending else {"under": active}
    batch = next(data_key_batches(store, batch_size, **source), [])
    moved = scratch.rewrap_many([(key_id, wrapped) for _, key_id, wrapped in batch])
    updates: list[Rewrap] = [
        (*row, *new) for row, new in zip(batch, moved, strict=True) if new is not None
    ]
    if updates:
        move_data_keys_rolled_back(store, updates)
    return len(batch), time.perf_counter() - started
