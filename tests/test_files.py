"""`write_atomically`: the whole new file, private, and nothing left behind when it fails."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from toolkit_vault.files import write_atomically


def test_replaces_the_file_whole_and_private(tmp_path: Path) -> None:
    target = tmp_path / "vault.json"
    target.write_bytes(b"old")
    target.chmod(0o644)
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["vault.json"]


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        write_atomically(target, b"new")  # a file cannot replace a non-empty directory
    assert (target / "inside").read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
