"""When a credential ends, as a fact kept beside it.

A check may tell (a plugin's `verify` returning when the key ends, or the response header
or JSON field an `x-verify` names), and so may the credential itself (a secret field that
is a JWT carries `exp`). The earliest of these is kept in the version's public config
under `EXPIRES_KEY`, an epoch number: public like the rest of it (history and auditors
see it, authenticated with the row), never the secret, and taken out again before a
toolkit sees its config. An instance made from a config past its expiry is not made: the
toolkit reads `configured: false` until a person configures it again.

A JWT is read, not verified: its signature is the issuer's business, and a forged `exp`
could only make the vault stop using a credential sooner.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "EXPIRES_KEY",
    "earliest",
    "expired_message",
    "expiry_of",
    "jwt_expiry",
    "read_expiry",
    "with_expiry",
    "without_expiry",
]

EXPIRES_KEY = "x-credential-expires-at"
_JWT = re.compile(r"^[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*$")
_MAX_JWT = 16 * 1024
_LATEST = 253402300799  # 9999-12-31: a later date is no expiry anyone meant


def read_expiry(value: Any) -> float | None:
    """An expiry as a check or a claim gives it: epoch seconds (milliseconds when it could
    only be those), an aware or UTC ISO 8601 text, an HTTP date, a `datetime`. None when it
    is none of these (a check's odd answer never refuses a working credential)."""
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo is not None else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value) / 1000 if value > _LATEST else float(value)
        return seconds if math.isfinite(seconds) and 0 < seconds <= _LATEST else None
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    text = value.strip()
    if re.fullmatch(r"\d{1,13}(\.\d+)?", text):
        return read_expiry(float(text))
    try:
        return read_expiry(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    try:
        return read_expiry(parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError):
        return None


def jwt_expiry(secrets: Mapping[str, Any]) -> float | None:
    """The earliest `exp` of the secret values that are JWTs (pointer -> value)."""
    found = []
    for value in secrets.values():
        if isinstance(value, str) and len(value) <= _MAX_JWT and _JWT.match(value):
            header, payload = (_json_part(part) for part in value.split(".")[:2])
            if isinstance(header, dict) and "alg" in header and isinstance(payload, dict):
                found.append(read_expiry(payload.get("exp")))
    return earliest(found)


def _json_part(part: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def earliest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def with_expiry(public: dict[str, Any], expires_at: float | None) -> dict[str, Any]:
    """The public half to store: with the expiry, when one is known (whole seconds)."""
    if expires_at is None:
        return public
    return {**public, EXPIRES_KEY: int(expires_at)}


def expiry_of(config: Mapping[str, Any]) -> float | None:
    """The expiry a stored config carries (None: none known)."""
    value = config.get(EXPIRES_KEY)
    return read_expiry(value) if isinstance(value, int | float) else None


def without_expiry(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config a toolkit sees: without the vault's own fact."""
    return {k: v for k, v in config.items() if k != EXPIRES_KEY}


def when(expires_at: float) -> str:
    return datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def expired_message(expires_at: float) -> str:
    """What a toolkit whose credential ended says (its status event, the list's reason)."""
    return f"the credential expired at {when(expires_at)}: configure it again to renew it"
