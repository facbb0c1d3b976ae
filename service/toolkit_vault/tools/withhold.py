"""The withheld rule: a tool's result that carries a secret of the calling scope is not
answered. A result is searched whole (every string in its content blocks and structured
content, keys included) for each secret value of 6 characters or more as is, and as its
base64, base64url, hex (either case) and percent-encoded forms. Base64 is searched at each
of the three alignments a secret can have inside a longer encoded text, without the
characters its neighbours change.

What it cannot see is in SECURITY.md: a secret split, reversed, encrypted, or encoded some
other way is not found; the rule stops accidents and careless tools, not a tool written to
leak.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["MIN_SECRET_CHARS", "Withholder", "secret_values"]

MIN_SECRET_CHARS = 6
_ESCAPED = re.compile(r'[\x00-\x1f"\\]')  # what `json.dumps` writes escaped (ensure_ascii off)


def _base64_forms(raw: bytes) -> Iterator[str]:
    """The part of `raw`'s base64 (both alphabets) that does not depend on its neighbours,
    at each alignment: the characters whose six bits all come from `raw`."""
    for offset in range(3):
        padded = bytes(offset) + raw
        first = (offset * 8 + 5) // 6
        last = (len(padded) * 8) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            yield encode(padded).decode("ascii")[first:last]


def _forms(secret: str) -> Iterator[str]:
    raw = secret.encode()
    yield secret
    yield raw.hex()
    yield raw.hex().upper()
    yield quote(secret, safe="")
    yield quote_plus(secret, safe="")
    yield from _base64_forms(raw)


class Withholder:
    """The secrets of one scope's config, compiled once into one search."""

    __slots__ = ("_pattern", "_verbatim")

    def __init__(self, secrets: Iterable[str]) -> None:
        needles = {
            form
            for secret in secrets
            if len(secret) >= MIN_SECRET_CHARS
            for form in _forms(secret)
            if len(form) >= MIN_SECRET_CHARS
        }
        # longest first, so the alternation's first match is never a prefix of a longer one
        ordered = sorted(needles, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        # no needle holds a character JSON text escapes: each shows as is in that text
        self._verbatim = not any(_ESCAPED.search(needle) for needle in ordered)

    def withholds(self, result: Any) -> bool:
        """Whether `result` (a result's content and structured content, as JSON values)
        carries one of the secrets."""
        if self._pattern is None:
            return False
        search = self._pattern.search
        return any(search(text) is not None for text in _strings(result))

    def withholds_json(self, text: str, result: Any) -> bool:
        """`withholds(result)`, given `text`, the result as `json.dumps` writes it (the
        engine's size check made it): one search of that text answers for a result
        carrying none of the secrets, where the secrets hold no character JSON escapes
        (every string, key and number of `result` is in `text` as is, so a needle in one
        is in `text`). A match there may span two values (`1,2`), so then, as for secrets
        JSON escapes, the result is searched value by value."""
        if self._pattern is None:
            return False
        if self._verbatim and self._pattern.search(text) is None:
            return False
        return self.withholds(result)

    def __repr__(self) -> str:
        return "Withholder(<secrets>)"


def secret_values(value: Any) -> Iterator[str]:
    """Every string (or number, as its text) in a config's secret fields, however nested:
    what a `Withholder` searches for."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from secret_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from secret_values(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included; numbers as their text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                yield str(key)
                stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            yield repr(item)
