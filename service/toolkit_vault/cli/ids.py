"""Ids as people type them: a unique prefix will do, and names stand in for ids.

Tables show the shortest prefix of a session id that no other session shares (at least 8
characters), so what a table shows can be typed back: `history --session 3f2a9c1e`. A typed
prefix that matches nothing, or more than one, is a clear error naming the matches, never
an empty table or a purge of the wrong session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toolkit_vault.access.principals import PrincipalInfo
from toolkit_vault.errors import VaultError
from toolkit_vault.store.sessions import session_ids, sessions_named
from toolkit_vault.store.storage import Store

__all__ = ["MIN_PREFIX", "resolve_principal", "resolve_session", "session_ids", "unique_prefixes"]

MIN_PREFIX = 8
_SHOWN = 5  # matches named in an "ambiguous" error


def _one(typed: str, matches: Sequence[str], what: str, nothing: str) -> str:
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise VaultError(nothing)
    more = " and more" if len(matches) > _SHOWN else ""
    named = ", ".join(matches[:_SHOWN])
    raise VaultError(
        f"{what} id prefix {typed!r} is ambiguous: it matches {named}{more}; type more of it"
    )


def resolve_session(store: Store, typed: str) -> str:
    """The session id `typed` names: itself, or the one id it is a prefix of."""
    matches = sessions_named(store, typed, _SHOWN + 1)
    nothing = f"unknown session {typed!r}: no session id is or starts with it"
    return _one(typed, matches, "session", nothing)


def resolve_principal(principals: Iterable[PrincipalInfo], typed: str) -> PrincipalInfo:
    """A principal by name, by id, or by a unique id prefix (a name always wins)."""
    known = list(principals)
    for exact in (
        [p for p in known if p.name == typed],
        [p for p in known if p.principal_id == typed],
    ):
        if exact:
            return exact[0]
    by_id = {p.principal_id: p for p in known if typed and p.principal_id.startswith(typed)}
    nothing = f"no principal named {typed!r}, nor with an id that is or starts with it"
    chosen = _one(typed, sorted(by_id), "principal", nothing)
    return by_id[chosen]


def unique_prefixes(ids: Iterable[str], minimum: int = MIN_PREFIX) -> dict[str, str]:
    """Each id's shortest prefix (at least `minimum` long) that no other id starts with."""
    ordered = sorted(set(ids))
    shortest: dict[str, str] = {}
    for i, current in enumerate(ordered):
        shared = 0
        for neighbour in ordered[max(0, i - 1) : i + 2]:
            if neighbour != current:
                shared = max(shared, _common(current, neighbour))
        shortest[current] = current[: max(minimum, shared + 1)]
    return shortest


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
