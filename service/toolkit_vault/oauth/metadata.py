"""The authorization server's endpoints: declared, or discovered from its metadata.

RFC 8414 first (`/.well-known/oauth-authorization-server` inserted before the issuer's
path), then OpenID Connect discovery. The document must name the issuer it was asked for
(RFC 8414 section 3.3: a server cannot speak for another) and https endpoints (http only
to loopback). Discovered endpoints are kept for `MAX_AGE` seconds per issuer, with
whether the server puts its `iss` in authorization responses (RFC 9207), which the
connect flow then requires.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.spec import OAuthSpec, secure_url

__all__ = ["Endpoints", "discover", "read_document", "server_metadata"]

MAX_AGE = 300.0
MAX_DOCUMENT = 64 * 1024
_cache: dict[str, tuple[float, Endpoints]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Endpoints:
    issuer: str | None
    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str | None = None
    iss_supported: bool = False  # RFC 9207: its authorization responses carry `iss`


def _well_known(issuer: str) -> list[str]:
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    rfc8414 = "/.well-known/oauth-authorization-server" + path
    openid = path + "/.well-known/openid-configuration"
    return [urlunsplit((parts.scheme, parts.netloc, p, "", "")) for p in (rfc8414, openid)]


def read_document(url: str, timeout: float) -> dict[str, Any] | None:
    """The JSON object at `url`, read up to `MAX_DOCUMENT` bytes and no further (the
    issuer may be one a remote server's metadata named at import); None when there is none."""
    body = b""
    try:
        identity = {"Accept-Encoding": "identity"}  # raw bytes are what the bound counts
        with httpx.stream(
            "GET", url, timeout=timeout, follow_redirects=False, headers=identity
        ) as response:
            if response.status_code != 200:
                return None
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > MAX_DOCUMENT:
                    return None
    except httpx.HTTPError:
        raise OAuthFailed("unavailable", "the authorization server cannot be reached") from None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def discover(spec: OAuthSpec, *, timeout: float = 10.0, now: float | None = None) -> Endpoints:
    """The endpoints of `spec`'s server; raises OAuthFailed when they cannot be known."""
    if spec.issuer is None or (spec.authorization_endpoint and spec.token_endpoint):
        assert spec.authorization_endpoint and spec.token_endpoint
        return Endpoints(
            spec.issuer, spec.authorization_endpoint, spec.token_endpoint, spec.revocation_endpoint
        )
    issuer = spec.issuer
    moment = time.time() if now is None else now
    with _cache_lock:
        cached = _cache.get(issuer)
    if cached is not None and moment - cached[0] < MAX_AGE:
        return cached[1]
    document = server_metadata(issuer, timeout=timeout)
    names = ("authorization_endpoint", "token_endpoint")
    if not all(isinstance(document.get(n), str) and secure_url(document[n]) for n in names):
        raise OAuthFailed("metadata", "the authorization server's metadata is incomplete")
    revocation = document.get("revocation_endpoint")
    if not (isinstance(revocation, str) and secure_url(revocation)):
        revocation = None
    found = Endpoints(
        issuer,
        document["authorization_endpoint"],
        document["token_endpoint"],
        spec.revocation_endpoint or revocation,
        document.get("authorization_response_iss_parameter_supported") is True,
    )
    with _cache_lock:
        _cache[issuer] = (moment, found)
    return found


def server_metadata(issuer: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The issuer's metadata document, which must name the issuer it was asked for (RFC
    8414 3.3); raises OAuthFailed. Import-time discovery reads `registration_endpoint` here."""
    for url in _well_known(issuer):
        document = read_document(url, timeout)
        if document is None:
            continue
        if document.get("issuer") != issuer:
            raise OAuthFailed(
                "metadata", "the authorization server's metadata names another issuer"
            )
        return document
    raise OAuthFailed("metadata", "the authorization server publishes no metadata")
