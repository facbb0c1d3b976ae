"""The built-in `filesystem` toolkit: the spec's definition, confined to root_dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from toolkit_vault.errors import VaultError
from toolkit_vault.filesystem import FilesystemToolkit, PathRefused
from toolkit_vault.testing import ToolkitConformance

from tkv_test_plugins import SecretiveToolkit


class TestFilesystemConformance(ToolkitConformance):
    factory = FilesystemToolkit
    valid_config: ClassVar[dict[str, Any]] = {"root_dir": "/srv/workspace-for-tests"}
    invalid_configs: ClassVar[list[dict[str, Any]]] = [{}, {"root_dir": 5}]


class TestSecretiveConformance(ToolkitConformance):
    factory = SecretiveToolkit
    valid_config: ClassVar[dict[str, Any]] = {
        "endpoint": "https://x.test",
        "api_key": "tkv-canary-conformance",
    }
    invalid_configs: ClassVar[list[dict[str, Any]]] = [
        {"endpoint": "x"},
        {"endpoint": "x", "api_key": "k", "other": 1},
    ]


@pytest.fixture
def toolkit(tmp_path: Path) -> FilesystemToolkit:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("outside")
    fs = FilesystemToolkit()
    assert fs.initialize({"root_dir": str(root)}) is None
    return fs


def test_tools_work_inside_the_root(toolkit: FilesystemToolkit) -> None:
    toolkit.write_file("a/b.txt", "hello")
    assert toolkit.read_file("a/b.txt") == "hello"
    assert toolkit.list_dir() == ["a"] and toolkit.list_dir("a") == ["b.txt"]


@pytest.mark.parametrize(
    "path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd", "..", "link/x"]
)
def test_paths_outside_the_root_are_refused(
    toolkit: FilesystemToolkit, path: str, tmp_path: Path
) -> None:
    os.symlink(tmp_path, toolkit.root / "link")
    with pytest.raises(PathRefused):
        toolkit.read_file(path)
    with pytest.raises(PathRefused):
        toolkit.write_file(path, "x")


def test_symlink_escape_is_refused(toolkit: FilesystemToolkit, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside.txt", toolkit.root / "sneaky")
    with pytest.raises(PathRefused):
        toolkit.read_file("sneaky")


def test_initialize_refusals(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(VaultError, match="absolute"):
        FilesystemToolkit().initialize({"root_dir": "relative/dir"})
    with pytest.raises(VaultError, match="not a directory"):
        FilesystemToolkit().initialize({"root_dir": str(tmp_path / "file")})
    with pytest.raises(VaultError, match="not configured"):
        FilesystemToolkit().list_dir()
