"""Refresh once: an OAuth token made fresh before a toolkit is initialized from it.

Before a toolkit is initialized from a token that expires within a minute, `ready`
refreshes it inside the store's write transaction, which is serialized across threads,
processes and replicas (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock): the token
request is made only if the version read is still the last one (a compare-and-set on the
version number), else the newer version (another caller's refresh) is read and used. A
refresh answer without a refresh token keeps the old one; a rotated one replaces it.

`invalid_grant` (or any refusal) stores a version holding no access token and marked
`reconnect`: every later initialization reports `configured: false` with a fresh intake
link and makes no token request (no hot loop). A server that cannot be reached stores
nothing: a token still valid is used; an expired one is reported.

May import: oauth, store, schema, logs, errors, and `core`'s sealing and OAuth specs.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from toolkit_vault.core.oauth_specs import (
    RECONNECT,
    REFRESH_ACTOR,
    OAuthSpecs,
    client_for,
    client_secret_of,
    kept_secrets,
    token_facts,
)
from toolkit_vault.core.ports import IntakeOffer
from toolkit_vault.core.sealing import Sealing
from toolkit_vault.errors import ConfigInvalid, Reconnect, VaultError, VersionMoved
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import OAuthFailed, OAuthSpec, TokenSet
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.schema import merge_secrets
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.leases import RefreshLeases
from toolkit_vault.store.records import AuditDraft, VersionDraft, VersionRecord
from toolkit_vault.store.scopes import principal_of
from toolkit_vault.store.storage import Store
from toolkit_vault.telemetry import metrics, traces
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = [
    "LEASE_TTL",
    "MAX_FAILURES",
    "RETRY_SPACING",
    "Marked",
    "OAuthRefresher",
]

LEASE_TTL = 60.0  # seconds a refresh lease holds: more than discovery and a token request take
WAIT_S = 30.0  # seconds an initialization waits for another process's refresh
FIRST_POLL, MAX_POLL = 0.02, 0.2  # seconds between two looks at the lease, doubling
MAX_FAILURES = 3  # the server failed this many refreshes in a row: a person must connect
RETRY_SPACING = 60.0  # seconds before a try after a failure, doubled with each one in a row
# The longest lease and backoff this vault writes: a lease row claiming more is not believed
# (`store.leases`: the rows carry no MAC, and their worst case is bounded by these).
LEASE_BOUNDS = {
    "longest_lease": LEASE_TTL,
    "longest_backoff": RETRY_SPACING * 2 ** (MAX_FAILURES - 1),
}
# The server failed rather than refused: worth another try, after the spacing.
TRANSIENT = frozenset({"unavailable", "metadata", "server_error", "temporarily_unavailable"})
log = logging.getLogger(__name__)


class Marked(Reconnect):
    """A version marked for reconnecting was just stored (refused, or failed too often)."""


class OAuthRefresher:
    """The refresh-once policy of one vault."""

    def __init__(
        self,
        store: Store,
        sealing: Sealing,
        specs: OAuthSpecs,
        clock: Callable[[], float],
        tell_replicas: Callable[[ToolkitStatusEvent], None],
        intake: Callable[[], IntakeOffer | None],
    ) -> None:
        """`tell_replicas`: sends a status event to the other replicas only (the relay,
        when one is set); `intake`: the intake links, when the web console is mounted
        (a reconnect link is offered through them)."""
        self._store, self._sealing, self._specs = store, sealing, specs
        self.clock = clock
        self._tell = tell_replicas
        self._intake = intake

    def ready(
        self, record: VersionRecord, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[dict[str, Any], int]:
        """`config` with a token valid for at least a minute, and the version it is from;
        refreshes (once across every process) when needed. Raises Reconnect."""
        spec = self._specs.of(toolkit)
        if spec is None:
            return config, record.version
        for _ in range(5):
            tokens = TokenSet.of_config(config, spec.token_field)
            if tokens is None:
                return config, record.version  # a token typed in: nothing to refresh
            register_secrets([tokens.refresh_token])
            if tokens.reconnect:
                raise Reconnect(RECONNECT, self.reconnect_link(record, toolkit))
            if not tokens.expiring(self.clock()):
                return config, record.version
            secret = client_secret_of(spec, config)
            fresh = self.refresh(record, toolkit, spec, tokens, secret)
            if fresh is not None:
                return fresh
            latest = self.current(record.session_id, record.toolkit_name)
            if latest is None or latest.version == record.version:
                break
            record, config = latest, self._sealing.decrypt(latest)
        raise Reconnect("the stored OAuth connection could not be read again")

    def current(self, scope_id: str, name: str) -> VersionRecord | None:
        """The scope's current, authentic version of `name`."""
        for found in self._store.current_versions(scope_id):
            if found.toolkit_name == name and found.authentic:
                return found
        return None

    def refresh(
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
        Raises Reconnect (`Marked` when a version marked for reconnecting was stored)."""
        scope, name = record.session_id, record.toolkit_name
        leases, holder = RefreshLeases(self._store, **LEASE_BOUNDS), secrets.token_hex(16)
        delay, give_up = FIRST_POLL, time.monotonic() + WAIT_S
        while True:
            now = self.clock()
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
                with traces.span("oauth.refresh", toolkit=name):
                    new, refused = self._ask(spec, tokens, client_secret)  # no transaction open
                metrics.observe_oauth_refresh("refused" if new.reconnect else "refreshed")
            except OAuthFailed as exc:  # unavailable: counted, spaced, then a person is asked
                metrics.observe_oauth_refresh("unavailable")
                failures = leases.failed(scope, name, holder, self.clock(), RETRY_SPACING)
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
            details, action = token_facts(new, tokens), AuditAction.OAUTH_REFRESHED
        self._store.record_attempt(AuditDraft(REFRESH_ACTOR, action, scope, name, version, details))
        self._tell_replicas(scope, name, new.reconnect)
        if new.reconnect:
            raise Marked(RECONNECT, self.reconnect_link(record, toolkit))
        register_secrets([new.access_token, new.refresh_token])
        values = new.secrets(spec.token_field) | kept_secrets(spec, client_secret)
        return merge_secrets(record.public_config, values), version

    def mark_refused(self, record: VersionRecord, toolkit: RegisteredToolkit) -> bool:
        """A server answered 401 to the access token of `record`: the version is marked for
        reconnecting, as a refused refresh is (audited `oauth_refresh_failed`, error
        `unauthorized`; the replicas told). False when there is nothing to mark: no OAuth,
        a token typed in, already marked, or a newer version meanwhile."""
        spec = self._specs.of(toolkit)
        if spec is None:
            return False
        config = self._sealing.decrypt(record)
        tokens = TokenSet.of_config(config, spec.token_field)
        if tokens is None or tokens.reconnect:
            return False
        dead = TokenSet(issuer=tokens.issuer, scope=tokens.scope, reconnect=True)
        try:
            version = self._append(record, spec, dead, client_secret_of(spec, config))
        except VersionMoved:
            return False
        scope, name = record.session_id, record.toolkit_name
        details: dict[str, Any] = {"error": "unauthorized", "issuer": tokens.issuer}
        action = AuditAction.OAUTH_REFRESH_FAILED
        self._store.record_attempt(AuditDraft(REFRESH_ACTOR, action, scope, name, version, details))
        self._tell_replicas(scope, name, True)
        return True

    def _tell_replicas(self, scope: str, name: str, marked: bool) -> None:
        """The other replicas (`serve` on PostgreSQL: the relay) hear of the new version:
        their instances from a principal's scope are initialized again without delay, with
        the new token (or told to reconnect); any other instance there follows at that
        replica's next `refresh_ahead` round."""
        event = ToolkitStatusEvent(
            session_id=scope,
            toolkit_name=name,
            configured=not marked,
            status="partial" if marked else "ok",
            message=RECONNECT if marked else "token refreshed",
        )
        self._tell(event)

    def _moved(self, record: VersionRecord) -> bool:
        latest = self.current(record.session_id, record.toolkit_name)
        return latest is None or latest.version != record.version

    def _append(
        self, record: VersionRecord, spec: OAuthSpec, new: TokenSet, client_secret: str | None
    ) -> int:
        """Store `new` as the next version, only if `record` is still the last and still
        current (the token request took a while: another process may have refreshed, an
        operator purged); raises VersionMoved."""
        scope, name = record.session_id, record.toolkit_name

        def build(version: int, primary_kek: str) -> VersionDraft:
            values = new.secrets(spec.token_field) | kept_secrets(spec, client_secret)
            public = record.public_config
            digest = record.schema_digest
            sealed = self._sealing.seal(scope, name, version, digest, public, values, primary_kek)
            if new.reconnect:
                status, message = "partial", "needs a person to connect again"
            else:
                status, message = "ok", "token refreshed"
            return VersionDraft.of(status, message, REFRESH_ACTOR, digest, public, sealed)

        configure = AuditAction.CONFIGURE
        return self._store.append_version(scope, name, build, configure, after=record.version)

    def _unreachable(
        self, record: VersionRecord, spec: OAuthSpec, tokens: TokenSet, client_secret: str | None
    ) -> tuple[dict[str, Any], int]:
        """The server cannot refresh now: a token still valid is used; an expired one is
        reported (nothing stored; tried again once the backoff has passed)."""
        if tokens.expires_at is not None and tokens.expires_at > self.clock():
            values = tokens.secrets(spec.token_field) | kept_secrets(spec, client_secret)
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
        client, found = client_for(spec, client_secret)
        issuer = found.issuer
        try:
            answer = client.refresh(tokens.refresh_token)
        except OAuthFailed as exc:
            if exc.code in TRANSIENT:
                raise
            return dead, exc.code
        try:
            fresh = TokenSet.from_response(answer, issuer or tokens.issuer, self.clock(), tokens)
        except ValueError:
            return dead, "invalid_response"
        return fresh, None

    def reconnect_link(self, record: VersionRecord, toolkit: RegisteredToolkit) -> str | None:
        """A fresh intake link for the person to connect again; None when it cannot be made."""
        public = {k: v for k, v in record.public_config.items()}
        owner = principal_of(record.session_id) or REFRESH_ACTOR
        intake = self._intake()
        if intake is None:
            return None
        try:
            return intake.offer(owner, record.session_id, toolkit, public, RECONNECT)
        except (VaultError, ConfigInvalid) as exc:
            log.warning("no reconnect link for %s: %s", record.toolkit_name, exc.message)
            return None
