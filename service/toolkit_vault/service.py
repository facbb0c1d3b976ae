"""The one service API: sessions, list and configure; every transport is a shell over it.

`Vault` owns the store, the key ring and the registry, and the initialized toolkit
instances of this process. `Connection` is one transport connection: it parses raw
messages, enforces the handshake and capability gating, and turns every failure into a
well-formed `error` message. `VaultToolkitPlugin` is the spec's `ToolkitPlugin` bound to
one session.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import crypto
from .audit import AuditReport, verify_audit_chain
from .crypto import KeyRing, RecordContext, SealedConfig, SecretBytes
from .errors import ConfigInvalid, DecryptionError, ToolkitNotFound, UnknownSession, VaultError
from .history import PurgeReport, purge
from .logs import register_secrets
from .plugin import PushCallback, ToolkitPlugin
from .protocol import (
    MAX_MESSAGE_BYTES,
    ConfigureStatus,
    ErrorCode,
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    InvalidMessage,
    Message,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitListRequest,
    ToolkitListResponse,
    ToolkitStatusEvent,
    dump_message,
    parse_message,
)
from .records import AuditDraft, VersionDraft, VersionRecord
from .registry import RegisteredToolkit, Toolkit, ToolkitRegistry
from .schema import check_sealable, merge_secrets
from .storage import Store

__all__ = ["CAPABILITIES", "Connection", "Principal", "Vault", "VaultToolkitPlugin"]

CAPABILITIES = ("toolkits",)
SESSION_ID_CHARS = 64  # sessions.session_id
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    principal_id: str
    role: str


@dataclass(frozen=True)
class Outcome:
    status: ConfigureStatus
    message: str


class Vault:
    def __init__(
        self,
        store: Store,
        ring: KeyRing,
        fingerprint_key: SecretBytes,
        registry: ToolkitRegistry,
        reload_keys: Callable[[], KeyRing] | None = None,
        audit_key: SecretBytes | None = None,
    ) -> None:
        self.store = store
        self.ring = ring
        self._reload_keys = reload_keys
        self._audit_key = audit_key
        self.registry = registry
        self._fingerprint_key = fingerprint_key
        self._active: dict[tuple[str, str], Toolkit] = {}
        self._active_version: dict[tuple[str, str], int] = {}
        self._next_version: dict[tuple[str, str], int] = {}  # a guess: saves a read per call
        self._plugins: dict[str, set[VaultToolkitPlugin]] = {}
        self._lock = threading.Lock()
        self.relay: Callable[[ToolkitStatusEvent], None] | None = None

    # -- sessions --------------------------------------------------------------------------

    def connect(self, principal: Principal, push: PushCallback | None = None) -> Connection:
        return Connection(self, principal, push)

    def open_session(
        self, principal: Principal, session_id: str | None
    ) -> tuple[str, list[Message]]:
        """Create a session, or resume one of the principal's; returns its id and events."""
        if session_id is None:
            session_id = str(uuid.uuid4())
            self.store.create_session(session_id, principal.principal_id)
            return session_id, []
        if (
            len(session_id) > SESSION_ID_CHARS
            or "\x00" in session_id  # PostgreSQL text cannot hold NUL: not even a lookup
            or not self.store.session_owned_by(session_id, principal.principal_id)
        ):
            raise UnknownSession("unknown session")
        return session_id, self._resume(session_id)

    def _resume(self, session_id: str) -> list[Message]:
        """Initialize every configured toolkit of a session again, from the store."""
        events: list[Message] = []
        for record in self.store.current_versions(session_id):
            key = (session_id, record.toolkit_name)
            if key in self._active and self._active_version.get(key) == record.version:
                continue  # already initialized from this very version in this process
            try:
                toolkit = self.registry.get(record.toolkit_name)
                config = self._decrypt(record)
                instance, outcome = self._initialize(toolkit, config)
            except (DecryptionError, ToolkitNotFound) as exc:
                reason = (
                    "stored config failed to decrypt"
                    if isinstance(exc, DecryptionError)
                    else "toolkit not registered"
                )
                instance, outcome = None, Outcome("error", reason)
            with self._lock:
                if instance is None or outcome.status == "error":
                    self._active.pop(key, None)
                else:
                    self._active[key] = instance
                    self._active_version[key] = record.version
            configured = instance is not None and outcome.status != "error"
            if not configured or outcome.status == "partial":
                events.append(self._event(session_id, record.toolkit_name, configured, outcome))
        return events

    def _decrypt(self, record: VersionRecord) -> dict[str, Any]:
        if not record.encrypted and not record.damaged:
            return dict(record.public_config)
        context, sealed = record.sealed()
        if sealed.kek_id not in self.ring:
            self._refresh_ring()  # rotated by another process since this one started
        secrets = crypto.open_config(self.ring, context, sealed)
        register_secrets(v.reveal() for v in secrets.values())
        try:
            return merge_secrets(record.public_config, {p: v.reveal() for p, v in secrets.items()})
        except ConfigInvalid:  # the public half was edited: the version cannot be put together
            raise DecryptionError from None

    @staticmethod
    def _initialize(
        toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[Toolkit | None, Outcome]:
        """Run a fresh instance's initialize; its own words never reach the agent (sanitized)."""
        try:
            instance = toolkit.factory()
            unavailable = instance.initialize(config)
        except Exception as exc:
            log.warning(
                "toolkit %s failed to initialize (%s)", toolkit.definition.name, type(exc).__name__
            )
            return None, Outcome("error", f"toolkit initialization failed ({type(exc).__name__})")
        known = [t for t in (unavailable or []) if t in toolkit.definition.tools]
        if known:
            return instance, Outcome(
                "partial", "tools unavailable: " + ", ".join(sorted(set(known)))
            )
        return instance, Outcome("ok", "Toolkit configured successfully")

    # -- toolkits ------------------------------------------------------------------------------

    def list_toolkits(self, session_id: str, msg: ToolkitListRequest) -> ToolkitListResponse:
        current = self.store.current_toolkits(session_id)
        self._forget_stale(session_id, current)
        toolkits = []
        for toolkit in self.registry.all():
            definition = toolkit.definition
            if msg.filter_kind and definition.category != msg.filter_kind:
                continue
            if not set(msg.filter_tags) <= set(definition.tags):
                continue
            configured = (
                definition.name in current and (session_id, definition.name) in self._active
            )
            toolkits.append(definition.model_copy(update={"configured": configured}))
        return ToolkitListResponse(req_id=msg.id, toolkits=toolkits)

    def _forget_stale(self, session_id: str, current: set[str]) -> None:
        """Drop live instances whose config is gone (purged by another process).

        A candidate is confirmed by a second read made after it was seen: an instance that
        a concurrent configure added after its commit is current in that read, so it stays.
        """
        with self._lock:
            seen = {
                k: v for k, v in self._active.items() if k[0] == session_id and k[1] not in current
            }
        if not seen:
            return
        still_current = self.store.current_toolkits(session_id)
        with self._lock:
            for key, instance in seen.items():
                if key[1] not in still_current and self._active.get(key) is instance:
                    del self._active[key]

    def configure(
        self, principal: Principal, session_id: str, msg: ToolkitConfigureRequest
    ) -> ToolkitConfigureResponse:
        """Validate, split, seal, initialize, then store the version and audit it at once."""
        try:
            toolkit = self.registry.get(msg.toolkit_name)
            public, secrets = toolkit.schema.split(msg.config)  # validates first
            check_sealable(secrets)
        except (ToolkitNotFound, ConfigInvalid) as exc:
            known = isinstance(exc, ConfigInvalid)
            self.store.record_attempt(
                AuditDraft(
                    principal.principal_id,
                    "configure_refused",
                    session_id,
                    msg.toolkit_name if known else None,
                    details={"reason": type(exc).__name__, "errors": exc.details},
                )
            )
            raise
        digest = toolkit.schema.digest
        # Sealed for the version this process expects; `build` reseals in the write
        # transaction if it is not the one taken (another process wrote meanwhile).
        provisional = self._next_version.get((session_id, msg.toolkit_name), 1)
        bound = crypto.public_digest(public)
        sealed = self._seal(session_id, msg.toolkit_name, provisional, digest, bound, secrets)
        # The toolkit gets the validated config as submitted (merged from copies of both
        # halves), not opened again from `sealed`: the envelope format is proven by its
        # known-answer vectors, and resume opens what was stored.
        register_secrets(secrets.values())
        instance, outcome = self._initialize(toolkit, merge_secrets(public, secrets))

        def build(version: int, primary_kek: str) -> VersionDraft:
            nonlocal sealed
            if primary_kek != self.ring.primary_id:
                self._refresh_ring()  # a rotation made another key primary meanwhile
            if version != provisional or sealed.kek_id != self.ring.primary_id:
                sealed = self._seal(session_id, msg.toolkit_name, version, digest, bound, secrets)
            return VersionDraft.of(
                outcome.status,
                outcome.message,
                principal.principal_id,
                digest,
                public,
                sealed,
                keep_ciphertext=outcome.status != "error",  # a rejected credential is not kept
            )

        version = self.store.append_version(session_id, msg.toolkit_name, build, "configure")
        self._next_version[(session_id, msg.toolkit_name)] = version + 1
        if instance is not None:
            with self._lock:
                self._active[(session_id, msg.toolkit_name)] = instance
                self._active_version[(session_id, msg.toolkit_name)] = version
        configured = (session_id, msg.toolkit_name) in self._active
        self.publish(self._event(session_id, msg.toolkit_name, configured, outcome))
        return ToolkitConfigureResponse(
            req_id=msg.id,
            toolkit_name=msg.toolkit_name,
            status=outcome.status,
            message=outcome.message,
        )

    # -- operators and auditors ------------------------------------------------------------

    def purge(self, actor: str, session_id: str, toolkit_name: str | None = None) -> PurgeReport:
        """Crypto-shred a session (or one toolkit of it) and forget its live instances."""
        report = purge(self.store, session_id, toolkit_name, actor=actor)
        with self._lock:
            for key in [
                k for k in self._active if k[0] == session_id and toolkit_name in (None, k[1])
            ]:
                del self._active[key]
        for name in report.unconfigured:
            self.publish(self._event(session_id, name, False, Outcome("error", "config purged")))
        return report

    def verify_audit(self) -> AuditReport:
        """Walk the audit chain with this vault's audit key (which never leaves it)."""
        if self._audit_key is None:
            raise VaultError("the audit key is not loaded")
        return verify_audit_chain(self.store, self._audit_key)

    def _refresh_ring(self) -> None:
        if self._reload_keys is None:
            raise DecryptionError
        with self._lock:
            self.ring = self._reload_keys()

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
        )

    def attach(self, session_id: str, plugin: VaultToolkitPlugin) -> None:
        with self._lock:
            self._plugins.setdefault(session_id, set()).add(plugin)

    def detach(self, session_id: str, plugin: VaultToolkitPlugin) -> None:
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
        """Deliver a status event to every connection of its session in this process."""
        with self._lock:
            plugins = list(self._plugins.get(event.session_id, ()))
        for plugin in plugins:
            plugin.emit_event(event)


