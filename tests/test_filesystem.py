"""The built-in `filesystem` toolkit: the spec's definition, confined to root_dir."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import select

from test_vault import AGENT, configure, handshake, listed, request
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.errors import VaultError
from toolkit_vault.filesystem import FilesystemToolkit, PathRefused
from toolkit_vault.models import AuditEvent, ConfigVersion
from toolkit_vault.service import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.testing import ToolkitConformance

from tkv_test_plugins import SecretiveToolkit


class TestFilesystemConformance(ToolkitConformance):
    factory = FilesystemToolkit
    valid_config: ClassVar[dict[str, Any]] = {"root_dir": "/tmp"}
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
    with pytest.raises(VaultError, match="does not exist"):
        FilesystemToolkit().initialize({"root_dir": str(tmp_path / "missing")})
    with pytest.raises(VaultError, match="not configured"):
        FilesystemToolkit().list_dir()


@pytest.mark.parametrize(
    ("make", "keyword"),
    [
        (lambda tmp: "relative/dir", "absolute"),
        (lambda tmp: str(tmp / "missing"), "exists"),
        (lambda tmp: str(tmp / "missing" / "deeper"), "exists"),
        (lambda tmp: str(tmp / "file"), "directory"),
    ],
)
def test_configure_refuses_a_root_dir_that_is_not_a_directory(
    vault: Vault, tmp_path: Path, make: Callable[[Path], str], keyword: str
) -> None:
    """Like a schema error: RUNTIME_ERROR naming the pointer and a keyword (never the path),
    nothing stored, the refusal audited; the toolkit stays unconfigured."""
    (tmp_path / "file").write_text("")
    conn, _ = handshake(vault)
    root_dir = make(tmp_path)
    (error,) = configure(conn, "filesystem", {"root_dir": root_dir})
    assert (error["type"], error["code"]) == ("error", "RUNTIME_ERROR")
    assert error["details"] == [{"pointer": "/root_dir", "keyword": keyword}]
    assert root_dir not in json.dumps(error)
    assert listed(conn)["filesystem"] is False
    with vault.store.engine.connect() as db:
        assert db.execute(select(ConfigVersion)).all() == []
        refused = db.execute(
            select(AuditEvent).where(AuditEvent.action == "configure_refused")
        ).one()
    assert json.loads(refused.details)["errors"] == error["details"]
    (ok, _) = configure(conn, "filesystem", {"root_dir": str(tmp_path)})
    assert ok["status"] == "ok" and listed(conn)["filesystem"] is True


def test_a_root_dir_removed_later_fails_the_resume(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    conn, session = handshake(vault)
    assert configure(conn, "filesystem", {"root_dir": str(root)})[0]["status"] == "ok"
    root.rmdir()
    restarted = open_vault(home)
    try:
        hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
        _, event = request(restarted.connect(AGENT), hello)
        assert (event["toolkit_name"], event["configured"], event["status"]) == (
            "filesystem",
            False,
            "error",
        )
    finally:
        restarted.store.engine.dispose()
