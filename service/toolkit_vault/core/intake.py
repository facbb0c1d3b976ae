"""Intake links: a person, not the agent, types a toolkit's secret fields.

When a configure leaves required secret fields out (or asks for an intake), the vault
stores the public half as a version of status `intake` (never current, never initialized)
and answers with a one-time link. The link is a capability that carries no secret: a
random id and what it is bound to (scope: a session or its principal, see `scopes`;
toolkit, schema digest, the version it must write, expiry), encrypted (AES-GCM under a key
derived from the intake key, so the link is opaque: no session or principal id can be read
from it) and MACed under the intake key.
It works once because the version it stores must take the number right after the intake
version, checked inside the serialized write transaction: once any version follows (this
link's, or the agent's own configure), the link is spent. Creating, refusing and
completing an intake are audit events.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from toolkit_vault.access.principals import Principal, list_principals
from toolkit_vault.core.expiry import with_expiry
from toolkit_vault.core.reserved import refuse_reserved
from toolkit_vault.core.vault import Outcome, Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import ConfigInvalid, ToolkitNotFound, VaultError, VersionMoved
from toolkit_vault.protocol import IntakeOptions, ToolkitConfigureRequest, ToolkitConfigureResponse
from toolkit_vault.schema import canonical_json, check_sealable
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.records import AuditDraft, VersionDraft
from toolkit_vault.store.scopes import Scope, scope_of
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["DEFAULT_TTL", "INTAKE_STATUS", "Claim", "Intake", "IntakeRefused", "IntakeView"]

DEFAULT_TTL = 600.0
INTAKE_STATUS = "intake"
MAX_LINK_CHARS = 2048
_DOMAIN = b"toolkit-vault intake link v1\x00"
Reason = Literal["invalid", "expired", "used", "changed"]
_REASONS: dict[Reason, str] = {
    "invalid": "this intake link is not valid",
    "expired": "this intake link has expired; ask the agent for a new one",
    "used": "this intake link was already used, or the toolkit was configured since",
    "changed": "the toolkit changed since this intake link was made; ask for a new one",
}


class IntakeRefused(VaultError):
    """A link that cannot be used; `reason` says why, without saying anything secret."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(_REASONS[reason])
        self.reason = reason


@dataclass(frozen=True)
class Claim:
    """What a verified link says: where the person's config goes, and until when."""

    link_id: str
    session_id: str  # the scope the config goes to: a session, or a principal scope
    toolkit_name: str
    schema_digest: str
    version: int  # the version number the completion must write
    principal_id: str  # who asked for the intake
    expires_at: float

    @property
    def actor(self) -> str:
        return f"intake:{self.link_id}"

    @property
    def scope(self) -> Scope:
        return scope_of(self.session_id)


@dataclass(frozen=True)
class IntakeView:
    """What the form needs: the claim, the toolkit and the public half kept so far."""

    claim: Claim
    toolkit: RegisteredToolkit
    public_config: dict[str, Any]
    requester: str = ""  # the name of the agent token (principal) that asked


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LinkSigner:
    """Encodes a claim as `payload.mac` (URL-safe), the payload encrypted so the link is
    opaque (nonce + AES-GCM), and checks the MAC before decrypting it."""

    def __init__(self, key: SecretBytes) -> None:
        if len(key) < 32:
            raise ValueError("the intake link key must be at least 32 bytes")
        self._key = key

    def _aead(self) -> AESGCM:
        derived = hmac.new(self._key.reveal(), _DOMAIN + b"encrypt", hashlib.sha256).digest()
        return AESGCM(derived)

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key.reveal(), _DOMAIN + payload.encode(), hashlib.sha256).digest()

    def issue(self, claim: Claim) -> str:
        fields = {
            "v": 1,
            "i": claim.link_id,
            "s": claim.session_id,
            "t": claim.toolkit_name,
            "d": claim.schema_digest,
            "n": claim.version,
            "p": claim.principal_id,
            "e": int(claim.expires_at),
        }
        nonce = secrets.token_bytes(12)
        payload = _b64(nonce + self._aead().encrypt(nonce, canonical_json(fields), _DOMAIN))
        return f"{payload}.{_b64(self._mac(payload))}"

    def verify(self, link: str, now: float) -> Claim:
        payload, _, mac = link.rpartition(".")
        try:
            if len(link) > MAX_LINK_CHARS or not hmac.compare_digest(
                _unb64(mac), self._mac(payload)
            ):
                raise IntakeRefused("invalid")
            sealed = _unb64(payload)
            fields = json.loads(self._aead().decrypt(sealed[:12], sealed[12:], _DOMAIN))
            claim = Claim(
                fields["i"], fields["s"], fields["t"], fields["d"], fields["n"], fields["p"],
                float(fields["e"]),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError, binascii.Error, InvalidTag):
            raise IntakeRefused("invalid") from None
        if fields.get("v") != 1:
            raise IntakeRefused("invalid")
        if now >= claim.expires_at:
            raise IntakeRefused("expired")
        return claim


