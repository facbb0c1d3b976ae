"""The vault's error hierarchy.

Two layers, as in itsdangerous: a small tree of typed errors that carry structured,
value-free context for callers and tests, and one opaque `DecryptionError` at the trust
boundary. No error here ever holds a submitted value: messages name JSON pointers, schema
keywords, key ids and toolkit names only.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigInvalid",
    "DecryptionError",
    "KeyProviderError",
    "PrincipalEnded",
    "Reconnect",
    "SchemaRefused",
    "StoreError",
    "ToolkitNotFound",
    "UnknownSession",
    "VaultError",
]


class VaultError(Exception):
    """Base of every error the vault raises on purpose; the message is safe to show."""

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: list[dict[str, Any]] = details or []


class DecryptionError(VaultError):
    """The one opaque error for every decrypt failure: wrong key, tampered or moved data."""

    def __init__(self) -> None:
        super().__init__("decryption failed")


class KeyProviderError(VaultError):
    """A master key could not be loaded, or the provider is unsafe; refuse to start."""


class SchemaRefused(VaultError):
    """A toolkit's JSON Schema cannot be registered (invalid, remote $ref, hostile)."""


class ConfigInvalid(VaultError):
    """A config does not match its toolkit's schema; details name pointers and keywords."""


class ToolkitNotFound(VaultError):
    """No registered toolkit has that name."""


class UnknownSession(VaultError):
    """The session does not exist or belongs to another principal (indistinguishable)."""


class Reconnect(VaultError):
    """An OAuth connection a person must authorize again (or whose server is down);
    `intake_url` (when one could be made) is where they do it."""

    def __init__(self, message: str, intake_url: str | None = None) -> None:
        super().__init__(message)
        self.intake_url = intake_url


class PrincipalEnded(VaultError):
    """The principal a write acts for had its token revoked or expire (or was removed)
    while the request ran: checked in the write's own transaction, nothing was stored.
    Answered `UNAUTHORIZED`, as the token would be now."""


class StoreError(VaultError):
    """The database refused or failed; nothing was written."""


class VersionMoved(VaultError):
    """A write conditioned on a version read earlier (a refreshed OAuth token set, an intake
    link's config) found another written since, or that one purged: nothing was written."""

    def __init__(self, message: str, *, purged: bool = False) -> None:
        super().__init__(message)
        self.purged = purged
