"""Moving the master key (Vault's seal migration): every live vault key unwrapped by the
provider that holds it and wrapped by another: another provider (file to AWS KMS), or
another key of the same one (a new KMS key). Only the few vault key rows change; data keys,
values, fingerprints and the recovery shares stay as they are.

The move is ordered so that a kill at any point leaves a vault that opens:

1. the target is proved first: it wraps every vault key and gives each back (a round trip,
   compared by key check value); a target that is unreachable, refuses (a disabled or
   missing KMS key), or gives back another key stops the move here, nothing changed;
2. `intent`: the home records the move as under way beside its pin, so from now on a
   process that opens the vault tries the pinned provider, then the target
   (`hierarchy.VaultKeys.unwrap`);
3. one transaction rewraps every vault key, compare-and-set on each wrap as read, with the
   `master_key_moved` audit event naming both sides (providers and master key ids, never
   key material);
4. `pin`: only once every live vault key opens under the target, the home pins the target
   (one atomic rename) and forgets the move.

Killed before 3, the vault is under the old master key; between 3 and 4 it opens through
the recorded target; a rerun of `keys move` finishes, and rewraps nothing already moved. A
running process keeps its unwrapped vault keys (no provider call) and follows the home when
it next meets a vault key its provider does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit_vault.crypto import SecretBytes, key_check_value
from toolkit_vault.errors import KeyProviderError, VaultError
from toolkit_vault.keys.hierarchy import unwrap_vault_key
from toolkit_vault.keys.keystore import VaultKeyRecord, vault_key_context, verified_vault_keys
from toolkit_vault.keys.providers import KeyProvider, blob_header
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import rewrap_vault_keys

__all__ = ["MoveReport", "move_master_key", "proved_wrap"]


@dataclass
class MoveReport:
    source: str | None  # the provider the vault keys were under (None: already moved)
    source_master_keys: list[str]
    target: str
    master_key: str
    moved: list[str]
    created_master_key: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "from": {"provider": self.source, "master_keys": self.source_master_keys},
            "to": {"provider": self.target, "master_key": self.master_key},
            "vault_keys_moved": self.moved,
            "created_master_key": self.created_master_key,
        }


def proved_wrap(target: KeyProvider, key: SecretBytes, key_id: str) -> bytes:
    """`key` wrapped by `target` for vault key `key_id`, once `target` has given it back:
    a provider that wraps but cannot unwrap (a KMS policy without Decrypt) or answers with
    another key is refused before anything depends on it."""
    context = vault_key_context(key_id)
    wrapped = target.wrap(key, context)
    if key_check_value(target.unwrap(wrapped, context)) != key_check_value(key):
        raise target.error(f"gave back another key than it wrapped for vault key {key_id}")
    return wrapped


def _opens(provider: KeyProvider, record: VaultKeyRecord) -> SecretBytes | None:
    try:
        return unwrap_vault_key(provider, record)
    except KeyProviderError:
        return None


def move_master_key(
    store: Store,
    sources: Sequence[KeyProvider],
    target: KeyProvider,
    *,
    intent: Callable[[], None],
    pin: Callable[[], None],
    actor: str = "operator",
) -> MoveReport:
    """Move every live vault key from whichever of `sources` holds it (the home's pin, then
    a recorded move's target) to `target`'s current master key, made if it holds none.
    `intent` records the move in the home before the store changes; `pin` pins the target
    once the store holds nothing else."""
    created = target.status().current is None  # unreachable: refused here, nothing changed
    if created:
        target.create_master_key()
    records = [r for r in verified_vault_keys(store) if r.live]
    moves: list[tuple[VaultKeyRecord, bytes]] = []
    done: list[str] = []
    source: KeyProvider | None = None
    for record in records:
        if _opens(target, record) is not None:
            done.append(record.key_id)  # a killed run's commit, or already there
            continue
        for holder in sources:
            if (key := _opens(holder, record)) is not None:
                break
        else:
            raise KeyProviderError(
                f"vault key {record.key_id} opens with none of "
                f"{', '.join(p.where for p in sources)}; nothing was changed"
            )
        if holder is not sources[0]:  # under a recorded move's target: it comes first
            raise VaultError(
                f"vault key {record.key_id} is under {holder.where}, the target of a move "
                "under way: run `toolkit-vault keys move` alone to finish it first"
            )
        source = source or holder
        moves.append((record, proved_wrap(target, key, record.key_id)))
    if not moves and not done:
        raise VaultError("the store has no live vault key: run `toolkit-vault init`")
    master = blob_header(moves[0][1] if moves else _wrap_of(records, done[0]))[1]
    report = MoveReport(
        source.name if source else None,
        sorted({str(r.master_key) for r, _ in moves}),
        target.name,
        master,
        [r.key_id for r, _ in moves],
        created,
    )
    if moves:
        intent()
        details = {
            "from_provider": report.source,
            "from_master_keys": report.source_master_keys,
            "to_provider": target.name,
            "to_master_key": master,
            "vault_keys": report.moved,
        }
        rewrap_vault_keys(
            store,
            [(r.key_id, r.wrapped_key, new) for r, new in moves if r.wrapped_key is not None],
            AuditDraft(actor, AuditAction.MASTER_KEY_MOVED, details=details),
        )
    written = {r.key_id: new for r, new in moves}
    left = [
        r.key_id
        for r in verified_vault_keys(store)
        if r.live and r.key_id not in done and written.get(r.key_id) != r.wrapped_key
    ]
    if left:  # a vault key added meanwhile, under the old master key: not pinned yet
        raise VaultError(
            f"vault key {left[0]} was added under the old master key during the move; run "
            "`toolkit-vault keys move` again to finish it"
        )
    pin()
    return report


def _wrap_of(records: list[VaultKeyRecord], key_id: str) -> bytes:
    wrapped = next(r.wrapped_key for r in records if r.key_id == key_id)
    assert wrapped is not None
    return wrapped
