"""`backup verify` with its lines parsed by a child process (`backup.parsing`, issue 53):
the same report as when this process parses them, every tampered copy refused with the
same words, a file changed after its header was read refused, and a child that dies fails
the verify, never passes it."""

from __future__ import annotations

import json
import select
import sys
from pathlib import Path

import pytest

from test_backup import CANARY, header_of, tampered_copies, three_configures_backed_up
from toolkit_vault.backup import (
    BackupError,
    create_backup,
    parsing,
    resolve_settings,
    verify_backup,
)
from toolkit_vault.backup.archive import Reader
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings

pytestmark = pytest.mark.key_providers("file")


def _verdict(path: Path, settings: VaultSettings) -> tuple[str, str]:
    try:
        report = verify_backup(path, settings)
    except BackupError as exc:
        return "refused", exc.message
    return json.dumps(report.as_json(), sort_keys=True), report.digest.hex()


def _header_reads(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            Reader(handle)
    except BackupError:
        return False  # refused before any row is read
    return True


def _by_child(monkeypatch: pytest.MonkeyPatch, child: bool, here: int = 1) -> list[Path]:
    """Whether a child parses every backup from here on, after this process parsed `here`
    rows (it waits for the child); the files it was handed."""
    handed: list[Path] = []
    monkeypatch.setattr(parsing, "PARALLEL_BYTES", 0 if child else 1 << 62)
    monkeypatch.setattr(parsing, "spare_cores", lambda _at_most: 1)
    monkeypatch.setattr(parsing, "HERE_BETWEEN_ASKS", here)
    monkeypatch.setattr(parsing, "_ready", lambda stream: select.select([stream], [], [], None))
    found = parsing._file_of

    def file_of(reader: Reader) -> int | None:
        fd = found(reader)
        if fd is not None:
            handed.append(Path(reader.handle.name))  # type: ignore[attr-defined]
        return fd

    monkeypatch.setattr(parsing, "_file_of", file_of)
    return handed


@pytest.mark.parametrize("here", [1, 4])
def test_a_child_parses_to_the_same_verdicts(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    here: int,
) -> None:
    file, settings = three_configures_backed_up(vault, home, tmp_path)
    files = [file, *tampered_copies(file, tmp_path).values()]
    _by_child(monkeypatch, False)
    verdicts = [_verdict(path, settings) for path in files]
    handed = _by_child(monkeypatch, True, here)
    assert [_verdict(path, settings) for path in files] == verdicts
    assert handed == [path for path in files if _header_reads(path)]  # each by a child
    assert verdicts[0][0] != "refused" and json.loads(verdicts[0][0])["ok"]
    assert all(kind == "refused" for kind, _ in verdicts[1:])
    assert all(CANARY not in message for _, message in verdicts[1:])


def test_a_file_changed_after_its_header_was_read_is_refused(
    vault: Vault, home: VaultSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    _by_child(monkeypatch, True)
    at = file.read_bytes().index(b'"created_at":') + len(b'"created_at":')
    with file.open("rb") as handle:
        reader = Reader(handle)
        with file.open("r+b") as writer:  # the same file, its header's time changed
            writer.seek(at)
            digit = file.read_bytes()[at : at + 1]
            writer.write(b"2" if digit == b"1" else b"1")
        with pytest.raises(BackupError, match="changed while it was being read"):
            list(parsing.decoded_rows(reader))


_READY_THEN_GONE = (
    "import sys; from toolkit_vault.backup.parsing import READY, _send; "
    "_send(sys.stdout.buffer, (READY,)); sys.stdout.flush()"
)


@pytest.mark.parametrize("when", ["at once", "once ready"])
def test_a_child_that_dies_fails_the_verify(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    _by_child(monkeypatch, True)
    if when == "at once":
        monkeypatch.setattr(sys, "executable", "/bin/true")
    else:
        monkeypatch.setattr(parsing, "_SERVE", _READY_THEN_GONE)
    with pytest.raises(BackupError, match="reader ended early"):
        verify_backup(file, resolve_settings(header_of(file)))
