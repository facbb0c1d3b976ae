"""Registry following: the imported toolkits kept in line with the audit chain.

`toolkits import` and `toolkits remove` in any process (or replica) apply to the next
list, handshake and configure here. Each import and removal is an event of the audit
chain, which every process already follows (cheaply: on SQLite only when `PRAGMA
data_version` moved, and a list on PostgreSQL reads it anyway); the chain's count of them
(`ChainState.registry_changes`) is the registry's generation, so a process loads the
imported toolkits again only when it moved. The chain, not a notice, is the signal: it is
authenticated, every process sees it in order, and a process that was down or missed a
notice cannot miss it. A removal also drops the instances made here from the removed
toolkit (their connections hear `configured: false`).

May import: store, toolkits, and the live-instance table and push routing of `core`.
"""

from __future__ import annotations

import threading

from toolkit_vault.core.instances import LiveInstances
from toolkit_vault.core.outcomes import Outcome, status_event
from toolkit_vault.core.push import PushRouter
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.scopes import principal_scope
from toolkit_vault.store.storage import Source, Store
from toolkit_vault.toolkits.imports import stored_toolkits
from toolkit_vault.toolkits.registry import RegisteredToolkit, SourceKind, ToolkitRegistry

__all__ = ["RegistryFollower"]


class RegistryFollower:
    """Keeps one vault's registry at the chain's generation of imports and removals."""

    def __init__(
        self,
        store: Store,
        registry: ToolkitRegistry,
        instances: LiveInstances,
        push: PushRouter,
        loaded_at: int | None,
    ) -> None:
        """`loaded_at`: the chain's `registry_changes` when the imported toolkits were
        loaded (None: not known, so the first request loads them)."""
        self.store, self.registry = store, registry
        self._instances, self._push = instances, push
        # -1: the chain is not believed (and then neither is any import)
        self.seen: int | None = loaded_at
        self._lock = threading.Lock()

    def toolkit(self, name: str, mark: int | None = None) -> RegisteredToolkit:
        """The toolkit `name` as the store has it now (raises ToolkitNotFound). Built-in and
        entry-point toolkits are as registered; for any other name the registry is first
        brought in line with the chain, so a configure follows the latest import (a field
        reclassified) and refuses a removed toolkit. On SQLite that costs one `PRAGMA
        data_version` while nothing was committed, and the new events read on the watching
        connection when something was (`chain_state_at_once`: every call's record is a
        commit, so under calls the mark moves all the time; a read transaction each was
        a sixth of a call's CPU); on PostgreSQL one read of the chain. `mark`: a commit
        mark the caller read just before (SQLite; `chain_state_at_once`), not read again."""
        if name in self.registry:
            found = self.registry.get(name)
            if found.source.kind is not SourceKind.PACKAGE:
                return found
        # PostgreSQL's at-once state may not have heard another process's commit yet
        notices = self.store.notices
        chain = None if notices is not None else self.store.chain_state_at_once(mark)
        if chain is None:
            self.follow()
        else:
            self.follow_chain(chain)
        return self.registry.get(name)

    def follow(self) -> None:
        """Follow the chain and load the imported toolkits again if an import or removal
        was made since (by any process); what a removal ends is dropped here and told to
        its connections. Cheap when nothing changed (`serve` calls it a few times a second,
        so a connection that sends nothing hears of a removal too)."""
        try:
            chain: ChainState | None = self.store.chain_state()
        except StateUnknown:
            chain = None
        self.follow_chain(chain)

    def follow_chain(self, chain: ChainState | None) -> bool:
        """Load the imported toolkits again when `chain` (followed just now; None: not
        believed, and then neither is any import) counts other imports and removals than
        the registry was loaded at; returns whether it did.

        Then every instance here of an imported toolkit that is no longer registered, or
        that was made from a version a removal ended (even when the toolkit was imported
        again since: `ChainState.ended_by_removal`), is dropped. Every session connected
        here hears `configured: false` for a toolkit removed since the last load that it,
        or its principal, had configured (the chain says which), or whose instance was
        dropped: each replica tells its own connections, as each follows the chain, so an
        agent told `configured: true` through another replica's relay hears this too."""
        seen = -1 if chain is None else chain.registry_changes
        if seen == self.seen:
            return False
        with self._lock:
            since = self.seen
            if seen == since:
                return False
            imported = {t.definition.name for t in self.registry.all() if imported_toolkit(t)}
            self.registry.load_imported(stored_toolkits(self.store))
            self.seen = seen
            now = {t.definition.name for t in self.registry.all() if imported_toolkit(t)}
        removed: dict[str, dict[str, int]] = {}  # since the last load: toolkit -> scopes
        if chain is not None and since is not None and since >= 0:
            removals = list(chain.removals.items())  # one copy: the ledger may take more
            removed = {n: chain.removed.get(n, {}) for n, at in removals if at > since}

        def ended(session_id: str, name: str, source: Source) -> bool:
            if name not in imported | now:
                return False
            scope, version = source
            return name not in now or bool(chain and chain.ended_by_removal(scope, name, version))

        dropped = self._instances.drop(ended)
        told: list[ToolkitStatusEvent] = []
        for session_id, principal_id in self._push.sessions().items():
            scopes = (session_id, principal_scope(principal_id))
            for name in sorted(removed.keys() | {n for s, n in dropped if s == session_id}):
                had = any(scope in removed.get(name, {}) for scope in scopes)
                if had or (session_id, name) in dropped:
                    gone = Outcome("error", "toolkit removed")
                    told.append(status_event(session_id, name, False, gone))
        for event in told:
            self._push.deliver(event)
        return True


def imported_toolkit(toolkit: RegisteredToolkit) -> bool:
    """Whether the toolkit came from `toolkits import` (a package the store holds)."""
    return toolkit.source.kind is SourceKind.PACKAGE