def _path(config: Any, pointer: str) -> list[str | int]:
    """A JSON pointer's tokens, array indices as ints (found by walking the config)."""
    path: list[str | int] = []
    node = config
    for token in pointer_tokens(pointer):
        if isinstance(node, list) and token.isdigit():
            path.append(int(token))
            node = node[int(token)] if int(token) < len(node) else None
        else:
            path.append(token)
            node = node.get(token) if isinstance(node, Mapping) else None
    return path


class Intake:
    """The intake service: offers links on configure, shows and completes them."""

    def __init__(
        self,
        vault: Vault,
        key: SecretBytes,
        url_for: Callable[[str], str],
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 1 <= ttl <= 24 * 3600:
            raise ValueError("an intake link lives between a second and a day")
        self.vault, self._signer, self._url_for = vault, LinkSigner(key), url_for
        self.ttl, self._clock = ttl, clock

    # -- offering a link (from Vault.configure) ---------------------------------------------

    def covers(
        self, toolkit: RegisteredToolkit, msg: ToolkitConfigureRequest, error: ConfigInvalid
    ) -> bool:
        """Whether a refused config's only faults are required secret fields left out."""
        return bool(error.details) and all(
            d.get("keyword") == "required"
            and toolkit.schema.is_secret_at(_path(msg.config, d.get("pointer", "")))
            for d in error.details
        )

    def request(
        self,
        principal: Principal,
        scope_id: str,
        toolkit: RegisteredToolkit,
        msg: ToolkitConfigureRequest,
    ) -> ToolkitConfigureResponse:
        """Keep the public half as an `intake` version and answer with a one-time link.
        `scope_id`: the scope the link is bound to (the principal's, for `scope:
        "principal"`), whose row exists."""
        missing: list[str] = []
        try:
            toolkit.schema.validate(msg.config)
        except ConfigInvalid as exc:
            if any(d.get("keyword") != "required" for d in exc.details):
                raise
            missing = [d["pointer"] for d in exc.details]
        public = toolkit.schema.public_half(msg.config)  # secrets sent anyway are not kept
        name = toolkit.definition.name
        ttl = self.ttl
        if isinstance(msg.intake, IntakeOptions) and msg.intake.expires_in is not None:
            ttl = min(ttl, msg.intake.expires_in)
        claim, url = self._offer(principal.principal_id, scope_id, toolkit, public, missing, ttl)
        minutes = max(1, round(ttl / 60))
        reach = " for every session of this principal" if claim.scope == "principal" else ""
        return ToolkitConfigureResponse(
            req_id=msg.id,
            toolkit_name=name,
            status="partial",
            message=f"a person must enter the secret fields at {url} (one use, expires in "
            f"about {minutes} min){reach}; the agent never sees them",
            intake_url=url,
        )

    def offer(
        self,
        principal_id: str,
        scope_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        why: str,
    ) -> str:
        """A link for a person to configure (or connect) a toolkit again, keeping `public`
        (an OAuth connection the server refused to refresh, `oauth_refresh`). While an `intake`
        version is already the last one, a new link to it is signed and nothing is written:
        every initialization of a broken connection may ask, and each link stays good until
        one of them is used."""
        name, digest = toolkit.definition.name, toolkit.schema.digest
        try:
            latest = self.vault.store.chain_state().last_version(scope_id, name)
            pending = self.vault.store.version_if_latest(scope_id, name, latest)
        except StateUnknown:
            pending = None
        if (
            pending is not None
            and pending.status == INTAKE_STATUS
            and pending.schema_digest == digest
        ):
            link_id = secrets.token_urlsafe(16)
            expires_at = self._clock() + self.ttl
            claim = Claim(link_id, scope_id, name, digest, latest + 1, principal_id, expires_at)
            return self._url_for(self._signer.issue(claim))
        return self._offer(principal_id, scope_id, toolkit, public, [], self.ttl, why)[1]

    def _offer(
        self,
        principal_id: str,
        scope_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        missing: list[str],
        ttl: float,
        why: str | None = None,
    ) -> tuple[Claim, str]:
        """Store the `intake` version, audit the request, and make the link."""
        name, digest = toolkit.definition.name, toolkit.schema.digest
        link_id = secrets.token_urlsafe(16)
        expires_at = self._clock() + ttl
        note = f"waiting for intake {link_id}" + (f": {', '.join(missing)}" if missing else "")
        if why:
            note += f" ({why})"

        def build(version: int, _primary_kek: str) -> VersionDraft:
            return VersionDraft(
                INTAKE_STATUS, note, principal_id, digest, public, {}, None, None, None, None,
            )  # fmt: skip

        version = self.vault.store.append_version(scope_id, name, build, AuditAction.CONFIGURE)
        claim = Claim(link_id, scope_id, name, digest, version + 1, principal_id, expires_at)
        url = self._url_for(self._signer.issue(claim))
        details = {"link_id": link_id, "expires_at": expires_at, "missing": missing}
        self.vault.store.record_attempt(
            AuditDraft(principal_id, AuditAction.INTAKE_REQUESTED, scope_id, name, version, details)
        )
        return claim, url

    # -- using a link (from the web form) ---------------------------------------------------

    def open(self, link: str) -> IntakeView:
        """Verify a link and that nothing has used it; raises IntakeRefused."""
        claim = self._signer.verify(link, self._clock())
        try:
            toolkit = self.vault.toolkit(claim.toolkit_name)  # as imported now
        except ToolkitNotFound:
            raise IntakeRefused("changed") from None
        if toolkit.schema.digest != claim.schema_digest:
            raise IntakeRefused("changed")
        try:
            pending = self.vault.store.version_if_latest(
                claim.session_id, claim.toolkit_name, claim.version - 1
            )
        except StateUnknown:
            raise IntakeRefused("changed") from None
        if pending is None:
            raise IntakeRefused("used")  # or its row no longer holds what the vault wrote
        if pending.status != INTAKE_STATUS:
            raise IntakeRefused("changed")  # purged since
        names = {p.principal_id: p.name for p in list_principals(self.vault.store)}
        return IntakeView(claim, toolkit, pending.public_config, names.get(claim.principal_id, ""))

    def complete(self, link: str, config: dict[str, Any]) -> Outcome:
        """Validate, seal, store and initialize a person's config, exactly once per link.

        Raises IntakeRefused (the link) or ConfigInvalid (the config: the link stays good).
        """
        view = self.open(link)
        claim = view.claim
        public, secret_values, ends = self._checked(view, config)

        public = with_expiry(public, ends)
        outcome = self.commit(claim, view.toolkit, public, secret_values)
        details = {"link_id": claim.link_id, "status": outcome.status}
        self.vault.store.record_attempt(
            AuditDraft(
                claim.actor, AuditAction.INTAKE_COMPLETED, claim.session_id, claim.toolkit_name,
                claim.version, details,
            )
        )  # fmt: skip
        return outcome

    def commit(
        self,
        claim: Claim,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        secrets: dict[str, Any],
    ) -> Outcome:
        """`Vault.store_version` of a link's config, once: only while the version the link was made
        for is still the last and not purged (checked in the write transaction, after
        whatever the submission waited on: a credential check, a token exchange)."""
        try:
            return self.vault.store_version(
                claim.actor, claim.session_id, toolkit, public, secrets, claim.version - 1
            )
        except VersionMoved as exc:
            raise IntakeRefused("changed" if exc.purged else "used") from None

    def check(self, link: str, config: dict[str, Any]) -> float | None:
        """The form's "Check now": the same validation and credential check as `complete`,
        saving nothing; returns when the credential ends, if the check said. Raises
        IntakeRefused or ConfigInvalid (a failure is audited as a refused submission)."""
        return self._checked(self.open(link), config, check_only=True)[2]

    def _checked(
        self, view: IntakeView, config: dict[str, Any], *, check_only: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any], float | None]:
        """A config split and checked (the schema, the toolkit's own rule, its credential
        check): (public, secrets, expiry). A refusal is audited `intake_refused`."""
        claim = view.claim
        try:
            refuse_reserved(config)  # the vault's own keys, never a person's
            public, secret_values = view.toolkit.schema.split(config)
            check_sealable(secret_values)
            if view.toolkit.check is not None:
                view.toolkit.check(config)
            ends = self.vault.check_credential(view.toolkit, config, secret_values)
        except ConfigInvalid as exc:
            details: dict[str, Any] = {"link_id": claim.link_id, "errors": exc.details}
            if check_only:
                details["check_only"] = True
            self.vault.store.record_attempt(
                AuditDraft(
                    claim.actor, AuditAction.INTAKE_REFUSED, claim.session_id, claim.toolkit_name,
                    details=details,
                )
            )  # fmt: skip
            raise
        return public, secret_values, ends
