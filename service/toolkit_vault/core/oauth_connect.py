"""The OAuth connect flow, through an intake link: the flow cookie, the authorization
request, and the answer checked and exchanged.

An intake link of a toolkit whose schema declares `x-oauth` offers a Connect button:
`start` makes a PKCE (S256) verifier and a `state`, both kept in a MACed, short-lived
cookie bound to the link (never in the URL the authorization server sees, so an
intercepted redirect is useless without the browser), with the server the flow is for:
its issuer, its token endpoint and its own redirect URI; `finish` checks the state, then
that the answer is that server's (RFC 9700 4.4: it arrived at that server's redirect URI,
its RFC 9207 `iss` names the flow's issuer), exchanges the code with that server only and
stores the token set as sealed secret fields of a new version, through the same
`Vault.store_version` a configure uses (the link's used-once check included).
`oauth_connected` joins the chain; a refused answer is `oauth_callback_refused`.

Refreshing and revoking are the vault's own (`oauth_tokens`, `Vault.oauth`); this flow
is made with the web console, which alone can take a person through it.

May import: `core`'s vault, intake and OAuth modules; oauth, crypto, store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NoReturn

from toolkit_vault import crypto
from toolkit_vault.core.intake import Intake, IntakeRefused, IntakeView
from toolkit_vault.core.oauth_refresh import LEASE_TTL, RETRY_SPACING
from toolkit_vault.core.oauth_revoke import revoke_at_server
from toolkit_vault.core.oauth_specs import REFRESH_ACTOR, client_for, kept_secrets, token_facts
from toolkit_vault.core.outcomes import Outcome
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import DecryptionError, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import Endpoints, OAuthFailed, OAuthSpec, TokenSet, redirect_uri
from toolkit_vault.schema import merge_secrets
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = [
    "FLOW_TTL",
    "LEASE_TTL",
    "REFRESH_ACTOR",
    "RETRY_SPACING",
    "AnswerRefused",
    "Flow",
    "OAuthConnections",
]

FLOW_TTL = 600.0  # seconds a person has for the authorization server's consent step
_DOMAIN = b"toolkit-vault oauth flow v2\x00"
MAX_COOKIE = 3800
log = logging.getLogger(__name__)


class AnswerRefused(VaultError):
    """An authorization response that is not the flow's server's (a mix-up, RFC 9700 4.4):
    `reason` says which check failed. No code was exchanged."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "the answer did not come from the authorization server this connection was "
            "started with; no code was exchanged and nothing was stored"
        )
        self.reason = reason


