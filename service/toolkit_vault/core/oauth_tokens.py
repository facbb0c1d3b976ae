"""The OAuth token policy one vault holds (`Vault.oauth`, a `ports.TokenSource`): refresh
once before an initialization (`oauth_refresh`), revoke before a purge (`oauth_revoke`),
refresh ahead of expiry (`oauth_schedule`), and whether a configure must connect instead.

The vault builds it at construction from its own parts (store, sealing, registry) and
narrow callbacks (its relay, its intake links, its live instances), so the policy never
holds the vault and the vault never waits for it to be attached. The connect flow
(`oauth_connect.OAuthConnections`, made with the web console) uses the same object.

May import: `core`'s OAuth modules, sealing and ports; oauth, store, toolkits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolkit_vault.core.oauth_refresh import OAuthRefresher
from toolkit_vault.core.oauth_revoke import OAuthRevoker
from toolkit_vault.core.oauth_schedule import OAuthSchedule
from toolkit_vault.core.oauth_specs import OAuthSpecs, value_at
from toolkit_vault.core.ports import IntakeOffer
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.oauth import OAuthSpec
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.store.records import VersionRecord
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import RegisteredToolkit, ToolkitRegistry

__all__ = ["OAuthTokens"]


class OAuthTokens:
    """Refresh, revocation and the proactive refresh of one vault's OAuth token sets."""

    def __init__(
        self,
        store: Store,
        sealing: Sealing,
        registry: Callable[[], ToolkitRegistry],
        *,
        clock: Callable[[], float],
        tell_replicas: Callable[[ToolkitStatusEvent], None],
        intake: Callable[[], IntakeOffer | None],
        live_scopes: Callable[[], set[tuple[str, str]]],
        reinitialize: Callable[[str, str], None],
    ) -> None:
        self.specs = OAuthSpecs()
        self.refresher = OAuthRefresher(store, sealing, self.specs, clock, tell_replicas, intake)
        self._revoker = OAuthRevoker(store, registry, sealing, self.specs)
        self._schedule = OAuthSchedule(
            self.refresher, registry, sealing, self.specs, live_scopes, reinitialize
        )

    @property
    def clock(self) -> Callable[[], float]:
        """What token expiry is measured against (a test's clock, through the connect
        flow it makes: `OAuthConnections(clock=...)`)."""
        return self.refresher.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.refresher.clock = clock

    def spec_of(self, toolkit: RegisteredToolkit) -> OAuthSpec | None:
        return self.specs.of(toolkit)

    def wants_connect(self, toolkit: RegisteredToolkit, config: Mapping[str, Any]) -> bool:
        """A configure of an OAuth toolkit that carries no token: a person must connect."""
        spec = self.specs.of(toolkit)
        return spec is not None and value_at(config, spec.token_field) is None

    def ready(
        self, record: VersionRecord, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[dict[str, Any], int]:
        return self.refresher.ready(record, toolkit, config)

    def mark_refused(self, scope_id: str, version: int, toolkit: RegisteredToolkit) -> bool:
        """A remote server answered 401 to the token of `version` (still current): marked
        for reconnecting (`OAuthRefresher.mark_refused`)."""
        record = self.refresher.current(scope_id, toolkit.definition.name)
        if record is None or record.version != version:
            return False
        return self.refresher.mark_refused(record, toolkit)

    def revoke(self, actor: str, scope_id: str, toolkit_name: str | None = None) -> list[str]:
        return self._revoker.revoke(actor, scope_id, toolkit_name)

    def refresh_ahead(self, ahead: float) -> list[str]:
        return self._schedule.refresh_ahead(ahead)
