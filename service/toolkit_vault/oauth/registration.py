"""RFC 7591 dynamic client registration: a client id for an imported remote MCP server
whose authorization server offers registration and whose operator named none.

The MCP authorization spec expects clients to register this way, since nobody can hand
out a client id for every server of a registry beforehand. The vault registers as a
public client (`token_endpoint_auth_method: none`, PKCE does the rest) with the one
callback its `/console/oauth/callback` answers on; a `client_secret` the server issues
anyway is neither kept nor shown. authlib has the server side of RFC 7591 only, so this
is one bounded POST (`fetch`).

The authorization server's metadata, where `registration_endpoint` is found, is read here
too at import, through `fetch` like every import-time exchange (a public address unless
the operator allowed others), where `oauth.metadata` reads it for a connect.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.fetch import DEADLINE, fetch

__all__ = ["CLIENT_NAME", "authorization_server_metadata", "register_client"]

CLIENT_NAME = "toolkit-vault"
MAX_CLIENT_ID = 200


def register_client(
    server_metadata: dict[str, Any],
    redirect_uri: str,
    scopes: tuple[str, ...],
    *,
    deadline: float = DEADLINE,
    allow_private: bool = False,
) -> str | None:
    """The client id the authorization server registered for the vault; None when its
    metadata offers no `registration_endpoint`. Raises OAuthFailed on a refusal.
    `allow_private`: see `fetch`."""
    endpoint = server_metadata.get("registration_endpoint")
    if not isinstance(endpoint, str):
        return None
    request: dict[str, Any] = {
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    if scopes:
        request["scope"] = " ".join(scopes)
    answer = fetch(
        "POST", endpoint, deadline=deadline, payload=request, allow_private=allow_private
    )
    host = urlsplit(endpoint).hostname
    if answer.status not in (200, 201):
        raise OAuthFailed(
            "registration_refused",
            f"{host} refused the client registration (HTTP {answer.status})",
        )
    document = answer.json_object() or {}
    client_id = document.get("client_id")
    if not isinstance(client_id, str) or not client_id.isprintable():
        raise OAuthFailed("registration_refused", f"{host}'s registration answer has no client_id")
    if not 0 < len(client_id) <= MAX_CLIENT_ID:
        raise OAuthFailed("registration_refused", f"{host}'s client_id is empty or too long")
    return client_id


def authorization_server_metadata(
    issuer: str, *, deadline: float = DEADLINE, allow_private: bool = False
) -> dict[str, Any]:
    """The issuer's metadata document, RFC 8414 first, then OpenID discovery, as
    `oauth.metadata.server_metadata` reads it: it must name the issuer it was asked for
    (RFC 8414 3.3). A document redirected, too large or not JSON is none; raises
    OAuthFailed (`metadata`, or `unavailable` when the server cannot be used)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    for where in (
        "/.well-known/oauth-authorization-server" + path,
        path + "/.well-known/openid-configuration",
    ):
        url = urlunsplit((parts.scheme, parts.netloc, where, "", ""))
        try:
            answer = fetch("GET", url, deadline=deadline, allow_private=allow_private)
        except OAuthFailed as exc:
            if exc.code in ("redirect", "too_large"):
                continue
            raise
        document = answer.json_object() if answer.status == 200 else None
        if document is None:
            continue
        if document.get("issuer") != issuer:
            raise OAuthFailed(
                "metadata", "the authorization server's metadata names another issuer"
            )
        return document
    raise OAuthFailed("metadata", "the authorization server publishes no metadata")
