"""Recovery shares: a second way to the vault keys, held by people, for a lost master key.

`init_recovery` makes a fresh 256-bit recovery key, wraps every live vault key under it
(`recovery_keys`, beside the master key's wraps in `vault_keys`; each wrap committing and
bound to its vault key id and share set) and splits the recovery key into N SLIP-39
shares, any K of which rebuild it (`shamir-mnemonic`, SatoshiLabs' reference
implementation: words people can write down, each share with an RS1024 checksum, so a
mistyped share is named before anything is combined). The recovery key itself is never
stored: it exists only as shares, shown once, and in this process while it runs. Fewer
than K shares carry no information about it (Shamir's scheme over GF(256)).

`unseal` rebuilds the recovery key from K shares, unwraps the vault keys, and wraps them
under a master key of any provider (the old one lost: a KMS key deleted, a token gone):
the same rewrap `keys rotate` makes, one row per vault key, with its audit event.

The recovery key is also kept wrapped under the active vault key, as the fingerprint, audit
and state keys are (`internal_keys`, name `recovery`: it gives nothing that a holder of the
vault keys does not already have), so a vault key rotation wraps its new vault key under
the recovery key too (`cover_vault_key`) and the shares keep covering the vault without
being gathered; `recovery_status` says which vault keys they cover.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shamir_mnemonic import (  # type: ignore[import-untyped]
    MnemonicError,
    Share,
    combine_mnemonics,
    generate_mnemonics,
)

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, SecretBytes, internal_context
from toolkit_vault.errors import DecryptionError, VaultError
from toolkit_vault.keys.hierarchy import unwrap_internal_keys, unwrap_vault_key, use_keys
from toolkit_vault.keys.keystore import (
    VaultKeyRecord,
    internal_keys,
    read_vault_keys,
    verified_vault_keys,
)
from toolkit_vault.keys.move import proved_wrap
from toolkit_vault.keys.providers import KeyProvider, blob_header
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import recovery_context
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.recovery_keys import (
    RECOVERY_KEY_NAME,
    HeldRecoveryKey,
    RecoveryWrap,
    replace_share_set,
    share_set_wraps,
    unvouched_wraps,
)
from toolkit_vault.store.storage import Store
from toolkit_vault.store.vault_keys import rewrap_vault_keys

__all__ = [
    "Recovered",
    "RecoveryError",
    "RecoverySet",
    "combine_shares",
    "cover_vault_key",
    "held_recovery_key",
    "init_recovery",
    "open_with_shares",
    "recovery_status",
    "share_threshold",
    "unseal",
]

MAX_SHARES = 16  # SLIP-39's limit per group
_RING_ID = "recovery"


class RecoveryError(VaultError):
    """Shares that do not rebuild this vault's recovery key; names the share, never a word."""


@dataclass(frozen=True, repr=False)
class RecoverySet:
    """A new share set: `shares` are shown once, then forgotten."""

    set_id: str
    threshold: int
    shares: list[str]
    vault_keys: list[str]

    def __repr__(self) -> str:
        return f"RecoverySet({self.set_id!r}, {self.threshold} of {len(self.shares)})"


def _context(set_id: str, key_id: str) -> tuple[str | int, ...]:
    return recovery_context(set_id, key_id)


def held_recovery_key(store: Store, ring_for: Callable[[str], KeyRing]) -> SecretBytes | None:
    """The recovery key as the vault keeps it (wrapped by a vault key: `ring_for` gives the
    ring holding that one), read now, so a share set made by another process since is
    known; None when there is none or it does not open (no recovery wrap is then believed,
    and `check` says so)."""
    held = internal_keys(store).get(RECOVERY_KEY_NAME)
    if held is None:
        return None
    key_id, wrapped = held
    try:
        return ring_for(key_id).unwrap(key_id, wrapped, internal_context(RECOVERY_KEY_NAME))
    except (DecryptionError, VaultError, KeyError):
        return None