@dataclass(frozen=True)
class Flow:
    """What the flow cookie holds: the link, the state, the PKCE verifier, and the server
    the flow is for (its redirect URI, issuer, token endpoint, whether it sends `iss`)."""

    link: str
    state: str
    verifier: str
    redirect_uri: str
    expires_at: float
    issuer: str | None = None  # None: endpoints declared without an issuer
    token_endpoint: str = ""
    iss_supported: bool = False  # RFC 9207: its metadata says its answers carry `iss`
    client_secret: str | None = None  # a confidential client's, typed by the person: sealed

    def mixed_up(self, reached: str, iss: str | None) -> str | None:
        """Why an answer that arrived at `reached` (the callback URL, no query) carrying
        `iss` is not this flow's server's (None: it is). RFC 9700 4.4.2: the answer must
        arrive at the redirect URI of the flow's server; RFC 9207 2.4: an `iss` sent must
        be the flow's issuer, advertised or not, and one advertised must be sent."""
        if not hmac.compare_digest(self.redirect_uri.encode(), reached.encode()):
            return "redirect_uri"
        if iss is not None:
            if self.issuer is None or not hmac.compare_digest(iss.encode(), self.issuer.encode()):
                return "iss"
        elif self.iss_supported:
            return "iss_missing"
        return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _FlowSigner:
    """The flow cookie: MACed fields; a client secret in it is sealed too (`crypto.seal`
    under its own subkey, bound to the link), so the browser holds only its ciphertext."""

    def __init__(self, key: SecretBytes) -> None:
        self._key = hmac.new(key.reveal(), _DOMAIN, hashlib.sha256).digest()
        self._seal = SecretBytes(hmac.new(self._key, b"client secret", hashlib.sha256).digest())

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).digest()

    def issue(self, flow: Flow) -> str:
        fields: list[Any] = [
            flow.link, flow.state, flow.verifier, flow.redirect_uri, int(flow.expires_at),
            flow.issuer, flow.token_endpoint, flow.iss_supported,
        ]  # fmt: skip
        if flow.client_secret is not None:
            sealed = crypto.seal(self._seal, flow.client_secret.encode(), flow.link.encode())
            fields.append(_b64(sealed))
        payload = _b64(json.dumps(fields).encode())
        return f"{payload}.{_b64(self._mac(payload))}"

    def verify(self, cookie: str, now: float) -> Flow:
        payload, _, mac = cookie.rpartition(".")
        try:
            if len(cookie) > MAX_COOKIE or not hmac.compare_digest(_unb64(mac), self._mac(payload)):
                raise IntakeRefused("invalid")
            link, state, verifier, redirect_uri, expires_at, issuer, token, iss, *sealed = (
                json.loads(_unb64(payload))
            )
            client_secret = None
            if sealed:
                box = _unb64(str(sealed[0]))
                client_secret = crypto.unseal(self._seal, box, str(link).encode()).decode()
            flow = Flow(
                str(link), str(state), str(verifier), str(redirect_uri), float(expires_at),
                None if issuer is None else str(issuer), str(token), iss is True, client_secret,
            )  # fmt: skip
        except (ValueError, TypeError, binascii.Error, DecryptionError):
            raise IntakeRefused("invalid") from None
        if now >= flow.expires_at:
            raise IntakeRefused("expired")
        return flow


