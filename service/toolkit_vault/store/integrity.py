"""Authenticated state: the one definition of which stored rows the vault believes.

Someone who can write to the database but holds no master key can edit any row. Envelopes
already bind each secret to its row; this module extends that to every row whose meaning
matters: a config version (including "this version has no ciphertext"), a current-version
pointer, a principal (name, role, token hash, revocation, expiry), a session's owner, an imported
toolkit definition, a vault key record (which one is active, which are retired) and a
legacy master-key record. Each carries `mac` = HMAC(state key, table || its meaningful
columns), and the state key is stored only wrapped by a vault key.

A recovery wrap (`recovery_keys`: a vault key wrapped under the recovery key whose only
copies are the shares) is authenticated by that wrap itself, an AEAD bound to its vault
key id and share set: the vault keeps the recovery key wrapped by a vault key, so whoever
holds the vault keys opens every wrap to check it (`recovery_wrap_opens`), long before a
disaster needs them. No MAC column, so the rows of vaults made before this needed no
upgrade; which share set is current, and which vault keys it covers, is the chain's word
(`reconcile`).

Left out on purpose: material that authenticates itself (wrapped keys and envelopes are AEAD
with the row's context as associated data; a vault key's wrap is bound to its id by the key
provider), so either rotation rewraps without touching a MAC, and bookkeeping with no
meaning (`updated_at`, row ids).

A MAC proves the vault wrote a row, not that it is the latest row: one restored from an
older valid state (a pointer, a principal) is found against the audit chain by `reconcile`.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Callable, Mapping
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import DecryptionError, StoreError

__all__ = [
    "IMPORTED",
    "MASTER_KEYS",
    "POINTERS",
    "PRINCIPALS",
    "RECOVERY",
    "SESSIONS",
    "TABLES",
    "VAULT_KEYS",
    "VERSIONS",
    "Row",
    "RowAuthenticator",
    "recovery_context",
    "recovery_wrap_opens",
]

VERSIONS = "config_versions"
POINTERS = "current_configs"
PRINCIPALS = "principals"
SESSIONS = "sessions"
IMPORTED = "imported_toolkits"
MASTER_KEYS = "master_keys"
VAULT_KEYS = "vault_keys"
RECOVERY = "recovery_keys"  # authenticated by its own wrap, not a MAC (see above)
RECOVERY_RING = "recovery"

Row = Mapping[Any, Any]  # a row as read (SQLAlchemy RowMapping) or as written (a dict)

# What each authenticated table's MAC covers, in order.
_COVERED: dict[str, Callable[[Row], tuple[Any, ...]]] = {
    VERSIONS: lambda r: (
        r["session_id"],
        r["toolkit_name"],
        r["version"],
        r["status"],
        r["message"],
        r["actor"],
        r["created_at"],
        r["schema_digest"],
        r["public_config"],
        r["secret_fingerprints"],
        r["dek_id"],
        r["wrapped_dek"] is not None,  # "has ciphertext": nulling it is a downgrade
    ),
    POINTERS: lambda r: (r["session_id"], r["toolkit_name"], r["version"]),
    PRINCIPALS: lambda r: (
        r["principal_id"],
        r["name"],
        r["role"],
        r["token_hash"],
        r["created_at"],
        r["revoked_at"],
        # only when there is one: a row written before expiries (schema 0005), or without
        # one, signs as it did; removing an expiry leaves a field fewer, which no MAC matches
        *(() if r.get("expires_at") is None else (r["expires_at"],)),
    ),
    SESSIONS: lambda r: (r["session_id"], r["principal_id"], r["created_at"]),
    IMPORTED: lambda r: (
        r["name"],
        r["definition"],
        r["package_digest"],
        r["strategy"],
        r["format"],
        r["imported_at"],
        r["actor"],
    ),
    MASTER_KEYS: lambda r: (
        r["kek_id"],
        r["check_value"],
        r["is_primary"],
        r["created_at"],
        r["retired_at"],
    ),
    VAULT_KEYS: lambda r: (r["key_id"], r["is_active"], r["created_at"], r["retired_at"]),
}
TABLES = tuple(_COVERED)


_LENGTH = struct.Struct(">I").pack  # `crypto.length_prefixed`'s framing, inlined below
_NULL, _TRUE, _FALSE = b"n" + _LENGTH(0), b"b" + _LENGTH(1) + b"1", b"b" + _LENGTH(1) + b"0"


def _encode(table: str, values: tuple[Any, ...]) -> bytes:
    """Typed, length-prefixed fields: no two different rows encode alike, and a value of
    another type than the vault wrote (SQLite keeps whatever it is given) never matches.

    The types a row holds (exactly `str`, None, `int`, `float`, `bytes`, `bool`) are written
    inline, chosen by their exact type; anything else (a subclass, a memoryview, a type no
    row holds) goes the long way (`_field`, the definition). Both write the same bytes (a
    property test holds them alike): `check` and `audit verify` pay this once a row, and
    the long way was most of a row MAC's cost (issue 53)."""
    parts = [table.encode()]
    append = parts.append
    for value in values:
        kind = type(value)
        if kind is str:
            data = value.encode()  # strict: a lone surrogate cannot be signed
            append(b"s" + _LENGTH(len(data)) + data)
        elif value is None:
            append(_NULL)
        elif kind is int:
            data = str(value).encode()
            append(b"i" + _LENGTH(len(data)) + data)
        elif kind is float:
            data = value.hex().encode()
            append(b"f" + _LENGTH(len(data)) + data)
        elif kind is bytes:
            append(b"y" + _LENGTH(len(value)) + value)
        elif kind is bool:
            append(_TRUE if value else _FALSE)
        else:
            append(_field(value))
    return b"".join(parts)


