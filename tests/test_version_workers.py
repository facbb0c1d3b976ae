"""The versions opened on every core (issue 53, `keys.version_check`): a full `check`, a
plain one and `backup verify` whose versions worker children open give the report one core
gives, row for row and in the same order, for every kind of bad row (edited in a column its
MAC covers, its ciphertext swapped and re-MACed, purged and put back, an unknown vault key
id, a wrapped key that no longer opens); a worker that dies fails the check, never passes
it, and none is left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from test_backup import CANARY, configure, header_of, put_back_edit_and_swap, session
from toolkit_vault.backup import create_backup, resolve_settings, verify_backup
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import StoreError
from toolkit_vault.keys import opening, rotation, version_check
from toolkit_vault.keys.rotation import rotate_vault_key
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import ConfigVersion

pytestmark = pytest.mark.key_providers("file")
PURGED = "was purged (the audit chain says so); its row was put back"


def _tamper(vault: Vault) -> dict[tuple[str, int], str]:
    """Ten versions, six of them made bad as the module docstring says; the reasons."""
    conn, session_id = session(vault)
    for n in range(8):
        assert configure(conn, n) == "ok"
    other, purged_id = session(vault)
    assert configure(other, 9) == "ok"
    assert configure(other, 10) == "ok"
    ours = put_back_edit_and_swap(vault, session_id, purged_id)
    by_id = update(ConfigVersion).where
    with vault.store.engine.begin() as db:
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
        (purged_id, 1): PURGED,
        (purged_id, 2): PURGED,
    }


def _workers(monkeypatch: pytest.MonkeyPatch, processes: int, ahead: int = 2) -> list[Any]:
    """`processes` workers from the first version on, batches of two rows (every path of
    the merge); the list holds the workers started."""
    started: list[Any] = []
    real = version_check._Worker.__init__

    def counted(self: Any) -> None:
        real(self)
        started.append(self)

    monkeypatch.setattr(version_check._Worker, "__init__", counted)
    monkeypatch.setattr(version_check, "PARALLEL_MIN", 0)
    monkeypatch.setattr(version_check, "spare_cores", lambda _at_most: processes)
    monkeypatch.setattr(version_check, "BATCH", 2)
    monkeypatch.setattr(version_check, "AHEAD", ahead)
    return started


def _reports(vault: Vault, file: Path) -> dict[str, Any]:
    full = vault.check(full=True)
    verified = verify_backup(file, resolve_settings(header_of(file)))
    keys = ("ok", "versions", "intact", "failed", "no_ciphertext", "failed_versions")
    return {
        "check": {k: full[k] for k in keys},
        "check_audit": full["audit"],
        "check_state": full["state_problems"],
        "backup_ok": verified.ok,
        "backup": verified.versions,
        "backup_failed": verified.failed_versions,
        "backup_state": verified.audit["state_problems"],
    }


@pytest.mark.parametrize(("processes", "ahead"), [(1, 8), (2, 1), (1, 0)])
def test_workers_give_the_one_core_report_row_for_row(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    processes: int,
    ahead: int,
) -> None:
    """`ahead` 8: every batch opened by a worker; 1: by two workers and here in turn; 0:
    every batch opened here, through the same function, while the worker waits."""
    expected = _tamper(vault)
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    started = _workers(monkeypatch, 0)
    serial = _reports(vault, file)
    assert started == []
    started = _workers(monkeypatch, processes, ahead)
    parallel = _reports(vault, file)
    assert len(started) == 2 * processes  # the check's workers and the backup's
    assert parallel == serial
    counts = {"versions": 10, "intact": 4, "failed": 6, "no_ciphertext": 0}
    assert serial["backup"] == counts and not serial["backup_ok"]
    for failed in (parallel["check"]["failed_versions"], parallel["backup_failed"]):
        assert {(v["session_id"], v["version"]): v["reason"] for v in failed} == expected
    assert CANARY not in json.dumps(parallel)


def test_the_plain_check_opens_on_workers_too(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check without `--full` and no mark to start after reads every version apart
    (`check_store`): its workers give its one-core report."""
    expected = _tamper(vault)
    started = _workers(monkeypatch, 0)
    serial = vault.check()  # it leaves no mark: versions failed
    started = _workers(monkeypatch, 1)
    parallel = vault.check()
    assert len(started) == 1
    keys = ("ok", "versions", "intact", "failed", "failed_versions")
    assert {k: parallel[k] for k in keys} == {k: serial[k] for k in keys}
    failed = parallel["failed_versions"]
    assert {(v["session_id"], v["version"]): v["reason"] for v in failed} == expected


