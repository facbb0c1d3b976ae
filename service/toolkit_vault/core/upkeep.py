"""The vault's upkeep, as operators and auditors ask for it: crypto-shredding a session's
or a principal's configs (their OAuth token sets revoked first), exporting the audit chain
and accepting a deliberate restore.

What a purge ends in this process (live instances, connections to tell) is the vault's:
it is given as callbacks at construction, so this module never holds the vault.

Walking the audit chain (`audit verify`) and `check` are `core.auditing`'s (`auditing`
here), which operators' commands run without the rest of the vault.

May import: audit, keys, store, crypto, errors, `tools.call_audit`, and `core`'s auditing,
sealing, ports, outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from toolkit_vault.audit.export import export_events
from toolkit_vault.audit.history import find_principal
from toolkit_vault.core.auditing import Auditing
from toolkit_vault.core.outcomes import Outcome, status_event
from toolkit_vault.core.ports import TokenSource
from toolkit_vault.core.purge import PurgeReport, purge, purge_principal
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.crypto import SecretBytes, derive_key
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.scopes import principal_scope
from toolkit_vault.store.storage import Store
from toolkit_vault.tools.call_audit import CALL_HMAC_LABEL, arguments_hmac

__all__ = ["Upkeep"]


class Upkeep:
    """Purges and audits of one vault."""

    def __init__(
        self,
        store: Store,
        sealing: Sealing,
        audit_key: SecretBytes | None,
        oauth: TokenSource,
        *,
        resync: Callable[[str, str, str | None], list[ToolkitStatusEvent]],
        known: Callable[[str], bool],
        publish: Callable[[ToolkitStatusEvent], None],
    ) -> None:
        """`resync(session, principal, toolkit)`: bring the session's instances here in
        line with the store, returning what changed; `known(session)`: whether this
        process holds anything of it; `publish`: tell its connections and the replicas."""
        self._store, self._audit_key, self._oauth = store, audit_key, oauth
        self.auditing = Auditing(store, sealing.ring_for, audit_key)  # `audit verify`, `check`
        # the key of every call's `arguments_hmac`, derived once: it is on every call's path
        self._call_key = None if audit_key is None else derive_key(audit_key, CALL_HMAC_LABEL)
        self._resync, self._known, self._publish = resync, known, publish

    def purge(self, actor: str, session_id: str, toolkit_name: str | None = None) -> PurgeReport:
        """Crypto-shred a session (or one toolkit of it); its live instances here make way
        for its principal's config, or are forgotten, and its connections are told. OAuth
        token sets are revoked at their servers first (`oauth_revoke`)."""
        self._oauth.revoke(actor, session_id, toolkit_name)
        report = purge(self._store, session_id, toolkit_name, actor=actor)
        if self._known(session_id) and report.principal_id is not None:
            for event in self._resync(session_id, report.principal_id, toolkit_name):
                self._publish(event)
        return report

    def purge_principal(
        self, actor: str, principal: str, toolkit_name: str | None = None
    ) -> PurgeReport:
        """Crypto-shred a principal's own configs (by principal id or name); its sessions'
        configs stay, and every session that used the principal's is told."""
        scope_id = principal_scope(find_principal(self._store, principal))
        self._oauth.revoke(actor, scope_id, toolkit_name)
        report = purge_principal(self._store, principal, toolkit_name, actor=actor)
        purged = Outcome("error", "config purged")
        for name in report.unconfigured:
            self._publish(status_event(report.session_id, name, False, purged))
        return report

    def export_audit(self, after: int, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The audit events after seq `after`, each verified as it is read (`audit.export`):
        what a receiver of the audit devices replays when it fell behind."""
        if self._audit_key is None:
            raise VaultError("the audit key is not loaded")
        return export_events(self._store, self._audit_key, after, limit)

    def hash_arguments(self, arguments: Mapping[str, Any]) -> str:
        """The `arguments_hmac` a `tool_called` event carries for these arguments (`audit
        hash`, as HashiCorp Vault's `sys/audit-hash`): an auditor tests a value they hold
        against the trail, and the key that makes it never leaves the vault. Meant for the
        call engine's records too: one key and one function, so they cannot drift apart."""
        if self._call_key is None:
            raise VaultError("the audit key is not loaded")
        return arguments_hmac(self._call_key, arguments)

    def accept_restore(self, actor: str) -> dict[str, Any]:
        """An operator's deliberate restore of an older copy: the database's chain must
        verify on its own; then its head becomes the witness again, and the step is an
        audit event naming both heads. Running processes that followed the newer chain
        keep refusing until they restart (they saw the events that are gone)."""
        store = self._store
        try:
            heads = store.witness.read() if store.witness is not None else None
        except StoreError:
            heads = None
        with store.accepting_restore():
            report = self.auditing.verify_audit(full=True)
            if report.problem in ("edited", "deleted", "inserted", "truncated"):
                raise VaultError(f"the database's own audit chain is broken: {report.message}")
            details = {
                "witness_seq": heads[0][0] if heads else None,
                "database_seq": report.head_seq,
            }
            store.record_attempt(AuditDraft(actor, AuditAction.RESTORE_ACCEPTED, details=details))
        return {**details, "accepted": True}