class VaultToolkitPlugin(ToolkitPlugin):
    """The spec's `ToolkitPlugin`, bound to one session of one principal."""

    name = "toolkit_vault"

    def __init__(self, vault: Vault, principal: Principal, session_id: str) -> None:
        super().__init__()
        self.vault = vault
        self.principal = principal
        self.session_id = session_id

    def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
        return self.vault.list_toolkits(self.session_id, msg)

    def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> ToolkitConfigureResponse:
        if msg.session_id not in ("", self.session_id):
            raise UnknownSession("unknown session")
        return self.vault.configure(self.principal, self.session_id, msg)


class Connection:
    """One transport connection: bound to one session after a successful handshake."""

    def __init__(self, vault: Vault, principal: Principal, push: PushCallback | None) -> None:
        self.vault = vault
        self.principal = principal
        self._push = push
        self._outbox: list[Message] | None = None
        self.plugin: VaultToolkitPlugin | None = None

    @property
    def session_id(self) -> str | None:
        return self.plugin.session_id if self.plugin else None

    def _deliver(self, event: Message) -> None:
        if self._outbox is not None:
            self._outbox.append(event)
        elif self._push is not None:
            self._push(event)

    def handle_raw(self, raw: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> list[str]:
        """One inbound message in; the response, then any events it caused, out (JSON)."""
        self._outbox = []
        try:
            try:
                request = parse_message(raw, max_bytes=max_bytes)
            except InvalidMessage as exc:
                response: Message = _error(exc.req_id, "INVALID_MESSAGE", exc.message, exc.details)
            else:
                response = self.handle(request)
            return [dump_message(m) for m in (response, *self._outbox)]
        finally:
            self._outbox = None

    def handle(self, request: Message) -> Message:
        try:
            if isinstance(request, HandshakeRequest):
                return self._handshake(request)
            if self.plugin is None:
                return _error(
                    request.id, "CAPABILITY_NOT_NEGOTIATED", "handshake granting toolkits first"
                )
            return self.plugin.handle(request)
        except VaultError as exc:
            return _error(request.id, "RUNTIME_ERROR", exc.message, exc.details)
        except Exception as exc:  # a bug must neither end the connection nor echo a value
            log.error("unexpected %s while handling %s", type(exc).__name__, request.type)
            return _error(request.id, "RUNTIME_ERROR", "internal error")

    def _handshake(self, request: HandshakeRequest) -> Message:
        if self.plugin is not None:
            return _error(request.id, "INVALID_MESSAGE", "this connection already has a session")
        granted = [c for c in CAPABILITIES if c in request.capabilities]
        if not granted:
            return _error(
                request.id, "CAPABILITY_NOT_NEGOTIATED", "no supported capability requested"
            )
        session_id, events = self.vault.open_session(self.principal, request.session_id)
        plugin = VaultToolkitPlugin(self.vault, self.principal, session_id)
        plugin.set_push_callback(self._deliver)
        self.vault.attach(session_id, plugin)
        self.plugin = plugin
        for event in events:
            self._deliver(event)
        return HandshakeResponse(req_id=request.id, session_id=session_id, capabilities=granted)

    def bind(self, session_id: str) -> None:
        """Bind a one-shot connection (HTTP) to one of its principal's sessions, no push."""
        self.vault.open_session(self.principal, session_id)
        self.plugin = VaultToolkitPlugin(self.vault, self.principal, session_id)

    def unsubscribe(self) -> None:
        """Stay bound but receive no more events (HTTP: there is nowhere to push them)."""
        if self.plugin is not None:
            self.vault.detach(self.plugin.session_id, self.plugin)

    def close(self) -> None:
        self.unsubscribe()
        self.plugin = None


def _error(
    req_id: str, code: ErrorCode, message: str, details: list[dict[str, Any]] | None = None
) -> ErrorMessage:
    return ErrorMessage(req_id=req_id, code=code, message=message, details=details or [])
