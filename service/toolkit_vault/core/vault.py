"""The vault's use cases: sessions, list, configure, tools; and the toolkit instances this
process initialized, brought in line with the store. Transports reach it through
`connection.A2EConnection`.

`Vault` is the last of four layers, each one idea: `instance_sync.InstanceSync` (the live
instances kept in line with the store), `listing.Listing`, `configuring.Configuring`,
`tool_calls.ToolCalling` (over the call engine, `tools.calls`); this
module adds construction, sessions and the public entry points of its parts. The parts
are made here, at construction, from what the vault is given: the live instances
(`instances.LiveInstances`, one table), sealing (`sealing.Sealing`), registry following
(`registry_follow`), push routing (`push.PushRouter`), the OAuth token policy
(`oauth_tokens.OAuthTokens`) and the upkeep operators ask for (`upkeep.Upkeep`). Where a
part must call back into the vault (a principal scope's event resolving its sessions
again, a purge resyncing a session, a proactive refresh initializing instances again, a
reconnect link offered through the intake) it is given a bound method or a callback,
never the vault. Two collaborators arrive after construction because they exist only in
`serve`: the intake links (`intake`, set when the web console is mounted) and the relay
between replicas (`relay`, set when it starts).

A configure's write checks, in its transaction, that the import it was validated against
is still there (`Store.append_version`'s `imported`), so a removal that lands between the
two leaves no version current.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from toolkit_vault.access.allowances import ToolAllowance, allowance_in
from toolkit_vault.access.principals import Principal
from toolkit_vault.audit.verify import AuditReport
from toolkit_vault.core.catalogue import ToolCatalogues
from toolkit_vault.core.configuring import SESSION_ID_CHARS
from toolkit_vault.core.instance_sync import INTEGRITY_FAILED
from toolkit_vault.core.instances import LiveInstances, Mark
from toolkit_vault.core.listing import ANSWERED_WITHOUT_BLOCKING, _info, served_tools
from toolkit_vault.core.oauth_tokens import OAuthTokens
from toolkit_vault.core.outcomes import Outcome, status_event
from toolkit_vault.core.ports import IntakeOffer, TokenSource
from toolkit_vault.core.purge import PurgeReport
from toolkit_vault.core.push import PushRouter, SessionListener
from toolkit_vault.core.registry_follow import RegistryFollower
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.core.server_audit import unconfined_launch_audit
from toolkit_vault.core.tool_calls import ToolCalling
from toolkit_vault.core.upkeep import Upkeep
from toolkit_vault.core.verification import CheckLog, CheckSlots, PluginChecks, VerifyPolicy
from toolkit_vault.crypto import KeyRing, SealedConfig, SecretBytes, derive_key
from toolkit_vault.errors import UnknownSession
from toolkit_vault.protocol import Message, ToolInfo, ToolkitStatusEvent
from toolkit_vault.store.scopes import principal_of
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import RegisteredToolkit, Toolkit, ToolkitRegistry
from toolkit_vault.toolkits.server_processes import ServerProcesses
from toolkit_vault.tools.call_audit import CALL_HMAC_LABEL, tool_called_draft
from toolkit_vault.tools.calls import CallEngine, CallLimits
from toolkit_vault.tools.limits import CallAdmission
from toolkit_vault.versions import CAPABILITIES

__all__ = [
    "ANSWERED_WITHOUT_BLOCKING",
    "CAPABILITIES",
    "INTEGRITY_FAILED",
    "IntakeOffer",
    "Mark",
    "Outcome",
    "SessionListener",
    "TokenSource",
    "Vault",
]


class Vault(ToolCalling):
    def __init__(
        self,
        store: Store,
        ring: KeyRing,
        fingerprint_key: SecretBytes,
        registry: ToolkitRegistry,
        reload_keys: Callable[[KeyRing], KeyRing] | None = None,
        audit_key: SecretBytes | None = None,
        relay_key: SecretBytes | None = None,
        intake_key: SecretBytes | None = None,
        registry_loaded_at: int | None = None,
    ) -> None:
        self.store = store
        self._audit_key = audit_key
        self.relay_key = relay_key  # seals status events between replicas (relay.py)
        self.intake_key = intake_key  # signs intake links, valid on every replica (intake.py)
        self.clock: Callable[[], float] = time.time  # what "expired" is measured against
        self._scopes: set[str] = set()  # principal scopes whose row exists
        self._next_version: dict[tuple[str, str], int] = {}  # a guess: saves a read per call
        self.intake: IntakeOffer | None = None  # intake links, set by the web console when mounted
        self.sealing = Sealing(ring, fingerprint_key, reload_keys)
        self.instances = LiveInstances()
        # Imported local servers: one process per (scope, toolkit, version), an unconfined
        # launch audited (`toolkits.server_processes`).
        self.servers = ServerProcesses(on_unconfined=unconfined_launch_audit(store))
        self.catalogues = ToolCatalogues(_info)  # what `tool_catalogue` built lately
        self.push = PushRouter(on_principal_scope=self._scope_changed)
        self.registry_follower = RegistryFollower(
            store, registry, self.instances, self.push, registry_loaded_at
        )
        self.oauth = OAuthTokens(
            store,
            self.sealing,
            lambda: self.registry,
            clock=time.time,
            tell_replicas=self._tell_replicas,
            intake=lambda: self.intake,
            live_scopes=self.instances.live_scopes,
            reinitialize=self.reinitialize,
        )
        self.upkeep = Upkeep(
            store,
            self.sealing,
            audit_key,
            self.oauth,
            resync=lambda session_id, principal_id, only: self._sync(
                session_id, principal_id, quiet=False, only=only
            ),
            known=lambda session_id: self.instances.knows(session_id) or self.push.has(session_id),
            publish=self.publish,
        )
        # Where a credential check may connect (`verification`; TOOLKIT_VAULT_VERIFY_ALLOW).
        self.verify_policy = VerifyPolicy.from_environment()
        self.plugin_checks = PluginChecks()  # which toolkits have a `verify`, learnt once
        self.checks = CheckLog()  # the last check of each toolkit here, for the console
        self.check_slots = CheckSlots()  # credential checks in flight here, at most a few
        # Tool calls: the engine (deadlines: TOOLKIT_VAULT_TOOL_DEADLINE[S]), the limits on
        # who calls how often (`tools.limits`: TOOLKIT_VAULT_CALL_RATE, _BURST,
        # _CONCURRENCY), and where each call's audit record goes.
        self.call_engine = CallEngine(CallLimits.from_environment())
        self.call_limits = CallAdmission.from_environment()
        self.record_call = lambda record: store.record_call(tool_called_draft(**record.fields()))
        self._call_hmac_key = None if audit_key is None else derive_key(audit_key, CALL_HMAC_LABEL)

    # -- the parts, as callers and tests knew them ----------------------------------------

    @property
    def ring(self) -> KeyRing:
        return self.sealing.ring

    @property
    def _fingerprint_key(self) -> SecretBytes:
        return self.sealing.fingerprint_key

    @property
    def relay(self) -> Callable[[ToolkitStatusEvent], None] | None:
        """Sends a status event to the other replicas (`transports.relay`, once started)."""
        return self.push.relay

    @relay.setter
    def relay(self, relay: Callable[[ToolkitStatusEvent], None] | None) -> None:
        self.push.relay = relay

    @property
    def _plugins(self) -> dict[str, set[SessionListener]]:
        return self.push.listeners

    @property
    def _active(self) -> dict[tuple[str, str], Toolkit]:
        return self.instances.active()

    _event = staticmethod(status_event)

    def _tell_replicas(self, event: ToolkitStatusEvent) -> None:
        relay = self.push.relay
        if relay is not None:
            relay(event)

    # -- sessions --------------------------------------------------------------------------

    def open_session(
        self, principal: Principal, session_id: str | None
    ) -> tuple[str, list[Message]]:
        """Create a session, or resume one of the principal's; returns its id and events.

        Either way its configured toolkits (its own, else its principal's) are initialized
        from the store before the handshake answers. A principal scope id is no session.
        """
        if session_id is None:
            session_id = str(uuid.uuid4())
            self.store.create_session(session_id, principal.principal_id)
        elif (
            len(session_id) > SESSION_ID_CHARS
            or "\x00" in session_id  # PostgreSQL text cannot hold NUL: not even a lookup
            or principal_of(session_id) is not None
            or not self.store.session_owned_by(session_id, principal.principal_id)
        ):
            raise UnknownSession("unknown session")
        return session_id, list(self._sync(session_id, principal.principal_id, retry=True))

    def tool_catalogue(
        self, principal: Principal, session_id: str
    ) -> tuple[tuple[ToolInfo, ...], set[str]]:
        """Every tool the principal may call, of toolkits configured in the session or not
        (an MCP client lists them all: calling an unconfigured one asks a person for its
        credential), and which toolkits are configured. The same allow-list as `tool/list`.
        An imported server's tools are its own (`tools/list`), as `tool/list` shows them.
        The same tuple while the registry, the allowance, the session's unavailable tools
        and its servers' tools stay the same (`catalogue.ToolCatalogues`)."""
        configured = self._configured(principal, session_id)
        allowance = self.allowance(principal.principal_id)
        return self._catalogue(session_id, configured, allowance), configured

    def tool_catalogue_without_blocking(
        self, principal: Principal, session_id: str, mark: Mark | None
    ) -> tuple[tuple[ToolInfo, ...], set[str]] | None:
        """`tool_catalogue` answered on an event loop, when nothing was committed to the
        store since the session's last read (`mark`: `mark_on_loop`'s) and the chain is
        known without a wait, as `answer_without_blocking` answers `tool/list`; None:
        call `tool_catalogue` in a worker thread."""
        if mark is None or (configured := self.instances.live_if_read(session_id, mark)) is None:
            return None
        chain = self.store.chain_state_at_mark(mark[0])
        if chain is None:
            return None
        allowance = allowance_in(chain, principal.principal_id)
        return self._catalogue(session_id, configured, allowance), configured

    def _catalogue(
        self, session_id: str, configured: set[str], allowance: ToolAllowance | None
    ) -> tuple[ToolInfo, ...]:
        lacking = self.instances.lacking(session_id)
        served = tuple(
            (name, tuple(tools.values()))
            for name in sorted(configured)
            if (tools := served_tools(self.instances.instance(session_id, name))) is not None
        )
        return self.catalogues.catalogue(self.registry.all(), allowance, lacking, served)

    def live_scopes(self) -> set[tuple[str, str]]:
        """(scope, toolkit) of every instance live in this process: what a proactive OAuth
        refresh looks at (`oauth_schedule.OAuthSchedule.refresh_ahead`)."""
        return self.instances.live_scopes()

    # -- who may call what (`access.allowances`) ---------------------------------------------

    def _call_allowed(self, principal_id: str, toolkit: str, tool: str) -> bool:
        """Whether the principal may call this tool: it is not narrowed, or its allowance
        names the toolkit or the tool. The one check every call passes (`tool_calls`),
        right after it brought the session in line (the ledger that read followed)."""
        allowance = self._listed_allowance(principal_id)
        return allowance is None or allowance.permits(toolkit, tool)

    # -- the registry, in line with the chain (`registry_follow`) ----------------------------

    def toolkit(self, name: str, mark: int | None = None) -> RegisteredToolkit:
        """`RegistryFollower.toolkit`: the toolkit `name` as the store has it now."""
        return self.registry_follower.toolkit(name, mark)

    def follow_registry(self) -> None:
        """`RegistryFollower.follow`: imports and removals made since, taken up here."""
        self.registry_follower.follow()

    # -- operators and auditors (`upkeep`) ---------------------------------------------------

    def purge(self, actor: str, session_id: str, toolkit_name: str | None = None) -> PurgeReport:
        """`Upkeep.purge`: crypto-shred a session (or one toolkit of it)."""
        return self.upkeep.purge(actor, session_id, toolkit_name)

    def purge_principal(
        self, actor: str, principal: str, toolkit_name: str | None = None
    ) -> PurgeReport:
        """`Upkeep.purge_principal`: crypto-shred a principal's own configs."""
        return self.upkeep.purge_principal(actor, principal, toolkit_name)

    def verify_audit(self, full: bool = False) -> AuditReport:
        """`Auditing.verify_audit`: walk the audit chain with this vault's audit key."""
        return self.upkeep.auditing.verify_audit(full)

    def export_audit(self, after: int, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """`Upkeep.export_audit`: the audit events after seq `after`, each verified."""
        return self.upkeep.export_audit(after, limit)

    def accept_restore(self, actor: str) -> dict[str, Any]:
        """`Upkeep.accept_restore`: an operator's deliberate restore of an older copy."""
        return self.upkeep.accept_restore(actor)

    def check(
        self, start: Callable[[int], Callable[[int], None]] | None = None, full: bool = False
    ) -> dict[str, Any]:
        """`Auditing.check`: every version, every row's MAC, the chain and its state."""
        return self.upkeep.auditing.check(start, full)

    # -- sealing (`sealing`) -----------------------------------------------------------------

    def ring_for(self, *key_ids: str, strict: bool = False) -> KeyRing:
        """`Sealing.ring_for`: the key ring, reloaded when it lacks a key the store names."""
        return self.sealing.ring_for(*key_ids, strict=strict)

    def seal(
        self,
        scope_id: str,
        toolkit_name: str,
        version: int,
        digest: str,
        public: dict[str, Any],
        secrets: dict[str, Any],
        primary_kek: str,
    ) -> SealedConfig:
        """`Sealing.seal`: a version's secret fields sealed for (scope, toolkit, version)."""
        sealing = self.sealing
        return sealing.seal(scope_id, toolkit_name, version, digest, public, secrets, primary_kek)
