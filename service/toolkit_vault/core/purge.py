"""Purge: an operator crypto-shreds a scope's configs, leaving only their audit skeleton.

A session's purge (`purge`) shreds its versions; a principal's (`purge_principal`) shreds
its own configs, the versions of its principal scope, and leaves its sessions' own. Either
may keep to one toolkit. `purge_preview` counts what a purge would destroy, writing
nothing, so the confirmation an operator answers names it. The shredding itself, its audit
event and the scrubbing of SQLite's files are the store's (`store.shredding`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit_vault.audit.history import find_principal
from toolkit_vault.errors import VaultError
from toolkit_vault.store.scopes import principal_of, principal_scope, scope_of
from toolkit_vault.store.shredding import scrub_files, shred_scope, shreddable
from toolkit_vault.store.storage import Store

__all__ = ["PurgePreview", "PurgeReport", "purge", "purge_preview", "purge_principal"]


@dataclass(frozen=True)
class PurgeReport:
    session_id: str  # the scope purged: a session, or a principal scope
    principal_id: str | None  # whose scope it is
    toolkit_name: str | None
    versions: int  # versions shredded by this purge (already purged ones are not counted)
    toolkits: list[str]  # toolkits those versions belong to
    unconfigured: list[str]  # toolkits that were configured and are not any more
    files_scrubbed: bool | None  # SQLite: WAL checkpointed and truncated; None elsewhere

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "scope": scope_of(self.session_id),
            "principal_id": self.principal_id,
            "toolkit_name": self.toolkit_name,
            "versions": self.versions,
            "toolkits": self.toolkits,
            "unconfigured": self.unconfigured,
            "files_scrubbed": self.files_scrubbed,
        }


@dataclass(frozen=True)
class PurgePreview:
    """What a purge of a scope would destroy, counted without writing: the confirmation
    an operator answers names it."""

    session_id: str  # the scope: a session, or a principal scope
    principal_id: str | None  # whose scope it is
    toolkit_name: str | None
    versions: int  # versions a purge would shred now
    toolkits: list[str]  # toolkits those versions belong to
    configured: list[str]  # toolkits configured from this scope now, unconfigured after

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "scope": scope_of(self.session_id),
            "principal_id": self.principal_id,
            "toolkit_name": self.toolkit_name,
            "versions": self.versions,
            "toolkits": self.toolkits,
            "configured": self.configured,
        }


def purge(store: Store, session: str, toolkit: str | None = None, *, actor: str) -> PurgeReport:
    """Crypto-shred a session's versions (or one toolkit's) in one audited transaction."""
    if principal_of(session) is not None:
        raise VaultError("that is a principal scope: purge it with --principal")
    return _purge(store, session, toolkit, actor, must_exist=True)


def purge_principal(
    store: Store, principal: str, toolkit: str | None = None, *, actor: str
) -> PurgeReport:
    """Crypto-shred a principal's own configs (or one toolkit's); its sessions' stay."""
    scope_id = principal_scope(find_principal(store, principal))
    return _purge(store, scope_id, toolkit, actor, must_exist=False)


def purge_preview(store: Store, scope_id: str, toolkit: str | None = None) -> PurgePreview:
    """Count what `purge` (a session) or `purge_principal` (its scope id) would destroy,
    by the same rule, writing nothing; an unknown session raises as `purge` does."""
    found = shreddable(store, scope_id, toolkit)
    owner = found.owner or principal_of(scope_id)
    return PurgePreview(scope_id, owner, toolkit, found.versions, found.toolkits, found.configured)


def _purge(
    store: Store, scope_id: str, toolkit: str | None, actor: str, *, must_exist: bool
) -> PurgeReport:
    done = shred_scope(store, scope_id, toolkit, actor=actor, must_exist=must_exist)
    owner = done.owner or principal_of(scope_id)
    scrubbed = scrub_files(store)
    return PurgeReport(
        scope_id, owner, toolkit, done.versions, done.toolkits, done.unconfigured, scrubbed
    )