def init_recovery(
    store: Store, provider: KeyProvider, *, shares: int, threshold: int, actor: str = "operator"
) -> RecoverySet:
    """Replace any earlier share set with a new one covering every live vault key."""
    if not 2 <= threshold <= shares <= MAX_SHARES:
        raise VaultError(
            f"shares and threshold must satisfy 2 <= threshold <= shares <= {MAX_SHARES}"
        )
    records = [r for r in verified_vault_keys(store) if r.live]
    recovery = crypto.new_key()
    ring = KeyRing({_RING_ID: recovery}, _RING_ID)
    set_id = secrets.token_hex(8)
    now = time.time()
    wraps = []
    vault_keys = {}
    for record in records:
        vault_keys[record.key_id] = unwrap_vault_key(provider, record)
        _, wrapped = ring.wrap(vault_keys[record.key_id], _context(set_id, record.key_id))
        wraps.append(RecoveryWrap(record.key_id, set_id, wrapped, now))
    active = next(r.key_id for r in records if r.is_active)
    held = KeyRing(vault_keys, active).wrap(recovery, internal_context(RECOVERY_KEY_NAME))
    words = generate_mnemonics(1, [(threshold, shares)], recovery.reveal())[0]
    covered = [r.key_id for r in records]
    details = {"set_id": set_id, "shares": shares, "threshold": threshold, "vault_keys": covered}
    event = AuditDraft(actor, AuditAction.RECOVERY_INITIALIZED, details=details)
    replace_share_set(store, wraps, held, event)
    return RecoverySet(set_id, threshold, list(words), covered)


def cover_vault_key(
    ring: KeyRing, key_id: str, key: SecretBytes
) -> Callable[[HeldRecoveryKey], bytes]:
    """How the transaction that adds vault key `key_id` wraps it under the recovery key
    too, so the shares keep covering the vault (`store.vault_keys.add_vault_key`, which
    calls it only when there are shares). `ring` holds the vault key the recovery key is
    kept under."""

    def wrap(held: HeldRecoveryKey) -> bytes:
        context = internal_context(RECOVERY_KEY_NAME)
        recovery = ring.unwrap(held.key_id, held.wrapped_key, context)
        recovery_ring = KeyRing({_RING_ID: recovery}, _RING_ID)
        return recovery_ring.wrap(key, _context(held.set_id, key_id))[1]

    return wrap


def recovery_status(store: Store) -> dict[str, Any]:
    """Which live vault keys the share set covers (no share, nothing secret)."""
    rows = share_set_wraps(store)
    live = [r.key_id for r in read_vault_keys(store) if r.live]
    covered = {row.key_id for row in rows}
    return {
        "initialized": bool(rows),
        "set_id": rows[0].set_id if rows else None,
        "covered": sorted(k for k in live if k in covered),
        "uncovered": sorted(k for k in live if k not in covered),
    }


def share_threshold(share: str) -> int:
    """How many shares the set of this (first) share needs, so a prompt knows how many to
    ask for; RecoveryError if it is not a valid share."""
    try:
        return int(Share.from_mnemonic(" ".join(share.lower().split())).member_threshold)
    except (MnemonicError, ValueError, KeyError, IndexError):
        raise RecoveryError(
            "share 1 is not a valid share (a word is wrong, missing or misspelt)"
        ) from None


def combine_shares(shares: list[str]) -> SecretBytes:
    """The recovery key from K shares; a share that is not valid is named by its place
    (1-based), never echoed: a typed share is a secret."""
    decoded = []
    for place, text in enumerate(shares, 1):
        try:
            decoded.append(Share.from_mnemonic(" ".join(text.lower().split())))
        except (MnemonicError, ValueError, KeyError, IndexError):
            raise RecoveryError(
                f"share {place} is not a valid share (a word is wrong, missing or misspelt)"
            ) from None
    first = decoded[0]
    for place, share in enumerate(decoded, 1):
        if share.common_parameters() != first.common_parameters():
            raise RecoveryError(f"share {place} belongs to another share set than share 1")
        for earlier, other in enumerate(decoded[: place - 1], 1):
            if other.index == share.index:
                raise RecoveryError(f"share {place} is share {earlier} again")
    threshold = first.member_threshold
    if len(decoded) < threshold:
        raise RecoveryError(
            f"{len(decoded)} shares given; this share set needs {threshold}: nothing was recovered"
        )
    try:
        return SecretBytes(combine_mnemonics([" ".join(s.lower().split()) for s in shares]))
    except (MnemonicError, ValueError):
        raise RecoveryError("the shares do not combine: one of them was altered") from None


