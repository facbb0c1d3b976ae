"""The versions judged on a second core (issue 53, `keys.opening`): a full `check` and
`backup verify` whose versions a forked child MACs and opens give the verdicts the one-core
path gives, row for row and in the same order, for every kind of bad row: one edited in a
column its MAC covers, one whose ciphertext was swapped and re-MACed, one the chain purged
and put back, one whose vault key id no longer names a key the child holds, one whose
wrapped key no longer opens. The lean path from a row to the crypto module's open
(`records.open_stored`) says what the `VersionRecord` path says, for odd rows too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update

from test_backup import CANARY, configure, header_of, session
from toolkit_vault.backup import create_backup, resolve_settings, verify_backup
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import StoreError
from toolkit_vault.keys import opening
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.data_keys import scanned
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import ConfigVersion, CurrentConfig

pytestmark = pytest.mark.key_providers("file")


def _tamper(vault: Vault) -> dict[tuple[str, int], str]:
    """Ten versions, five of them made bad as the docstring says; the reasons expected."""
    conn, session_id = session(vault)
    for n in range(8):
        assert configure(conn, n) == "ok"
    other, purged_id = session(vault)
    assert configure(other, 9) == "ok"
    assert configure(other, 10) == "ok"
    store = vault.store
    with store.engine.connect() as db:
        copied = [dict(r._mapping) for r in db.execute(select(ConfigVersion))]
        pointers = [dict(r._mapping) for r in db.execute(select(CurrentConfig))]
    vault.purge("operator", purged_id)
    ours = {r["version"]: r for r in copied if r["session_id"] == session_id}
    with store.engine.begin() as db:
        db.execute(delete(CurrentConfig).where(CurrentConfig.session_id == purged_id))
        db.execute(delete(ConfigVersion).where(ConfigVersion.session_id == purged_id))
        db.execute(insert(ConfigVersion), [r for r in copied if r["session_id"] == purged_id])
        db.execute(insert(CurrentConfig), [r for r in pointers if r["session_id"] == purged_id])
        by_id = update(ConfigVersion).where
        db.execute(by_id(ConfigVersion.id == ours[1]["id"]).values(message="edited"))
        forged = dict(ours[2])
        sealed = json.loads(forged["sealed_secrets"])
        first = next(iter(sealed))
        sealed[first] = json.loads(ours[3]["sealed_secrets"])[first]  # another version's
        forged["sealed_secrets"] = json.dumps(sealed)
        forged["mac"] = store.mac("config_versions", forged)
        db.execute(
            by_id(ConfigVersion.id == forged["id"]).values(
                sealed_secrets=forged["sealed_secrets"], mac=forged["mac"]
            )
        )
        # the key id is not under the row's MAC (a rotation moves it): an unknown one
        db.execute(by_id(ConfigVersion.id == ours[4]["id"]).values(kek_id="vk-9999"))
        wrapped = bytearray(ours[5]["wrapped_dek"])
        wrapped[-1] ^= 1  # a wrapped key that no longer opens (its AEAD tag)
        db.execute(by_id(ConfigVersion.id == ours[5]["id"]).values(wrapped_dek=bytes(wrapped)))
    return {
        (session_id, 1): "fails its integrity check",
        (session_id, 2): "does not decrypt",
        (session_id, 4): "does not decrypt",
        (session_id, 5): "does not decrypt",
        (purged_id, 1): "was purged (the audit chain says so); its row was put back",
        (purged_id, 2): "was purged (the audit chain says so); its row was put back",
    }


def _forks(monkeypatch: pytest.MonkeyPatch, parallel: bool) -> list[int]:
    """One-core (no child) or forked (a child, batches of two rows: every path of the
    merge); the list names the children forked (their pids)."""
    forked: list[int] = []
    real = opening._Forked.__init__

    def counted(self: Any, *args: Any) -> None:
        real(self, *args)
        forked.append(self._pid)

    monkeypatch.setattr(opening._Forked, "__init__", counted)
    monkeypatch.setattr(opening, "workers", lambda: 1 if parallel else 0)
    monkeypatch.setattr(opening, "BATCH", 2)
    return forked


def _checked(vault: Vault, home: VaultSettings, file: Path) -> dict[str, Any]:
    checked = vault.check(full=True)
    verified = verify_backup(file, resolve_settings(header_of(file)))
    return {
        "check": {k: checked[k] for k in ("ok", "versions", "intact", "failed", "no_ciphertext")},
        "check_failed": checked["failed_versions"],
        "check_audit": checked["audit"],
        "check_state": checked["state_problems"],
        "backup_ok": verified.ok,
        "backup": verified.versions,
        "backup_failed": verified.failed_versions,
        "backup_state": verified.audit["state_problems"],
    }


@pytest.mark.parametrize("ahead", [0, 8])
def test_the_forked_child_gives_the_one_core_verdicts_row_for_row(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ahead: int,
) -> None:
    """`ahead` 8: every batch judged by the child; 0: every one judged here, through the
    same function, while the child waits (the busy child's case)."""
    expected = _tamper(vault)
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    forked = _forks(monkeypatch, parallel=False)
    serial = _checked(vault, home, file)
    assert forked == []
    forked = _forks(monkeypatch, parallel=True)
    monkeypatch.setattr(opening, "AHEAD", ahead)
    parallel = _checked(vault, home, file)
    assert len(forked) == 2  # the check's child and the backup verification's
    assert parallel == serial
    counts = {"versions": 10, "intact": 4, "failed": 6, "no_ciphertext": 0}
    assert serial["backup"] == counts and not serial["backup_ok"]
    for failed in (parallel["check_failed"], parallel["backup_failed"]):
        assert {(v["session_id"], v["version"]): v["reason"] for v in failed} == expected
    assert ("config_versions", "unauthenticated") in {
        (p["table"], p["problem"]) for p in parallel["backup_state"]
    }
    assert CANARY not in json.dumps(parallel)


def test_a_child_that_dies_fails_the_check_and_is_reaped(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that ends before it answers makes the check fail loudly (a StoreError),
    never count a version it did not judge; no child is left behind."""
    conn, _ = session(vault)
    for n in range(5):
        assert configure(conn, n) == "ok"
    forked = _forks(monkeypatch, parallel=True)
    monkeypatch.setattr(opening, "AHEAD", 5)  # every batch to the child
    parent = os.getpid()
    real = opening.TallyAsRead._verdicts

    def dies(self: Any, *args: Any) -> bytes:
        if os.getpid() != parent:
            os._exit(3)
        return real(self, *args)

    monkeypatch.setattr(opening.TallyAsRead, "_verdicts", dies)
    with pytest.raises(StoreError, match="ended early"):
        vault.check(full=True)
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)  # reaped already


def test_the_lean_open_says_what_the_record_path_says(vault: Vault) -> None:
    """`verdict` on rows as stored (the lean path) against `VersionTally.see` on the same
    rows read as `VersionRecord`s, for intact rows and odd ones a database writer can
    leave: wrong types, JSON that is not an object, a missing wrapped key, bad base64."""
    conn, _ = session(vault)
    for n in range(2):
        assert configure(conn, n) == "ok"
    with vault.store.engine.connect() as db:
        rows = [dict(r._mapping) for r in db.execute(select(ConfigVersion))]
    good = rows[0]
    odd: list[dict[str, Any]] = [
        *rows,
        {**good, "public_config": "[1]"},
        {**good, "public_config": "not json"},
        {**good, "sealed_secrets": "[]"},
        {**good, "sealed_secrets": None},
        {**good, "sealed_secrets": json.dumps({"/api_key": "***"})},
        {**good, "sealed_secrets": json.dumps({"/api_key": 7})},
        {**good, "wrapped_dek": "text"},
        {**good, "wrapped_dek": b"short"},
        {**good, "version": "1"},
        {**good, "schema_digest": None},
        {**good, "kek_id": None},
        {**good, "dek_id": 5},
        {**good, "session_id": "another"},
        {**good, "public_config": json.dumps({"endpoint": "https://elsewhere.test"})},
    ]
    ring = vault.ring_for()
    for row in odd:
        for holds in (True, False):
            for chain in (ChainState(), None):  # None: no purge to hold it to
                lean, by_record = (
                    _lean(ring, row, holds, chain),
                    _by_record(ring, row, holds, chain),
                )
                assert lean == by_record, (row, holds, chain)
    assert _lean(ring, rows[0], True, ChainState()) == "intact"


def _lean(ring: Any, row: dict[str, Any], holds: bool, chain: ChainState | None) -> str:
    try:
        return opening.verdict(ring, row, holds, chain)
    except Exception as exc:  # a type no MAC signs: both paths raise alike
        return type(exc).__name__


def _by_record(ring: Any, row: dict[str, Any], holds: bool, chain: ChainState | None) -> str:
    tally = opening.VersionTally(chain)
    try:
        tally.see(ring, scanned(row, holds))
    except Exception as exc:
        return type(exc).__name__
    if tally.failed:
        return str(tally.failed[0]["reason"])
    return next(k for k in ("intact", "no_ciphertext") if tally.counts[k])
