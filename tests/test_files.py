"""`write_atomically`: the whole new file, private, and nothing left behind when it fails."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit_vault import files
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


KILLED_AT_THE_NAME = """
import os, signal, sys
from pathlib import Path
from toolkit_vault import files

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

files._link = killed  # the unnamed file's naming
os.replace = killed  # the dot file's rename
files.write_atomically(Path(sys.argv[1]), b"every byte, fsynced " * 1000)
"""


@pytest.mark.parametrize("existing", [False, True])
def test_a_process_killed_after_its_last_byte_leaves_no_file(
    tmp_path: Path, existing: bool
) -> None:
    """Killed once every byte is written and fsynced, before the file has its name: no
    complete copy under a temporary name remains (for a backup, one that verifies)."""
    target = tmp_path / "vault.tkvb"
    if existing:
        target.write_bytes(b"old")
    env = {**os.environ, "PYTHONPATH": str(Path(files.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AT_THE_NAME, str(target)], env=env, check=False
    )
    assert done.returncode == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir()] == (["vault.tkvb"] if existing else [])
    if existing:
        assert target.read_bytes() == b"old"
