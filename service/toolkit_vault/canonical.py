"""RFC 8785 canonical JSON, the bytes every MAC, digest and envelope here is computed over.

`rfc8785.dumps` is the definition; it is pure Python and, on a configure, its six calls
cost as much as the SQL. Where its output provably equals the C encoder's
(`json.dumps` with sorted keys, no spaces, UTF-8), that encoder writes it:
- every key is an ASCII string, so code point order is RFC 8785's UTF-16 order;
- every number is an int within +-(2**53 - 1) (beyond it RFC 8785 refuses), or a finite
  float with a fraction and 1e-4 <= |x| < 1e16, where Python's shortest round-trip `repr`
  is ECMAScript's fixed notation (no exponent, no `.0`);
- strings escape alike: both write \\b \\f \\n \\r \\t, \\uXXXX in lower case for the other
  control characters, and everything else as itself.
- a float with no fraction and |x| <= 2**53 (1.0, -0.0, a duration of whole milliseconds)
  is written by both as the int it equals ("1", "0"): it is turned into that int first,
  so every call's record, whose duration is such a float, is not the slow case.
One pass (`_fast`) tells both and turns those floats. Anything else (a `bool` subclass, a
tuple, a float like 1e-7, a non-ASCII key, a lone surrogate) goes to `rfc8785.dumps`, with
its errors. A property test holds the two
byte for byte; a stored MAC or chain link never changes with this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring
from typing import Any

import rfc8785

__all__ = ["canonical_digest", "canonical_json", "parse_json", "sorted_encoder"]

_SAFE_INT = 2**53 - 1


def sorted_encoder() -> Callable[[Any], str]:
    """`json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True,
    separators=(",", ":")).encode`, its C encoder made once instead of once a call and
    without the circular-reference check, for values that hold no cycle: `_fast` has
    walked every value `canonical_json` gives it (a cycle never ends that walk), and
    `links_check` gives it details parsed from text."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # (not in typeshed)
    if c_make_encoder is None:  # (an interpreter without the C accelerator)
        encode: Callable[[Any], str] = json.JSONEncoder(
            ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
        ).encode
        return encode
    chunks = c_make_encoder(None, None, encode_basestring, None, ":", ",", True, False, False)
    return lambda value: "".join(chunks(value, 0))


_ENCODE = sorted_encoder()


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of `value`; raises `rfc8785.CanonicalizationError` (a ValueError) or
    TypeError for what canonical JSON cannot carry."""
    fast = _fast(value)
    if fast is not _SLOW:
        try:
            return _ENCODE(fast).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 names the error
    encoded: bytes = rfc8785.dumps(value)
    return encoded


def canonical_digest(value: Any) -> str:
    """`sha256:` and the SHA-256 of `value`'s canonical JSON: a schema's digest
    (`schema.schema_digest`), here so a listing can name one without the schema package."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


# the C scanner `json.loads` runs under its wrappers (typeshed leaves the attribute out)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def parse_json(text: Any) -> Any:
    """`json.loads(text)`, without the cost of its wrappers (three Python calls and two
    regular expressions a value; `audit verify` parses every event's details and every
    version's JSON): the scanner alone, believed only when it took the whole string, and
    `json.loads` itself for anything else (whitespace around the value, bytes, an error),
    so the answer and the errors are `json.loads`'s."""
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


_SLOW = object()  # `_fast`'s answer for a value the C encoder may write otherwise


def _fast(value: Any) -> Any:
    """`value` as the C encoder writes exactly as RFC 8785 does, in one pass: as it is, or a
    copy (of the dicts and lists on the way) with each whole float within 2**53 turned
    into its int; `_SLOW` for anything else. Strings are taken at once: every call's
    audit record comes here."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value
    if kind is int:
        return value if -_SAFE_INT <= value <= _SAFE_INT else _SLOW
    if kind is float:
        if value.is_integer():
            return int(value) if abs(value) <= _SAFE_INT else _SLOW
        return value if 1e-4 <= abs(value) < 1e16 else _SLOW
    if kind is dict:
        for key in value:  # a loop, not `any` of a generator: every event's details come here
            if type(key) is not str or not key.isascii():
                return _SLOW
        return _turned(value, value.items(), dict)
    if kind is list:
        return _turned(value, enumerate(value), list)
    return _SLOW


def _turned(value: Any, members: Iterable[tuple[Any, Any]], copy_of: Any) -> Any:
    """`_fast` of a dict's or a list's `members` (key or index, item): `value` itself when
    none changes, a copy (`copy_of`) with the changed ones, or `_SLOW`."""
    copy = None
    for key, item in members:
        if type(item) is str:
            continue
        fast = _fast(item)
        if fast is _SLOW:
            return _SLOW
        if fast is not item:
            copy = copy_of(value) if copy is None else copy
            copy[key] = fast
    return value if copy is None else copy
