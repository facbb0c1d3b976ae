"""OAuth connections, the vault's policy: connect through an intake link, refresh once,
and tell a person when only they can fix it.

- **Connect.** An intake link of a toolkit whose schema declares `x-oauth` offers a
  Connect button: `start` makes a PKCE (S256) verifier and a `state`, both kept in a
  MACed, short-lived cookie bound to the link (never in the URL the authorization server
  sees, so an intercepted redirect is useless without the browser), with the server the
  flow is for: its issuer, its token endpoint and its own redirect URI; `finish` checks the
  state, then that the answer is that server's (RFC 9700 4.4: it arrived at that server's
  redirect URI, its RFC 9207 `iss` names the flow's issuer), exchanges the code with that
  server only and stores the token set as sealed secret fields of a new version, through
  the same `Vault.commit` a configure uses (the link's used-once check included).
  `oauth_connected` joins the chain; a refused answer is `oauth_callback_refused`.
- **Refresh once.** Before a toolkit is initialized from a token that expires within a
  minute, `ready` refreshes it inside the store's write transaction, which is serialized
  across threads, processes and replicas (SQLite's BEGIN IMMEDIATE, PostgreSQL's
  advisory lock): the token request is made only if the version read is still the last
  one (a compare-and-set on the version number), else the newer version (another
  caller's refresh) is read and used. A refresh answer without a refresh token keeps the
  old one; a rotated one replaces it.
- **Failure.** `invalid_grant` (or any refusal) stores a version holding no access token
  and marked `reconnect`: every later initialization reports `configured: false` with a
  fresh intake link and makes no token request (no hot loop). A server that cannot be
  reached stores nothing: a token still valid is used; an expired one is reported.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NoReturn

from toolkit_vault import crypto
from toolkit_vault.core.intake import Intake, IntakeRefused, IntakeView
from toolkit_vault.core.vault import Outcome, Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import (
    ConfigInvalid,
    DecryptionError,
    Reconnect,
    SchemaRefused,
    ToolkitNotFound,
    VaultError,
    VersionMoved,
)
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import (
    Endpoints,
    OAuthClient,
    OAuthFailed,
    OAuthSpec,
    TokenSet,
    discover,
    oauth_spec,
    redirect_uri,
)
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.schema import merge_secrets
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.leases import RefreshLeases
from toolkit_vault.store.records import AuditDraft, VersionDraft, VersionRecord
from toolkit_vault.store.scopes import principal_of
from toolkit_vault.toolkits.imports import stored_toolkits
from toolkit_vault.toolkits.registry import RegisteredToolkit, ToolkitRegistry

__all__ = ["FLOW_TTL", "REFRESH_ACTOR", "AnswerRefused", "Flow", "OAuthConnections"]

FLOW_TTL = 600.0  # seconds a person has for the authorization server's consent step
REFRESH_ACTOR = "oauth:refresh"
RECONNECT = "the authorization expired or was revoked: a person must connect again"
LEASE_TTL = 60.0  # seconds a refresh lease holds: more than discovery and a token request take
WAIT_S = 30.0  # seconds an initialization waits for another process's refresh
FIRST_POLL, MAX_POLL = 0.02, 0.2  # seconds between two looks at the lease, doubling
MAX_FAILURES = 3  # the server failed this many refreshes in a row: a person must connect
RETRY_SPACING = 60.0  # seconds before a try after a failure, doubled with each one in a row
# The server failed rather than refused: worth another try, after the spacing.
TRANSIENT = frozenset({"unavailable", "metadata", "server_error", "temporarily_unavailable"})
_DOMAIN = b"toolkit-vault oauth flow v2\x00"
MAX_COOKIE = 3800
log = logging.getLogger(__name__)


class _Marked(Reconnect):
    """A version marked for reconnecting was just stored (refused, or failed too often)."""


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
    """The connect flow and the refresher of one vault; installed as `vault.oauth`."""

    def __init__(
        self,
        vault: Vault,
        intake: Intake | None,
        key: SecretBytes | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`intake` and `key`: the intake links and the key of flow cookies, when the web
        console is mounted (`create_console`); without them (every process `open_vault`
        opens) tokens are refreshed and revoked, and connecting needs the console."""
        self.vault, self._intake, self._clock = vault, intake, clock
        self._flows = _FlowSigner(key or SecretBytes(secrets.token_bytes(32)))
        self._specs: dict[str, OAuthSpec | None] = {}
        self._seen: dict[tuple[str, str], int] = {}  # (scope, toolkit) -> version, last round
        self._revoking: ToolkitRegistry | None = None  # loaded to revoke (`_toolkit_to_revoke`)
        self._lock = threading.Lock()
        vault.oauth = self

    def spec_of(self, toolkit: RegisteredToolkit) -> OAuthSpec | None:
        """The toolkit's `x-oauth`, once per schema digest; None without one (or a wrong
        one, logged: such a toolkit cannot connect)."""
        digest = toolkit.schema.digest
        with self._lock:
            if digest in self._specs:
                return self._specs[digest]
        try:
            spec = oauth_spec(toolkit.definition.config_schema)
        except SchemaRefused as exc:
            log.warning("toolkit %s: %s", toolkit.definition.name, exc.message)
            spec = None
        with self._lock:
            self._specs[digest] = spec
        return spec

    @property
    def intake(self) -> Intake:
        if self._intake is None:
            raise VaultError("connecting needs the web console (toolkit-vault serve)")
        return self._intake

    def wants_connect(self, toolkit: RegisteredToolkit, config: Mapping[str, Any]) -> bool:
        """A configure of an OAuth toolkit that carries no token: a person must connect."""
        spec = self.spec_of(toolkit)
        if spec is None:
            return False
        node: Any = config
        for part in spec.token_field.split("/")[1:]:
            node = node.get(part) if isinstance(node, Mapping) else None
        return node is None

    def _client(
        self, spec: OAuthSpec, client_secret: str | None = None
    ) -> tuple[OAuthClient, Endpoints]:
        found = discover(spec)
        client = OAuthClient(
            spec, found.authorization_endpoint, found.token_endpoint, client_secret
        )
        return client, found

    @staticmethod
    def _client_secret(spec: OAuthSpec, config: Mapping[str, Any]) -> str | None:
        """A confidential client's secret as the stored config holds it (None: public)."""
        if spec.client_secret_field is None:
            return None
        node: Any = config
        for part in pointer_tokens(spec.client_secret_field):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, str):
            register_secrets([node])
            return node
        return None

    def _kept(self, spec: OAuthSpec, client_secret: str | None) -> dict[str, str]:
        """The secret fields a new version carries besides the token set: the client secret."""
        if spec.client_secret_field is None or client_secret is None:
            return {}
        return {spec.client_secret_field: client_secret}

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
        client, found = self._client(spec, client_secret)
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
        client, found = self._client(spec, flow.client_secret)
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
        kept = self._kept(spec, flow.client_secret)
        sealed = tokens.secrets(spec.token_field) | kept
        view.toolkit.schema.validate(
            merge_secrets(public, {spec.token_field: tokens.access_token} | kept)
        )

        try:
            outcome = self.intake.commit(claim, view.toolkit, public, sealed)
        except IntakeRefused:  # purged or superseded meanwhile: tokens nobody will hold
            with suppress(VaultError, ValueError):
                _revoke(client, revocation, tokens)
            raise
        store = self.vault.store
        details = {"link_id": claim.link_id, "status": outcome.status}
        for action, more in (
            (AuditAction.OAUTH_CONNECTED, self._facts(tokens)),
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

    @staticmethod
    def _facts(tokens: TokenSet, previous: TokenSet | None = None) -> dict[str, Any]:
        """What an audit event may say of a token set: never a token."""
        facts: dict[str, Any] = {
            "issuer": tokens.issuer,
            "scope": tokens.scope,
            "expires_at": tokens.expires_at,
            "has_refresh_token": tokens.refresh_token is not None,
        }
        if previous is not None:
            facts["refresh_token_rotated"] = tokens.refresh_token != previous.refresh_token
        return facts

    # -- refresh before initialization ---------------------------------------------------------

    def ready(
        self, record: VersionRecord, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[dict[str, Any], int]:
        """`config` with a token valid for at least a minute, and the version it is from;
        refreshes (once across every process) when needed. Raises Reconnect."""
        spec = self.spec_of(toolkit)
        if spec is None:
            return config, record.version
        for _ in range(5):
            tokens = TokenSet.of_config(config, spec.token_field)
            if tokens is None:
                return config, record.version  # a token typed in: nothing to refresh
            register_secrets([tokens.refresh_token])
            if tokens.reconnect:
                raise Reconnect(RECONNECT, self._reconnect_link(record, toolkit))
            if not tokens.expiring(self._clock()):
                return config, record.version
            secret = self._client_secret(spec, config)
            fresh = self._refresh(record, toolkit, spec, tokens, secret)
            if fresh is not None:
                return fresh
            latest = self._current(record)
            if latest is None or latest.version == record.version:
                break
            record, config = latest, self.vault.decrypt(latest)
        raise Reconnect("the stored OAuth connection could not be read again")

    def _current(self, record: VersionRecord) -> VersionRecord | None:
        for found in self.vault.store.current_versions(record.session_id):
            if found.toolkit_name == record.toolkit_name and found.authentic:
                return found
        return None

    def _refresh(
        self,
        record: VersionRecord,
        toolkit: RegisteredToolkit,
        spec: OAuthSpec,
        tokens: TokenSet,
        client_secret: str | None = None,
    ) -> tuple[dict[str, Any], int] | None:
        """Refresh `record`'s token set once across every process: take its lease, ask the
        server outside any transaction, append the new version only if `record` is still
        the last. None when another process refreshed it meanwhile (read the latest).
        Raises Reconnect (`_Marked` when a version marked for reconnecting was stored)."""
        scope, name = record.session_id, record.toolkit_name
        leases, holder = RefreshLeases(self.vault.store), secrets.token_hex(16)
        delay, give_up = FIRST_POLL, time.monotonic() + WAIT_S
        while True:
            now = self._clock()
            claim = leases.peek(scope, name, record.version, holder, now)
            if claim.won:
                claim = leases.claim(scope, name, record.version, holder, now, LEASE_TTL)
                if claim.won:
                    break
            if claim.backing_off(now):  # the server failed lately: not asked again yet
                return self._unreachable(record, spec, tokens, client_secret)
            if time.monotonic() >= give_up:
                raise Reconnect("another refresh of this OAuth token is taking long; try again")
            time.sleep(delay)  # another process is asking: wait for its version
            delay = min(delay * 2, MAX_POLL)
            if self._moved(record):
                return None
        failures = 0
        try:
            if self._moved(record):  # appended between this read and the claim
                return None
            try:
                new, refused = self._ask(spec, tokens, client_secret)  # no transaction open
            except OAuthFailed as exc:  # unavailable: counted, spaced, then a person is asked
                failures = leases.failed(scope, name, holder, self._clock(), RETRY_SPACING)
                log.warning(
                    "%s: the authorization server failed a refresh (%s), %d time(s) in a row",
                    name, exc.code, failures,
                )  # fmt: skip
                if failures < MAX_FAILURES:
                    return self._unreachable(record, spec, tokens, client_secret)
                new = TokenSet(issuer=tokens.issuer, scope=tokens.scope, reconnect=True)
                refused = exc.code
            try:
                version = self._append(record, spec, new, client_secret)
            except VersionMoved:  # another refreshed too (its lease outlived), or a purge
                log.warning("%s: the version refreshed is no longer current; not stored", name)
                return None
        finally:
            leases.release(scope, name, holder)
        if new.reconnect:
            details: dict[str, Any] = {"error": refused, "issuer": tokens.issuer}
            if failures:
                details["failures_in_a_row"] = failures
            action = AuditAction.OAUTH_REFRESH_FAILED
        else:
            details, action = self._facts(new, tokens), AuditAction.OAUTH_REFRESHED
        self.vault.store.record_attempt(
            AuditDraft(REFRESH_ACTOR, action, scope, name, version, details)
        )
        self._tell_replicas(scope, name, new.reconnect)
        if new.reconnect:
            raise _Marked(RECONNECT, self._reconnect_link(record, toolkit))
        register_secrets([new.access_token, new.refresh_token])
        values = new.secrets(spec.token_field) | self._kept(spec, client_secret)
        return merge_secrets(record.public_config, values), version

    def _tell_replicas(self, scope: str, name: str, marked: bool) -> None:
        """The other replicas (`serve` on PostgreSQL: the relay) hear of the new version:
        their instances from a principal's scope are initialized again at once, with the
        new token (or told to reconnect); any other instance there follows at that
        replica's next `refresh_ahead` round."""
        if self.vault.relay is None:
            return
        event = ToolkitStatusEvent(
            session_id=scope,
            toolkit_name=name,
            configured=not marked,
            status="partial" if marked else "ok",
            message=RECONNECT if marked else "token refreshed",
        )
        self.vault.relay(event)

    def _moved(self, record: VersionRecord) -> bool:
        latest = self._current(record)
        return latest is None or latest.version != record.version

    def _append(
        self, record: VersionRecord, spec: OAuthSpec, new: TokenSet, client_secret: str | None
    ) -> int:
        """Store `new` as the next version, only if `record` is still the last and still
        current (the token request took a while: another process may have refreshed, an
        operator purged); raises VersionMoved."""
        scope, name = record.session_id, record.toolkit_name

        def build(version: int, primary_kek: str) -> VersionDraft:
            values = new.secrets(spec.token_field) | self._kept(spec, client_secret)
            public = record.public_config
            digest = record.schema_digest
            sealed = self.vault.seal(scope, name, version, digest, public, values, primary_kek)
            if new.reconnect:
                status, message = "partial", "needs a person to connect again"
            else:
                status, message = "ok", "token refreshed"
            return VersionDraft.of(status, message, REFRESH_ACTOR, digest, public, sealed)

        configure = AuditAction.CONFIGURE
        return self.vault.store.append_version(scope, name, build, configure, after=record.version)

    def _unreachable(
        self, record: VersionRecord, spec: OAuthSpec, tokens: TokenSet, client_secret: str | None
    ) -> tuple[dict[str, Any], int]:
        """The server cannot refresh now: a token still valid is used; an expired one is
        reported (nothing stored; tried again once the backoff has passed)."""
        if tokens.expires_at is not None and tokens.expires_at > self._clock():
            values = tokens.secrets(spec.token_field) | self._kept(spec, client_secret)
            return merge_secrets(record.public_config, values), record.version
        raise Reconnect(
            "the authorization server cannot be reached; the token expired (tried again later)"
        )

    def _ask(
        self, spec: OAuthSpec, tokens: TokenSet, client_secret: str | None
    ) -> tuple[TokenSet, str | None]:
        """The refreshed set, or one marked `reconnect` with the server's refusal. Raises
        OAuthFailed when the server failed rather than refused (worth another try)."""
        dead = TokenSet(issuer=tokens.issuer, scope=tokens.scope, reconnect=True)
        if tokens.refresh_token is None:
            return dead, "no_refresh_token"
        client, found = self._client(spec, client_secret)
        issuer = found.issuer
        try:
            answer = client.refresh(tokens.refresh_token)
        except OAuthFailed as exc:
            if exc.code in TRANSIENT:
                raise
            return dead, exc.code
        try:
            fresh = TokenSet.from_response(answer, issuer or tokens.issuer, self._clock(), tokens)
        except ValueError:
            return dead, "invalid_response"
        return fresh, None

    def _reconnect_link(self, record: VersionRecord, toolkit: RegisteredToolkit) -> str | None:
        """A fresh intake link for the person to connect again; None when it cannot be made."""
        public = {k: v for k, v in record.public_config.items()}
        owner = principal_of(record.session_id) or REFRESH_ACTOR
        if self._intake is None:
            return None
        try:
            return self.intake.offer(owner, record.session_id, toolkit, public, RECONNECT)
        except (VaultError, ConfigInvalid) as exc:
            log.warning("no reconnect link for %s: %s", record.toolkit_name, exc.message)
            return None

    # -- revocation (RFC 7009) ----------------------------------------------------------------

    def revoke(self, actor: str, scope_id: str, toolkit_name: str | None = None) -> list[str]:
        """Revoke at their servers the token sets current in a scope (one toolkit, or all),
        before a purge shreds them; returns the toolkits revoked, each audited
        `oauth_disconnected`. A server without a revocation endpoint, or that cannot be
        reached, is logged and skipped: a purge never waits on it."""
        revoked = []
        for record in self.vault.store.current_versions(scope_id):
            if toolkit_name not in (None, record.toolkit_name) or not record.authentic:
                continue
            toolkit = self._toolkit_to_revoke(record.toolkit_name)
            if toolkit is None:
                continue
            try:
                spec = self.spec_of(toolkit)
                if spec is None:
                    continue
                config = self.vault.decrypt(record)
                tokens = TokenSet.of_config(config, spec.token_field)
                if tokens is None or tokens.reconnect:
                    continue
                register_secrets([tokens.access_token, tokens.refresh_token])
                client, found = self._client(spec, self._client_secret(spec, config))
                if not _revoke(client, found.revocation_endpoint, tokens):
                    log.info("%s: its server offers no revocation", record.toolkit_name)
                    continue
            except (VaultError, ValueError) as exc:
                log.warning("%s: tokens not revoked (%s)", record.toolkit_name, type(exc).__name__)
                continue
            details = {"revoked": True, "issuer": tokens.issuer}
            self.vault.store.record_attempt(
                AuditDraft(
                    actor, AuditAction.OAUTH_DISCONNECTED, scope_id, record.toolkit_name,
                    record.version, details,
                )
            )  # fmt: skip
            revoked.append(record.toolkit_name)
        return revoked

    def _toolkit_to_revoke(self, name: str) -> RegisteredToolkit | None:
        """The toolkit whose `x-oauth` names the server to revoke at. A vault opened without
        toolkits (the operators' `purge`, so a broken plugin cannot stop it) loads them
        here, once, only when a purge meets one it lacks; a plugin that fails to load is
        left out as always (its tokens then expire at the server instead)."""
        try:
            return self.vault.registry.get(name)
        except ToolkitNotFound:
            pass
        with self._lock:
            if self._revoking is None:
                try:
                    registry = ToolkitRegistry.default()
                    registry.load_imported(stored_toolkits(self.vault.store))
                except VaultError as exc:
                    log.warning("toolkits not loaded to revoke tokens (%s)", exc.message)
                    registry = ToolkitRegistry()
                self._revoking = registry
            registry = self._revoking
        try:
            return registry.get(name)
        except ToolkitNotFound:
            return None

    # -- proactive refresh ----------------------------------------------------------------------

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
        for scope_id, name in sorted(self.vault.live_scopes()):
            record = self._current_of(scope_id, name)
            if record is None:
                continue
            try:
                toolkit = self.vault.registry.get(name)
                spec = self.spec_of(toolkit)
                if spec is None:
                    continue
                moved = self._seen.get((scope_id, name)) != record.version
                refreshed = self._ahead(record, toolkit, spec, ahead)
            except VaultError as exc:
                log.warning("%s: not refreshed ahead (%s)", name, type(exc).__name__)
                continue
            if refreshed or moved:
                self.vault.reinitialize(scope_id, name)
            if refreshed:
                done.append(f"{scope_id}/{name}")
            latest = self._current_of(scope_id, name) if refreshed else record
            self._seen[(scope_id, name)] = latest.version if latest else 0
        return done

    def _ahead(
        self, record: VersionRecord, toolkit: RegisteredToolkit, spec: OAuthSpec, ahead: float
    ) -> bool:
        """Refresh `record`'s token set if it expires within `ahead` seconds; whether a
        version was stored here (refreshed, or marked for reconnecting)."""
        config = self.vault.decrypt(record)
        tokens = TokenSet.of_config(config, spec.token_field)
        if tokens is None or tokens.reconnect or tokens.expires_at is None:
            return False
        if tokens.expires_at - self._clock() >= ahead:
            return False
        register_secrets([tokens.access_token, tokens.refresh_token])
        try:
            fresh = self._refresh(record, toolkit, spec, tokens, self._client_secret(spec, config))
        except _Marked:
            return True  # stored: the instances are initialized again and say so
        except Reconnect:
            return False  # the server cannot be reached: tried again after the backoff
        return fresh is not None and fresh[1] != record.version

    def _current_of(self, scope_id: str, name: str) -> VersionRecord | None:
        for found in self.vault.store.current_versions(scope_id):
            if found.toolkit_name == name and found.authentic:
                return found
        return None


def _revoke(client: OAuthClient, endpoint: str | None, tokens: TokenSet) -> bool:
    """Revoke a token set at its server (RFC 7009: the refresh token, then the access
    token); False when the server offers no revocation."""
    if endpoint is None:
        return False
    if tokens.refresh_token:
        client.revoke(endpoint, tokens.refresh_token, "refresh_token")
    client.revoke(endpoint, tokens.access_token, "access_token")
    return True
