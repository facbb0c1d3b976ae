"""Configuring: a config validated, split, checked, sealed, initialized, then stored as a
version with its audit event and its status published (`store_version`, which the intake
links and the OAuth connect flow use too); or, when it leaves its secrets to a person,
answered with an intake link.

The third layer of `vault.Vault` (over `listing.Listing`).

May import: `core`'s listing, expiry, templates, reserved, verification; schema, store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.access.principals import Principal
from toolkit_vault.core.expiry import earliest, jwt_expiry, with_expiry
from toolkit_vault.core.instances import stop_instance
from toolkit_vault.core.listing import Listing
from toolkit_vault.core.outcomes import Outcome, status_event
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
from toolkit_vault.errors import ConfigInvalid, ToolkitNotFound, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.protocol import Message, ToolkitConfigureRequest, ToolkitConfigureResponse
from toolkit_vault.schema import check_sealable, merge_secrets
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft, VersionDraft
from toolkit_vault.store.scopes import principal_of, principal_scope
from toolkit_vault.telemetry import metrics, traces
from toolkit_vault.toolkits.registry import RegisteredToolkit, SourceKind

__all__ = ["SESSION_ID_CHARS", "Configuring"]

SESSION_ID_CHARS = 64  # sessions.session_id


class Configuring(Listing):
    """The configures of one vault."""

    verify_policy: VerifyPolicy  # where a credential check may connect
    plugin_checks: PluginChecks  # which toolkits have a `verify`, learnt once
    checks: CheckLog  # the last check of each toolkit here, for the console
    check_slots: CheckSlots  # credential checks in flight here, at most a few
    _scopes: set[str]  # principal scopes whose row exists
    _next_version: dict[tuple[str, str], int]  # a guess: saves a read per call

    def configure(
        self, principal: Principal, session_id: str, msg: ToolkitConfigureRequest
    ) -> ToolkitConfigureResponse:
        """Validate, split, seal, initialize, then store the version and audit it together;
        or, when the config leaves its secrets to a person, answer with an intake link.
        `scope: "principal"` stores it for the principal (every session without its own).
        Counted by outcome (`telemetry.metrics`): `refused` when nothing was stored for a
        bad request or a rejected credential, `intake` when a person is asked."""
        try:
            response, outcome = self._configure(principal, session_id, msg)
        except VaultError:
            metrics.observe_configure("refused")
            raise
        metrics.observe_configure(outcome)
        return response

    def _configure(
        self, principal: Principal, session_id: str, msg: ToolkitConfigureRequest
    ) -> tuple[ToolkitConfigureResponse, str]:
        """`configure`'s answer, and its outcome as `/metrics` counts it."""
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
                return self.intake.request(principal, self._made(scope_id), toolkit, msg), "intake"
            if self.intake and self.oauth.wants_connect(toolkit, msg.config):
                return self.intake.request(principal, self._made(scope_id), toolkit, msg), "intake"
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
            refused = ToolkitConfigureResponse(
                req_id=msg.id, toolkit_name=msg.toolkit_name, status="error", message=exc.message
            )
            return refused, "refused"
        except (ToolkitNotFound, ConfigInvalid) as exc:
            intake = self.intake
            if isinstance(exc, ConfigInvalid) and intake and intake.covers(toolkit, msg, exc):
                return intake.request(principal, self._made(scope_id), toolkit, msg), "intake"
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
        outcome = self.store_version(
            principal.principal_id, scope_id, toolkit, public, secrets, asking=principal
        )
        message = outcome.message
        name = msg.toolkit_name
        if scope_id != session_id and outcome.status != "error":
            for event in self._sync(session_id, principal.principal_id, quiet=False, only=name):
                self.deliver(event)  # the asking session, whatever its transport
            source = self.instances.source(session_id, name)
            if source is not None and source[0] == session_id:
                message += " for the principal; this session keeps its own config"
        response = ToolkitConfigureResponse(
            req_id=msg.id,
            toolkit_name=msg.toolkit_name,
            status=outcome.status,
            message=message,
        )
        return response, outcome.status

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
            with self.check_slots.taken(), traces.span("credential_check", toolkit=name):
                checked = verify_credential(toolkit, config, self.verify_policy, self.plugin_checks)
        except CredentialRejected as exc:
            if exc.message == BUSY:  # beyond the cap: refused, no wait (not noted)
                metrics.observe_credential_check("busy")
                raise
            metrics.observe_credential_check("rejected")
            self.checks.note(name, CheckResult(self.clock(), False, exc.message))
            raise
        metrics.observe_credential_check("passed")
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

    def store_version(
        self,
        actor: str,
        scope_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        secrets: dict[str, Any],
        waiting: int | None = None,
        *,
        asking: Principal | None = None,
    ) -> Outcome:
        """Seal, initialize, store the version with its audit event, publish the status.

        `scope_id`: a session, or a principal scope (`scopes`), whose
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
        provisional = self._next_version.get((scope_id, name), 1)
        bound = crypto.public_digest(public)
        sealed = self.sealing.seal_bound(scope_id, name, provisional, digest, bound, secrets)
        # The toolkit gets the validated config as submitted (merged from copies of both
        # halves), not opened again from `sealed`: the envelope format is proven by its
        # known-answer vectors, and resume opens what was stored.
        register_secrets(secrets.values())
        live, outcome = self._initialize(toolkit, merge_secrets(public, secrets))

        def build(version: int, primary_kek: str) -> VersionDraft:
            nonlocal sealed
            ring = self.sealing.ring_for(primary_kek)  # another process may have rotated meanwhile
            if version != provisional or sealed.kek_id != ring.primary_id:
                sealed = self.sealing.seal_bound(scope_id, name, version, digest, bound, secrets)
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
            self._next_version[(scope_id, name)] = version + 1
            if principal_of(scope_id) is not None:
                stop_instance(live[0])  # its sessions make their own from the store
                if outcome.status != "error":  # else nothing changed: the previous one stays
                    self.publish(status_event(scope_id, name, True, outcome))
                return
            if live[0] is not None:
                self._activate((scope_id, name), live, version, outcome)
            configured = name in self.instances.live(scope_id)
            self.publish(status_event(scope_id, name, configured, outcome))

        # an imported toolkit removed or replaced meanwhile: nothing is stored
        imported = toolkit.source.name if toolkit.source.kind is SourceKind.PACKAGE else None
        version = (scope_id, name, build, AuditAction.CONFIGURE)
        principal = None if asking is None else asking.principal_id
        try:
            if principal_of(scope_id) is None:  # may be left to commit: nothing reads it next
                self.store.append_version(
                    *version, committed, imported=imported, waiting=waiting, principal=principal
                )
            else:  # `configure` resolves the asking session from it next
                committed(
                    self.store.append_version(
                        *version, imported=imported, waiting=waiting, principal=principal
                    )
                )
        except BaseException:
            stop_instance(live[0])  # nothing stored: what it runs stops
            raise
        return outcome
