"""Key rotation on both layers (the decrypt check that follows one: `version_check`).

**Master key** (`rotate_master_key`, `keys rotate`): the provider makes a new master key
(or new key material), then every live vault key is unwrapped and wrapped again under it,
in one audited transaction. It touches the few vault key rows only, so it takes the same
time at a thousand versions and at a million. Rerun after a crash: a vault key still under
an older master key than the provider's current one is finished without rotating again.

**Vault key** (`rotate_vault_key`, `keys rotate --vault-key`), a resumable state machine
driven by what is stored, so a killed run is finished by running it again and never adds a
second new key:

1. when nothing is left to move, a new vault key is wrapped by the provider and made
   active, in one audited transaction; from then on every writer wraps under it (writers
   with an older ring reload the keys);
2. the vault-wide keys, then every data key not under the active vault key, are rewrapped
   in batches: the key only (`KeyRing.rewrap`), never a value, each row written back by
   compare-and-set on its wrapped key as read. `check` is what proves values still open.

Only wrapped keys change: envelopes, fingerprints, history and row MACs keep their identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, internal_context
from toolkit_vault.errors import DecryptionError, KeyProviderError, VaultError
from toolkit_vault.keys.keystore import (
    internal_keys,
    next_key_id,
    vault_key_context,
    verified_vault_keys,
)
from toolkit_vault.keys.providers import KeyProvider, blob_header
from toolkit_vault.keys.recovery import cover_vault_key
from toolkit_vault.store import vault_keys
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.data_keys import (
    Rewrap,
    data_key_batches,
    move_data_keys,
    version_batches,
    version_name,
    write_rewraps,
)
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import (
    InternalMove,
    NewVaultKey,
    add_vault_key,
    any_pending,
    rewrap_internal_keys,
    rewrap_vault_keys,
)

__all__ = [
    "MasterRotationReport",
    "RotationReport",
    "pending_rewraps",
    "rotate_master_key",
    "rotate_vault_key",
    "version_batches",  # re-exported from `store.data_keys` for benchmarks/rotation.py
    "write_rewraps",  # likewise
]

Progress = Callable[[int], None]


@dataclass
class MasterRotationReport:
    master_key: str
    previous: list[str]
    rotated_in_provider: bool
    vault_keys: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": "master",
            "master_key": self.master_key,
            "previous": self.previous,
            "rotated_in_provider": self.rotated_in_provider,
            "vault_keys_rewrapped": self.vault_keys,
        }


def rotate_master_key(
    store: Store, provider: KeyProvider, *, actor: str = "operator"
) -> MasterRotationReport:
    """Rotate the master key and rewrap every live vault key under the new one."""
    live = [r for r in verified_vault_keys(store) if r.live]
    current = provider.status().current
    behind = [r for r in live if r.master_key != current]
    rotated = not behind  # all under the current key: rotate; else finish the last rotation
    if rotated:
        current = provider.rotate()
    moves = []
    for record in live:
        assert record.wrapped_key is not None
        context = vault_key_context(record.key_id)
        try:
            key = provider.unwrap(record.wrapped_key, context)
        except DecryptionError:
            raise KeyProviderError(
                f"vault key {record.key_id} does not open with {provider.where}; nothing was "
                "changed (run `toolkit-vault check`)"
            ) from None
        moves.append((record.key_id, record.wrapped_key, provider.wrap(key, context)))
    previous = sorted({str(r.master_key) for r in live} - {str(current)})
    details = {"master_key": current, "previous": previous, "vault_keys": len(moves)}
    event = AuditDraft(actor, AuditAction.MASTER_KEY_ROTATED, details=details)
    rewrap_vault_keys(store, moves, event)
    return MasterRotationReport(str(current), previous, rotated, [m[0] for m in moves])


@dataclass
class RotationReport:
    primary: str
    previous: list[str]
    resumed: bool
    rewrapped: int = 0
    internal_rewrapped: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": "vault-key",
            "primary": self.primary,
            "previous": self.previous,
            "resumed": self.resumed,
            "rewrapped": self.rewrapped,
            "internal_rewrapped": self.internal_rewrapped,
            "failed": self.failed,
        }


def pending_rewraps(store: Store, active: str) -> int:
    """Wrapped keys (data keys and vault-wide keys) not under the active vault key."""
    return vault_keys.pending_rewraps(store, active)


def rotate_vault_key(
    store: Store,
    provider: KeyProvider,
    ring: KeyRing,
    *,
    batch_size: int = 500,
    start: Callable[[int], Progress] | None = None,
    actor: str = "operator",
) -> RotationReport:
    """Make a new vault key active and rewrap every wrapped key under it; rerun to resume.

    One pass of keyset-paginated batches is enough: once the new key is active, every write
    transaction (they are serialized) wraps under it, and rows written before it committed
    are in the store when the pass begins (rows appended meanwhile come after, by id). A
    writer that could not reach the provider to load the new key keeps the old one: its rows
    are found by the next run, and `keys retire` refuses the old key until then."""
    records = verified_vault_keys(store)
    live = [r.key_id for r in records if r.live]
    active = next(r.key_id for r in records if r.is_active and r.live)
    resumed = any_pending(store, active)
    report = RotationReport(active, [], resumed)
    if not resumed:
        new_id, key = next_key_id(r.key_id for r in records), crypto.new_key()
        wrapped = provider.wrap(key, vault_key_context(new_id))
        ring, active = ring.with_keys({new_id: key}, new_id), new_id
        moves = _internal_moves(store, ring)
        add_vault_key(  # the vault-wide keys move with the new key
            store,
            NewVaultKey(new_id, wrapped, blob_header(wrapped)[1], actor=actor),
            internal=moves,
            cover=cover_vault_key(ring, new_id, key),  # the recovery shares cover it too
        )
        report.primary, report.internal_rewrapped = new_id, len(moves)
    if active not in ring or ring.primary_id != active:
        raise VaultError(f"vault key {active} is not loaded; run the rotation again")
    report.previous = sorted(k for k in live if k != active)
    moves = _internal_moves(store, ring)
    if moves:
        rewrap_internal_keys(store, moves)
        report.internal_rewrapped += len(moves)
    advance = start(pending_rewraps(store, active)) if start else None
    _rewrap_versions(store, ring, batch_size, report, advance)
    details = {"active": active, "rewrapped": report.rewrapped, "failed": len(report.failed)}
    vault_keys.record_key_event(
        store, AuditDraft(actor, AuditAction.VAULT_KEY_ROTATED, details=details)
    )
    return report


def _internal_moves(store: Store, ring: KeyRing) -> list[InternalMove]:
    """The vault-wide keys not under the active vault key, rewrapped (values unchanged)."""
    return [
        (name, key_id, wrapped, *ring.rewrap(key_id, wrapped, internal_context(name)))
        for name, (key_id, wrapped) in internal_keys(store).items()
        if key_id != ring.primary_id
    ]


def _rewrap_versions(
    store: Store, ring: KeyRing, batch_size: int, report: RotationReport, advance: Progress | None
) -> int:
    """One pass over the data keys not under the active vault key. A data key is read with
    its id and wrap only: the wrap carries its record's binding, so the row is not parsed."""
    done = 0
    for rows in data_key_batches(store, batch_size, not_under_key=ring.primary_id):
        updates: list[Rewrap] = []
        moved = ring.rewrap_many([(key_id, wrapped) for _, key_id, wrapped in rows])
        for (row_id, key_id, wrapped), new in zip(rows, moved, strict=True):
            if new is None:
                report.failed.append(version_name(store, row_id).as_json())
            else:
                updates.append((row_id, key_id, wrapped, *new))
        if updates:
            move_data_keys(store, updates)
        done += len(updates)
        report.rewrapped += len(updates)
        if advance:
            advance(len(rows))
    return done
