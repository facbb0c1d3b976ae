"""The toolkit instances this process initialized: one table, keyed by (session,
toolkit), each entry holding where the instance was made from (`Source`: the scope and
version of its config), the instance (None: it failed, or its credential ended), the tools
a `partial` status named unavailable, and when its credential ends.

Every change goes through it under one lock: `install` (compare-and-set against what a
reader saw), `drop` (every entry a predicate picks: a removed toolkit's, a principal
scope's), so no use case cleans up several structures by hand. It also keeps what a
list's read of the store stays true for (`Mark`: the store's commit mark and the count of
drops made here), so a list may be answered from memory (`Vault.answer_without_blocking`).

Each live entry holds the calls in flight on its instance (`claim`), and the secrets its
results are searched for (`tools.scope_secrets`): an entry replaced (a reconfigure, an
expiry) or dropped (a purge, a removal, a principal's config changed) cancels its calls
at once, and a call can claim only the entry live now. One exception: an imported
server's instance replaced by a newer version's lets its calls in flight finish on the old
version's process, which then stops (`retire`).

May import: store (its `Source` type), plugin types, the tool engine's types; nothing
that acts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from toolkit_vault.store.storage import Source
from toolkit_vault.toolkits.registry import Toolkit
from toolkit_vault.tools.calls import Cancellation
from toolkit_vault.tools.scope_secrets import ScopeSecrets

__all__ = ["Claim", "LiveInstances", "Mark", "stop_instance"]

log = logging.getLogger(__name__)
Mark = tuple[int, int]  # `Vault.mark`: the store's commit mark, this process's drops


@dataclass
class _Entry:
    source: Source  # the scope and version the instance was made from
    instance: Toolkit | None = None  # None: none is live (failed, or its credential ended)
    unavailable: frozenset[str] = frozenset()  # tools a `partial` status named
    expires_at: float | None = None  # when its credential ends, if known
    secrets: ScopeSecrets | None = None  # what its results are searched for
    calls: set[Cancellation] = field(default_factory=set)  # calls in flight on it

    def end_calls(self, *, replaced: bool = False) -> None:
        """Cancel every call in flight on this entry's instance (it is no longer live), and
        stop what it runs (an imported server's process). `replaced` by a newer version's
        instance: one that can `retire` (an imported server) finishes its calls in flight
        first, the new version's process taking the new ones."""
        retire = getattr(self.instance, "retire", None) if replaced else None
        if callable(retire):
            try:
                retire()
            except Exception as exc:
                log.warning("a toolkit instance failed to retire (%s)", type(exc).__name__)
            return
        for call in self.calls:
            call.cancel()
        stop_instance(self.instance)


def stop_instance(instance: object) -> None:
    """Stop what an instance runs, if it runs anything (`toolkits.served`: a server's
    process): one no longer live, or never installed. Never blocks, never raises."""
    stop = getattr(instance, "stop", None)
    if callable(stop):
        try:
            stop()
        except Exception as exc:
            log.warning("a toolkit instance failed to stop (%s)", type(exc).__name__)


@dataclass(frozen=True)
class Claim:
    """A call's hold on a live instance: the instance, what it was made from, the secrets
    its result is searched for; `release` when the call ends."""

    instance: Toolkit
    source: Source
    secrets: ScopeSecrets
    unavailable: frozenset[str]
    release: Callable[[], None]


class LiveInstances:
    """The live-instance table of one vault (see the module)."""

    def __init__(self) -> None:
        # session -> toolkit -> entry; a session's dict stays once made (`knows`)
        self._table: dict[str, dict[str, _Entry]] = {}
        self._read_at: dict[str, Mark] = {}  # session -> the mark its list last read at
        self._dropped = 0  # counts changes made here to what a read had installed
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    def sources(self, session_id: str) -> dict[str, Source]:
        """What each of the session's toolkits was last initialized from, here."""
        with self._lock:
            return self._sources(session_id)

    def sources_and_live(self, session_id: str) -> tuple[dict[str, Source], set[str]]:
        """`sources` and `live`, read together."""
        with self._lock:
            return self._sources(session_id), self._live(session_id)

    def source(self, session_id: str, name: str) -> Source | None:
        with self._lock:
            entry = self._table.get(session_id, {}).get(name)
            return None if entry is None else entry.source

    def live(self, session_id: str) -> set[str]:
        """The session's toolkits with a live instance here."""
        with self._lock:
            return self._live(session_id)

    def knows(self, session_id: str) -> bool:
        """Whether this process ever initialized anything for the session."""
        with self._lock:
            return session_id in self._table

    def is_live(self, session_id: str, name: str, instance: Toolkit) -> bool:
        """Whether `instance` is still the live one of (session, toolkit)."""
        with self._lock:
            entry = self._table.get(session_id, {}).get(name)
            return entry is not None and entry.instance is instance

    def instance(self, session_id: str, name: str) -> Toolkit | None:
        """The live instance of (session, toolkit), if any."""
        with self._lock:
            entry = self._table.get(session_id, {}).get(name)
            return None if entry is None else entry.instance

    def unavailable(self, session_id: str, name: str) -> frozenset[str]:
        with self._lock:
            entry = self._table.get(session_id, {}).get(name)
            return frozenset() if entry is None or entry.instance is None else entry.unavailable

    def lacking(self, session_id: str) -> tuple[tuple[str, frozenset[str]], ...]:
        """`unavailable` of each of the session's toolkits that lacks a tool, by name."""
        with self._lock:
            entries = sorted(self._table.get(session_id, {}).items())
        return tuple(
            (name, entry.unavailable)
            for name, entry in entries
            if entry.instance is not None and entry.unavailable
        )

    def ends(self, session_id: str, configured: set[str]) -> dict[str, float]:
        """When the credentials of the session's configured toolkits end, where known."""
        with self._lock:
            entries = dict(self._table.get(session_id, {}))
        return {
            name: entry.expires_at
            for name, entry in entries.items()
            if name in configured and entry.instance is not None and entry.expires_at is not None
        }

    def expiring(self) -> list[tuple[str, str, Source, float]]:
        """(session, toolkit, source, when its credential ends) of every live instance
        whose credential has a known end."""
        with self._lock:
            return [
                (session_id, name, entry.source, entry.expires_at)
                for session_id, entries in self._table.items()
                for name, entry in entries.items()
                if entry.instance is not None and entry.expires_at is not None
            ]

    def live_scopes(self) -> set[tuple[str, str]]:
        """(scope, toolkit) of every live instance: the configs they were made from."""
        with self._lock:
            return {
                (entry.source[0], name)
                for entries in self._table.values()
                for name, entry in entries.items()
                if entry.instance is not None
            }

    def sessions_from(self, scope_id: str, name: str) -> list[str]:
        """The sessions whose entry of `name` was made from `scope_id`'s config."""
        with self._lock:
            return [
                session_id
                for session_id, entries in self._table.items()
                if name in entries and entries[name].source[0] == scope_id
            ]

    def claim(self, session_id: str, name: str, call: Cancellation) -> Claim | None:
        """Hold the live instance of (session, toolkit) for `call`, which is cancelled if the
        entry is replaced or dropped before `release`; None when none is live."""
        with self._lock:
            entry = self._table.get(session_id, {}).get(name)
            if entry is None or entry.instance is None or entry.secrets is None:
                return None
            entry.calls.add(call)
        held = entry

        def release() -> None:
            with self._lock:
                held.calls.discard(call)

        return Claim(entry.instance, entry.source, entry.secrets, entry.unavailable, release)

    # -- what a list's read stays true for ---------------------------------------------------

    @property
    def dropped(self) -> int:
        with self._lock:
            return self._dropped

    def live_if_read(self, session_id: str, mark: Mark | None) -> set[str] | None:
        """The session's live toolkits if its last read is still what the store says
        (`mark` is the one it read at); None: read again."""
        with self._lock:
            return self._live(session_id) if self._still_read(session_id, mark) else None

    def live_if_unchanged(
        self, session_id: str, had: Mapping[str, Source], mark: Mark
    ) -> set[str] | None:
        """The session's live toolkits, noting `mark` as its read, if nothing changed here
        since `had` was read (no install, no drop); None otherwise."""
        with self._lock:
            if self._sources(session_id) != had or mark[1] != self._dropped:
                return None
            self._read_at[session_id] = mark
            return self._live(session_id)

    def live_after_read(self, session_id: str, mark: Mark | None) -> set[str]:
        """The session's live toolkits after its read of the store; `mark`, taken before
        that read, is noted as its read unless something was dropped here meanwhile."""
        with self._lock:
            if mark is not None and mark[1] == self._dropped:
                self._read_at[session_id] = mark
            return self._live(session_id)

    def forget_reads(self) -> None:
        """Every list reads the store next (benchmarks measure that path)."""
        with self._lock:
            self._read_at.clear()

    # -- changing ------------------------------------------------------------------------------

    def install(
        self,
        session_id: str,
        name: str,
        had: Mapping[str, Source] | None,
        source: Source | None,
        instance: Toolkit | None = None,
        unavailable: frozenset[str] = frozenset(),
        expires_at: float | None = None,
        secrets: ScopeSecrets | None = None,
    ) -> bool:
        """Record what (session, toolkit) was last initialized from (`source`; None:
        nothing is current) and its live instance (None: none, or it failed), only if the
        entry is still what `had` says (None: unconditionally); returns whether it did."""
        with self._lock:
            entries = self._table.get(session_id, {})
            held = entries.get(name)
            if had is not None and (None if held is None else held.source) != had.get(name):
                return False
            if held is not None and (source is None or held.instance is not instance):
                newer = source is not None and instance is not None and source != held.source
                held.end_calls(replaced=newer)
            if source is None:
                entries.pop(name, None)
                return True
            entry = _Entry(source)
            if instance is not None:
                entry = _Entry(source, instance, unavailable, expires_at, secrets)
            self._table.setdefault(session_id, entries)[name] = entry
            return True

    def drop(self, where: Callable[[str, str, Source], bool]) -> set[tuple[str, str]]:
        """Forget every entry (session, toolkit, source) that `where` picks, instance and
        all; a list's read before this no longer says what is live. Returns the dropped."""
        with self._lock:
            dropped = {
                (session_id, name)
                for session_id, entries in self._table.items()
                for name, entry in entries.items()
                if where(session_id, name, entry.source)
            }
            for session_id, name in dropped:
                self._table[session_id].pop(name).end_calls()
            if dropped:
                self._dropped += 1
            return dropped

    def invalidate_reads(self) -> None:
        """Something a read installed may have changed: every list reads the store next."""
        with self._lock:
            self._dropped += 1

    # -- views for tests and benchmarks ------------------------------------------------------

    def active(self) -> dict[tuple[str, str], Toolkit]:
        """(session, toolkit) -> live instance, a copy."""
        with self._lock:
            return {
                (session_id, name): entry.instance
                for session_id, entries in self._table.items()
                for name, entry in entries.items()
                if entry.instance is not None
            }

    # -- lock held ---------------------------------------------------------------------------

    def _sources(self, session_id: str) -> dict[str, Source]:
        return {name: e.source for name, e in self._table.get(session_id, {}).items()}

    def _live(self, session_id: str) -> set[str]:
        entries = self._table.get(session_id, {})
        return {name for name, entry in entries.items() if entry.instance is not None}

    def _still_read(self, session_id: str, mark: Mark | None) -> bool:
        return (
            mark is not None and mark[1] == self._dropped and self._read_at.get(session_id) == mark
        )
