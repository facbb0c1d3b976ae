"""OpenID Connect, the relying party's side: console sign-in through an operator's identity
provider (authorization code + PKCE S256, a `nonce`, discovery, the `id_token` checked).

The provider is found from `{issuer}/.well-known/openid-configuration`, which must name the
issuer it was asked for; its keys from the document's `jwks_uri`, read again once when an
`id_token` names a key id not yet seen (the provider rotated its keys). Both are bounded
reads of https (http only to loopback), never a redirect followed.

An `id_token` is believed only when all of these hold, each refused with its own reason
(`IdTokenRefused.reason`) and never with any of the token's text: its signature verifies
under one of the provider's published keys with an asymmetric algorithm (never `none`, never
an HMAC whose key would be the client secret); `iss` is the configured issuer; `aud` names
this client (and `azp`, when present or when `aud` names several, is this client); `exp` has
not passed and `iat`/`nbf` are not in the future (a small leeway for clocks); `nonce` is the
one this sign-in sent; `sub` is a string. The nonce is what makes a token captured from
another sign-in (or an older one of the same person) worthless here.

The client secret, when the client is confidential, goes to the token endpoint only
(`client_secret_basic`), and is held in a value whose repr hides it.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from authlib.integrations.base_client import OAuthError
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

with warnings.catch_warnings():  # authlib suggests httpx2 where it is not installed
    warnings.simplefilter("ignore")
    from authlib.integrations.httpx_client import OAuth2Client

from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.oauth.client import UNAVAILABLE, OAuthFailed
from toolkit_vault.oauth.metadata import read_document
from toolkit_vault.oauth.spec import secure_url

__all__ = [
    "ALGORITHMS",
    "IdTokenRefused",
    "OpenIDProvider",
    "RelyingParty",
    "check_claims",
    "discover_provider",
]

log = logging.getLogger(__name__)
# Asymmetric only: with an HMAC algorithm the "key" would be the client secret, which a
# token forger may hold (a public client has none at all).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
LEEWAY = 60.0  # seconds of clock difference allowed between the provider and the vault
MAX_AGE = 300.0  # seconds a discovered document and key set are believed
TIMEOUT = 10.0
MAX_SUB = 255  # OpenID Connect Core 2: `sub` is at most 255 ASCII characters


class IdTokenRefused(VaultError):
    """An `id_token` not believed; `reason` is one word (`signature`, `issuer`, `audience`,
    `expired`, `not_yet_valid`, `nonce`, `malformed`). Never carries the token's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the identity provider's id_token was refused ({reason})")
        self.reason = reason


