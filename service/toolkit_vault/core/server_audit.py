"""The audit line of an imported server launched without the sandbox: the operator turned
it off (`TOOLKIT_VAULT_SANDBOX=off`), so the server sees what the vault's user sees, the
vault home and the database included. `serve` says so once at start-up; each such launch
leaves a `server_unconfined` event naming the scope, toolkit and version it ran for, so
an auditor finds every one.

May import: store (the draft and its action), toolkits (the key's shape).
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.server_processes import ServerKey

__all__ = ["SERVERS_ACTOR", "unconfined_launch_audit"]

SERVERS_ACTOR = "vault:servers"


def unconfined_launch_audit(store: Store) -> Callable[[ServerKey], None]:
    """What `ServerProcesses` calls at each unconfined launch: one audit event."""

    def audit(key: ServerKey) -> None:
        scope, toolkit, version = key
        details = {"sandbox": "off"}
        draft = AuditDraft(
            SERVERS_ACTOR, AuditAction.SERVER_UNCONFINED, scope, toolkit, version, details
        )
        store.record_attempt(draft)

    return audit
