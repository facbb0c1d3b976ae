"""Config scopes: a config belongs to one session, or to a principal and all its sessions.

A principal's configs live in the same tables as a session's, under a reserved scope id,
`principal:<principal id>`: a `sessions` row owned by that principal, made on its first
principal-scoped configure. So versions, pointers, row MACs, the audit cross-checks,
fingerprints, purge, rotation and `check` treat both scopes alike, and every envelope's
associated data (which holds the scope id) binds the ciphertext to its scope. The vault
never hands out a reserved id as a session id (those are UUIDs), and refuses one named in a
handshake or an `A2E-Session` header like an unknown session.

A session's effective config for a toolkit is its own current version, else its
principal's (`Vault._sync`).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["PREFIX", "Scope", "principal_of", "principal_scope", "scope_of"]

Scope = Literal["session", "principal"]
PREFIX = "principal:"


def principal_scope(principal_id: str) -> str:
    """The reserved scope id of a principal's own configs (the vault makes principal ids
    of at most 36 characters, so it fits `sessions.session_id`; `Vault` refuses to make a
    scope whose id would not)."""
    return PREFIX + principal_id


def principal_of(scope_id: str) -> str | None:
    """The principal a reserved scope id belongs to; None for a session id."""
    return scope_id[len(PREFIX) :] if scope_id.startswith(PREFIX) else None


def scope_of(scope_id: str) -> Scope:
    return "principal" if scope_id.startswith(PREFIX) else "session"
