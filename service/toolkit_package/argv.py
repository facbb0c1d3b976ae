"""Credentials written into a command line or a URL, found by their shape, never kept.

A client config is the user's own file: ``"args": ["--token", "xoxb-..."]`` or a
``postgresql://admin:pw@host/db`` argument puts a credential where every local user can read
it (argv) and where no vault holds it. These functions say *that* one is there and name the
field that should hold it (``token``, ``postgresql-url``), never the value. A docker
``-e NAME`` (a name, its value from the environment) is not one; ``-e NAME=value`` is when
``NAME`` names a credential.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from toolkit_package.classify import TOKEN_SHAPE as _TOKEN_SHAPE
from toolkit_package.classify import credential_word

__all__ = ["argv_credential", "url_credential"]

_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.-]{0,63})(?:=(.*))?$", re.S)
_DOCKER_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,127})=(.+)$", re.S)
_PLACEHOLDER = re.compile(r"\$\{[^}]*\}|^<[^>]*>$|^\{[^}]*\}$")


def url_credential(text: str) -> tuple[str, str] | None:
    """(field name, why) when ``text`` is a URL carrying a credential in its user-info or
    query; placeholders (``${input:pw}``) are inputs already, not credentials."""
    if "://" not in text or _PLACEHOLDER.search(text):
        return None
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        return None
    scheme = re.sub(r"[^a-z0-9]+", "-", parts.scheme.lower()).strip("-") or "url"
    if parts.password or (
        parts.username and "@" in parts.netloc and _TOKEN_SHAPE.match(parts.username)
    ):
        return f"{scheme}-url", "a URL with a password in its user-info"
    for key, value in parse_qsl(parts.query, keep_blank_values=False):
        if value and (credential_word(key) is not None or _TOKEN_SHAPE.match(value)):
            return re.sub(r"[^A-Za-z0-9_-]+", "_", key)[
                :64
            ] or "token", "a URL with a credential in its query"
    return None


def _literal(value: str) -> bool:
    return bool(value.strip()) and not _PLACEHOLDER.search(value) and not value.startswith("-")


def argv_credential(args: list[str], i: int) -> tuple[str, str] | None:
    """(field name, why) when ``args[i]`` is a credential written in argv."""
    arg = args[i]
    previous = args[i - 1] if i else ""
    if (flag := _FLAG.match(arg)) is not None and flag.group(2) is not None:
        name, value = flag.group(1), flag.group(2)
        if _literal(value) and (credential_word(name) is not None or _TOKEN_SHAPE.match(value)):
            return name, f"the value of {arg.split('=', 1)[0]}"
    if previous in ("-e", "--env") and (env := _DOCKER_ENV.match(arg)) is not None:
        if _literal(env.group(2)) and credential_word(env.group(1)) is not None:
            return env.group(1), f"-e {env.group(1)}=..."
        return None  # `-e NAME` passes a name: its value stays in the environment
    if (found := url_credential(arg)) is not None:
        return found
    if _FLAG.match(arg) is None and _literal(arg):
        flag = _FLAG.match(previous)
        if flag is not None and flag.group(2) is None and credential_word(flag.group(1)):
            return flag.group(1), f"the value of {previous}"
        if _TOKEN_SHAPE.match(arg):
            return f"argument-{i}", "a token's well-known shape"
    return None
