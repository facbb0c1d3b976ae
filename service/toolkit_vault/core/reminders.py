"""Reminders of credentials that end: an audit event ahead of time, and, once one has
ended, the instance dropped and its session told (`Vault.end_expired`).

A round looks at this process's live instances whose credential has a known end
(`core.expiry`): one that ends within `ahead` seconds is audited `credential_expiring`
once per version (once per process: each replica reminds of what it serves), and one
that has ended is dropped. The clock is the vault's, so a test moves time instead of
waiting for it. `transports.expiry_watch` runs a round every minute.
"""

from __future__ import annotations

import os

from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft

__all__ = ["AHEAD_VARIABLE", "REMINDER_ACTOR", "ExpiryReminders", "ahead_from_environment"]

AHEAD_VARIABLE = "TOOLKIT_VAULT_EXPIRY_REMINDER_DAYS"
DEFAULT_DAYS = 7.0
REMINDER_ACTOR = "vault:expiry"


def ahead_from_environment() -> float:
    """Seconds before its end that a credential is reminded of (the operator's days)."""
    text = os.environ.get(AHEAD_VARIABLE, "").strip()
    try:
        days = float(text) if text else DEFAULT_DAYS
    except ValueError:
        raise VaultError(f"{AHEAD_VARIABLE}: {text!r} is not a number of days") from None
    if not 0 <= days <= 365:
        raise VaultError(f"{AHEAD_VARIABLE}: between 0 and 365 days")
    return days * 86400


class ExpiryReminders:
    def __init__(self, vault: Vault, ahead: float | None = None) -> None:
        self.vault = vault
        self.ahead = ahead_from_environment() if ahead is None else ahead
        self._reminded: set[tuple[str, str, int]] = set()  # (scope, toolkit, version)

    def round(self) -> list[str]:
        """Remind and end what is due now; returns `scope/toolkit` of each reminder made."""
        now = self.vault.clock()
        reminded = []
        for session_id, name, source, ends in sorted(self.vault.expiring()):
            scope, version = source
            if ends - now <= self.ahead and (scope, name, version) not in self._reminded:
                self._reminded.add((scope, name, version))
                details = {"expires_at": int(ends), "ahead_days": round(self.ahead / 86400, 2)}
                draft = AuditDraft(
                    REMINDER_ACTOR, AuditAction.CREDENTIAL_EXPIRING, scope, name, version, details
                )
                self.vault.store.record_attempt(draft)
                reminded.append(f"{scope}/{name}")
            if ends <= now:
                self.vault.end_expired(session_id, name, source, ends)
        return reminded