def _field(value: Any) -> bytes:
    """One field, tag and length-prefixed data: the definition `_encode`'s lookup follows."""
    if value is None:
        tag, data = b"n", b""
    elif isinstance(value, bool):
        tag, data = b"b", b"1" if value else b"0"
    elif isinstance(value, int):
        tag, data = b"i", str(value).encode()
    elif isinstance(value, float):
        tag, data = b"f", value.hex().encode()
    elif isinstance(value, str):
        tag, data = b"s", value.encode()  # strict: a lone surrogate cannot be signed
    elif isinstance(value, bytes | bytearray | memoryview):
        tag, data = b"y", bytes(value)
    else:
        raise TypeError(f"cannot authenticate a {type(value).__name__}")
    return tag + crypto.length_prefixed(data)


def recovery_context(set_id: str, key_id: str) -> tuple[str | int, ...]:
    """What a recovery wrap is bound to: its share set and its vault key."""
    return (crypto.FORMAT_VERSION, "recovery", set_id, key_id)


def recovery_wrap_opens(recovery: SecretBytes | None, row: Row) -> bool:
    """A recovery wrap opens under the recovery key, for its own set and vault key (the key
    it yields is dropped at once); never raises on odd data."""
    if recovery is None:
        return False
    ring = crypto.KeyRing({RECOVERY_RING: recovery}, RECOVERY_RING)
    try:
        context = recovery_context(str(row["set_id"]), str(row["key_id"]))
        ring.unwrap(RECOVERY_RING, bytes(row["wrapped_key"]), context)
    except (DecryptionError, KeyError, TypeError, ValueError):
        return False
    return True


class RowAuthenticator:
    """Signs and checks rows under the state key; the key never leaves this object."""

    def __init__(self, key: SecretBytes) -> None:
        self._mac = crypto.state_macs(key)  # keyed once: each row's MAC starts from a copy

    def __repr__(self) -> str:
        return "RowAuthenticator(<state key hidden>)"

    def mac(self, table: str, row: Row) -> bytes:
        return self._mac(_encode(table, _COVERED[table](row)))

    def verify(self, table: str, row: Row) -> bool:
        """True only for a row exactly as the vault wrote it; never raises on odd data."""
        stored = row.get("mac")
        if not isinstance(stored, bytes | bytearray | memoryview):
            return False
        try:
            expected = self.mac(table, row)
        except (KeyError, TypeError, UnicodeEncodeError):
            return False
        return hmac.compare_digest(expected, bytes(stored))


def require(authenticator: RowAuthenticator | None) -> RowAuthenticator:
    if authenticator is None:
        raise StoreError("the state key is not loaded")
    return authenticator