class OAuthConnections:
    """The connect flow of one vault (made with the web console, which holds its intake
    links and the key of its flow cookies)."""

    def __init__(
        self,
        vault: Vault,
        intake: Intake | None,
        key: SecretBytes | None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`intake` and `key`: the intake links and the key of flow cookies (without them,
        connecting is refused: it needs the console). `clock`: a test's clock, which the
        vault's token policy then measures expiry against too."""
        self.vault, self._intake = vault, intake
        self.tokens = vault.oauth
        if clock is not None:
            self.tokens.clock = clock
        self._clock = clock or time.time
        self._flows = _FlowSigner(key or SecretBytes(secrets.token_bytes(32)))

    def spec_of(self, toolkit: RegisteredToolkit) -> OAuthSpec | None:
        return self.tokens.spec_of(toolkit)

    def wants_connect(self, toolkit: RegisteredToolkit, config: Mapping[str, Any]) -> bool:
        return self.tokens.wants_connect(toolkit, config)

    def refresh_ahead(self, ahead: float) -> list[str]:
        """`oauth_schedule.OAuthSchedule.refresh_ahead`, of this flow's vault."""
        return self.tokens.refresh_ahead(ahead)

    @property
    def intake(self) -> Intake:
        if self._intake is None:
            raise VaultError("connecting needs the web console (toolkit-vault serve)")
        return self._intake

    # -- connect ------------------------------------------------------------------------------

    def start(self, link: str, callback: str, client_secret: str | None = None) -> tuple[str, str]:
        """The authorization URL to send the person to, and the flow cookie to set (with
        the client secret sealed in it, for a confidential client: the person connecting
        types it). The redirect URI is `callback` + the server's own segment (`oauth.
        redirect_uri`). Raises IntakeRefused (the link), OAuthFailed (the server)."""
        view = self.intake.open(link)
        spec = self.spec_of(view.toolkit)
        if spec is None:
            raise VaultError("this toolkit does not connect through OAuth")
        if spec.client_secret_field is None:
            client_secret = None
        elif not client_secret:
            raise VaultError("this toolkit needs its client secret to connect")
        else:
            register_secrets([client_secret])
        client, found = client_for(spec, client_secret)
        state = secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64)  # 86 characters: RFC 7636 asks for 43 to 128
        expires_at = min(self._clock() + FLOW_TTL, view.claim.expires_at)
        back = redirect_uri(callback, spec)
        flow = Flow(
            link, state, verifier, back, expires_at, found.issuer, found.token_endpoint,
            found.iss_supported, client_secret,
        )  # fmt: skip
        cookie = self._flows.issue(flow)
        return client.authorization_url(back, state, verifier), cookie

    def finish(
        self, cookie: str, state: str, code: str, reached: str, iss: str | None = None
    ) -> tuple[IntakeView, Outcome]:
        """Check the state against the flow cookie, and that the answer is the flow's
        server's: it arrived at `reached` (the callback URL it came to, without its query),
        which must be that server's redirect URI, with `iss` (RFC 9207, None when absent)
        naming that server. Then exchange the code there, and only there, and store the
        token set as a new version (once per link). Raises IntakeRefused, AnswerRefused
        (audited `oauth_callback_refused`), OAuthFailed, ConfigInvalid."""
        flow = self._flows.verify(cookie, self._clock())
        if not state or not hmac.compare_digest(flow.state.encode(), state.encode()):
            raise IntakeRefused("invalid")
        view = self.intake.open(flow.link)
        claim = view.claim
        spec = self.spec_of(view.toolkit)
        if spec is None:
            raise IntakeRefused("changed")
        if spec.client_secret_field is not None and flow.client_secret is None:
            raise IntakeRefused("changed")  # the toolkit became confidential meanwhile
        mixed_up = flow.mixed_up(reached, iss)
        if mixed_up is not None:
            self._refuse(view, flow, mixed_up)
        client, found = client_for(spec, flow.client_secret)
        if not self._same_server(flow, spec, found):
            self._refuse(view, flow, "server_changed")  # the code goes where the flow began
        issuer, revocation = found.issuer, found.revocation_endpoint
        answer = client.exchange(flow.redirect_uri, code, flow.verifier)
        try:
            tokens = TokenSet.from_response(answer, issuer, self._clock(), None)
        except ValueError:
            raise OAuthFailed(
                "invalid_response", "the authorization server sent no token"
            ) from None
        register_secrets([tokens.access_token, tokens.refresh_token])
        public = view.public_config
        kept = kept_secrets(spec, flow.client_secret)
        sealed = tokens.secrets(spec.token_field) | kept
        view.toolkit.schema.validate(
            merge_secrets(public, {spec.token_field: tokens.access_token} | kept)
        )

        try:
            outcome = self.intake.commit(claim, view.toolkit, public, sealed)
        except IntakeRefused:  # purged or superseded meanwhile: tokens nobody will hold
            with suppress(VaultError, ValueError):
                revoke_at_server(client, revocation, tokens)
            raise
        store = self.vault.store
        details = {"link_id": claim.link_id, "status": outcome.status}
        for action, more in (
            (AuditAction.OAUTH_CONNECTED, token_facts(tokens)),
            (AuditAction.INTAKE_COMPLETED, {}),
        ):
            store.record_attempt(
                AuditDraft(
                    claim.actor, action, claim.session_id, claim.toolkit_name, claim.version,
                    {**details, **more},
                )
            )  # fmt: skip
        return view, outcome

    @staticmethod
    def _same_server(flow: Flow, spec: OAuthSpec, found: Endpoints) -> bool:
        """The server the code would go to now is the one the flow was started for: its
        redirect URI, issuer and token endpoint (its metadata may have changed since)."""
        callback = flow.redirect_uri.rpartition("/")[0]
        return (
            redirect_uri(callback, spec) == flow.redirect_uri
            and found.issuer == flow.issuer
            and found.token_endpoint == flow.token_endpoint
        )

    def _refuse(self, view: IntakeView, flow: Flow, reason: str) -> NoReturn:
        """Audit an answer refused as not the flow's server's (never its code or `iss`),
        and raise AnswerRefused."""
        claim = view.claim
        log.warning("%s: an authorization response was refused (%s)", claim.toolkit_name, reason)
        details = {"link_id": claim.link_id, "reason": reason, "issuer": flow.issuer}
        self.vault.store.record_attempt(
            AuditDraft(
                claim.actor, AuditAction.OAUTH_CALLBACK_REFUSED, claim.session_id,
                claim.toolkit_name, details=details,
            )
        )  # fmt: skip
        raise AnswerRefused(reason)
