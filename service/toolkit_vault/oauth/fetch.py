"""One bounded HTTP exchange with a server the vault was only told about.

Import-time discovery (protected resource metadata, authorization server metadata, dynamic
client registration) talks to URLs taken from untrusted package metadata, so each exchange
is fenced the same way: https (http only to a loopback host, `secure_url`), no redirect
followed (a 3xx is an answer, never a hop to somewhere the package did not name), no proxy
from the environment, one deadline for the whole exchange, and at most `MAX_DOCUMENT`
bytes read. A failure is an `OAuthFailed` whose message names the host and the kind of
failure, never the URL's path or query.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.spec import secure_url

__all__ = ["DEADLINE", "MAX_DOCUMENT", "Fetched", "fetch"]

DEADLINE = 5.0  # seconds for one whole exchange
MAX_DOCUMENT = 64 * 1024  # a metadata document or a registration answer is a few KiB


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process: making one reads the CA bundle, about 0.1 s each time."""
    return httpx.create_ssl_context(trust_env=False)


@dataclass(frozen=True)
class Fetched:
    status: int
    headers: httpx.Headers
    body: bytes

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None when it is not one."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return None
        return document if isinstance(document, dict) else None


def fetch(
    method: str,
    url: str,
    *,
    deadline: float = DEADLINE,
    payload: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    read_body: bool = True,
) -> Fetched:
    """`method url` (`payload`: a JSON body), bounded; a 3xx raises (`redirect`).
    `read_body=False` keeps only the status and headers (a probe of an endpoint that might
    stream forever)."""
    host = urlsplit(url).hostname or "?"
    if not secure_url(url):
        raise OAuthFailed("insecure", f"{host}: only https (or http to loopback) is used")
    started = time.monotonic()
    body = b""
    try:
        with httpx.Client(
            follow_redirects=False, trust_env=False, timeout=httpx.Timeout(deadline), verify=_tls()
        ) as client:
            sent = {"Accept-Encoding": "identity", **(headers or {})}  # raw bytes are the bound
            request = client.build_request(method, url, json=payload, headers=sent)
            response = client.send(request, stream=True)
            try:
                for chunk in response.iter_raw() if read_body else ():
                    body += chunk
                    if len(body) > MAX_DOCUMENT:
                        raise OAuthFailed("too_large", f"{host} answered more than 64 KiB")
                    if time.monotonic() - started > deadline:
                        raise httpx.ReadTimeout("deadline")
            finally:
                response.close()
    except httpx.TimeoutException:
        raise OAuthFailed("unavailable", f"{host} did not answer within {deadline:g} s") from None
    except httpx.HTTPError as exc:
        kind = type(exc).__name__
        raise OAuthFailed("unavailable", f"{host} cannot be reached ({kind})") from None
    if 300 <= response.status_code < 400:
        raise OAuthFailed(
            "redirect",
            f"{host} answered HTTP {response.status_code}: redirects are not followed",
        )
    return Fetched(response.status_code, response.headers, body)
