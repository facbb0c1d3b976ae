"""RFC 9728 protected resource metadata: which authorization server a remote MCP server
trusts, read when the server is imported so its toolkit can declare `x-oauth`.

The MCP authorization spec (2025-06-18) has a server name its authorization servers this
way rather than in the package metadata, so without it an imported remote server is two
secret text fields nobody can fill. The document is looked for where RFC 9728 section 3.1
puts it (`/.well-known/oauth-protected-resource` inserted before the server URL's path),
then where the server itself points: the `resource_metadata` parameter of the
`WWW-Authenticate` header of its 401 to an unauthenticated request. Either way the
document must name the server's own URL as its `resource` (section 3.3): metadata that
speaks for another resource could send a person's consent, and the token, elsewhere, so
it is refused, not believed. Every exchange is bounded and goes only to a public address
unless the operator allowed others (`fetch`); a pointed-to document that cannot be read
fails as an unreachable target does, in the same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.fetch import DEADLINE, fetch, unreachable
from toolkit_vault.oauth.spec import secure_url

__all__ = ["ProtectedResource", "metadata_url", "protected_resource", "same_resource"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"
_RESOURCE_METADATA = re.compile(r'resource_metadata\s*=\s*(?:"([^"]*)"|([^\s,]+))', re.I)
Via = Literal["well-known", "www-authenticate"]


@dataclass(frozen=True)
class ProtectedResource:
    resource: str
    authorization_servers: tuple[str, ...]
    scopes: tuple[str, ...]
    metadata_url: str  # where the document was read
    via: Via


def metadata_url(resource: str) -> str:
    """RFC 9728 3.1: the well-known suffix goes between the host and the path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, parts.query, ""))


def _compared(url: str) -> tuple[str, str, int | None, str, str] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    return parts.scheme.lower(), host, port, parts.path.rstrip("/") or "/", parts.query


def same_resource(named: str, url: str) -> bool:
    """RFC 9728 3.3: the metadata's `resource` is the server's URL (scheme and host compared
    without case, a default port as none, a trailing slash as none, as the well-known URL
    drops it; path and query exactly)."""
    mine = _compared(url)
    return mine is not None and _compared(named) == mine


def _strings(document: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        return None
    return tuple(value)


def _parsed(document: dict[str, Any], url: str, where: str, via: Via) -> ProtectedResource:
    host = urlsplit(url).hostname
    resource = document.get("resource")
    if not isinstance(resource, str) or not same_resource(resource, url):
        named = resource[:120] if isinstance(resource, str) else "none"
        raise OAuthFailed(
            "resource_mismatch",
            f"{host}'s protected resource metadata names the resource {named!r}, not the "
            "server's URL (RFC 9728 3.3): not believed",
        )
    servers = _strings(document, "authorization_servers")
    if servers is None or not all(secure_url(s) for s in servers):
        raise OAuthFailed(
            "metadata",
            f"{host}'s protected resource metadata lists authorization servers that are not "
            "https URLs",
        )
    scopes = _strings(document, "scopes_supported") or ()
    return ProtectedResource(resource, servers, scopes, where, via)


def _pointed_to(url: str, deadline: float, allow_private: bool) -> str | None:
    """The `resource_metadata` URL of the server's 401, if it sends one."""
    headers = {"Accept": "application/json, text/event-stream"}
    answer = fetch(
        "GET",
        url,
        deadline=deadline,
        headers=headers,
        read_body=False,
        allow_private=allow_private,
    )
    if answer.status != 401:
        return None
    found = _RESOURCE_METADATA.search(answer.headers.get("www-authenticate", ""))
    return (found.group(1) or found.group(2)) if found else None


def protected_resource(
    url: str, *, deadline: float = DEADLINE, allow_private: bool = False
) -> ProtectedResource | None:
    """The metadata of the remote server at `url`; None when it publishes none. Raises
    OAuthFailed when it cannot be read (`unavailable`, `redirect`, `too_large`) or is not
    to be believed (`resource_mismatch`, `metadata`). `allow_private`: see `fetch`."""
    where = metadata_url(url)
    answer = fetch("GET", where, deadline=deadline, allow_private=allow_private)
    document = answer.json_object() if answer.status == 200 else None  # a site's HTML: none
    via: Via = "well-known"
    if document is None:
        pointed = _pointed_to(url, deadline, allow_private)
        if pointed is None:
            return None
        where, via = pointed, "www-authenticate"
        answer = fetch("GET", where, deadline=deadline, allow_private=allow_private)
        document = answer.json_object() if answer.status == 200 else None
        if document is None:  # a bad answer: said as any unusable target is
            raise unreachable(urlsplit(where).hostname or "?")
    return _parsed(document, url, where, via)