@dataclass(frozen=True, repr=False)
class Recovered:
    """The vault keys rebuilt from shares, with the vault-wide keys they wrap."""

    ring: KeyRing
    keys: dict[str, SecretBytes]
    internal: dict[str, SecretBytes]
    records: list[VaultKeyRecord]
    set_id: str


def open_with_shares(store: Store, shares: list[str]) -> Recovered:
    """Every live vault key from its recovery wrap (K shares), then the vault-wide keys
    under them; the store is given the audit and state keys, and the vault key records are
    checked with them. No provider is asked."""
    recovery = combine_shares(shares)
    ring = KeyRing({_RING_ID: recovery}, _RING_ID)
    wraps = {r.key_id: r for r in share_set_wraps(store)}
    records = [r for r in read_vault_keys(store) if r.live]
    if not wraps:
        raise RecoveryError("this vault has no recovery shares (`keys recovery init` never ran)")
    missing = [r.key_id for r in records if r.key_id not in wraps]
    if missing:
        are = "is" if len(missing) == 1 else "are"
        which = f"vault key{'' if len(missing) == 1 else 's'} {', '.join(missing)} {are}"
        raise RecoveryError(
            f"{which} not covered by the recovery shares: the shares cannot re-establish the vault"
        )
    keys: dict[str, SecretBytes] = {}
    for record in records:
        row = wraps[record.key_id]
        try:
            keys[record.key_id] = ring.unwrap(
                _RING_ID, row.wrapped_key, _context(row.set_id, record.key_id)
            )
        except DecryptionError:
            raise RecoveryError(
                "the shares do not open this vault's recovery key (a share set of another "
                "vault, or an older set replaced since)"
            ) from None
    active = [r.key_id for r in records if r.is_active] or [records[-1].key_id]
    vault_ring = KeyRing(keys, active[0])
    internal = unwrap_internal_keys(store, vault_ring)
    use_keys(store, internal)
    verified_vault_keys(store)  # the records are the vault's own, believed now
    _current_per_chain(store)
    set_id = next(iter(wraps.values())).set_id
    return Recovered(vault_ring, keys, internal, records, set_id)


def _current_per_chain(store: Store) -> None:
    """Shares open only the chain's current share set: a replaced set's rows put back (its
    shares still combine, and its wraps still open) are refused, as is any wrap the chain
    does not vouch for. The chain is followed and verified first (`state_failure`)."""
    if (failure := store.state_failure()) is not None:
        raise RecoveryError(f"the vault's state is not believed: {failure}")
    found = unvouched_wraps(store)
    if found:
        name, (_kind, detail) = found[0]
        raise RecoveryError(
            f"the recovery wraps are not the audit chain's current share set ({name}: "
            f"{detail}): nothing was recovered"
        )


def unseal(
    store: Store, shares: list[str], provider: KeyProvider, *, actor: str = "operator"
) -> dict[str, Any]:
    """Re-establish the vault under `provider`'s master key (made if it has none) from K
    shares: every live vault key is unwrapped from its recovery wrap and wrapped anew."""
    recovered = open_with_shares(store, shares)
    keys, records = recovered.keys, recovered.records
    created = None
    if provider.status().current is None:
        created = provider.create_master_key()
    moves = [  # each wrap given back by the provider before it replaces the old one
        (r.key_id, r.wrapped_key, proved_wrap(provider, keys[r.key_id], r.key_id))
        for r in records
        if r.wrapped_key is not None
    ]
    master = blob_header(moves[0][2])[1]
    details = {
        "set_id": recovered.set_id,
        "provider": provider.name,
        "master_key": master,
        "vault_keys": [m[0] for m in moves],
    }
    event = AuditDraft(actor, AuditAction.RECOVERY_UNSEALED, details=details)
    rewrap_vault_keys(store, [(key_id, old, new) for key_id, old, new in moves if old], event)
    return {**details, "created_master_key": created is not None}
