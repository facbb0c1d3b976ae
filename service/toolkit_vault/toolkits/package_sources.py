"""Where `toolkits import` reads from: a file, stdin (`-`), or an MCP registry URL.

Every source is bounded by `MAX_IMPORT_BYTES` in total. A registry URL (its list API,
`https://registry.example/v0/servers?search=...`) is read page by page, following the
listing's `nextCursor`, at most `MAX_PAGES` pages and `MAX_IMPORT_BYTES` over all of them, and
the pages' entries are joined into one listing (`{"servers": [...]}`) for the importer; a URL
answering with one server.json is imported as that. Only https is spoken, or plain http to a
loopback address; no redirect is followed and a URL with user-info is refused, so no
credential travels with the request. Errors name the host, never the path or query.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from toolkit_package.jsonbound import BoundsRefused, loads_bounded
from toolkit_vault.toolkits.imports import MAX_IMPORT_BYTES, PackageRefused

__all__ = ["MAX_PAGES", "TIMEOUT_SECONDS", "fetch_listing", "read_package"]

MAX_PAGES = 100
TIMEOUT_SECONDS = 30.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx surfaces as an HTTPError, and is refused


def _refuse(message: str) -> PackageRefused:
    return PackageRefused(f"package refused: {message}")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _opener(url: str) -> tuple[urllib.request.OpenerDirector, str]:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.username is not None or parts.password is not None:
        raise _refuse("a registry URL with user-info is not accepted")
    if parts.scheme != "https" and not (parts.scheme == "http" and _loopback(host)):
        raise _refuse(f"registry {host!r}: only https (or http to a loopback address)")
    handlers: list[Any] = [_NoRedirect()]
    if _loopback(host):
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers), host


def _get(opener: urllib.request.OpenerDirector, url: str, host: str, budget: int) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            data: bytes = response.read(budget + 1)
    except urllib.error.HTTPError as exc:
        raise _refuse(f"registry {host!r} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        raise _refuse(f"registry {host!r} unreachable: {reason}") from None
    if len(data) > budget:
        raise _refuse(f"input_too_large: the listing exceeds {MAX_IMPORT_BYTES} bytes")
    return data


def _with_cursor(url: str, cursor: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "cursor"]
    query.append(("cursor", cursor))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def fetch_listing(url: str) -> bytes:
    """The registry listing at `url`, every page joined, as one bounded JSON document."""
    opener, host = _opener(url)
    entries: list[Any] = []
    seen: set[str] = set()
    budget, page_url = MAX_IMPORT_BYTES, url
    for _ in range(MAX_PAGES):
        data = _get(opener, page_url, host, budget)
        budget -= len(data)
        try:
            page = loads_bounded(data, max_bytes=MAX_IMPORT_BYTES)
        except BoundsRefused as exc:
            raise _refuse(f"registry {host!r}: {exc.code}: {exc.message}") from None
        if not (isinstance(page, dict) and isinstance(page.get("servers"), list)):
            if entries:
                raise _refuse(f"registry {host!r}: a later page is not a listing")
            return data  # one server.json (or whatever it is: the importer decides)
        entries += page["servers"]
        metadata = page.get("metadata")
        cursor = None
        if isinstance(metadata, dict):
            cursor = metadata.get("nextCursor", metadata.get("next_cursor"))
        if not isinstance(cursor, str) or not cursor:
            return json.dumps({"servers": entries}).encode()
        if cursor in seen:
            raise _refuse(f"registry {host!r}: the listing's cursor repeats")
        seen.add(cursor)
        page_url = _with_cursor(url, cursor)
    raise _refuse(f"registry {host!r}: more than {MAX_PAGES} pages")


def read_package(source: str) -> bytes:
    """The bytes of SOURCE: a path, `-` (stdin) or an http(s) registry URL, bounded."""
    if source.startswith(("https://", "http://")):
        return fetch_listing(source)
    try:
        if source == "-":
            if sys.stdin is None:
                raise _refuse("stdin is closed")
            data = sys.stdin.buffer.read(MAX_IMPORT_BYTES + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(MAX_IMPORT_BYTES + 1)
    except OSError as exc:
        raise PackageRefused(
            f"cannot read {source!r}: {exc.strerror or type(exc).__name__}"
        ) from None
    if len(data) > MAX_IMPORT_BYTES:
        raise _refuse(f"input_too_large: input exceeds {MAX_IMPORT_BYTES} bytes")
    return data
