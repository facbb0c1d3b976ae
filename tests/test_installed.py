"""`installed.group`: entry points read once, and read again when what is installed changes
(a distribution installed into a directory already on the path, or a directory added)."""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from toolkit_vault import installed

GROUP = "tkv_test_installed.things"


def _install(directory: Path, name: str) -> None:
    info = directory / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {name}:Thing\n")


def test_the_same_as_importlib_metadata_and_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    group = "toolkit_vault.key_providers"
    assert installed.group(group) == tuple(entry_points(group=group))
    monkeypatch.setattr(installed, "entry_points", lambda: pytest.fail("read again"))
    assert installed.group(group) == tuple(entry_points(group=group))


def test_an_install_or_a_new_path_entry_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert installed.group(GROUP) == ()
    _install(site, "tkv_first")
    os.utime(site, ns=(0, 10**9))  # a file system whose clock did not tick between the two
    assert [e.name for e in installed.group(GROUP)] == ["tkv_first"]
    other = tmp_path / "other"
    _install(other, "tkv_second")
    monkeypatch.syspath_prepend(str(other))
    assert sorted(e.name for e in installed.group(GROUP)) == ["tkv_first", "tkv_second"]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in (str(site), str(other))])
    assert installed.group(GROUP) == ()
