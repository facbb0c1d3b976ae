"""One bounded HTTP exchange with a server the vault was only told about.

Import-time discovery (protected resource metadata, authorization server metadata, dynamic
client registration) talks to URLs taken from untrusted package metadata, so each exchange
is fenced the same way: https (http only to a loopback host, `secure_url`), no redirect
followed (a 3xx is an answer, never a hop to somewhere the package did not name), no proxy
from the environment, one deadline for the whole exchange, and at most `MAX_DOCUMENT`
bytes read. The host is resolved once and every address it has checked against
`toolkit_vault.addresses` (no private, loopback, link-local or NAT64-mapped one unless the
operator allowed them, `toolkits import --allow-private`), and the connection is made to
the address checked, so a second answer of the name (DNS rebinding) cannot move it.

A target that cannot be used (an address refused, a closed port, no answer in time, an
answer that is not HTTP) is one `UNREACHABLE` phrase naming the host and nothing else:
the report of an import must not tell a closed port from an open one, or it is a port
scanner for whoever writes the package. Other failures name the host and the kind of
failure, never the URL's path or query.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from toolkit_vault.addresses import permitted
from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.spec import secure_url

__all__ = ["DEADLINE", "MAX_DOCUMENT", "UNREACHABLE", "Fetched", "fetch", "unreachable"]

DEADLINE = 5.0  # seconds for one whole exchange
MAX_DOCUMENT = 64 * 1024  # a metadata document or a registration answer is a few KiB
UNREACHABLE = (
    "{host} cannot be reached (unreachable, no usable answer, or not a public address: "
    "see --allow-private)"
)


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


def unreachable(host: str) -> OAuthFailed:
    """The one failure of every target that cannot be used, whatever the cause."""
    return OAuthFailed("unavailable", UNREACHABLE.format(host=host))


def _pinned(url: str, allow_private: bool) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(`url` with its host replaced by the one address checked, the Host header, the
    request's TLS server name): the name is resolved here, once, and every answer checked."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        netloc = httpx.URL(url).netloc.decode("ascii")  # an IDN host as the wire spells it
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    except (OSError, UnicodeError, ValueError, httpx.InvalidURL):
        raise unreachable(host) from None
    if not addresses or not (allow_private or all(permitted(a) for a in addresses)):
        raise unreachable(host)
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    target = parts._replace(netloc=f"{literal}:{port}").geturl()
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return target, {"Host": netloc}, extensions


def fetch(
    method: str,
    url: str,
    *,
    deadline: float = DEADLINE,
    payload: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    read_body: bool = True,
    allow_private: bool = False,
) -> Fetched:
    """`method url` (`payload`: a JSON body), bounded; a 3xx raises (`redirect`).
    `read_body=False` keeps only the status and headers (a probe of an endpoint that might
    stream forever). `allow_private`: the operator's leave to reach non-public addresses."""
    host = urlsplit(url).hostname or "?"
    if not secure_url(url):
        raise OAuthFailed("insecure", f"{host}: only https (or http to loopback) is used")
    started = time.monotonic()
    target, host_header, extensions = _pinned(url, allow_private)
    body = b""
    try:
        with httpx.Client(
            follow_redirects=False, trust_env=False, timeout=httpx.Timeout(deadline), verify=_tls()
        ) as client:
            # identity: the raw bytes are what the bound counts
            sent = {"Accept-Encoding": "identity", **(headers or {}), **host_header}
            request = client.build_request(
                method, target, json=payload, headers=sent, extensions=extensions
            )
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
    except (httpx.HTTPError, httpx.InvalidURL):
        raise unreachable(host) from None
    if 300 <= response.status_code < 400:
        raise OAuthFailed(
            "redirect",
            f"{host} answered HTTP {response.status_code}: redirects are not followed",
        )
    return Fetched(response.status_code, response.headers, body)
