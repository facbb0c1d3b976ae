"""Refresh ahead: the token sets this process's live instances were made from, refreshed
before they expire, and those instances initialized again (`transports.oauth_watch` asks
every half minute).

May import: oauth, store, toolkits, logs, errors, and `core`'s OAuth refresh and specs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from toolkit_vault.core.oauth_refresh import Marked, OAuthRefresher
from toolkit_vault.core.oauth_specs import OAuthSpecs, client_secret_of
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.errors import Reconnect, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import OAuthSpec, TokenSet
from toolkit_vault.store.records import VersionRecord
from toolkit_vault.toolkits.registry import RegisteredToolkit, ToolkitRegistry

__all__ = ["OAuthSchedule"]

log = logging.getLogger(__name__)


class OAuthSchedule:
    """The proactive refresh of one vault's live instances."""

    def __init__(
        self,
        refresher: OAuthRefresher,
        registry: Callable[[], ToolkitRegistry],
        sealing: Sealing,
        specs: OAuthSpecs,
        live_scopes: Callable[[], set[tuple[str, str]]],
        reinitialize: Callable[[str, str], None],
    ) -> None:
        """`live_scopes`: (scope, toolkit) of every instance live in this process;
        `reinitialize(scope, toolkit)`: initialize its instances here again; `registry`:
        the vault's registry as it is now."""
        self._refresher, self._registry = refresher, registry
        self._sealing, self._specs = sealing, specs
        self._live_scopes, self._reinitialize = live_scopes, reinitialize
        self._seen: dict[tuple[str, str], int] = {}  # (scope, toolkit) -> version, last round

    def refresh_ahead(self, ahead: float) -> list[str]:
        """Refresh the token sets this process's live instances were made from that expire
        within `ahead` seconds (once across processes, as at initialization), and initialize
        those instances again (`transports.oauth_watch` calls it every half minute). Returns
        the (scope, toolkit) refreshed, as `scope/toolkit`. A refusal marks the connection
        for reconnecting, as at initialization; an unreachable server is tried again after
        the backoff (`RETRY_SPACING`), and marks it after `MAX_FAILURES` in a row.

        Instances here made from a version another process (or session) replaced since the
        last round (a refresh made elsewhere) are initialized again too, so they get the new
        token even when no relay told this process."""
        done = []
        for scope_id, name in sorted(self._live_scopes()):
            record = self._refresher.current(scope_id, name)
            if record is None:
                continue
            try:
                toolkit = self._registry().get(name)
                spec = self._specs.of(toolkit)
                if spec is None:
                    continue
                moved = self._seen.get((scope_id, name)) != record.version
                refreshed = self._ahead(record, toolkit, spec, ahead)
            except VaultError as exc:
                log.warning("%s: not refreshed ahead (%s)", name, type(exc).__name__)
                continue
            if refreshed or moved:
                self._reinitialize(scope_id, name)
            if refreshed:
                done.append(f"{scope_id}/{name}")
            latest = self._refresher.current(scope_id, name) if refreshed else record
            self._seen[(scope_id, name)] = latest.version if latest else 0
        return done

    def _ahead(
        self, record: VersionRecord, toolkit: RegisteredToolkit, spec: OAuthSpec, ahead: float
    ) -> bool:
        """Refresh `record`'s token set if it expires within `ahead` seconds; whether a
        version was stored here (refreshed, or marked for reconnecting)."""
        config = self._sealing.decrypt(record)
        tokens = TokenSet.of_config(config, spec.token_field)
        if tokens is None or tokens.reconnect or tokens.expires_at is None:
            return False
        if tokens.expires_at - self._refresher.clock() >= ahead:
            return False
        register_secrets([tokens.access_token, tokens.refresh_token])
        secret = client_secret_of(spec, config)
        try:
            fresh = self._refresher.refresh(record, toolkit, spec, tokens, secret)
        except Marked:
            return True  # stored: the instances are initialized again and say so
        except Reconnect:
            return False  # the server cannot be reached: tried again after the backoff
        return fresh is not None and fresh[1] != record.version
