"""The OAuth client calls, through authlib's httpx client: the authorization URL (code
flow, PKCE S256, `resource` per RFC 8707), the code exchange, refresh and revocation.

Errors come out as `OAuthFailed` with the server's error code (`invalid_grant`, ...) or
`unavailable`, and a fixed message: never a token, a code or a server's own words.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import httpx
import httpx2
from authlib.integrations.base_client import OAuthError

with warnings.catch_warnings():  # authlib suggests httpx2 where it is not installed
    warnings.simplefilter("ignore")
    from authlib.integrations.httpx_client import OAuth2Client

from toolkit_vault.oauth.failures import OAuthFailed
from toolkit_vault.oauth.spec import OAuthSpec
from toolkit_vault.telemetry import traces

__all__ = ["OAuthClient", "OAuthFailed"]

# authlib's httpx client runs on httpx2 when it is installed (the MCP SDK brings it), on
# httpx otherwise: a server that cannot be reached fails in either's types.
HTTP_FAILURES: tuple[type[Exception], ...] = (httpx.HTTPError, httpx2.HTTPError)
UNAVAILABLE: tuple[type[Exception], ...] = (*HTTP_FAILURES, ValueError)  # or no JSON answer

log = logging.getLogger(__name__)
TIMEOUT = 10.0


class OAuthClient:
    """One server's client (`spec` + endpoints): a public client, or a confidential one
    given its `client_secret` (sent as the spec's `token_endpoint_auth_method` says, to
    the token and revocation endpoints only)."""

    def __init__(
        self,
        spec: OAuthSpec,
        authorization_endpoint: str,
        token_endpoint: str,
        client_secret: str | None = None,
    ) -> None:
        if (client_secret is None) != (spec.client_secret_field is None):
            raise OAuthFailed("client_secret", "this toolkit's client secret is not set")
        self.spec = spec
        self.authorization_endpoint = authorization_endpoint
        self.token_endpoint = token_endpoint
        self._client_secret = client_secret

    def __repr__(self) -> str:
        return f"OAuthClient(client_id={self.spec.client_id!r}, token={self.token_endpoint!r})"

    def _session(self, **kwargs: Any) -> OAuth2Client:
        method = self.spec.token_endpoint_auth_method
        return OAuth2Client(
            client_id=self.spec.client_id,
            client_secret=self._client_secret,
            token_endpoint_auth_method=method,
            revocation_endpoint_auth_method=method,
            timeout=TIMEOUT,
            **kwargs,
        )

    def _extra(self) -> dict[str, str]:
        return {"resource": self.spec.resource} if self.spec.resource else {}

    def authorization_url(self, redirect_uri: str, state: str, code_verifier: str) -> str:
        with self._session(
            redirect_uri=redirect_uri,
            scope=" ".join(self.spec.scopes) or None,
            code_challenge_method="S256",
        ) as session:
            url, _ = session.create_authorization_url(
                self.authorization_endpoint,
                state=state,
                code_verifier=code_verifier,
                **self._extra(),
            )
        return str(url)

    def exchange(self, redirect_uri: str, code: str, code_verifier: str) -> Mapping[str, Any]:
        with self._session(redirect_uri=redirect_uri) as session:
            return self._token(
                session.fetch_token,
                self.token_endpoint,
                grant_type="authorization_code",
                code=code,
                code_verifier=code_verifier,
                **self._extra(),
            )

    def refresh(self, refresh_token: str) -> Mapping[str, Any]:
        with self._session() as session:
            return self._token(
                session.refresh_token,
                self.token_endpoint,
                refresh_token=refresh_token,
                **self._extra(),
            )

    def revoke(self, revocation_endpoint: str, token: str, hint: str) -> None:
        with self._session() as session:
            self._call(session.revoke_token, revocation_endpoint, token=token, token_type_hint=hint)

    @classmethod
    def _token(cls, call: Any, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        answer = cls._call(call, *args, **kwargs)
        if not isinstance(answer, Mapping):
            raise OAuthFailed("invalid_response", "the authorization server sent no token")
        return answer

    @staticmethod
    def _call(call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            with traces.span("oauth.token_request"):
                answer = call(*args, **kwargs)
        except OAuthError as exc:
            code = exc.error if isinstance(exc.error, str) and exc.error.isascii() else "error"
            code = code[:40]
            log.warning("authorization server refused (%s)", code)
            raise OAuthFailed(code, f"the authorization server refused ({code})") from None
        except UNAVAILABLE as exc:
            log.warning("authorization server unavailable (%s)", type(exc).__name__)
            raise OAuthFailed("unavailable", "the authorization server cannot be reached") from None
        if isinstance(answer, httpx.Response | httpx2.Response) and answer.status_code >= 400:
            raise OAuthFailed("unavailable", "the authorization server refused the revocation")
        return answer