@dataclass(frozen=True)
class OpenIDProvider:
    """What discovery found: the endpoints and the algorithms the provider signs with."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]
    end_session_endpoint: str | None = None


def discover_provider(issuer: str, *, timeout: float = TIMEOUT) -> OpenIDProvider:
    """The provider at `issuer`, from its OpenID discovery document; raises OAuthFailed."""
    if not secure_url(issuer):
        raise OAuthFailed("insecure", "the issuer must be https (or http to loopback)")
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    document = read_document(url, timeout)
    if document is None:
        raise OAuthFailed("metadata", "the identity provider publishes no OpenID configuration")
    if document.get("issuer") != issuer:
        raise OAuthFailed("metadata", "the identity provider's configuration names another issuer")
    names = ("authorization_endpoint", "token_endpoint", "jwks_uri")
    if not all(isinstance(document.get(n), str) and secure_url(document[n]) for n in names):
        raise OAuthFailed("metadata", "the identity provider's configuration is incomplete")
    offered = document.get("id_token_signing_alg_values_supported")
    offered = offered if isinstance(offered, list) else ["RS256"]  # the spec's default
    algorithms = tuple(a for a in ALGORITHMS if a in offered)
    if not algorithms:
        raise OAuthFailed("metadata", "the identity provider signs with no algorithm accepted")
    end = document.get("end_session_endpoint")
    return OpenIDProvider(
        issuer,
        document["authorization_endpoint"],
        document["token_endpoint"],
        document["jwks_uri"],
        algorithms,
        end if isinstance(end, str) and secure_url(end) else None,
    )


def _numeric(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IdTokenRefused("malformed")
    return float(value)


def check_claims(
    claims: Mapping[str, Any],
    *,
    issuer: str,
    client_id: str,
    nonce: str,
    now: float,
    leeway: float = LEEWAY,
) -> None:
    """Raise IdTokenRefused unless the (signature-checked) claims are for this sign-in."""
    if claims.get("iss") != issuer:
        raise IdTokenRefused("issuer")
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud
    if not isinstance(audiences, list) or client_id not in audiences:
        raise IdTokenRefused("audience")
    if ("azp" in claims or len(audiences) > 1) and claims.get("azp") != client_id:
        raise IdTokenRefused("audience")
    expires = _numeric(claims, "exp")
    if expires is None or now >= expires + leeway:
        raise IdTokenRefused("expired")
    issued = _numeric(claims, "iat")
    if issued is None:
        raise IdTokenRefused("malformed")
    not_before = _numeric(claims, "nbf")
    if issued > now + leeway or (not_before is not None and not_before > now + leeway):
        raise IdTokenRefused("not_yet_valid")
    sent = claims.get("nonce")
    if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), nonce.encode()):
        raise IdTokenRefused("nonce")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not 0 < len(subject) <= MAX_SUB:
        raise IdTokenRefused("malformed")


class RelyingParty:
    """The vault as an OpenID Connect client of one provider: the authorization URL, the
    code exchange, and the `id_token` checks. Discovery and keys are cached per instance."""

    def __init__(
        self,
        issuer: str,
        client_id: str,
        client_secret: SecretBytes | None = None,
        scopes: tuple[str, ...] = ("openid", "profile", "email"),
        *,
        leeway: float = LEEWAY,
        clock: Any = time.time,
    ) -> None:
        if not secure_url(issuer):
            raise VaultError("the OIDC issuer must be https (or http to a loopback host)")
        if not client_id:
            raise VaultError("the OIDC client id is not set")
        self.issuer, self.client_id = issuer, client_id
        self.scopes = ("openid", *(s for s in scopes if s != "openid"))
        self.leeway, self._clock = leeway, clock
        self._secret = client_secret
        self._lock = threading.Lock()
        self._provider: tuple[float, OpenIDProvider] | None = None
        self._keys: tuple[float, KeySet] | None = None

    def __repr__(self) -> str:
        return f"RelyingParty(issuer={self.issuer!r}, client_id={self.client_id!r})"

    def provider(self) -> OpenIDProvider:
        now = time.monotonic()
        with self._lock:
            cached = self._provider
        if cached is not None and now - cached[0] < MAX_AGE:
            return cached[1]
        found = discover_provider(self.issuer)
        with self._lock:
            self._provider = (now, found)
        return found

    def _session(self, **kwargs: Any) -> OAuth2Client:
        secret = self._secret.reveal().decode() if self._secret is not None else None
        return OAuth2Client(
            client_id=self.client_id,
            client_secret=secret,
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
            timeout=TIMEOUT,
            **kwargs,
        )

    def authorization_url(self, redirect_uri: str, state: str, nonce: str, verifier: str) -> str:
        with self._session(
            redirect_uri=redirect_uri, scope=" ".join(self.scopes), code_challenge_method="S256"
        ) as session:
            url, _ = session.create_authorization_url(
                self.provider().authorization_endpoint,
                state=state,
                nonce=nonce,
                code_verifier=verifier,
            )
        return str(url)

    def exchange(self, redirect_uri: str, code: str, verifier: str) -> str:
        """The `id_token` the token endpoint gives for `code` (not yet checked)."""
        try:
            with self._session(redirect_uri=redirect_uri) as session:
                answer = session.fetch_token(
                    self.provider().token_endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=verifier,
                )
        except OAuthError as exc:
            code_ = exc.error if isinstance(exc.error, str) and exc.error.isascii() else "error"
            log.warning("identity provider refused the code (%s)", code_[:40])
            raise OAuthFailed(code_[:40], "the identity provider refused the sign-in") from None
        except UNAVAILABLE as exc:
            log.warning("identity provider unavailable (%s)", type(exc).__name__)
            raise OAuthFailed("unavailable", "the identity provider cannot be reached") from None
        id_token = answer.get("id_token") if isinstance(answer, Mapping) else None
        if not isinstance(id_token, str):
            raise OAuthFailed("invalid_response", "the identity provider sent no id_token")
        return id_token

    def _key_set(self, *, fresh: bool = False) -> KeySet:
        now = time.monotonic()
        with self._lock:
            cached = self._keys
        if cached is not None and not fresh and now - cached[0] < MAX_AGE:
            return cached[1]
        document = read_document(self.provider().jwks_uri, TIMEOUT)
        try:
            keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError):
            keys = None
        if document is None or keys is None:
            raise OAuthFailed("metadata", "the identity provider's key set cannot be read")
        with self._lock:
            self._keys = (now, keys)
        return keys

    def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The claims of `id_token` once every check holds; raises IdTokenRefused."""
        algorithms = self.provider().algorithms
        try:
            try:
                token = jwt.decode(id_token, self._key_set(), algorithms=algorithms)
            except InvalidKeyIdError:  # a key id not seen yet: the provider rotated
                token = jwt.decode(id_token, self._key_set(fresh=True), algorithms=algorithms)
        except (JoseError, ValueError, TypeError) as exc:
            log.warning("id_token refused: signature (%s)", type(exc).__name__)
            raise IdTokenRefused("signature") from None
        claims = dict(token.claims)
        try:
            check_claims(
                claims,
                issuer=self.issuer,
                client_id=self.client_id,
                nonce=nonce,
                now=float(self._clock()),
                leeway=self.leeway,
            )
        except IdTokenRefused as exc:
            log.warning("id_token refused: %s", exc.reason)
            raise
        return claims
