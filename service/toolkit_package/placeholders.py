"""Placeholders in published values, and where in a URL each one sits.

Publishers write the same idea several ways: ``{token}`` (server.json variables), ``${TOKEN}``
and ``${env:TOKEN}`` (shell style), ``${input:token}`` (VS Code inputs) and, inside URLs,
``<YOUR_TOKEN>``. Each names one input. Where a placeholder sits in a URL matters: in the
user-info or the query it is a credential, in the host it is a name.
"""

from __future__ import annotations

import re

from toolkit_package.classify import UrlPart

__all__ = ["fill", "names", "strip", "url_parts"]

_PLACEHOLDER = re.compile(
    r"\$?\{(?:input:|env:)?([A-Za-z_][A-Za-z0-9_.-]{0,127})\}|<([A-Za-z_][A-Za-z0-9_.-]{0,127})>"
)
_RANK: dict[UrlPart, int] = {"host": 0, "path": 1, "query": 2, "userinfo": 3}


def _found(text: str, *, angled: bool) -> list[tuple[str, int]]:
    out = []
    for match in _PLACEHOLDER.finditer(text):
        if match.group(1):
            out.append((match.group(1), match.start()))
        elif angled:
            out.append((match.group(2), match.start()))
    return out


def names(text: str, *, angled: bool = False) -> list[str]:
    """Placeholder names in ``text``, each once, in order (``<NAME>`` only when ``angled``)."""
    return list(dict.fromkeys(name for name, _ in _found(text, angled=angled)))


def fill(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{name}``-style placeholder replaced by its value; a placeholder
    without one raises KeyError (``<NAME>`` is left as written: only URLs use it)."""

    def value(match: re.Match[str]) -> str:
        return match.group(0) if match.group(1) is None else values[match.group(1)]

    return _PLACEHOLDER.sub(value, text)


def strip(text: str) -> str:
    """``text`` without its placeholders: the words a template wraps its values in."""
    return _PLACEHOLDER.sub(" ", text)


def _part(url: str, at: int) -> UrlPart:
    start = url.find("://")
    start = start + 3 if start >= 0 else 0
    ends = [i for i in (url.find(c, start) for c in "/?#") if i >= 0]
    authority_end = min(ends) if ends else len(url)
    if at < authority_end:
        return "userinfo" if "@" in url[at:authority_end] else "host"
    query = url.find("?", authority_end)
    return "query" if 0 <= query < at else "path"


def url_parts(url: str) -> dict[str, UrlPart]:
    """Placeholder name -> the most sensitive URL part it occurs in."""
    parts: dict[str, UrlPart] = {}
    for name, at in _found(url, angled=True):
        part = _part(url, at)
        if name not in parts or _RANK[part] > _RANK[parts[name]]:
            parts[name] = part
    return parts
