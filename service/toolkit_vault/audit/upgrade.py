"""Upgrading a vault made before authenticated state: a keyed, resumable backfill.

Schema revision 0002 gives every row whose meaning matters a `mac` (see `integrity`). The
MACs need the state key, which only the master key unwraps, so `toolkit-vault init` runs
this after migrating. It signs only what the audit chain vouches for: it walks the chain
first (a broken one stops the upgrade), reconciles each table with it (`reconcile`) and
signs each unsigned row that agrees, and a live config version only once it has opened
under its wrapped key (which binds its public half and its secret paths). A row that fails
stays unsigned, so it is never believed, and is named in the report.

On the way, fingerprints are scoped to their (session, toolkit) (see `crypto.fingerprint`):
a version whose secrets open gets new ones; one without ciphertext (a failed or purged
attempt) keeps its secret paths only, and a purged one keeps nothing of its config.

Batches commit one by one; a rerun signs what is still unsigned. Once the
`state_authenticated` event is in the chain, no unsigned row is ever signed again: from
then on only the vault's own writes carry MACs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.audit.verify import verify_chain_only
from toolkit_vault.crypto import KeyRing, SecretBytes
from toolkit_vault.errors import DecryptionError, VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.backfill import Backfill, append_event, recorded
from toolkit_vault.store.integrity import (
    IMPORTED,
    MASTER_KEYS,
    POINTERS,
    PRINCIPALS,
    SESSIONS,
    VAULT_KEYS,
    VERSIONS,
)
from toolkit_vault.store.ledger import LIVE
from toolkit_vault.store.reconcile import MAX_LISTED
from toolkit_vault.store.records import AuditDraft, version_record
from toolkit_vault.store.storage import Store

__all__ = ["UpgradeReport", "authenticate_state", "state_authenticated"]

BATCH_SIZE = 500
_KEYS = {
    VERSIONS: ("id",),
    POINTERS: ("session_id", "toolkit_name"),
    PRINCIPALS: ("principal_id",),
    SESSIONS: ("session_id",),
    IMPORTED: ("name",),
    MASTER_KEYS: ("kek_id",),
    VAULT_KEYS: ("key_id",),
}


@dataclass
class UpgradeReport:
    signed: dict[str, int] = field(default_factory=dict)
    left_unsigned: list[str] = field(default_factory=list)  # the first MAX_LISTED
    unsigned_count: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "signed": self.signed,
            "left_unsigned": self.left_unsigned,
            "unsigned_count": self.unsigned_count,
        }


def state_authenticated(store: Store) -> bool:
    return recorded(store, AuditAction.STATE_AUTHENTICATED)


def authenticate_state(
    store: Store, ring: KeyRing, fingerprint_key: SecretBytes, audit_key: SecretBytes
) -> UpgradeReport | None:
    """Sign the rows of a pre-0002 vault that the chain vouches for; None if done before."""
    if state_authenticated(store):
        return None
    chain = verify_chain_only(store, audit_key)
    if chain.problem not in (None, "unaudited", "state"):
        raise VaultError(
            f"cannot upgrade: the audit chain does not verify ({chain.message}); the upgrade "
            "signs only what the chain vouches for, so resolve that first"
        )
    report = UpgradeReport()
    backfill = Backfill(store, BATCH_SIZE, _chain_alone)
    for table in backfill.tables:
        pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for row, name, disagreement in backfill.findings(table):
            if row is None or row.get("mac") is not None:
                continue
            changes = None if disagreement else _changes(table, row, ring, fingerprint_key)
            if changes is None:
                report.unsigned_count += 1
                if len(report.left_unsigned) < MAX_LISTED:
                    why = disagreement[1] if disagreement else "it does not open"
                    report.left_unsigned.append(f"{table} {_label(name)}: {why}")
                continue
            signed = {**dict(row), **changes}
            changes["mac"] = store.mac(table, signed)
            pending.append(({k: row[k] for k in _KEYS[table]}, changes))
        for start in range(0, len(pending), BATCH_SIZE):
            _write(backfill, table, pending[start : start + BATCH_SIZE])
        report.signed[table] = len(pending)
    details = {"signed": report.signed, "left_unsigned": report.unsigned_count}
    append_event(store, AuditDraft("init", AuditAction.STATE_AUTHENTICATED, details=details))
    return report


def _chain_alone(_table: str, _row: Any) -> bool:
    """Before the backfill no row is signed yet: the chain alone decides."""
    return True


def _label(name: Any) -> str:
    return f"{name[0]}/{name[1]} v{name[2]}" if isinstance(name, tuple) else str(name)


def _changes(
    table: str, row: Mapping[str, Any], ring: KeyRing, fingerprint_key: SecretBytes
) -> dict[str, Any] | None:
    """What a row must become before it is signed; None if it must stay unsigned."""
    if table != VERSIONS:
        return {}
    record = version_record(row)
    if record.damaged:
        return None
    if row["status"] == "purged":  # purge now keeps nothing of the config but its skeleton
        return {"public_config": "{}", "secret_fingerprints": "{}", "message": None}
    if record.wrapped_dek is None:
        if row["status"] in LIVE:
            return None  # a live version always has a wrapped key: this one was downgraded
        try:  # kept without values: with the fingerprint key, each was a guessing oracle
            paths = dict.fromkeys(json.loads(row["secret_fingerprints"]))
        except (TypeError, ValueError):
            return None
        return {"secret_fingerprints": json.dumps(paths)}
    try:
        context, sealed = record.sealed()
        fingerprints = crypto.fingerprints_of(ring, fingerprint_key, context, sealed)
    except DecryptionError:
        return None
    return {"secret_fingerprints": json.dumps(fingerprints)}


def _write(
    backfill: Backfill, table: str, batch: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    """Sign one batch (a seam: a test stops the upgrade between batches)."""
    backfill.sign(table, batch)
