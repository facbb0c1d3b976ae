"""A real OAuth 2.1 authorization server on loopback for the OAuth tests: authlib's flask
`AuthorizationServer` with authorization code + PKCE (S256 required) and refresh tokens,
RFC 8414 metadata, RFC 7009 revocation, served by werkzeug in a thread.

Knobs make it misbehave as providers do: a short `expires_in`, no `refresh_token` in a
refresh response, refresh token rotation (the old one dies), `invalid_grant` for every
refresh. It counts token-endpoint calls and keeps what each request carried (the
`resource`, the `code_challenge_method`), never to be asserted on as a secret.

RFC 9207: `send_iss` adds `iss` to its authorization responses (authlib's
`IssuerParameter`), `advertise_iss` says so in its metadata. `forward_to` makes it the
hostile server of an issuer mix-up: its `/authorize` sends the person on to another
server's `/authorize` with the same query, and its `/token` redeems what it is given there.
A code is redeemed only by the client it was issued to, with its redirect URI.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9207 import IssuerParameter
from flask import Flask, Response, jsonify, redirect, request

from http_support import loopback_wsgi

CLIENT_ID = "tkv-test-client"
CONFIDENTIAL_ID = "tkv-confidential-client"  # a confidential client: `AuthServer.client_secret`
SECRET_METHODS = ["client_secret_basic", "client_secret_post"]
CONSENT_BUTTON = "Allow access"


@dataclass
class Knobs:
    expires_in: int = 3600
    refresh_returns_refresh_token: bool = True
    rotate_refresh_tokens: bool = False  # the old refresh token dies on use
    invalid_grant: bool = False  # every refresh answers invalid_grant
    token_delay: float = 0.0  # seconds the token endpoint takes
    token_gate: threading.Event | None = None  # the token endpoint answers once it is set
    metadata_issuer: str | None = None  # the issuer its metadata names (None: its own)
    registration: bool = False  # RFC 7591: metadata offers a registration_endpoint
    metadata_padding: int = 0  # bytes of filler in its metadata document (size bounds)
    send_iss: bool = False  # RFC 9207: `iss` in every authorization response
    advertise_iss: bool = False  # RFC 9207: its metadata says it sends `iss`
    forward_to: str | None = None  # a mix-up: another server's base, where it sends all
    forward_redirect_uri: str | None = None  # the redirect_uri it puts in what it forwards
    metadata_token_endpoint: str | None = None  # the token endpoint its metadata names
    access_token: str | None = None  # every access token it issues (a resource server's one)


@dataclass
class _Client:
    client_id: str
    redirect_uris: list[str]
    client_secret: str | None = None  # None: a public client

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0] if self.redirect_uris else ""

    def get_allowed_scope(self, scope: str) -> str:
        return scope

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return not self.redirect_uris or redirect_uri in self.redirect_uris

    def check_client_secret(self, secret: str) -> bool:
        return self.client_secret is not None and hmac.compare_digest(secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, _endpoint: str) -> bool:
        return method in SECRET_METHODS if self.client_secret else method == "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class _Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    code_challenge: str
    code_challenge_method: str
    auth_time: float = field(default_factory=time.time)

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_auth_time(self) -> float:
        return self.auth_time

    def get_nonce(self) -> None:
        return None

    def is_expired(self) -> bool:
        return time.time() > self.auth_time + 300


@dataclass
class _Token:
    client_id: str
    scope: str
    access_token: str
    refresh_token: str | None
    revoked: bool = False

    def check_client(self, client: _Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return 3600

    def is_expired(self) -> bool:
        return False

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str:
        return "alice"

    def get_client(self) -> _Client:
        return _Client(self.client_id, [])


class AuthServer:
    """The server's state: clients, codes, tokens, knobs and counters."""

    def __init__(self) -> None:
        self.knobs = Knobs()
        self.client = _Client(CLIENT_ID, [])
        self.client_secret = secrets.token_urlsafe(24)
        self.confidential = _Client(CONFIDENTIAL_ID, [], self.client_secret)
        self.revocation_auth: list[str] = []  # how each revocation request authenticated
        self.codes: dict[str, _Code] = {}
        self.tokens: list[_Token] = []
        self.token_calls = 0
        self.refresh_calls = 0
        self.revocations: list[str] = []
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.registered: dict[str, _Client] = {}  # RFC 7591 clients, by client_id
        self.registrations: list[dict[str, Any]] = []  # what each registration asked for
        self.registered_secrets: list[str] = []  # issued although a public client asked
        self.lock = threading.Lock()
        self.base = ""
        self.app = self._app()

    @property
    def issuer(self) -> str:
        return self.base

    def issued(self) -> list[str]:
        """Every access and refresh token issued (for canary scans)."""
        found = [t.access_token for t in self.tokens]
        return found + [t.refresh_token for t in self.tokens if t.refresh_token]

    def latest(self) -> _Token:
        return self.tokens[-1]

    def _app(self) -> Flask:
        app = Flask("tkv_test_oauth")
        server_state = self

        def query_client(client_id: str) -> _Client | None:
            if client_id in server_state.registered:
                return server_state.registered[client_id]
            if client_id == CONFIDENTIAL_ID:
                return server_state.confidential
            return server_state.client if client_id == CLIENT_ID else None

        def save_token(token: dict[str, Any], req: Any) -> None:
            knobs = server_state.knobs
            refresh = token.get("refresh_token")
            refreshing = req.payload.grant_type == "refresh_token"
            if refreshing and not knobs.refresh_returns_refresh_token:
                token.pop("refresh_token", None)
                refresh = req.refresh_token.refresh_token  # the old one stays good
            token["expires_in"] = knobs.expires_in
            if knobs.access_token is not None:
                token["access_token"] = knobs.access_token
            server_state.tokens.append(
                _Token(req.client.client_id, token.get("scope", ""), token["access_token"], refresh)
            )

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["none", *SECRET_METHODS]  # noqa: RUF012 (authlib's)

            def save_authorization_code(self, code: str, req: Any) -> None:
                payload = req.payload
                server_state.codes[code] = _Code(
                    code,
                    req.client.client_id,
                    payload.redirect_uri,
                    req.scope or "",
                    payload.data.get("code_challenge"),
                    payload.data.get("code_challenge_method"),
                )

            def query_authorization_code(self, code: str, client: Any) -> _Code | None:
                found = server_state.codes.get(code)  # only the client it was issued to
                return found if found and found.client_id == client.client_id else None

            def delete_authorization_code(self, code: _Code) -> None:
                server_state.codes.pop(code.code, None)

            def authenticate_user(self, _code: _Code) -> str:
                return "alice"

        class Refresh(grants.RefreshTokenGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["none", *SECRET_METHODS]  # noqa: RUF012 (authlib's)

            @property
            def INCLUDE_NEW_REFRESH_TOKEN(self) -> bool:  # type: ignore[override]
                knobs = server_state.knobs
                return knobs.refresh_returns_refresh_token or knobs.rotate_refresh_tokens

            def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
                if server_state.knobs.invalid_grant:
                    return None
                for token in server_state.tokens:
                    if token.refresh_token == refresh_token and not token.revoked:
                        return token
                return None

            def authenticate_user(self, _credential: _Token) -> str:
                return "alice"

            def revoke_old_credential(self, credential: _Token) -> None:
                if server_state.knobs.rotate_refresh_tokens:
                    credential.revoked = True

        app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
        authorization = AuthorizationServer(app, query_client=query_client, save_token=save_token)
        authorization.register_grant(CodeGrant, [CodeChallenge(required=True)])
        authorization.register_grant(Refresh)

        class Issuer(IssuerParameter):
            def get_issuer(self) -> str | None:
                return server_state.base if server_state.knobs.send_iss else None

        authorization.register_extension(Issuer())

        class Registration(ClientRegistrationEndpoint):
            def authenticate_token(self, _request: Any) -> bool:
                return True  # open registration, as MCP authorization servers offer it

            def get_server_metadata(self) -> dict[str, Any]:
                return {"token_endpoint_auth_methods_supported": ["none"]}

            def save_client(self, info: dict[str, Any], metadata: dict[str, Any], _r: Any) -> Any:
                server_state.registrations.append(dict(metadata))
                server_state.registered_secrets.append(info["client_secret"])
                made = _Client(info["client_id"], list(metadata.get("redirect_uris", [])))
                server_state.registered[made.client_id] = made
                return made

        authorization.register_endpoint(Registration)

        @app.route("/register", methods=["POST"])
        def register() -> Any:
            return authorization.create_endpoint_response("client_registration")

        @app.route("/.well-known/oauth-authorization-server")
        def metadata() -> Any:
            base = server_state.base
            offered = {"registration_endpoint": base + "/register"}
            padding = server_state.knobs.metadata_padding
            return jsonify(
                **(offered if server_state.knobs.registration else {}),
                **({"x-padding": "a" * padding} if padding else {}),
                issuer=server_state.knobs.metadata_issuer or base,
                authorization_endpoint=base + "/authorize",
                token_endpoint=server_state.knobs.metadata_token_endpoint or base + "/token",
                revocation_endpoint=base + "/revoke",
                response_types_supported=["code"],
                grant_types_supported=["authorization_code", "refresh_token"],
                code_challenge_methods_supported=["S256"],
                token_endpoint_auth_methods_supported=["none", *SECRET_METHODS],
                authorization_response_iss_parameter_supported=server_state.knobs.advertise_iss,
            )

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            if request.method == "GET":
                server_state.authorize_requests.append(dict(request.args))
            forward = server_state.knobs.forward_to
            if forward is not None:  # the mix-up: the person goes on to the other server
                query = dict(parse_qsl(request.query_string.decode()))
                if server_state.knobs.forward_redirect_uri:
                    query["redirect_uri"] = server_state.knobs.forward_redirect_uri
                return redirect(f"{forward}/authorize?{urlencode(query)}", code=302)
            try:
                grant = authorization.get_consent_grant(end_user="alice")
            except OAuth2Error as error:  # an unregistered redirect_uri: said here, not sent
                return authorization.handle_error_response(request, error)
            if request.method == "GET":
                return (
                    f"<!doctype html><title>Consent</title><h1>Allow {CLIENT_ID}?</h1>"
                    f"<p>Scopes: {grant.request.scope}</p><form method=post action="
                    f"'/authorize?{request.query_string.decode()}'>"
                    f"<button name=confirm value=yes>{CONSENT_BUTTON}</button></form>"
                )
            return authorization.create_authorization_response(grant_user="alice", grant=grant)

        @app.route("/token", methods=["POST"])
        def token() -> Any:
            with server_state.lock:
                server_state.token_calls += 1
                form = dict(request.form)
                server_state.token_requests.append(form)
                if form.get("grant_type") == "refresh_token":
                    server_state.refresh_calls += 1
            gate = server_state.knobs.token_gate
            if gate is not None:  # outside the lock: a revocation meanwhile is answered
                gate.wait(timeout=30)
            with server_state.lock:
                if server_state.knobs.token_delay:
                    time.sleep(server_state.knobs.token_delay)
                forward = server_state.knobs.forward_to
                if forward is not None:  # the mix-up: redeem what was sent here over there
                    if server_state.knobs.forward_redirect_uri:
                        form["redirect_uri"] = server_state.knobs.forward_redirect_uri
                    answer = httpx.post(f"{forward}/token", data=form, timeout=10)
                    return Response(answer.content, answer.status_code, mimetype="application/json")
                return authorization.create_token_response()

        @app.route("/revoke", methods=["POST"])
        def revoke() -> Any:
            value = request.form.get("token", "")
            server_state.revocations.append(value)
            server_state.revocation_auth.append(_revocation_auth(server_state))
            for issued in server_state.tokens:
                if value in (issued.access_token, issued.refresh_token):
                    issued.revoked = True
            return ""

        app.config["SECRET_KEY"] = secrets.token_hex(16)
        return app


def _revocation_auth(server: AuthServer) -> str:
    """Which way a revocation request proved the confidential client (RFC 7009 2.1), if any."""
    basic = request.authorization
    if basic is not None and basic.type == "basic":
        good = basic.username == CONFIDENTIAL_ID and basic.password == server.client_secret
        return "client_secret_basic" if good else "wrong secret"
    posted = request.form.get("client_secret")
    if posted is not None:
        return "client_secret_post" if posted == server.client_secret else "wrong secret"
    return "none"


@contextlib.contextmanager
def running_auth_server() -> Iterator[AuthServer]:
    server = AuthServer()
    with loopback_wsgi(server.app) as server.base:
        yield server
