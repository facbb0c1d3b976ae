"""`x-verify`: how an imported or declarative toolkit says its credential can be checked.

One HTTP request, read from the schema's root and refused at compile time when it could
leak: its URL is built from public fields only (never a secret), the secret goes to one
place the author names (a header, with a template such as `Bearer {secret}`, or a query
parameter), and it names the status that means "this credential works". Running it is
`core.verification`'s business (SSRF rules, deadline, size bound); this module only says
what the request is.

    "x-verify": {"method": "GET", "url": "https://{region}.api.example.com/v1/me",
                 "secret": "api_key", "header": "Authorization", "value": "Bearer {secret}",
                 "expect": 200, "expires": {"json": "/key/expires_at"}}

`expires` (optional) names where a passing answer says when the credential ends: a
response header (`{"header": "X-Key-Expires"}`) or a JSON pointer into the response body
(`{"json": "/expires_at"}`); `core.expiry` reads the value and the vault keeps it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit_vault.errors import SchemaRefused

__all__ = ["KEYWORD", "VerifySpec", "read_verify"]

KEYWORD = "x-verify"
METHODS = ("GET", "HEAD", "POST")
MAX_URL = 2048
_KEYS = {"method", "url", "secret", "header", "value", "query", "expect", "expires"}
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # RFC 9110 token
_NAME = re.compile(r"^[A-Za-z0-9._~-]{1,64}$")
# Headers the request itself owns: naming one would let a schema steer where it goes.
_OWNED = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te"}


@dataclass(frozen=True)
class VerifySpec:
    """The check's request: `url` a template over public top-level fields, the value of the
    top-level secret field `secret` sent as header `header` (through `value`) or as the
    query parameter `query`; any status of `expect` passes."""

    method: str
    url: str
    url_fields: tuple[str, ...]
    secret: str
    header: str | None
    value: str
    query: str | None
    expect: tuple[int, ...]
    expires_header: str | None = None
    expires_pointer: str | None = None


def _refuse(where: str, what: str) -> SchemaRefused:
    return SchemaRefused(f"{KEYWORD}{where}: {what}")


def _fields(template: str, where: str) -> list[str]:
    """The `{name}` placeholders of a template (no format specs, conversions or indexing)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        raise _refuse(where, "is not a valid template (unbalanced braces)") from None
    for _text, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion or not _NAME.match(name):
            raise _refuse(where, "a placeholder is a plain {name}, without format or index")
        names.append(name)
    return names


def read_verify(
    root: Mapping[str, Any], is_secret_at: Callable[[Sequence[str | int]], bool]
) -> VerifySpec | None:
    """The root's `x-verify` checked (raises SchemaRefused), or None when there is none."""
    spec = root.get(KEYWORD)
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or set(spec) - _KEYS:
        raise _refuse("", f"must be an object of {', '.join(sorted(_KEYS))}")
    properties = root.get("properties")
    declared = set(properties) if isinstance(properties, Mapping) else set()
    method = spec.get("method", "GET")
    if method not in METHODS:
        raise _refuse("/method", f"must be one of {', '.join(METHODS)}")
    url = spec.get("url")
    if not isinstance(url, str) or not 0 < len(url) <= MAX_URL or any(c in url for c in "\r\n "):
        raise _refuse("/url", f"must be a URL template of at most {MAX_URL} characters")
    names = _fields(url, "/url")
    if not (url.startswith(("https://", "http://")) or url.startswith("{")):
        raise _refuse("/url", "must start with https:// or http:// (or a {field} holding one)")
    for name in names:
        if name not in declared or is_secret_at([name]):
            raise _refuse(
                "/url", f"{{{name}}} is not a public property: a URL never holds a secret"
            )
    secret = spec.get("secret")
    if not isinstance(secret, str) or secret not in declared or not is_secret_at([secret]):
        raise _refuse("/secret", "must name a secret property of the schema's root")
    header, query = spec.get("header"), spec.get("query")
    if (header is None) == (query is None):
        raise _refuse("", "names exactly one of header or query, where the secret goes")
    if header is not None and (not isinstance(header, str) or not _TOKEN.match(header)):
        raise _refuse("/header", "must be a header name")
    if isinstance(header, str) and header.lower() in _OWNED:
        raise _refuse("/header", f"{header} belongs to the request itself")
    if query is not None and (not isinstance(query, str) or not _NAME.match(query)):
        raise _refuse("/query", "must be a query parameter name")
    value = spec.get("value", "{secret}")
    if (
        not isinstance(value, str)
        or len(value) > 256
        or any(c in value for c in "\r\n")
        or _fields(value, "/value") != ["secret"]
    ):
        raise _refuse("/value", "must hold {secret} once and no other placeholder")
    if query is not None and "value" in spec:
        raise _refuse("/value", "applies to a header only")
    expect = spec.get("expect", 200)
    codes = [expect] if isinstance(expect, int) else expect
    if (
        not isinstance(codes, list)
        or not 0 < len(codes) <= 10
        or not all(type(c) is int and 200 <= c <= 299 for c in codes)
    ):
        raise _refuse("/expect", "must be a 2xx status or a list of at most 10 of them")
    expires_header, expires_pointer = _expires(spec.get("expires"))
    return VerifySpec(
        method, url, tuple(names), secret, header, value, query, tuple(sorted(set(codes))),
        expires_header, expires_pointer,
    )  # fmt: skip


def _expires(where: Any) -> tuple[str | None, str | None]:
    """`expires`: one response header, or one JSON pointer into the body."""
    if where is None:
        return None, None
    if not isinstance(where, Mapping) or len(where) != 1 or not set(where) <= {"header", "json"}:
        raise _refuse("/expires", 'must be {"header": NAME} or {"json": POINTER}')
    header, pointer = where.get("header"), where.get("json")
    if header is not None and (not isinstance(header, str) or not _TOKEN.match(header)):
        raise _refuse("/expires/header", "must be a header name")
    if pointer is not None and (
        not isinstance(pointer, str) or not pointer.startswith("/") or len(pointer) > 256
    ):
        raise _refuse("/expires/json", "must be a JSON pointer such as /expires_at")
    return header, pointer
