"""The vault's use cases: sessions, list, configure, tools, purge, check; and the toolkit
instances this process initialized, each with a push callback bound to its session and
toolkit when it takes one. Transports reach it through `connection.A2EConnection`.

The registry is live: `toolkits import` and `toolkits remove` in any process (or replica)
apply to the next list, handshake and configure here. Each import and removal is an
event of the audit chain, which every process already follows (cheaply: on SQLite only
when `PRAGMA data_version` moved, and a list on PostgreSQL reads it anyway); the chain's
count of them (`ChainState.registry_changes`) is the registry's generation, so a process
loads the imported toolkits again only when it moved (`_follow_registry`). The chain, not
a notice, is the signal: it is authenticated, every process sees it in order, and a
process that was down or missed a notice cannot miss it. A removal also drops the
instances made here from the removed toolkit (their connections hear `configured:
false`), and a configure's write checks, in its transaction, that the import it was
validated against is still there (`Store.append_version`'s `imported`), so a removal that
lands between the two leaves no version current.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from toolkit_vault import crypto
from toolkit_vault.access.principals import Principal
from toolkit_vault.audit.export import export_events
from toolkit_vault.audit.history import find_principal
from toolkit_vault.audit.verify import AuditReport, verify_audit_chain
from toolkit_vault.core.events import EventGate
from toolkit_vault.core.expiry import (
    earliest,
    expired_message,
    expiry_of,
    jwt_expiry,
    with_expiry,
    without_expiry,
)
from toolkit_vault.core.purge import PurgeReport, purge, purge_principal
from toolkit_vault.core.reserved import refuse_reserved
from toolkit_vault.core.templates import apply_template
from toolkit_vault.core.verification import (
    BUSY,
    CheckLog,
    CheckResult,
    CheckSlots,
    CredentialRejected,
    PluginChecks,
    VerifyPolicy,
    verify_credential,
)
from toolkit_vault.crypto import KeyRing, RecordContext, SealedConfig, SecretBytes
from toolkit_vault.errors import (
    ConfigInvalid,
    DecryptionError,
    Reconnect,
    StoreError,
    ToolkitNotFound,
    UnknownSession,
    VaultError,
)
from toolkit_vault.keys.recovery import held_recovery_key
from toolkit_vault.keys.rotation import check_store
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import without_token_set
from toolkit_vault.protocol import (
    ConfigureStatus,
    Message,
    ToolInfo,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
    ToolkitStatusEvent,
    ToolListRequest,
    ToolListResponse,
    dump_message,
    dump_toolkit_list,
)
from toolkit_vault.schema import check_sealable, merge_secrets
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.records import AuditDraft, VersionDraft, VersionRecord
from toolkit_vault.store.scopes import principal_of, principal_scope, scope_of
from toolkit_vault.store.storage import Source, Store
from toolkit_vault.toolkits.imports import stored_toolkits
from toolkit_vault.toolkits.registry import (
    RegisteredToolkit,
    SourceKind,
    Toolkit,
    ToolkitRegistry,
)
from toolkit_vault.versions import CAPABILITIES

__all__ = [
    "ANSWERED_AT_ONCE",
    "CAPABILITIES",
    "INTEGRITY_FAILED",
    "IntakeOffer",
    "Mark",
    "Outcome",
    "SessionListener",
    "Vault",
]

ANSWERED_AT_ONCE = (ToolkitListRequest, ToolListRequest)  # what `answer_at_once` may answer
Mark = tuple[int, int]  # `Vault.mark`: the store's commit mark, this process's drops
SESSION_ID_CHARS = 64  # sessions.session_id
# What a stored config that fails its MAC, its pointer check or decryption reports (one
# message: which layer caught an edit is the operator's business, `check` names it).
INTEGRITY_FAILED = "stored config failed its integrity check"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    status: ConfigureStatus
    message: str
    unavailable: frozenset[str] = field(default=frozenset())
    intake_url: str | None = None  # where a person connects again (an OAuth connection)
    expires_at: float | None = None  # when the credential ends, if known (`expiry`)


class SessionListener(Protocol):
    """A session's connection as the vault sees it (`spec_plugin.VaultToolkitPlugin`): who
    it is, whether it has a push channel, and where its status events go."""

    principal: Principal
    pushes: bool

    def emit_event(self, event: Message) -> None: ...


class IntakeOffer(Protocol):
    """The intake links a configure may answer with (`intake.Intake`, when the web console
    is mounted)."""

    def covers(
        self, toolkit: RegisteredToolkit, msg: ToolkitConfigureRequest, error: ConfigInvalid
    ) -> bool: ...

    def request(
        self,
        principal: Principal,
        session_id: str,
        toolkit: RegisteredToolkit,
        msg: ToolkitConfigureRequest,
    ) -> ToolkitConfigureResponse: ...

    def offer(
        self,
        principal_id: str,
        session_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        why: str,
    ) -> str: ...


class TokenSource(Protocol):
    """The OAuth connections (`connect.OAuthConnections`, when the web console is
    mounted): a stored config's token made fresh before a toolkit is initialized."""

    def ready(
        self, record: VersionRecord, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[dict[str, Any], int]: ...

    def wants_connect(self, toolkit: RegisteredToolkit, config: Mapping[str, Any]) -> bool: ...

    def revoke(self, actor: str, scope_id: str, toolkit_name: str | None = None) -> list[str]: ...


class Vault:
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
        self.ring = ring
        self._reload_keys = reload_keys
        self._audit_key = audit_key
        self.relay_key = relay_key  # seals status events between replicas (relay.py)
        self.intake_key = intake_key  # signs intake links, valid on every replica (intake.py)
        self.registry = registry
        self._fingerprint_key = fingerprint_key
        self._active: dict[tuple[str, str], Toolkit] = {}
        self._sources: dict[str, dict[str, Source]] = {}  # session -> toolkit -> tried here
        self._unavailable: dict[tuple[str, str], frozenset[str]] = {}  # named by `partial`
        # session -> toolkit -> when the credential of its live instance ends (`expiry`)
        self._expires: dict[str, dict[str, float]] = {}
        self.clock: Callable[[], float] = time.time  # what "expired" is measured against
        self._scopes: set[str] = set()  # principal scopes whose row exists
        self._next_version: dict[tuple[str, str], int] = {}  # a guess: saves a read per call
        self._plugins: dict[str, set[SessionListener]] = {}
        # session -> (store's commit mark, `_dropped`) when its list last read the store
        self._read_at: dict[str, Mark] = {}
        self._dropped = 0  # counts changes made here to what a read had installed
        # The chain's `registry_changes` when the imported toolkits were last loaded here
        # (None: not known, so the first request loads them; -1: the chain is not believed).
        self._registry_seen: int | None = registry_loaded_at
        self._registry_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ring_lock = threading.Lock()
        self.relay: Callable[[ToolkitStatusEvent], None] | None = None
        self.intake: IntakeOffer | None = None  # intake links, set by the web console when mounted
        self.oauth: TokenSource | None = None  # OAuth connections, set with the intake links
        # Where a credential check may connect (`verification`; TOOLKIT_VAULT_VERIFY_ALLOW).
        self.verify_policy = VerifyPolicy.from_environment()
        self.plugin_checks = PluginChecks()  # which toolkits have a `verify`, learnt once
        self.checks = CheckLog()  # the last check of each toolkit here, for the console
        self.check_slots = CheckSlots()  # credential checks in flight here, at most a few

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
        with self._lock:
            had = dict(self._sources.get(session_id, {}))
            live = {name for name in had if (session_id, name) in self._active}
        current, chain = self.store.effective_sources(session_id, scope_id)
        if self._follow_registry(chain):  # instances may have been dropped: read them again
            with self._lock:
                had = dict(self._sources.get(session_id, {}))
                live = {name for name in had if (session_id, name) in self._active}
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
                    events.append(self._event(session_id, name, False, gone))
                continue
            source = (record.session_id, record.version)
            if source == had.get(name) and name in live and record.authentic:
                continue  # the read before was older; nothing changed after all
            opened = self._open(record, inherited=record.session_id != session_id)
            instance, outcome, source = opened[0], opened[1], (record.session_id, opened[2])
            if not self._install(session_id, name, had, outcome, instance, source):
                continue
            configured = instance is not None
            if not quiet or not configured or outcome.status == "partial":
                events.append(self._event(session_id, name, configured, outcome))
        return events

    @staticmethod
    def _stale(had: dict[str, Source], chain: ChainState | None) -> set[str]:
        """The toolkits whose instances were made from a version the verified chain no
        longer makes current: purged or replaced elsewhere, then its rows put back before
        this process looked (the pointers alone read as before). None: nothing is."""
        if chain is None:
            return set(had)
        return {
            name for name, (scope, version) in had.items() if chain.pointer(scope, name) != version
        }

    def _open(
        self, record: VersionRecord, *, inherited: bool
    ) -> tuple[Toolkit | None, Outcome, int]:
        """A fresh instance initialized from a stored version (an OAuth token refreshed
        first when it is about to expire: the version it was made from is returned); (None,
        why, version) when it fails."""
        version = record.version
        try:
            toolkit = self.registry.get(record.toolkit_name)
            config = self._decrypt(record)
            if self.oauth is not None:
                config, version = self.oauth.ready(record, toolkit, config)
        except DecryptionError:
            return None, Outcome("error", INTEGRITY_FAILED), version
        except ToolkitNotFound:
            return None, Outcome("error", "toolkit not registered"), version
        except Reconnect as exc:
            return None, Outcome("error", exc.message, intake_url=exc.intake_url), version
        instance, outcome = self._initialize(toolkit, config)
        if inherited and outcome.status == "ok":
            outcome = Outcome("ok", "Toolkit configured from its principal's config")
        return instance, outcome, version

    def decrypt(self, record: VersionRecord) -> dict[str, Any]:
        """A stored version's whole config (OAuth's token set included: `ready` reads it);
        raises the opaque DecryptionError."""
        return self._decrypt(record)

    def _decrypt(self, record: VersionRecord) -> dict[str, Any]:
        context, sealed = record.sealed()
        secrets = crypto.open_config(self.ring_for(sealed.kek_id), context, sealed)
        register_secrets(v.reveal() for v in secrets.values())
        try:
            return merge_secrets(record.public_config, {p: v.reveal() for p, v in secrets.items()})
        except ConfigInvalid:  # the public half was edited: the version cannot be put together
            raise DecryptionError from None

    def _initialize(
        self, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[Toolkit | None, Outcome]:
        """Run a fresh instance's initialize; its own words never reach the agent (sanitized).
        A credential past its known expiry makes no instance: a person must renew it."""
        ends = expiry_of(config)
        if ends is not None and ends <= self.clock():
            return None, Outcome("error", expired_message(ends), expires_at=ends)
        try:
            instance = toolkit.factory()
            unavailable = instance.initialize(without_expiry(without_token_set(config)))
        except Exception as exc:
            log.warning(
                "toolkit %s failed to initialize (%s)", toolkit.definition.name, type(exc).__name__
            )
            return None, Outcome("error", f"toolkit initialization failed ({type(exc).__name__})")
        known = frozenset(t for t in (unavailable or []) if t in toolkit.definition.tools)
        if known:
            message = "tools unavailable: " + ", ".join(sorted(known))
            return instance, Outcome("partial", message, known, expires_at=ends)
        return instance, Outcome("ok", "Toolkit configured successfully", expires_at=ends)

    def _activate(
        self, key: tuple[str, str], instance: Toolkit, version: int, outcome: Outcome
    ) -> None:
        """Make `instance`, just configured from the session's own `version`, the live one
        for (session, toolkit), unless a newer own version is live already."""
        session_id, name = key
        with self._lock:
            held = self._sources.get(session_id, {}).get(name)
        if held is not None and held[0] == session_id and held[1] > version:
            return
        self._install(session_id, name, None, outcome, instance, (session_id, version))

    def _install(
        self,
        session_id: str,
        name: str,
        had: dict[str, Source] | None,
        outcome: Outcome,
        instance: Toolkit | None = None,
        source: Source | None = None,
    ) -> bool:
        """Record what (session, toolkit) was last initialized from (`source`; None: nothing
        is current) and its live instance (None: none, or it failed), only if the record is
        still what `had` says (None: unconditionally). The instance gets its push callback:
        bound to that session and toolkit, silent once another instance replaces it."""
        key = (session_id, name)
        with self._lock:
            sources = self._sources.get(session_id, {})
            if had is not None and sources.get(name) != had.get(name):
                return False
            if source is not None:
                self._sources.setdefault(session_id, sources)[name] = source
            elif name in sources:
                del sources[name]
            if instance is None:
                self._active.pop(key, None)
                self._unavailable.pop(key, None)
                self._expires.get(session_id, {}).pop(name, None)
            else:
                self._active[key] = instance
                self._unavailable[key] = outcome.unavailable
                if outcome.expires_at is None:
                    self._expires.get(session_id, {}).pop(name, None)
                else:
                    self._expires.setdefault(session_id, {})[name] = outcome.expires_at
        bind = getattr(instance, "set_push_callback", None)
        if not callable(bind):
            return True
        gate = EventGate(self.publish, *key, still_active=lambda: self._active.get(key) is instance)
        try:
            bind(gate)
        except Exception as exc:
            log.warning("toolkit %s refused its push callback (%s)", name, type(exc).__name__)
        return True

    # -- toolkits ------------------------------------------------------------------------------

    def list_toolkits(
        self, principal: Principal, session_id: str, msg: ToolkitListRequest
    ) -> ToolkitListResponse:
        configured = self._configured(principal, session_id)
        return self._toolkits(configured, msg, self._ends(session_id, configured))

    def _ends(self, session_id: str, configured: set[str]) -> dict[str, float]:
        """When the credentials of the session's configured toolkits end, where known."""
        with self._lock:
            ends = dict(self._expires.get(session_id, {}))
        return {name: at for name, at in ends.items() if name in configured}

    def answer_at_once(
        self,
        principal: Principal,
        session_id: str,
        msg: Message,
        mark: Mark | None = None,
    ) -> str | None:
        """The answer to a list that needs no wait, as JSON, so a transport may give it on
        its event loop: this process's instances are still what the store says, because
        nothing was committed to the store since this session's list last read it
        (`Store.commit_mark`), or because the session's pointers, read without waiting
        (`Store.pointers_at_once`), are still the ones its instances were made from. None:
        `handle` it in a worker thread (a toolkit to initialize again, a read that would
        wait, PostgreSQL). `mark`: a `mark()` taken after the message arrived (a transport
        shares one among the lists that arrived together: `access.SharedMarks`); None:
        taken here."""
        if not isinstance(msg, ANSWERED_AT_ONCE):
            return None
        mark = mark or self.mark()
        if mark is None:
            return None
        with self._lock:
            if self._still_read(session_id, mark):
                configured: set[str] | None = self._live(session_id)
            else:
                configured, had = None, dict(self._sources.get(session_id, {}))
        if configured is None:
            scope_id = principal_scope(principal.principal_id)
            if self.store.pointers_at_once(session_id, scope_id) != had:
                return None  # something to bring in line, or no quick read: `_sync` it
            chain = self.store.chain_state_at_once()
            if chain is None or self._stale(had, chain):
                return None  # a version the chain no longer makes current, or no quick read
            if chain.registry_changes != self._registry_seen:
                return None  # an import or removal to load first
            with self._lock:
                if self._sources.get(session_id, {}) != had or mark[1] != self._dropped:
                    return None  # changed here meanwhile
                self._read_at[session_id] = mark
                configured = self._live(session_id)
        if isinstance(msg, ToolListRequest):
            return dump_message(self._tools(session_id, configured, msg))
        ends = self._ends(session_id, configured)
        listed = [json for _, json in self._listed(configured, msg, ends)]
        return dump_toolkit_list(msg.id, listed)

    def _toolkits(
        self, configured: set[str], msg: ToolkitListRequest, ends: Mapping[str, float]
    ) -> ToolkitListResponse:
        toolkits = [definition for definition, _ in self._listed(configured, msg, ends)]
        return ToolkitListResponse(req_id=msg.id, toolkits=toolkits)

    def _listed(
        self, configured: set[str], msg: ToolkitListRequest, ends: Mapping[str, float]
    ) -> list[tuple[ToolkitDefinition, str]]:
        """What the list shows: each toolkit its filters keep, as `RegisteredToolkit.listed`;
        one whose credential has a known end says when (`expires_at`, an extension)."""
        shown = []
        for toolkit in self.registry.all():
            definition = toolkit.definition
            if msg.filter_kind and definition.category != msg.filter_kind:
                continue
            if msg.filter_tags and not set(msg.filter_tags) <= set(definition.tags):
                continue
            if definition.name in ends:
                ending = {"configured": True, "expires_at": int(ends[definition.name])}
                dated = definition.model_copy(update=ending)
                shown.append((dated, dated.model_dump_json(by_alias=True)))
                continue
            shown.append(toolkit.listed(definition.name in configured))
        return shown

    def list_tools(
        self, principal: Principal, session_id: str, msg: ToolListRequest
    ) -> ToolListResponse:
        """The tools of every toolkit configured in the session, each naming its toolkit;
        the ones a `partial` status named unavailable are left out."""
        return self._tools(session_id, self._configured(principal, session_id), msg)

    def _tools(
        self, session_id: str, configured: set[str], msg: ToolListRequest
    ) -> ToolListResponse:
        tools = [
            ToolInfo(name=tool, toolkit=toolkit.definition.name)
            for toolkit in self.registry.all()
            if toolkit.definition.name in configured
            for tool in toolkit.definition.tools
            if tool not in self._unavailable.get((session_id, toolkit.definition.name), ())
        ]
        return ToolListResponse(req_id=msg.id, tools=tools)

    def _configured(self, principal: Principal, session_id: str) -> set[str]:
        """Toolkits with a current config in the store (the session's or its principal's)
        and a live instance made from it in this process. What another process changed
        since is taken up here, silently: the list itself tells the agent. The store is
        read unless nothing was committed to it since this session's last read."""
        mark = self.mark()  # taken before the read: what is committed during it shows next
        with self._lock:
            unchanged = self._still_read(session_id, mark)
        if not unchanged:
            self._sync(session_id, principal.principal_id)
        with self._lock:
            if mark is not None and mark[1] == self._dropped:
                self._read_at[session_id] = mark
            return self._live(session_id)

    def mark(self) -> Mark | None:
        """What a list's read of the store stays true for: the store's commit mark and how
        often this process dropped what a read installed; None when the store gives no
        mark (then every list reads). Never raises."""
        with self._lock:
            dropped = self._dropped
        store_mark = self.store.commit_mark()
        return None if store_mark is None else (store_mark, dropped)

    async def mark_on_loop(self) -> Mark | None:
        """`mark` on an event loop (`Store.commit_mark_on_loop`)."""
        with self._lock:
            dropped = self._dropped
        store_mark = await self.store.commit_mark_on_loop()
        return None if store_mark is None else (store_mark, dropped)

    def _still_read(self, session_id: str, mark: Mark | None) -> bool:
        """(Lock held.) Whether the session's last read is still what the store says."""
        return (
            mark is not None and mark[1] == self._dropped and self._read_at.get(session_id) == mark
        )

    def _live(self, session_id: str) -> set[str]:
        """(Lock held.) The session's toolkits with a live instance here."""
        names = list(self._sources.get(session_id, ()))
        return {name for name in names if (session_id, name) in self._active}

    def configure(
        self, principal: Principal, session_id: str, msg: ToolkitConfigureRequest
    ) -> ToolkitConfigureResponse:
        """Validate, split, seal, initialize, then store the version and audit it at once;
        or, when the config leaves its secrets to a person, answer with an intake link.
        `scope: "principal"` stores it for the principal (every session without its own)."""
        scope_id = session_id
        if msg.scope == "principal":
            scope_id = principal_scope(principal.principal_id)
        try:
            toolkit = self.toolkit(msg.toolkit_name)
            if msg.template is not None:  # its public values, and the secrets sent
                config = apply_template(self.store, toolkit, msg.template, msg.config)
                msg = msg.model_copy(update={"config": config})
            refuse_reserved(msg.config)  # an expiry or token set is the vault's to write
            if msg.intake:
                if self.intake is None:
                    raise VaultError("intake links need the web console (toolkit-vault serve)")
                return self.intake.request(principal, self._made(scope_id), toolkit, msg)
            if self.intake and self.oauth and self.oauth.wants_connect(toolkit, msg.config):
                return self.intake.request(principal, self._made(scope_id), toolkit, msg)
            public, secrets = toolkit.schema.split(msg.config)  # validates first
            check_sealable(secrets)
            if toolkit.check is not None:
                toolkit.check(msg.config)  # field-level, like a schema error: nothing stored
            ends = self.check_credential(toolkit, msg.config, secrets)  # nothing stored
        except CredentialRejected as exc:  # the config is well formed; its credential is not
            self.store.record_attempt(
                AuditDraft(
                    principal.principal_id,
                    AuditAction.CONFIGURE_REFUSED,
                    scope_id,
                    msg.toolkit_name,
                    details={"reason": "CredentialRejected", "check": exc.message},
                )
            )
            return ToolkitConfigureResponse(
                req_id=msg.id, toolkit_name=msg.toolkit_name, status="error", message=exc.message
            )
        except (ToolkitNotFound, ConfigInvalid) as exc:
            intake = self.intake
            if isinstance(exc, ConfigInvalid) and intake and intake.covers(toolkit, msg, exc):
                return intake.request(principal, self._made(scope_id), toolkit, msg)
            known = isinstance(exc, ConfigInvalid)
            self.store.record_attempt(
                AuditDraft(
                    principal.principal_id,
                    AuditAction.CONFIGURE_REFUSED,
                    scope_id,
                    msg.toolkit_name if known else None,
                    details={"reason": type(exc).__name__, "errors": exc.details},
                )
            )
            raise
        scope_id = self._made(scope_id)
        public = with_expiry(public, ends)  # a fact beside the public fields, never a secret
        outcome = self.commit(
            principal.principal_id, scope_id, toolkit, public, secrets, asking=principal
        )
        message = outcome.message
        name = msg.toolkit_name
        if scope_id != session_id and outcome.status != "error":
            for event in self._sync(session_id, principal.principal_id, quiet=False, only=name):
                self.deliver(event)  # the asking session, whatever its transport
            with self._lock:
                source = self._sources.get(session_id, {}).get(name)
            if source is not None and source[0] == session_id:
                message += " for the principal; this session keeps its own config"
        return ToolkitConfigureResponse(
            req_id=msg.id,
            toolkit_name=msg.toolkit_name,
            status=outcome.status,
            message=message,
        )

    def check_credential(
        self, toolkit: RegisteredToolkit, config: Mapping[str, Any], secrets: Mapping[str, Any]
    ) -> float | None:
        """The toolkit's credential check (`verification`) under this vault's policy; raises
        CredentialRejected. Returns when the credential ends, if the check or a secret that
        is a JWT says (`expiry`). A configure and an intake form both ask here."""
        name = toolkit.definition.name
        if not self.plugin_checks.verifies(toolkit) and toolkit.schema.verify is None:
            return jwt_expiry(secrets)  # no check: no slot taken
        try:
            with self.check_slots.taken():  # beyond the cap: refused at once (not noted)
                checked = verify_credential(toolkit, config, self.verify_policy, self.plugin_checks)
        except CredentialRejected as exc:
            if exc.message == BUSY:
                raise
            self.checks.note(name, CheckResult(self.clock(), False, exc.message))
            raise
        passed = CheckResult(self.clock(), True, "the credential check passed", checked)
        self.checks.note(name, passed)
        return earliest([checked, jwt_expiry(secrets)])

    def waits_on_a_check(self, message: Message) -> bool:
        """Whether answering `message` may wait on a credential check (a configure of a
        toolkit with an `x-verify` or a plugin `verify`), so that `serve` runs it on threads
        of its own, not on those every agent's messages need. Answered from memory, on the
        event loop: a toolkit whose plugin was never looked at counts as checking."""
        if not isinstance(message, ToolkitConfigureRequest):
            return False
        if message.toolkit_name not in self.registry:
            return False
        toolkit = self.registry.get(message.toolkit_name)
        if toolkit.schema.verify is not None:
            return True
        return self.plugin_checks.known(toolkit) is not False

    def _made(self, scope_id: str) -> str:
        """A principal scope's row, made on its first use (a session's exists already)."""
        principal_id = principal_of(scope_id)
        if principal_id is not None and scope_id not in self._scopes:
            if len(scope_id) > SESSION_ID_CHARS:
                raise VaultError("this principal's id is too long for a principal scope")
            self.store.ensure_scope(scope_id, principal_id)
            self._scopes.add(scope_id)
        return scope_id

    def commit(
        self,
        actor: str,
        session_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        secrets: dict[str, Any],
        waiting: int | None = None,
        *,
        asking: Principal | None = None,
    ) -> Outcome:
        """Seal, initialize, store the version with its audit event, publish the status.

        `session_id` is the scope: a session, or a principal scope (`scopes`), whose
        sessions then each resolve the toolkit again (`deliver`); the instance initialized
        here only decides the version's status. `waiting`: the version an intake link was
        made for; nothing is stored (VersionMoved) unless it is still the last and not
        purged (the link's used-once check, `Store.append_version`). `asking`: the principal
        whose request this is; nothing is stored (PrincipalEnded) if its token was revoked
        or expired meanwhile, as a slow initialize or credential check leaves time for.
        """
        name = toolkit.definition.name
        digest = toolkit.schema.digest
        # Sealed for the version this process expects; `build` reseals in the write
        # transaction if it is not the one taken (another process wrote meanwhile).
        provisional = self._next_version.get((session_id, name), 1)
        bound = crypto.public_digest(public)
        sealed = self._seal(session_id, name, provisional, digest, bound, secrets)
        # The toolkit gets the validated config as submitted (merged from copies of both
        # halves), not opened again from `sealed`: the envelope format is proven by its
        # known-answer vectors, and resume opens what was stored.
        register_secrets(secrets.values())
        instance, outcome = self._initialize(toolkit, merge_secrets(public, secrets))

        def build(version: int, primary_kek: str) -> VersionDraft:
            nonlocal sealed
            ring = self.ring_for(primary_kek)  # another process may have rotated meanwhile
            if version != provisional or sealed.kek_id != ring.primary_id:
                sealed = self._seal(session_id, name, version, digest, bound, secrets)
            return VersionDraft.of(
                outcome.status,
                outcome.message,
                actor,
                digest,
                public,
                sealed,
                keep_ciphertext=outcome.status != "error",  # a rejected credential is not kept
            )

        def committed(version: int) -> None:
            """Stored: live here, and said (on the store's writer thread if left to it)."""
            self._next_version[(session_id, name)] = version + 1
            if principal_of(session_id) is not None:
                if outcome.status != "error":  # else nothing changed: the previous one stays
                    self.publish(self._event(session_id, name, True, outcome))
                return
            if instance is not None:
                self._activate((session_id, name), instance, version, outcome)
            configured = (session_id, name) in self._active
            self.publish(self._event(session_id, name, configured, outcome))

        # an imported toolkit removed or replaced meanwhile: nothing is stored
        imported = toolkit.source.name if toolkit.source.kind is SourceKind.PACKAGE else None
        version = (session_id, name, build, AuditAction.CONFIGURE)
        principal = None if asking is None else asking.principal_id
        if principal_of(session_id) is None:  # may be left to commit: nothing reads it next
            self.store.append_version(
                *version, committed, imported=imported, waiting=waiting, principal=principal
            )
        else:  # `configure` resolves the asking session from it next
            committed(
                self.store.append_version(
                    *version, imported=imported, waiting=waiting, principal=principal
                )
            )
        return outcome

    def expiring(self) -> list[tuple[str, str, Source, float]]:
        """(session, toolkit, where its instance was made from, when its credential ends)
        of every live instance here whose credential has a known end (`reminders`)."""
        with self._lock:
            return [
                (session_id, name, self._sources[session_id][name], ends)
                for session_id, known in self._expires.items()
                for name, ends in known.items()
                if (session_id, name) in self._active and name in self._sources.get(session_id, {})
            ]

    def end_expired(self, session_id: str, name: str, source: Source, ends: float) -> None:
        """A live instance's credential ended: the instance is dropped (its source kept, so
        nothing makes it again but a new version, and `_initialize` refuses this one), and
        the session's connections here hear `configured: false`, with a link to renew it
        when the intake is on."""
        with self._lock:
            plugins = list(self._plugins.get(session_id, ()))
        link = None
        if plugins and self.intake is not None:
            link = self._renewal_link(session_id, plugins[0].principal.principal_id, name, source)
        outcome = Outcome("error", expired_message(ends), intake_url=link)
        if self._install(session_id, name, {name: source}, outcome, None, source):
            self.deliver(self._event(session_id, name, False, outcome))

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

    def live_scopes(self) -> set[tuple[str, str]]:
        """(scope, toolkit) of every instance live in this process: what a proactive OAuth
        refresh looks at (`connect.OAuthConnections.refresh_ahead`)."""
        with self._lock:
            return {
                (scope, name)
                for session_id, sources in self._sources.items()
                for name, (scope, _) in sources.items()
                if (session_id, name) in self._active
            }

    def reinitialize(self, scope_id: str, toolkit_name: str) -> None:
        """Initialize again, from the store, the instances of `toolkit_name` this process
        made from `scope_id`'s config for sessions with a connection here (a token refreshed
        ahead of its expiry); they hear of it. Other sessions follow at their next use."""
        with self._lock:
            sessions = [
                (session_id, next(iter(self._plugins[session_id])).principal.principal_id)
                for session_id, sources in self._sources.items()
                if sources.get(toolkit_name, ("", 0))[0] == scope_id
                and self._plugins.get(session_id)
            ]
        for session_id, principal_id in sessions:
            for event in self._sync(session_id, principal_id, quiet=False, only=toolkit_name):
                self.deliver(event)

    # -- the registry, in line with the chain ------------------------------------------------

    def toolkit(self, name: str) -> RegisteredToolkit:
        """The toolkit `name` as the store has it now (raises ToolkitNotFound). Built-in and
        entry-point toolkits are as registered; for any other name the registry is first
        brought in line with the chain, so a configure follows the latest import (a field
        reclassified) and refuses a removed toolkit. On SQLite that costs one `PRAGMA
        data_version` while nothing was committed; on PostgreSQL one read of the chain."""
        if name in self.registry:
            found = self.registry.get(name)
            if found.source.kind is not SourceKind.PACKAGE:
                return found
        self.follow_registry()
        return self.registry.get(name)

    def follow_registry(self) -> None:
        """Follow the chain and load the imported toolkits again if an import or removal
        was made since (by any process); what a removal ends is dropped here and told to
        its connections. Cheap when nothing changed (`serve` calls it a few times a second,
        so a connection that sends nothing hears of a removal too)."""
        try:
            chain: ChainState | None = self.store.chain_state()
        except StateUnknown:
            chain = None
        self._follow_registry(chain)

    def _follow_registry(self, chain: ChainState | None) -> bool:
        """Load the imported toolkits again when `chain` (followed just now; None: not
        believed, and then neither is any import) counts other imports and removals than
        the registry was loaded at; returns whether it did.

        Then every instance here of an imported toolkit that is no longer registered, or
        that was made from a version a removal ended (even when the toolkit was imported
        again since: `ChainState.ended_by_removal`), is dropped. Every session connected
        here hears `configured: false` for a toolkit removed since the last load that it,
        or its principal, had configured (the chain says which), or whose instance was
        dropped: each replica tells its own connections, as each follows the chain, so an
        agent told `configured: true` through another replica's relay hears this too."""
        seen = -1 if chain is None else chain.registry_changes
        if seen == self._registry_seen:
            return False
        with self._registry_lock:
            since = self._registry_seen
            if seen == since:
                return False
            imported = {t.definition.name for t in self.registry.all() if _imported(t)}
            self.registry.load_imported(stored_toolkits(self.store))
            self._registry_seen = seen
            now = {t.definition.name for t in self.registry.all() if _imported(t)}
        removed: dict[str, dict[str, int]] = {}  # since the last load: toolkit -> scopes
        if chain is not None and since is not None and since >= 0:
            removals = list(chain.removals.items())  # one copy: the ledger may take more
            removed = {n: chain.removed.get(n, {}) for n, at in removals if at > since}
        ended: list[ToolkitStatusEvent] = []
        with self._lock:
            dropped: set[tuple[str, str]] = set()
            for session_id, sources in self._sources.items():
                for name in sorted((imported | now) & sources.keys()):
                    scope, version = sources[name]
                    if name in now and not (chain and chain.ended_by_removal(scope, name, version)):
                        continue
                    del sources[name]
                    self._active.pop((session_id, name), None)
                    self._unavailable.pop((session_id, name), None)
                    self._expires.get(session_id, {}).pop(name, None)
                    self._dropped += 1  # a list's read before this no longer says what is live
                    dropped.add((session_id, name))
            for session_id, plugins in self._plugins.items():
                principal_id = next(iter(plugins)).principal.principal_id
                scopes = (session_id, principal_scope(principal_id))
                for name in sorted(removed.keys() | {n for s, n in dropped if s == session_id}):
                    had = any(scope in removed.get(name, {}) for scope in scopes)
                    if had or (session_id, name) in dropped:
                        gone = Outcome("error", "toolkit removed")
                        ended.append(self._event(session_id, name, False, gone))
        for event in ended:
            self.deliver(event)
        return True

    # -- operators and auditors ------------------------------------------------------------

    def purge(self, actor: str, session_id: str, toolkit_name: str | None = None) -> PurgeReport:
        """Crypto-shred a session (or one toolkit of it); its live instances here make way
        for its principal's config, or are forgotten, and its connections are told. OAuth
        token sets are revoked at their servers first (`connect.OAuthConnections.revoke`)."""
        if self.oauth is not None:
            self.oauth.revoke(actor, session_id, toolkit_name)
        report = purge(self.store, session_id, toolkit_name, actor=actor)
        with self._lock:
            known = session_id in self._sources or session_id in self._plugins
        if known and report.principal_id is not None:
            changes = self._sync(session_id, report.principal_id, quiet=False, only=toolkit_name)
            for event in changes:
                self.publish(event)
        return report

    def purge_principal(
        self, actor: str, principal: str, toolkit_name: str | None = None
    ) -> PurgeReport:
        """Crypto-shred a principal's own configs (by principal id or name); its sessions'
        configs stay, and every session that used the principal's is told."""
        if self.oauth is not None:
            scope_id = principal_scope(find_principal(self.store, principal))
            self.oauth.revoke(actor, scope_id, toolkit_name)
        report = purge_principal(self.store, principal, toolkit_name, actor=actor)
        purged = Outcome("error", "config purged")
        for name in report.unconfigured:
            self.publish(self._event(report.session_id, name, False, purged))
        return report

    def verify_audit(self) -> AuditReport:
        """Walk the audit chain with this vault's audit key (which never leaves it), and
        reconcile every authenticated table with it."""
        if self._audit_key is None:
            raise VaultError("the audit key is not loaded")
        recovery = held_recovery_key(self.store, self.ring_for)
        return verify_audit_chain(self.store, self._audit_key, recovery=recovery)

    def export_audit(self, after: int, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The audit events after seq `after`, each verified as it is read (`audit.export`):
        what a receiver of the audit devices replays when it fell behind."""
        if self._audit_key is None:
            raise VaultError("the audit key is not loaded")
        return export_events(self.store, self._audit_key, after, limit)

    def accept_restore(self, actor: str) -> dict[str, Any]:
        """An operator's deliberate restore of an older copy: the database's chain must
        verify on its own; then its head becomes the witness again, and the step is an
        audit event naming both heads. Running processes that followed the newer chain
        keep refusing until they restart (they saw the events that are gone)."""
        store = self.store
        try:
            heads = store.witness.read() if store.witness is not None else None
        except StoreError:
            heads = None
        with store.accepting_restore():
            report = self.verify_audit()
            if report.problem in ("edited", "deleted", "inserted", "truncated"):
                raise VaultError(f"the database's own audit chain is broken: {report.message}")
            details = {
                "witness_seq": heads[0][0] if heads else None,
                "database_seq": report.head_seq,
            }
            store.record_attempt(AuditDraft(actor, AuditAction.RESTORE_ACCEPTED, details=details))
        return {**details, "accepted": True}

    def check(self, start: Callable[[int], Callable[[int], None]] | None = None) -> dict[str, Any]:
        """`check`: every version decrypted in memory and every row's MAC, then the audit
        chain and the state it vouches for; counts and names, never a value. A key the ring
        lacks is loaded (`ring_for`), or the check stops: never a false "failed"."""
        result = check_store(self.store, partial(self.ring_for, strict=True), start)
        for failed in result["failed_versions"]:
            failed["scope"] = scope_of(failed["session_id"])
        result["scopes"] = self.store.versions_by_scope()
        audit = self.verify_audit()
        result["audit"] = {
            "ok": audit.problem in (None, "unaudited", "state"),
            "message": audit.message,
        }
        result["state_problems"] = [p.as_json() for p in audit.state_problems]
        result["state_problem_count"] = audit.state_problem_count
        result["ok"] = not result["failed"] and audit.ok
        return result

    def ring_for(self, *key_ids: str, strict: bool = False) -> KeyRing:
        """The key ring, reloaded first when the store names a vault key it lacks: the one
        way every process learns of a rotation made by another (decrypt, configure and
        `check` all ask here). A reload that cannot reach the key provider keeps the ring
        as it is (a version under the new key then fails alone), unless `strict`."""
        if all(key_id in self.ring for key_id in key_ids) or self._reload_keys is None:
            return self.ring
        with self._ring_lock:
            if not all(key_id in self.ring for key_id in key_ids):
                try:
                    self.ring = self._reload_keys(self.ring)
                except VaultError as exc:
                    if strict:
                        raise
                    log.warning("key ring not reloaded: %s", exc.message)
        return self.ring

    def seal(
        self,
        session_id: str,
        toolkit_name: str,
        version: int,
        digest: str,
        public: dict[str, Any],
        secrets: dict[str, Any],
        primary_kek: str,
    ) -> SealedConfig:
        """Seal a version's secret fields for (scope, toolkit, version), under the store's
        primary vault key (`primary_kek`, learnt in the write transaction)."""
        self.ring_for(primary_kek)
        bound = crypto.public_digest(public)
        return self._seal(session_id, toolkit_name, version, digest, bound, secrets)

    def _seal(
        self,
        session_id: str,
        toolkit_name: str,
        version: int,
        digest: str,
        public_digest: str,
        secrets: dict[str, Any],
    ) -> SealedConfig:
        context = RecordContext(session_id, toolkit_name, version, digest, public_digest)
        return crypto.seal_config(self.ring, self._fingerprint_key, context, secrets)

    # -- push ------------------------------------------------------------------------------------

    @staticmethod
    def _event(
        session_id: str, toolkit_name: str, configured: bool, outcome: Outcome
    ) -> ToolkitStatusEvent:
        return ToolkitStatusEvent(
            session_id=session_id,
            toolkit_name=toolkit_name,
            configured=configured,
            status=outcome.status,
            message=outcome.message,
            intake_url=outcome.intake_url,
        )

    def attach(self, session_id: str, plugin: SessionListener) -> None:
        with self._lock:
            self._plugins.setdefault(session_id, set()).add(plugin)

    def detach(self, session_id: str, plugin: SessionListener) -> None:
        with self._lock:
            plugins = self._plugins.get(session_id, set())
            plugins.discard(plugin)
            if not plugins:
                self._plugins.pop(session_id, None)

    def publish(self, event: ToolkitStatusEvent) -> None:
        """Deliver a status event here, and to the other replicas when a relay is set."""
        self.deliver(event)
        if self.relay is not None:
            self.relay(event)

    def deliver(self, event: ToolkitStatusEvent) -> None:
        """Deliver a status event to every connection of its session in this process; one
        of a principal scope (from here or, relayed, from another replica) makes that
        principal's sessions here resolve its toolkit again."""
        principal_id = principal_of(event.session_id)
        if principal_id is not None:
            self._scope_changed(principal_id, event.toolkit_name)
            return
        with self._lock:
            plugins = list(self._plugins.get(event.session_id, ()))
        for plugin in plugins:
            plugin.emit_event(event)

    def _scope_changed(self, principal_id: str, toolkit_name: str) -> None:
        """A principal's config of a toolkit changed: its sessions connected here with a
        push channel initialize what they now resolve to and hear of it; any other
        session's instance made from the principal's config is dropped, to be made again
        from the store when that session is next used (`bind`, a list). So the work done
        here is bounded by the principal's open connections, not by its HTTP sessions."""
        scope_id = principal_scope(principal_id)
        with self._lock:
            connected = sorted(
                session_id
                for session_id, plugins in self._plugins.items()
                if any(p.pushes and p.principal.principal_id == principal_id for p in plugins)
            )
            self._dropped += 1  # a list's read before this no longer says what is live
            for session_id, sources in self._sources.items():
                source = sources.get(toolkit_name)
                if session_id not in connected and source is not None and source[0] == scope_id:
                    del sources[toolkit_name]
                    self._active.pop((session_id, toolkit_name), None)
                    self._unavailable.pop((session_id, toolkit_name), None)
                    self._expires.get(session_id, {}).pop(toolkit_name, None)
        for session_id in connected:
            for event in self._sync(session_id, principal_id, quiet=False, only=toolkit_name):
                self.deliver(event)


def _imported(toolkit: RegisteredToolkit) -> bool:
    return toolkit.source.kind is SourceKind.PACKAGE
