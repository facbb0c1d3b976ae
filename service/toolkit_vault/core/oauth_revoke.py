"""Revocation (RFC 7009): a scope's OAuth token sets revoked at their servers before a
purge shreds them, each audited `oauth_disconnected`. A server without a revocation
endpoint, or that cannot be reached, is logged and skipped: a purge never waits on it.

May import: oauth, store, toolkits, logs, errors, and `core`'s sealing and OAuth specs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from toolkit_vault.core.oauth_specs import OAuthSpecs, client_for, client_secret_of
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.errors import ToolkitNotFound, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import TokenSet
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.imports import stored_toolkits
from toolkit_vault.toolkits.registry import RegisteredToolkit, ToolkitRegistry

if TYPE_CHECKING:  # the HTTP client loads at a first connection (`oauth_specs.client_for`)
    from toolkit_vault.oauth import OAuthClient

__all__ = ["OAuthRevoker", "revoke_at_server"]

log = logging.getLogger(__name__)


class OAuthRevoker:
    """Revokes the token sets current in a scope, before a purge."""

    def __init__(
        self,
        store: Store,
        registry: Callable[[], ToolkitRegistry],
        sealing: Sealing,
        specs: OAuthSpecs,
    ) -> None:
        """`registry`: the vault's registry as it is now."""
        self._store, self._registry, self._sealing, self._specs = store, registry, sealing, specs
        self._revoking: ToolkitRegistry | None = None  # loaded to revoke (`_toolkit_to_revoke`)
        self._lock = threading.Lock()

    def revoke(self, actor: str, scope_id: str, toolkit_name: str | None = None) -> list[str]:
        """Revoke at their servers the token sets current in a scope (one toolkit, or all),
        before a purge shreds them; returns the toolkits revoked, each audited
        `oauth_disconnected`. A server without a revocation endpoint, or that cannot be
        reached, is logged and skipped: a purge never waits on it."""
        revoked = []
        for record in self._store.current_versions(scope_id):
            if toolkit_name not in (None, record.toolkit_name) or not record.authentic:
                continue
            toolkit = self._toolkit_to_revoke(record.toolkit_name)
            if toolkit is None:
                continue
            try:
                spec = self._specs.of(toolkit)
                if spec is None:
                    continue
                config = self._sealing.decrypt(record)
                tokens = TokenSet.of_config(config, spec.token_field)
                if tokens is None or tokens.reconnect:
                    continue
                register_secrets([tokens.access_token, tokens.refresh_token])
                client, found = client_for(spec, client_secret_of(spec, config))
                if not revoke_at_server(client, found.revocation_endpoint, tokens):
                    log.info("%s: its server offers no revocation", record.toolkit_name)
                    continue
            except (VaultError, ValueError) as exc:
                log.warning("%s: tokens not revoked (%s)", record.toolkit_name, type(exc).__name__)
                continue
            details = {"revoked": True, "issuer": tokens.issuer}
            self._store.record_attempt(
                AuditDraft(
                    actor, AuditAction.OAUTH_DISCONNECTED, scope_id, record.toolkit_name,
                    record.version, details,
                )
            )  # fmt: skip
            revoked.append(record.toolkit_name)
        return revoked

    def _toolkit_to_revoke(self, name: str) -> RegisteredToolkit | None:
        """The toolkit whose `x-oauth` names the server to revoke at. A vault opened without
        toolkits (the operators' `purge`, so a broken plugin cannot stop it) loads them
        here, once, only when a purge meets one it lacks; a plugin that fails to load is
        left out as always (its tokens then expire at the server instead)."""
        try:
            return self._registry().get(name)
        except ToolkitNotFound:
            pass
        with self._lock:
            if self._revoking is None:
                try:
                    registry = ToolkitRegistry.default()
                    registry.load_imported(stored_toolkits(self._store))
                except VaultError as exc:
                    log.warning("toolkits not loaded to revoke tokens (%s)", exc.message)
                    registry = ToolkitRegistry()
                self._revoking = registry
            registry = self._revoking
        try:
            return registry.get(name)
        except ToolkitNotFound:
            return None


def revoke_at_server(client: OAuthClient, endpoint: str | None, tokens: TokenSet) -> bool:
    """Revoke a token set at its server (RFC 7009: the refresh token, then the access
    token); False when the server offers no revocation."""
    if endpoint is None:
        return False
    if tokens.refresh_token:
        client.revoke(endpoint, tokens.refresh_token, "refresh_token")
    client.revoke(endpoint, tokens.access_token, "access_token")
    return True
