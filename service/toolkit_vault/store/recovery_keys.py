"""Recovery shares as stored: the share set's wraps of the vault keys, and the recovery key
kept wrapped by the active vault key.

`keys.recovery` makes and opens them (the crypto, the shares); here are the rows: one
`recovery_keys` row per covered vault key (its wrap under the recovery key, bound to the
vault key id and the share set), and the `internal_keys` row `recovery`. A new share set
replaces the old one whole, with its audit event, in one transaction; a vault key added
later is covered in the transaction that adds it (`cover`), by a callback that does the
crypto, so the transaction stays here and the keys stay in `keys`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select

from toolkit_vault.store.models import InternalKey, RecoveryKey
from toolkit_vault.store.reconcile import Kind, recovery_wraps
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "RECOVERY_KEY_NAME",
    "Cover",
    "HeldRecoveryKey",
    "RecoveryWrap",
    "cover",
    "replace_share_set",
    "share_set_wraps",
    "unvouched_wraps",
]

RECOVERY_KEY_NAME = "recovery"  # its row in `internal_keys`, wrapped by the active vault key


@dataclass(frozen=True, repr=False)
class RecoveryWrap:
    """A vault key wrapped under the recovery key, for one share set."""

    key_id: str
    set_id: str
    wrapped_key: bytes
    created_at: float

    def __repr__(self) -> str:
        return f"RecoveryWrap({self.key_id!r}, set={self.set_id!r})"


@dataclass(frozen=True, repr=False)
class HeldRecoveryKey:
    """The recovery key as the vault keeps it (wrapped by vault key `key_id`), and the
    share set whose wraps a newly covered vault key joins."""

    key_id: str
    wrapped_key: bytes
    set_id: str

    def __repr__(self) -> str:
        return f"HeldRecoveryKey(under={self.key_id!r}, set={self.set_id!r})"


# Given the held recovery key, the new vault key's wrap under it (the crypto is the caller's).
Cover = Callable[[HeldRecoveryKey], bytes]


def replace_share_set(
    store: Store, wraps: Sequence[RecoveryWrap], held: tuple[str, bytes], event: AuditDraft
) -> None:
    """Replace any earlier share set with `wraps` and the recovery key kept as `held`
    (vault key id, wrapped key), with its audit event, in one transaction."""
    rows = [
        {
            "key_id": w.key_id,
            "set_id": w.set_id,
            "wrapped_key": w.wrapped_key,
            "created_at": w.created_at,
        }
        for w in wraps
    ]

    def work(conn: Connection) -> None:
        conn.execute(delete(RecoveryKey))
        conn.execute(insert(RecoveryKey), rows)
        conn.execute(delete(InternalKey).where(InternalKey.name == RECOVERY_KEY_NAME))
        conn.execute(
            insert(InternalKey).values(name=RECOVERY_KEY_NAME, kek_id=held[0], wrapped_key=held[1])
        )
        store.audit(conn, event)

    store.transact(work)


def cover(conn: Connection, key_id: str, wrap: Cover) -> bool:
    """(In the transaction that adds vault key `key_id`: `vault_keys.add_vault_key`.) Add
    its wrap under the recovery key, made by `wrap` from the recovery key as held; False
    when there are no shares (nothing is written)."""
    held = conn.execute(
        select(InternalKey.kek_id, InternalKey.wrapped_key).where(
            InternalKey.name == RECOVERY_KEY_NAME
        )
    ).first()
    share_set = conn.execute(select(RecoveryKey.set_id).limit(1)).scalar()
    if held is None or share_set is None:
        return False
    wrapped = wrap(HeldRecoveryKey(held.kek_id, bytes(held.wrapped_key), share_set))
    row = {"key_id": key_id, "set_id": share_set, "wrapped_key": wrapped, "created_at": time.time()}
    conn.execute(insert(RecoveryKey).values(**row))
    return True


def share_set_wraps(store: Store) -> list[RecoveryWrap]:
    """Every recovery wrap as stored (not yet checked against the chain: `unvouched_wraps`)."""
    with store.read() as conn:
        rows = conn.execute(select(RecoveryKey)).all()
    return [RecoveryWrap(r.key_id, r.set_id, bytes(r.wrapped_key), r.created_at) for r in rows]


def unvouched_wraps(store: Store) -> list[tuple[str, tuple[Kind, str]]]:
    """The recovery wraps the audit chain does not call its current share set (vault key
    id, (kind, why)): a replaced set's rows put back, a wrap with no event, one deleted."""
    with store.read() as conn:
        return [(str(name), why) for _row, name, why in recovery_wraps(conn) if why is not None]
