"""`x-oauth`: a toolkit schema's declaration that its token comes from an OAuth server.

`{"issuer": URL, "client_id": str, "scopes": [str], "resource": URL?, "token_field":
JSON pointer}`; `authorization_endpoint` + `token_endpoint` may replace `issuer`. The
`token_field` must name a secret (`writeOnly`) string property: the plugin receives the
access token there and nothing else of the token set. A confidential client adds
`client_secret_field`, a pointer to another secret string property (an operator sets it:
it is typed next to the Connect button and sealed with the token set, never shown), sent
as `token_endpoint_auth_method` says: `client_secret_basic` (the default) or
`client_secret_post`. Checked when first read (a toolkit
whose declaration is wrong cannot connect, and says why in field terms).

`redirect_uri` is the vault's callback for one authorization server: the shared callback
path plus a segment naming that server, so that an answer sent to one server's callback is
never taken for another's (RFC 9700 4.4.2.2, the mix-up defence by distinct redirect URIs).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from toolkit_vault.errors import SchemaRefused
from toolkit_vault.schema.values import pointer_tokens

__all__ = ["OAuthSpec", "oauth_spec", "redirect_uri", "secure_url"]

KEYWORD = "x-oauth"
SECRET_METHODS = ("client_secret_basic", "client_secret_post")


@dataclass(frozen=True)
class OAuthSpec:
    client_id: str
    scopes: tuple[str, ...]
    token_field: str
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    resource: str | None = None
    client_secret_field: str | None = None  # a confidential client's secret, sealed
    token_endpoint_auth_method: str = "none"  # noqa: S105 (a method's name)


def secure_url(url: str) -> bool:
    """https, or http to a loopback host (RFC 8252 7.3); never credentials in the URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if not parts.hostname or parts.username or parts.password or parts.fragment:
        return False
    if parts.scheme == "https":
        return True
    if parts.scheme != "http":
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def redirect_uri(callback: str, server: OAuthSpec | str) -> str:
    """`callback` (the vault's `/console/oauth/callback`) + `/` + a tag of the server
    (`server`: a declaration, or an issuer URL): the first 22 characters of the unpadded
    base64url SHA-256 of its issuer, or of `authorization_endpoint token_endpoint` when a
    declaration names those. A function of the declaration alone, so that it can be
    registered at the server (RFC 7591 at import, or by hand) before anyone connects."""
    name = server
    if isinstance(server, OAuthSpec):
        declared = server.authorization_endpoint and server.token_endpoint
        name = f"{server.authorization_endpoint} {server.token_endpoint}" if declared else ""
        name = name or str(server.issuer)
    tag = base64.urlsafe_b64encode(hashlib.sha256(str(name).encode()).digest()).decode()[:22]
    return f"{callback.rstrip('/')}/{tag}"


def _refuse(why: str) -> SchemaRefused:
    return SchemaRefused(f"x-oauth: {why}")


def _token_property(schema: Mapping[str, Any], pointer: str) -> Mapping[str, Any] | None:
    node: Any = schema
    for token in pointer_tokens(pointer):
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping) or token not in props:
            return None
        node = props[token]
    return node if isinstance(node, Mapping) else None


def oauth_spec(schema: Mapping[str, Any]) -> OAuthSpec | None:
    """The schema root's `x-oauth`, checked; None without one. Raises SchemaRefused."""
    raw = schema.get(KEYWORD)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _refuse("must be an object")
    urls = ("issuer", "authorization_endpoint", "token_endpoint", "revocation_endpoint")
    names = ("resource", "client_id", "token_field", "client_secret_field")
    for name in (*urls, *names, "token_endpoint_auth_method"):
        if name in raw and not isinstance(raw[name], str):
            raise _refuse(f"{name} must be a string")
    for name in urls:
        if name in raw and not secure_url(raw[name]):
            raise _refuse(f"{name} must be https (or http to a loopback host)")
    if not raw.get("issuer") and not (
        raw.get("authorization_endpoint") and raw.get("token_endpoint")
    ):
        raise _refuse("needs issuer, or authorization_endpoint and token_endpoint")
    if not raw.get("client_id"):
        raise _refuse("needs client_id")
    scopes = raw.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s for s in scopes):
        raise _refuse("scopes must be a list of strings")
    resource = raw.get("resource")
    if resource is not None and urlsplit(resource).scheme not in ("https", "http"):
        raise _refuse("resource must be an absolute URI")
    field = raw.get("token_field", "")
    if not _secret_string(schema, field):
        raise _refuse("token_field must point to a writeOnly string property")
    secret_field = raw.get("client_secret_field")
    method = raw.get("token_endpoint_auth_method")
    if secret_field is not None:
        if secret_field == field or not _secret_string(schema, secret_field):
            raise _refuse("client_secret_field must point to another writeOnly string property")
        method = method or SECRET_METHODS[0]
        if method not in SECRET_METHODS:
            raise _refuse(f"token_endpoint_auth_method must be one of {', '.join(SECRET_METHODS)}")
    elif method not in (None, "none"):
        raise _refuse("token_endpoint_auth_method needs a client_secret_field")
    return OAuthSpec(
        client_id=raw["client_id"],
        scopes=tuple(scopes),
        token_field=field,
        issuer=raw.get("issuer"),
        authorization_endpoint=raw.get("authorization_endpoint"),
        token_endpoint=raw.get("token_endpoint"),
        revocation_endpoint=raw.get("revocation_endpoint"),
        resource=resource,
        client_secret_field=secret_field,
        token_endpoint_auth_method=method or "none",
    )


def _secret_string(schema: Mapping[str, Any], field: Any) -> bool:
    if not isinstance(field, str) or not field.startswith("/"):
        return False
    try:
        prop = _token_property(schema, field)
    except ValueError:
        return False
    return prop is not None and prop.get("type") == "string" and prop.get("writeOnly") is True
