"""Bounded JSON parsing for untrusted public metadata.

Every limit is checked before or during parsing, so a hostile document ends in one
``BoundsRefused`` naming the broken bound, never in a traceback, a hang or a guess. Duplicate
keys are refused rather than resolved "last wins", because two readers could disagree on which
value (and which secret marking) counts.

With ``jsonc=True`` the input may be JSONC, as VS Code writes its configs: ``//`` and ``/* */``
comments and trailing commas. They are blanked out in place (newlines kept), so the strict
parser then reads the same line and column numbers the user sees, and a syntax error names
them (never the text around them, which may hold a value).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_INPUT_BYTES",
    "MAX_STRING_BYTES",
    "BoundsRefused",
    "loads_bounded",
]

MAX_INPUT_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_STRING_BYTES = 64 << 10

# Strings are skipped as whole tokens, so brackets inside them never count toward depth.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_COMMENTS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL)
_TRAILING = re.compile(r'"(?:[^"\\\n]|\\.)*"|,(?=\s*[\]}])')
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class BoundsRefused(ValueError):
    """The document broke a bound or is not JSON; ``code`` names which, never a value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _check_depth(data: bytes) -> None:
    depth = 0
    for match in _TOKENS.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise BoundsRefused("nesting_too_deep", f"JSON nesting deeper than {MAX_DEPTH}")
        elif token in (b"]", b"}"):
            depth -= 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BoundsRefused("duplicate_key", "an object repeats a key")
        result[key] = value
    return result


def _refuse_constant(_: str) -> Any:
    raise BoundsRefused("not_json", "NaN and Infinity are not JSON")


def _check_string(text: str) -> None:
    if len(text) * 4 > MAX_STRING_BYTES and len(text.encode("utf-8", "surrogatepass")) > (
        MAX_STRING_BYTES
    ):
        raise BoundsRefused("string_too_long", f"a string exceeds {MAX_STRING_BYTES} bytes")
    if _SURROGATE.search(text):
        raise BoundsRefused("invalid_string", "a string holds an unpaired surrogate")


def _check_strings(root: Any) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            _check_string(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                _check_string(key)
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _blank(match: re.Match[str]) -> str:
    token = match.group()
    if token.startswith('"'):
        return token
    return "".join(c if c == "\n" else " " for c in token)


def _strip_jsonc(text: str) -> str:
    """JSONC to JSON with every character in place: comments and trailing commas blanked."""
    return _TRAILING.sub(_blank, _COMMENTS.sub(_blank, text))


def loads_bounded(data: bytes, *, max_bytes: int = MAX_INPUT_BYTES, jsonc: bool = False) -> Any:
    """Parse ``data`` as UTF-8 JSON (or JSONC) within every bound, or raise ``BoundsRefused``."""
    if len(data) > max_bytes:
        raise BoundsRefused("input_too_large", f"input exceeds {max_bytes} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BoundsRefused("not_utf8", "input is not UTF-8") from None
    if jsonc:
        text = _strip_jsonc(text.removeprefix("\ufeff"))
        data = text.encode("utf-8", "surrogatepass")
    _check_depth(data)
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant)
    except BoundsRefused:
        raise
    except RecursionError:
        raise BoundsRefused("nesting_too_deep", "JSON nesting too deep") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BoundsRefused("not_json", f"invalid JSON at {where}: {exc.msg}") from None
    except ValueError:
        # int() refusing an over-long digit string.
        raise BoundsRefused("not_json", "input is not valid JSON") from None
    _check_strings(value)
    return value
