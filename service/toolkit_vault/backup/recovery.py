"""`keys recovery init|unseal|status` for a vault home: the key work is `keys.recovery`;
this opens the home's store and provider, and after an unseal records the new provider in
the home, so every later command finds the new master key."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from toolkit_vault.audit.verify import verify_audit_chain
from toolkit_vault.bootstrap import open_provider, open_store
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.hierarchy import VaultKeys
from toolkit_vault.keys.recovery import RecoverySet, init_recovery, recovery_status, unseal
from toolkit_vault.settings import VaultSettings, write_record
from toolkit_vault.store.integrity import RECOVERY
from toolkit_vault.store.storage import Store

__all__ = ["init_shares", "share_status", "unseal_vault"]


@contextmanager
def _store(settings: VaultSettings) -> Iterator[Store]:
    store = open_store(settings)
    try:
        yield store
    finally:
        if store.witness is not None:
            store.witness.flush()
        store.close_watch()
        store.close()


def init_shares(settings: VaultSettings, *, shares: int, threshold: int) -> RecoverySet:
    """A new share set for the vault (the master key must still open it)."""
    provider = open_provider(settings)
    with _store(settings) as store:
        VaultKeys(store, provider).open()
        if (failure := store.state_failure()) is not None:
            raise VaultError(f"the vault's state is not believed: {failure}")
        return init_recovery(store, provider, shares=shares, threshold=threshold)


def share_status(settings: VaultSettings) -> dict[str, Any]:
    """Which live vault keys the shares cover, counting only wraps that are believed: each
    opened under the vault's recovery key and held to the audit chain's current share set
    (`problems` names the others); `warnings` when a live vault key is not covered. Needs
    the master key to check; without it, says the wraps were not checked."""
    with _store(settings) as store:
        status = recovery_status(store)
        problems: list[dict[str, str]] = []
        warnings: list[str] = []
        try:
            _ring, internal = VaultKeys(store, open_provider(settings)).open()
        except VaultError as exc:
            warnings.append(f"the recovery wraps were not checked: {exc.message}")
        else:
            report = verify_audit_chain(store, internal["audit"], recovery=internal.get("recovery"))
            if report.first_bad_seq is not None:
                problems.append(
                    {
                        "table": "audit_events",
                        "row": str(report.first_bad_seq),
                        "problem": str(report.problem),
                        "detail": report.message,
                    }
                )
            problems += [p.as_json() for p in report.state_problems if p.table == RECOVERY]
    bad = {p["row"] for p in problems}
    live = set(status["covered"]) | set(status["uncovered"])
    status["covered"] = [k for k in status["covered"] if k not in bad]
    status["uncovered"] = sorted(live - set(status["covered"]))
    if status["initialized"] or problems:
        warnings += [
            f"vault key {key_id} is not covered by the recovery shares: after a disaster they "
            "cannot re-establish the vault (run `toolkit-vault keys recovery init` again)"
            for key_id in status["uncovered"]
        ]
    return {**status, "problems": problems, "warnings": warnings}


def unseal_vault(settings: VaultSettings, shares: list[str], new: VaultSettings) -> dict[str, Any]:
    """Re-establish the vault of `settings` under the master key of `new`'s provider, from
    K shares; the home then records `new`'s provider."""
    provider = open_provider(new)
    with _store(settings) as store:
        result = unseal(store, shares, provider)
        if (failure := store.state_failure()) is not None:
            raise VaultError(f"the vault's state is not believed: {failure}")
    write_record(dataclasses.replace(new, key_options=provider.recorded_options()))
    return result
