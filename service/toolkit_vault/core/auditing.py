"""`audit verify` and `check` over a store and its keys, and nothing that serves.

An operator's `audit verify` or `check` needs the store, the vault key ring (to reload it
when the store names a key it lacks, and to open the recovery key and the versions) and the
audit key. The whole vault (`core.vault`: the registry, the protocol's models, OAuth, the
tool engine) is none of that, and importing it was a third of an incremental run at a
million events (issue 53). So these two live here, on their own; `Upkeep` hands its
`verify_audit` and `check` to the same object, so the server and the commands run one code.

May import: audit, keys, store, crypto, errors, and `core.checking`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from toolkit_vault.audit.verify import AuditReport, verify_audit_chain
from toolkit_vault.core.checking import check_all, check_versions
from toolkit_vault.crypto import KeyRing, SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.recovery import held_recovery_key
from toolkit_vault.store.scopes import scope_of
from toolkit_vault.store.storage import Store

__all__ = ["Auditing", "RingSource"]

Start = Callable[[int], Callable[[int], None]]


class RingSource(Protocol):
    """Where the ring comes from (`Sealing.ring_for`): reloaded when it lacks a key."""

    def __call__(self, *key_ids: str, strict: bool = False) -> KeyRing: ...


class Auditing:
    """The audit chain's verification and `check`, for one store."""

    def __init__(self, store: Store, ring_for: RingSource, audit_key: SecretBytes | None) -> None:
        self.store = store
        self._ring_for = ring_for
        self._audit_key = audit_key

    def _key(self) -> SecretBytes:
        if self._audit_key is None:
            raise VaultError("the audit key is not loaded")
        return self._audit_key

    def verify_audit(self, full: bool = False) -> AuditReport:
        """Walk the audit chain with this vault's audit key (which never leaves it), and
        reconcile every authenticated table with it: after the last run's mark unless
        `full` (`audit.verify`)."""
        audit_key = self._key()
        recovery = held_recovery_key(self.store, self._ring_for)
        return verify_audit_chain(self.store, audit_key, recovery=recovery, full=full)

    def check(self, start: Start | None = None, full: bool = False) -> dict[str, Any]:
        """`check`: every version decrypted in memory and every row's MAC, then the audit
        chain and the state it vouches for; counts and names, never a value. A key the ring
        lacks is loaded (`ring_for`), or the check stops: never a false "failed". Without
        `full`, the versions and events after the last run's marks (`core.checking`)."""
        audit_key = self._key()
        ring_for = partial(self._ring_for, strict=True)
        if full:  # one pass: each version opened as the audit's reconciliation reads it
            recovery = held_recovery_key(self.store, self._ring_for)
            result, audit = check_all(self.store, ring_for, audit_key, recovery, start)
        else:
            # the chain first: the versions since the check's mark are held to the state it
            # verified, and the store need not follow the chain a second time to say it
            audit = self.verify_audit(full)
            chain = audit.chain_state
            result = check_versions(self.store, ring_for, audit_key, start, chain=chain)
        for failed in result["failed_versions"]:
            failed["scope"] = scope_of(failed["session_id"])
        result["scopes"] = self.store.versions_by_scope()
        result["audit"] = {
            "ok": audit.problem in (None, "unaudited", "state"),
            "message": audit.message,
        }
        result["state_problems"] = [p.as_json() for p in audit.state_problems]
        result["state_problem_count"] = audit.state_problem_count
        result["ok"] = not result["failed"] and audit.ok
        return result
