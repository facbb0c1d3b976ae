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
  is written by both as the int it equals ("1", "0"): it is turned into that int first
  (`_whole`), so every call's record, whose duration is such a float, is not the slow case.
Anything else (a `bool` subclass, a tuple, a float like 1e-7, a non-ASCII key, a lone
surrogate) goes to `rfc8785.dumps`, with its errors. A property test holds the two
byte for byte; a stored MAC or chain link never changes with this.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

__all__ = ["canonical_json"]

_SAFE_INT = 2**53 - 1
_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of `value`; raises `rfc8785.CanonicalizationError` (a ValueError) or
    TypeError for what canonical JSON cannot carry."""
    plain = _plain(value)
    fast = value if plain else _whole(value)  # a copy, when it has whole floats to turn
    if plain or (fast is not value and _plain(fast)):
        try:
            return _ENCODE(fast).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 names the error
    encoded: bytes = rfc8785.dumps(value)
    return encoded


def _whole(value: Any) -> Any:
    """`value` with each float that is a whole number within +-2**53 as that int (RFC 8785
    writes both alike); dicts and lists copied where they hold one, the rest as it is."""
    kind = type(value)
    if kind is float:
        return int(value) if value.is_integer() and abs(value) <= _SAFE_INT else value
    if kind is dict:
        return {k: _whole(v) for k, v in value.items()}
    if kind is list:
        return [_whole(item) for item in value]
    return value


def _plain(value: Any) -> bool:
    """Whether the C encoder writes `value` exactly as RFC 8785 does."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if kind is float:
        return 1e-4 <= abs(value) < 1e16 and not value.is_integer()
    if kind is dict:
        return all(type(k) is str and k.isascii() and _plain(v) for k, v in value.items())
    if kind is list:
        return all(_plain(item) for item in value)
    return False
