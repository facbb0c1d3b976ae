"""A real OpenID provider on loopback for the console sign-in tests: authlib's flask
`AuthorizationServer` with the authorization code grant, PKCE (S256 required) and the
OpenID Connect extension (`OpenIDCode`, nonce required), OpenID discovery and a JWKS
route, served by werkzeug in a thread. Its `id_token`s are signed with an RSA key made
here, published at `/jwks`.

Its consent page names the person who will sign in (`provider.person`), with a button.
Knobs make it forge what an attacker would: another audience, another issuer, an expired
token, another nonce, a signature by a key it does not publish (under the published key's
id), or the whole `id_token` of an earlier sign-in replayed. `id_tokens` keeps every token
it issued.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import OpenIDCode, UserInfo
from flask import Flask, Response, jsonify, request
from joserfc.jwk import KeySet, RSAKey

from http_support import loopback_wsgi

CLIENT_ID = "tkv-console"
KEY_ID = "provider-key-1"
SIGN_IN_BUTTON = "Continue"


@dataclass
class Person:
    sub: str = "248289761001"
    name: str = "Ada Lovelace"
    email: str = "ada@example.test"
    groups: list[str] = field(default_factory=lambda: ["vault-operators"])


@dataclass
class Knobs:
    audience: str | None = None  # the `aud` it signs (None: the client's id)
    issuer: str | None = None  # the `iss` it signs (None: its own)
    lifetime: int = 3600  # seconds until `exp` (negative: already expired)
    nonce: str | None = None  # the `nonce` it signs instead of the one it was sent
    foreign_key: bool = False  # sign with a key it does not publish, under KEY_ID
    replay: str | None = None  # answer the token request with this earlier id_token


@dataclass
class _Client:
    client_id: str
    client_secret: str | None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return ""

    def get_allowed_scope(self, scope: str) -> str:
        return scope

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri.startswith("http://127.0.0.1:")

    def check_client_secret(self, secret: str) -> bool:
        return self.client_secret is not None and secrets.compare_digest(secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, _endpoint: str) -> bool:
        return method == ("client_secret_basic" if self.client_secret else "none")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class _Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str | None
    code_challenge: str
    code_challenge_method: str
    person: Person
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None

    def is_expired(self) -> bool:
        return time.time() > self.auth_time + 300


class Provider:
    """The provider's state: its key, clients, codes, knobs and what it issued."""

    def __init__(self, client_secret: str | None = None) -> None:
        self.knobs = Knobs()
        self.person = Person()
        self.client = _Client(CLIENT_ID, client_secret)
        self.key = RSAKey.generate_key(2048, parameters={"kid": KEY_ID, "use": "sig"})
        self.other_key = RSAKey.generate_key(2048, parameters={"kid": KEY_ID, "use": "sig"})
        self.codes: dict[str, _Code] = {}
        self.id_tokens: list[str] = []
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.base = ""
        self.app = self._app()

    @property
    def issuer(self) -> str:
        return self.base

    def _app(self) -> Flask:
        app = Flask("tkv_test_oidc")
        provider = self

        def query_client(client_id: str) -> _Client | None:
            return provider.client if client_id == CLIENT_ID else None

        def save_token(_token: dict[str, Any], _req: Any) -> None:
            return None

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_basic"]  # noqa: RUF012

            def save_authorization_code(self, code: str, req: Any) -> None:
                data = req.payload.data
                provider.codes[code] = _Code(
                    code,
                    req.client.client_id,
                    req.payload.redirect_uri,
                    req.scope or "",
                    data.get("nonce"),
                    data.get("code_challenge"),
                    data.get("code_challenge_method"),
                    req.user,
                )

            def query_authorization_code(self, code: str, client: Any) -> _Code | None:
                found = provider.codes.get(code)
                return found if found and found.client_id == client.client_id else None

            def delete_authorization_code(self, code: _Code) -> None:
                provider.codes.pop(code.code, None)

            def authenticate_user(self, code: _Code) -> Person:
                return code.person

        class OpenID(OpenIDCode):
            def resolve_client_private_key(self, _client: Any) -> Any:
                return provider.other_key if provider.knobs.foreign_key else provider.key

            def get_client_algorithm(self, _client: Any) -> str:
                return "RS256"

            def get_encode_header(self, _client: Any) -> dict[str, str]:
                return {"alg": "RS256", "kid": KEY_ID}

            def get_client_claims(self, _client: Any) -> dict[str, Any]:
                knobs = provider.knobs
                return {
                    "iss": knobs.issuer or provider.base,
                    "aud": knobs.audience or CLIENT_ID,
                    "exp": int(time.time()) + knobs.lifetime,
                    "iat": int(time.time()) - (3600 if knobs.lifetime < 0 else 0),
                }

            def get_authorization_code_claims(self, code: _Code) -> dict[str, Any]:
                claims = super().get_authorization_code_claims(code)
                if provider.knobs.nonce is not None:
                    claims["nonce"] = provider.knobs.nonce
                return claims

            def exists_nonce(self, nonce: str, _req: Any) -> bool:
                return any(c.nonce == nonce for c in provider.codes.values())

            def generate_user_info(self, person: Person, scope: str) -> UserInfo:
                info = UserInfo(sub=person.sub, name=person.name, groups=list(person.groups))
                if "email" in scope.split():
                    info["email"] = person.email
                return info

        server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
        server.register_grant(CodeGrant, [CodeChallenge(required=True), OpenID(require_nonce=True)])

        @app.route("/.well-known/openid-configuration")
        def configuration() -> Any:
            base = provider.base
            return jsonify(
                issuer=base,
                authorization_endpoint=base + "/authorize",
                token_endpoint=base + "/token",
                jwks_uri=base + "/jwks",
                response_types_supported=["code"],
                subject_types_supported=["public"],
                id_token_signing_alg_values_supported=["RS256"],
                code_challenge_methods_supported=["S256"],
                token_endpoint_auth_methods_supported=["none", "client_secret_basic"],
            )

        @app.route("/jwks")
        def jwks() -> Any:
            return jsonify(KeySet([provider.key]).as_dict(private=False))

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            if request.method == "GET":
                provider.authorize_requests.append(dict(request.args))
            try:
                grant = server.get_consent_grant(end_user=provider.person)
            except OAuth2Error as error:
                return server.handle_error_response(request, error)
            if request.method == "GET":
                who = provider.person
                return (
                    f"<!doctype html><title>Sign in</title><h1>Sign in as {who.name}?</h1>"
                    f"<form method=post action='/authorize?{request.query_string.decode()}'>"
                    f"<button name=confirm value=yes>{SIGN_IN_BUTTON}</button></form>"
                )
            return server.create_authorization_response(grant_user=provider.person, grant=grant)

        @app.route("/token", methods=["POST"])
        def token() -> Any:
            provider.token_requests.append(dict(request.form))
            answer = server.create_token_response()
            body = json.loads(answer.get_data())
            if "id_token" in body:
                if provider.knobs.replay is not None:
                    body["id_token"] = provider.knobs.replay
                provider.id_tokens.append(body["id_token"])
            return Response(json.dumps(body), answer.status_code, mimetype="application/json")

        app.config["SECRET_KEY"] = secrets.token_hex(16)
        return app


@contextlib.contextmanager
def running_provider(client_secret: str | None = None) -> Iterator[Provider]:
    provider = Provider(client_secret)
    with loopback_wsgi(provider.app) as provider.base:
        yield provider
