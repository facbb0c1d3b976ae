"""Keeping this process's live instances in line with the store: a session's toolkits
resolved (its own config, else its principal's), initialized from their stored versions,
installed in the live-instance table with their push callbacks, dropped when a principal's
config changes or a credential ends, and initialized again after a proactive refresh.

`InstanceSync` is the first layer of `vault.Vault` (then `listing.Listing`, then
`configuring.Configuring`): each layer one idea of the use cases, over the parts the vault
makes at construction (annotated here).

May import: `core`'s parts (instances, push, sealing, registry following, ports, expiry,
events, outcomes), store, toolkits, oauth, protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from toolkit_vault.core.events import EventGate
from toolkit_vault.core.expiry import expired_message, expiry_of, without_expiry
from toolkit_vault.core.instances import LiveInstances, stop_instance
from toolkit_vault.core.oauth_tokens import OAuthTokens
from toolkit_vault.core.outcomes import Outcome, status_event
from toolkit_vault.core.ports import IntakeOffer
from toolkit_vault.core.push import PushRouter, SessionListener
from toolkit_vault.core.registry_follow import RegistryFollower
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.errors import (
    ConfigInvalid,
    DecryptionError,
    Reconnect,
    ToolkitNotFound,
    VaultError,
)
from toolkit_vault.oauth import TOKEN_SET_KEY, without_token_set
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.records import VersionRecord
from toolkit_vault.store.scopes import principal_scope
from toolkit_vault.store.storage import Source, Store
from toolkit_vault.toolkits.registry import RegisteredToolkit, Toolkit, ToolkitRegistry
from toolkit_vault.toolkits.server_processes import ServerProcesses
from toolkit_vault.tools.scope_secrets import ScopeSecrets

__all__ = ["INTEGRITY_FAILED", "NONE_LIVE", "InstanceSync", "Live"]

# An instance made, with the secrets its results are searched for; or none (it failed).
Live = tuple[Toolkit, ScopeSecrets] | tuple[None, None]
NONE_LIVE: Live = (None, None)

# What a stored config that fails its MAC, its pointer check or decryption reports (one
# message: which layer caught an edit is the operator's business, `check` names it).
INTEGRITY_FAILED = "stored config failed its integrity check"
log = logging.getLogger(__name__)


class InstanceSync:
    """The live instances of one vault, kept in line with the store."""

    store: Store
    clock: Callable[[], float]  # what "expired" is measured against
    intake: IntakeOffer | None  # intake links, set by the web console when mounted
    sealing: Sealing
    instances: LiveInstances
    push: PushRouter
    registry_follower: RegistryFollower
    oauth: OAuthTokens
    servers: ServerProcesses  # the local servers of imported toolkits, by (scope, toolkit, version)

    @property
    def registry(self) -> ToolkitRegistry:
        """The toolkits this vault knows, kept in line with the chain (`registry_follow`)."""
        return self.registry_follower.registry

    @registry.setter
    def registry(self, registry: ToolkitRegistry) -> None:
        self.registry_follower.registry = registry

    def _sync(
        self,
        session_id: str,
        principal_id: str,
        *,
        retry: bool = False,
        quiet: bool = True,
        only: str | None = None,
    ) -> list[ToolkitStatusEvent]:
        """Bring this process's live instances of a session in line with the store.

        Per toolkit the session uses its own current version, else its principal's. An
        instance made from anything else (replaced or purged by another process, a
        principal's config the session now overrides) is replaced or dropped, a config
        never tried here is initialized, and with `retry` (a handshake) one that failed is
        tried again. What this process holds is read before the store is, and `_install`
        changes only what is still as read: an instance another thread installs meanwhile
        is at least as new as that read, and stays. Returns the status events of what
        changed; `quiet` (a handshake, whose list tells the rest) keeps only failures and
        `partial` ones.
        """
        scope_id = principal_scope(principal_id)
        had, live = self.instances.sources_and_live(session_id)
        current, chain = self.store.effective_sources(session_id, scope_id)
        if self.registry_follower.follow_chain(chain):  # instances may have been dropped
            had, live = self.instances.sources_and_live(session_id)
        stale = self._stale(had, chain)
        changed = sorted(
            name
            for name in current.keys() | had.keys()
            if current.get(name) != had.get(name) or name in stale or (retry and name not in live)
            if only in (None, name)
        )
        if not changed:
            return []
        records = self.store.effective_versions(session_id, scope_id)
        events = []
        for name in changed:
            record = records.get(name)
            if record is None:
                gone = Outcome("error", "config purged")
                if had.get(name) is not None and self._install(session_id, name, had, gone):
                    events.append(status_event(session_id, name, False, gone))
                continue
            source = (record.session_id, record.version)
            if source == had.get(name) and name in live and record.authentic:
                continue  # the read before was older; nothing changed after all
            opened = self._open(record, inherited=record.session_id != session_id)
            (instance, secrets), outcome = opened[0], opened[1]
            source = (record.session_id, opened[2])
            if not self._install(session_id, name, had, outcome, instance, source, secrets):
                stop_instance(instance)  # another thread's is live: this one runs nothing
                continue
            configured = instance is not None
            if not quiet or not configured or outcome.status == "partial":
                events.append(status_event(session_id, name, configured, outcome))
        return events

    @staticmethod
    def _stale(had: Mapping[str, Source], chain: ChainState | None) -> set[str]:
        """The toolkits whose instances were made from a version the verified chain no
        longer makes current: purged or replaced elsewhere, then its rows put back before
        this process looked (the pointers alone read as before). None: nothing is."""
        if chain is None:
            return set(had)
        return {
            name for name, (scope, version) in had.items() if chain.pointer(scope, name) != version
        }

    def _open(self, record: VersionRecord, *, inherited: bool) -> tuple[Live, Outcome, int]:
        """A fresh instance initialized from a stored version (an OAuth token refreshed
        first when it is about to expire: the version it was made from is returned); (None,
        why, version) when it fails."""
        version = record.version
        try:
            toolkit = self.registry.get(record.toolkit_name)
            config = self.sealing.decrypt(record)
            config, version = self.oauth.ready(record, toolkit, config)
        except DecryptionError:
            return NONE_LIVE, Outcome("error", INTEGRITY_FAILED), version
        except ToolkitNotFound:
            return NONE_LIVE, Outcome("error", "toolkit not registered"), version
        except Reconnect as exc:
            return NONE_LIVE, Outcome("error", exc.message, intake_url=exc.intake_url), version
        live, outcome = self._initialize(toolkit, config)
        if inherited and outcome.status == "ok":
            outcome = Outcome("ok", "Toolkit configured from its principal's config")
        return live, outcome, version

    def decrypt(self, record: VersionRecord) -> dict[str, Any]:
        """A stored version's whole config (OAuth's token set included: `ready` reads it);
        raises the opaque DecryptionError."""
        return self.sealing.decrypt(record)

    def _initialize(
        self, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[Live, Outcome]:
        """Run a fresh instance's initialize; its own words never reach the agent (sanitized).
        A credential past its known expiry makes no instance: a person must renew it. The
        instance comes with the secrets its results are searched for (`ScopeSecrets`)."""
        ends = expiry_of(config)
        if ends is not None and ends <= self.clock():
            return NONE_LIVE, Outcome("error", expired_message(ends), expires_at=ends)
        given = without_expiry(without_token_set(config))
        try:
            instance = toolkit.factory()
            unavailable = instance.initialize(given)
        except Exception as exc:
            log.warning(
                "toolkit %s failed to initialize (%s)", toolkit.definition.name, type(exc).__name__
            )
            failed = Outcome("error", f"toolkit initialization failed ({type(exc).__name__})")
            return NONE_LIVE, failed
        secrets = ScopeSecrets(lambda: toolkit.schema, given, config.get(TOKEN_SET_KEY))
        live: Live = (instance, secrets)
        known = frozenset(t for t in (unavailable or []) if t in toolkit.definition.tools)
        if known:
            message = "tools unavailable: " + ", ".join(sorted(known))
            return live, Outcome("partial", message, known, expires_at=ends)
        return live, Outcome("ok", "Toolkit configured successfully", expires_at=ends)

    def _activate(self, key: tuple[str, str], live: Live, version: int, outcome: Outcome) -> None:
        """Make `live`'s instance, just configured from the session's own `version`, the
        live one for (session, toolkit), unless a newer own version is live already."""
        session_id, name = key
        held = self.instances.source(session_id, name)
        if held is not None and held[0] == session_id and held[1] > version:
            stop_instance(live[0])
            return
        instance, secrets = live
        self._install(session_id, name, None, outcome, instance, (session_id, version), secrets)

    def _install(
        self,
        session_id: str,
        name: str,
        had: Mapping[str, Source] | None,
        outcome: Outcome,
        instance: Toolkit | None = None,
        source: Source | None = None,
        secrets: ScopeSecrets | None = None,
    ) -> bool:
        """Record in the live-instance table what (session, toolkit) was last initialized
        from and its live instance (with the secrets its results are searched for), only
        if the entry is still what `had` says (`LiveInstances.install`). The instance gets
        its push callback: bound to that session and toolkit, silent once another instance
        replaces it. An imported server's instance first holds the process of its (scope,
        toolkit, version) in `servers` (`toolkits.server_processes`)."""
        unavailable, ends = outcome.unavailable, outcome.expires_at
        serve_from = getattr(instance, "serve_from", None)  # an imported server's process
        if source is not None and callable(serve_from):
            serve_from(self.servers, source)  # before the old one lets go: a same key is kept
        if not self.instances.install(
            session_id, name, had, source, instance, unavailable, ends, secrets
        ):
            return False
        bind = getattr(instance, "set_push_callback", None)
        if instance is None or not callable(bind):
            return True
        installed = instance

        def still_active() -> bool:
            return self.instances.is_live(session_id, name, installed)

        gate = EventGate(self.publish, session_id, name, still_active=still_active)
        try:
            bind(gate)
        except Exception as exc:
            log.warning("toolkit %s refused its push callback (%s)", name, type(exc).__name__)
        return True

    def expiring(self) -> list[tuple[str, str, Source, float]]:
        """(session, toolkit, where its instance was made from, when its credential ends)
        of every live instance here whose credential has a known end (`reminders`)."""
        return self.instances.expiring()

    def end_expired(self, session_id: str, name: str, source: Source, ends: float) -> None:
        """A live instance's credential ended: the instance is dropped (its source kept, so
        nothing makes it again but a new version, and `_initialize` refuses this one), and
        the session's connections here hear `configured: false`, with a link to renew it
        when the intake is on."""
        plugins = self.push.of(session_id)
        link = None
        if plugins and self.intake is not None:
            link = self._renewal_link(session_id, plugins[0].principal.principal_id, name, source)
        outcome = Outcome("error", expired_message(ends), intake_url=link)
        if self._install(session_id, name, {name: source}, outcome, None, source):
            self.deliver(status_event(session_id, name, False, outcome))

    def _renewal_link(
        self, session_id: str, principal_id: str, name: str, source: Source
    ) -> str | None:
        """An intake link asking a person for the secrets again, the public fields kept."""
        try:
            record = self.store.effective_versions(session_id, principal_scope(principal_id))
            current = record.get(name)
            if self.intake is None or current is None or current.version != source[1]:
                return None
            public = without_expiry(current.public_config)
            why = "the credential expired"
            return self.intake.offer(principal_id, source[0], self.toolkit(name), public, why)
        except (VaultError, ConfigInvalid) as exc:
            log.warning("no renewal link for %s: %s", name, exc.message)
            return None

    def reinitialize(self, scope_id: str, toolkit_name: str) -> None:
        """Initialize again, from the store, the instances of `toolkit_name` this process
        made from `scope_id`'s config for sessions with a connection here (a token refreshed
        ahead of its expiry); they hear of it. Other sessions follow at their next use."""
        connected = self.push.sessions()
        sessions = [
            (session_id, connected[session_id])
            for session_id in self.instances.sessions_from(scope_id, toolkit_name)
            if session_id in connected
        ]
        for session_id, principal_id in sessions:
            for event in self._sync(session_id, principal_id, quiet=False, only=toolkit_name):
                self.deliver(event)

    def _scope_changed(self, principal_id: str, toolkit_name: str) -> None:
        """A principal's config of a toolkit changed: its sessions connected here with a
        push channel initialize what they now resolve to and hear of it; any other
        session's instance made from the principal's config is dropped, to be made again
        from the store when that session is next used (`bind`, a list). So the work done
        here is bounded by the principal's open connections, not by its HTTP sessions."""
        scope_id = principal_scope(principal_id)
        connected = self.push.pushing_sessions(principal_id)
        self.instances.invalidate_reads()  # a list's read before this no longer says what is live
        self.instances.drop(
            lambda session_id, name, source: (
                session_id not in connected and name == toolkit_name and source[0] == scope_id
            )
        )
        for session_id in connected:
            for event in self._sync(session_id, principal_id, quiet=False, only=toolkit_name):
                self.deliver(event)

    def toolkit(self, name: str, mark: int | None = None) -> RegisteredToolkit:
        """`RegistryFollower.toolkit`: the toolkit `name` as the store has it now (`mark`:
        a commit mark just read, on SQLite, not read again)."""
        return self.registry_follower.toolkit(name, mark)

    # -- push (`push`) -----------------------------------------------------------------------

    def attach(self, session_id: str, plugin: SessionListener) -> None:
        self.push.attach(session_id, plugin)

    def detach(self, session_id: str, plugin: SessionListener) -> None:
        self.push.detach(session_id, plugin)

    def publish(self, event: ToolkitStatusEvent) -> None:
        """`PushRouter.publish`: here, and to the other replicas when a relay is set."""
        self.push.publish(event)

    def deliver(self, event: ToolkitStatusEvent) -> None:
        """`PushRouter.deliver`: to every connection of its session in this process."""
        self.push.deliver(event)