def test_a_ring_that_grows_during_the_check_reaches_the_workers(
    vault: Vault, home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process made a new vault key (its rotation killed before it rewrapped a
    data key) and configured under it: this vault's ring reloads when a row names it, and
    its worker, which opened the earlier rows under the old ring, is sent the grown one
    (else the new versions would not open there)."""
    conn, _ = session(vault)
    for n in range(4):
        assert configure(conn, n) == "ok"
    other = open_vault(home)
    try:
        with monkeypatch.context() as killed:
            killed.setattr(rotation, "_rewrap_versions", lambda *_args: 0)
            rotate_vault_key(other.store, open_provider(load_settings()), other.ring)
        later, _ = session(other)
        for n in range(4):
            assert configure(later, n) == "ok"
    finally:
        other.store.close()
    assert len(vault.ring.ids) == 1
    started = _workers(monkeypatch, 1, ahead=8)  # every batch to the worker
    sent: list[Any] = []
    reveal = version_check.KeyRing.reveal
    monkeypatch.setattr(
        version_check.KeyRing, "reveal", lambda ring: sent.append(1) or reveal(ring)
    )
    checked = vault.check(full=True)
    assert len(started) == 1 and len(vault.ring.ids) == 2
    assert len(sent) == 2  # the first ring, then the grown one
    assert (checked["ok"], checked["intact"], checked["failed"]) == (True, 8, 0)


@pytest.mark.parametrize("when", ["before its batch", "after its batch"])
def test_a_worker_that_dies_fails_the_check_and_is_reaped(
    vault: Vault, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A worker killed before it is sent a batch (a broken pipe) or before it answers (the
    end of its answers) makes the check fail loudly, never count a version it did not
    open; the worker is reaped."""
    conn, _ = session(vault)
    for n in range(6):
        assert configure(conn, n) == "ok"
    started = _workers(monkeypatch, 1, ahead=8)  # every batch to the worker
    real = version_check._Worker.send

    def killed(self: Any, *args: Any) -> None:
        if when == "before its batch":
            self._child.kill()
            self._child.wait()
        real(self, *args)
        self._child.kill()

    monkeypatch.setattr(version_check._Worker, "send", killed)
    with pytest.raises(StoreError, match="a worker opening the config versions ended early"):
        vault.check(full=True)
    assert len(started) == 1
    assert started[0]._child.returncode is not None  # reaped


def test_a_row_that_raises_in_a_worker_is_opened_again_here(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening raised something other than the opaque error: the worker says so
    (`RAISED`), and the row is opened in the parent, where it raises as it always did."""
    conn, _ = session(vault)
    for n in range(5):
        assert configure(conn, n) == "ok"
    started = _workers(monkeypatch, 1, ahead=8)
    real = version_check._Worker.receive

    def raised(self: Any) -> bytes:
        return bytes([opening.RAISED]) * len(real(self))

    monkeypatch.setattr(version_check._Worker, "receive", raised)
    checked = vault.check(full=True)
    assert len(started) == 1
    assert (checked["ok"], checked["intact"], checked["failed"]) == (True, 5, 0)
    with vault.store.engine.connect() as db:
        row = dict(db.execute(select(ConfigVersion).limit(1)).one()._mapping)
    values = opening.sent(row)

    def raises(_ring: Any, _row: Any) -> bool:
        raise RuntimeError("unexpected")

    ring = vault.ring_for()
    assert opening._answers(ring, [values]) == bytes([opening.OPENS])
    monkeypatch.setattr(opening, "opens", raises)
    assert opening._answers(ring, [values]) == bytes([opening.RAISED])
    monkeypatch.setattr(version_check, "opens", raises)
    with pytest.raises(RuntimeError, match="unexpected"):  # here, as one core raises
        vault.check(full=True)
