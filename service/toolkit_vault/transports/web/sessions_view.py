"""The console's Sessions page as data: each session (`store.overview.session_overview`)
with what is configured in it and what is still waiting for a person.

A configure that leaves secret fields to a person stores an `intake` version that is never
current until the link is used (`core.intake`), so a session whose only toolkit waits on
one has nothing configured, yet something is under way: the page says it is pending
rather than "nothing configured"."""

from __future__ import annotations

from typing import Any

from toolkit_vault.core.intake import INTAKE_STATUS
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.overview import session_overview
from toolkit_vault.store.storage import Store

__all__ = ["sessions_view"]


def sessions_view(store: Store) -> list[dict[str, Any]]:
    """`session_overview`'s rows, each with `pending`: the toolkits whose last version is an
    `intake` one (a link sent, not used since), by name and version."""
    rows = session_overview(store)
    for row in rows:
        row["pending"] = []
    try:
        state = store.chain_state()
    except StateUnknown:  # nothing can be believed: the pages that can say why do
        return rows
    for row in rows:
        scope, pending = row["session_id"], row["pending"]
        current = {c["toolkit_name"]: c["version"] for c in row["configured"]}
        for toolkit, last in sorted(state.latest.get(scope, {}).items()):
            if current.get(toolkit) == last:
                continue
            if state.was_purged(scope, toolkit, last) or state.ended_by_removal(
                scope, toolkit, last
            ):
                continue
            record = store.version_if_latest(scope, toolkit, last)
            if record is not None and record.status == INTAKE_STATUS:
                pending.append({"toolkit_name": toolkit, "version": last})
    return rows
