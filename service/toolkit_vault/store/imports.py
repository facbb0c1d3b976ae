"""Imported toolkit definitions as stored (`imported_toolkits`): written, removed and read.

`toolkits.imports` plans what an import stores; these are its statements. Each write shares
one transaction with its audit event (`toolkit_imported`, `toolkit_removed`). A read gives
the rows as stored with the chain's state read in the same transaction, so the caller can
believe a row only when its MAC holds and it is the chain's latest import of that name.
(`Store.append_version` checks on its own that a configure's import is still there.)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, delete, insert, select, update

from toolkit_vault.errors import ToolkitNotFound
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import IMPORTED
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import CurrentConfig, ImportedToolkitRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "ImportedDefinition",
    "Written",
    "any_imported",
    "imported_rows",
    "remove_imported",
    "write_imported",
]

Written = Literal["imported", "replaced", "unchanged"]


@dataclass(frozen=True)
class ImportedDefinition:
    """One definition to store under `name`, with what its `toolkit_imported` event says
    besides its digests (`details`: its keys follow `previous_digest`, which is read here)."""

    name: str
    text: str  # canonical JSON of the definition, as stored
    digest: str  # the package digest
    strategy: str
    format: str
    details: dict[str, Any]


def _write(
    store: Store, definitions: Sequence[ImportedDefinition], actor: str, conn: Connection
) -> list[Written]:
    outcomes: list[Written] = []
    for item in definitions:
        found = conn.execute(
            select(ImportedToolkitRow.definition, ImportedToolkitRow.package_digest).where(
                ImportedToolkitRow.name == item.name
            )
        ).first()
        if found is not None and found[0] == item.text:
            outcomes.append("unchanged")
            continue
        values = {
            "definition": item.text,
            "package_digest": item.digest,
            "strategy": item.strategy,
            "format": item.format,
            "imported_at": time.time(),
            "actor": actor,
        }
        values["mac"] = store.mac(IMPORTED, {"name": item.name, **values})
        if found is None:
            conn.execute(insert(ImportedToolkitRow).values(name=item.name, **values))
        else:
            conn.execute(
                update(ImportedToolkitRow)
                .where(ImportedToolkitRow.name == item.name)
                .values(**values)
            )
        details = {
            "digest": item.digest,
            "previous_digest": None if found is None else found[1],
            **item.details,
        }
        store.audit(
            conn,
            AuditDraft(
                actor, AuditAction.TOOLKIT_IMPORTED, toolkit_name=item.name, details=details
            ),
        )
        outcomes.append("imported" if found is None else "replaced")
    return outcomes


def write_imported(
    store: Store, definitions: Sequence[ImportedDefinition], actor: str
) -> list[Written]:
    """Store each definition (an identical one is left as it is), in one transaction;
    returns what became of each, in order."""
    outcomes: list[Written] = store.transact(lambda conn: _write(store, definitions, actor, conn))
    return outcomes


def _remove(store: Store, name: str, actor: str, conn: Connection) -> tuple[str, tuple[str, ...]]:
    found = conn.execute(
        select(ImportedToolkitRow.package_digest).where(ImportedToolkitRow.name == name)
    ).scalar_one_or_none()
    if found is None:
        raise ToolkitNotFound(f"no imported toolkit named {name!r}")
    conn.execute(delete(ImportedToolkitRow).where(ImportedToolkitRow.name == name))
    pointers = CurrentConfig.toolkit_name == name
    sessions = tuple(
        sorted(conn.execute(select(CurrentConfig.session_id).where(pointers)).scalars())
    )
    conn.execute(delete(CurrentConfig).where(pointers))
    details = {"digest": found, "unconfigured": list(sessions)}
    store.audit(
        conn, AuditDraft(actor, AuditAction.TOOLKIT_REMOVED, toolkit_name=name, details=details)
    )
    return found, sessions


def remove_imported(store: Store, name: str, actor: str) -> tuple[str, tuple[str, ...]]:
    """Delete one imported definition and end every session's current config of it (one
    transaction, audited); returns its package digest and those sessions, sorted. Raises
    `ToolkitNotFound` when none is stored under `name`."""
    removed: tuple[str, tuple[str, ...]] = store.transact(
        lambda conn: _remove(store, name, actor, conn)
    )
    return removed


def any_imported(store: Store) -> bool:
    """Whether any definition is stored (believed or not): a listing of a vault with none
    needs none of the machinery that runs imported servers."""
    with store.read() as conn:
        return conn.execute(select(ImportedToolkitRow.name).limit(1)).first() is not None


def imported_rows(
    store: Store, *, with_state: bool = True
) -> tuple[list[dict[str, Any]], ChainState | None]:
    """Every stored definition's row (every column, its MAC included), by name, and the
    chain's state read in the same transaction (None without `with_state`). Nothing is
    believed yet; raises `StateUnknown` when the chain cannot be."""
    with store.read() as conn:
        # The state first, followed in this read (`force`), so the snapshot begins after the
        # witness was read: a snapshot begun before it (the rows read first, as this did)
        # may end before a head another thread has since committed and witnessed, and the
        # ledger then takes the database for one put back (a false "behind its witness").
        state = store.chain_state(conn, force=True) if with_state else None
        rows = conn.execute(select(ImportedToolkitRow).order_by(ImportedToolkitRow.name)).all()
    return [dict(row._mapping) for row in rows], state
