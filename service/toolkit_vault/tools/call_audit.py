"""A call's audit record: who called which tool, how it ended, and a keyed hash of its
arguments, never the arguments.

An auditor must be able to ask "was this value passed to this tool?" without the trail
holding any value a call carried (a path, a message body, a search term can be as private
as a credential). So the record holds `arguments_hmac`: HMAC-SHA256 of the arguments as
canonical JSON (RFC 8785, `canonical.py`) under a subkey of the audit key, which the
database holds only wrapped. Whoever holds the vault's keys can compute it for a value they
already have (`toolkit-vault audit hash`, as HashiCorp Vault's `sys/audit-hash`) and compare;
nobody can read a value back from it. A keyed hash rather than a plain digest because a
plain one lets anyone who reads the trail test guesses offline.

`CALL_HMAC_LABEL` names that subkey (`crypto.derive_key(audit_key, CALL_HMAC_LABEL)`), so
it is independent of the chain's links, which the audit key itself signs.
"""

from __future__ import annotations

import hmac
import json
import math
import re
from collections.abc import Mapping
from typing import Any, get_args

from toolkit_vault.canonical import canonical_json
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.tools.refusals import CallOutcome, RefusalReason

__all__ = [
    "CALL_HMAC_LABEL",
    "MAX_ARGUMENTS_BYTES",
    "BadArguments",
    "arguments_hmac",
    "canonical_hmac",
    "parse_arguments",
    "tool_called_draft",
]

CALL_HMAC_LABEL = "call-arguments"
# What `audit hash` reads: a call's arguments are at most a message, and a message is bounded
# (`protocol.MAX_MESSAGE_BYTES`); this leaves room for any of them.
MAX_ARGUMENTS_BYTES = 4 * 1024 * 1024
_OUTCOMES = frozenset(get_args(CallOutcome))
_HMAC = re.compile(r"[0-9a-f]{64}")
_REASONS = frozenset(get_args(RefusalReason))


class BadArguments(VaultError):
    """Arguments `audit hash` cannot read; the message never repeats what was given."""


def arguments_hmac(key: SecretBytes, arguments: Mapping[str, Any]) -> str:
    """Hex HMAC-SHA256 of `arguments` as canonical JSON, under `key` (the audit key's
    `CALL_HMAC_LABEL` subkey). Equal JSON values hash alike however they were written (key
    order, spacing, `1.0` or `1`). A value RFC 8785 cannot carry (an integer beyond 2**53)
    is hashed as sorted, compact JSON instead, so every call that reached the vault has a
    hash, and `audit hash` of the same text finds it."""
    value = dict(arguments)
    try:
        encoded = canonical_json(value)
    except ValueError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        encoded = text.encode("utf-8", "surrogatepass")
    return canonical_hmac(key, encoded)


def canonical_hmac(key: SecretBytes, canonical: bytes) -> str:
    """`arguments_hmac` of arguments whose canonical JSON the caller already holds (the
    engine's argument check made it: `tools.calls.checked_arguments`), not made twice."""
    return hmac.digest(key.reveal(), canonical, "sha256").hex()  # one-shot: OpenSSL's


def parse_arguments(text: str | bytes) -> dict[str, Any]:
    """A JSON object of arguments, read as the wire reads a message (`protocol`): no
    duplicate keys, no NaN or Infinity, no number out of range. Raises `BadArguments`
    saying what is wrong, never what was given."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_ARGUMENTS_BYTES:
        raise BadArguments(f"arguments of {size} bytes exceed the limit of {MAX_ARGUMENTS_BYTES}")
    raw = text
    if isinstance(text, bytes):
        try:
            raw = text.decode(json.detect_encoding(text), "surrogatepass")
        except (UnicodeDecodeError, LookupError):
            raise BadArguments("arguments are not text in UTF-8, -16 or -32") from None
    try:
        value = json.loads(
            raw,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_float=_finite,
        )
    except _Duplicate:
        raise BadArguments("arguments hold a duplicate object key") from None
    except (ValueError, RecursionError):
        raise BadArguments("arguments are not valid JSON") from None
    if not isinstance(value, dict):
        raise BadArguments("arguments must be a JSON object, as a call's are")
    return value


def tool_called_draft(
    *,
    actor: str,
    session_id: str | None,
    toolkit_name: str | None,
    version: int | None,
    tool: str | None,
    outcome: CallOutcome,
    duration_ms: float,
    arguments_hmac: str,
    reason: RefusalReason | None = None,
) -> AuditDraft:
    """The `tool_called` event of one call, refused ones too.

    `actor`: the calling principal; `session_id`: the session or principal scope the call
    ran in (or was refused in); `version`: the config version whose instance answered, None
    when none did. A name the caller made up (a toolkit or tool the vault does not know) is
    not the vault's to record: pass None. `reason`: a refusal's one word. Details hold the
    tool, the outcome, the duration in milliseconds and the arguments' HMAC, never a value
    of an argument or of a result."""
    for name, value, longest in (
        ("actor", actor, 64),
        ("session_id", session_id, 64),
        ("toolkit_name", toolkit_name, 200),
        ("tool", tool, 200),
    ):  # the columns' widths: one record too wide would fail its whole batch
        if value is not None and (not isinstance(value, str) or len(value) > longest):
            raise ValueError(f"{name}: a text of at most {longest} characters, or None")
    if not _HMAC.fullmatch(arguments_hmac):
        raise ValueError("arguments_hmac: 64 hex digits (`arguments_hmac`)")
    if outcome not in _OUTCOMES:
        raise ValueError(f"not a call outcome: {outcome!r}")
    if reason is not None and reason not in _REASONS:
        raise ValueError(f"not a refusal reason: {reason!r}")
    details: dict[str, Any] = {
        "tool": tool,
        "outcome": outcome,
        "duration_ms": round(max(float(duration_ms), 0.0), 3),
        "arguments_hmac": arguments_hmac,
    }
    if reason is not None:
        details["reason"] = reason
    return AuditDraft(
        actor, AuditAction.TOOL_CALLED, session_id, toolkit_name, version, details=details
    )


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Duplicate
    return found


def _no_constant(_name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value
