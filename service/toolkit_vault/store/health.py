"""What readiness and `/metrics` ask of the store: does the database answer, is stored
state believed (the chain follows, the database is not behind its witness), and the
chain's head, the witness's lag and age, the pool's use.

Each check answers with a reason or None; the reasons name what failed and what to run,
never a row's content, and they go to the log: `/readyz` shows only a code (`core.health`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from toolkit_vault.errors import StoreError
from toolkit_vault.store.storage import Store

__all__ = ["chain_readings", "database_failure", "pool_readings", "state_failure"]

_ANSWER = "SELECT 1"
_HEAD = "SELECT max(seq) FROM audit_events"


def database_failure(store: Store) -> str | None:
    """Why the database does not answer a statement (None: it does)."""
    try:
        store.fetch(_ANSWER, ())
    except StoreError as exc:
        return exc.message
    except Exception as exc:  # the pool could not connect: SQLAlchemy's, or the driver's
        return f"the database does not answer ({type(exc).__name__})"
    return None


def state_failure(store: Store) -> str | None:
    """Why stored state is not believed (None: it is): the database behind the newest head
    its home witnessed, or holding another event there; the chain broken or cut back; a
    damaged witness slot."""
    try:
        failure = store.behind_witness() or store.state_failure() or store.witness_damage()
    except StoreError as exc:
        return exc.message
    return failure


def chain_readings(store: Store) -> dict[str, float]:
    """`audit_chain_head_seq`, and while the home has a witness file, how many events it
    trails the head by and how long ago it was written."""
    rows = store.fetch(_HEAD, ())
    head = int(rows[0][0] or 0) if rows else 0
    found: dict[str, float] = {"audit_chain_head_seq": head}
    witness = store.witness
    if witness is None:
        return found
    heads = witness.read()
    if heads:
        found["audit_witness_lag_events"] = max(head - heads[0][0], 0)
        found["audit_witness_age_seconds"] = max(time.time() - os.stat(witness.path).st_mtime, 0)
    return found


def pool_readings(store: Store) -> dict[str, float]:
    """The pool's size and its connections in use and idle (none for a pool without them)."""
    pool: Any = store.engine.pool
    try:
        return {
            "size": float(pool.size()),
            "in_use": float(pool.checkedout()),
            "idle": float(pool.checkedin()),
        }
    except AttributeError:  # SQLite in memory: one connection, not a queue
        return {}
