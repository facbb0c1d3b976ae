"""The built-in `filesystem` toolkit: the spec's definition, confined to root_dir."""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import select

from test_vault import AGENT, configure, handshake, listed, request
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, ConfigVersion
from toolkit_vault.testing import ToolkitConformance
from toolkit_vault.toolkits import filesystem
from toolkit_vault.toolkits.filesystem import (
    NOT_ALLOWED,
    ROOTS_ENV,
    UNAVAILABLE,
    FilesystemToolkit,
    PathRefused,
)

from tkv_test_plugins import SecretiveToolkit

pytestmark = pytest.mark.one_database


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
    for refused in (tmp_path / "file", tmp_path / "missing", Path("/etc")):
        with pytest.raises(VaultError, match=r"^root_dir is not an allowed directory$"):
            FilesystemToolkit().initialize({"root_dir": str(refused)})
    with pytest.raises(VaultError, match="not configured"):
        FilesystemToolkit().list_dir()


def refusal(root_dir: str) -> tuple[str, list[dict[str, str]]] | None:
    """`check_config`'s error for `root_dir` (message, details), or None if allowed."""
    try:
        FilesystemToolkit.check_config({"root_dir": root_dir})
    except ConfigInvalid as exc:
        return str(exc), exc.details
    return None


REFUSED = (NOT_ALLOWED, [{"pointer": "/root_dir", "keyword": "allowed"}])
SYSTEM_ROOTS = [
    "/",
    "/etc",
    "/etc/ssh",
    "/root",
    "/proc",
    "/proc/self",
    "/sys",
    "/dev",
    "/boot",
    "/usr",
    "/usr/local",
    "/bin",
    "/sbin",
    "/lib",
    "/var",
    "/var/lib",
    "/var/log",
    "/run",
    "/home",
    "~",
]


@pytest.mark.parametrize("root_dir", SYSTEM_ROOTS)
def test_system_directories_are_refused(root_dir: str) -> None:
    """Each exists here (so the refusal is the policy's, not a missing directory's), and
    each gets the one error a missing directory gets."""
    if not Path(root_dir).expanduser().is_dir():
        pytest.skip(f"{root_dir} is not a directory on this machine")
    assert refusal(root_dir) == REFUSED


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`/home` and the vault user's home, moved under tmp_path: `homes/me` is $HOME."""
    (tmp_path / "homes" / "me" / "projects").mkdir(parents=True)
    (tmp_path / "homes" / "other").mkdir()
    monkeypatch.setattr(filesystem, "_HOMES", tmp_path / "homes")
    monkeypatch.setenv("HOME", str(tmp_path / "homes" / "me"))
    return tmp_path / "homes"


def test_homes_and_what_holds_them_are_refused(
    homes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home gives its dot-directories away, so a home and whatever holds one is refused;
    a project inside a home is a root like any other. `~` is the vault user's home."""
    for root in (homes, homes / "me", homes / "other", tmp_path, "~"):
        assert refusal(str(root)) == REFUSED, root
    elsewhere = tmp_path / "me-elsewhere"  # $HOME, outside `/home`
    (elsewhere / "work").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(elsewhere))
    assert refusal(str(elsewhere)) == REFUSED
    for root in (homes / "me" / "projects", elsewhere / "work", "~/work"):
        assert refusal(str(root)) is None, root


def test_hidden_directories_are_refused(tmp_path: Path) -> None:
    for hidden in (".ssh", ".aws", ".gnupg", ".config/tool", "project/.git", ".cache/x/y"):
        (tmp_path / hidden).mkdir(parents=True)
        assert refusal(str(tmp_path / hidden)) == REFUSED, hidden
    assert refusal(str(tmp_path / "project")) is None


def test_symlinks_are_resolved_before_the_policy(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / "real").mkdir()
    for name, target in (("etc", "/etc"), ("ssh", tmp_path / ".ssh"), ("ok", tmp_path / "real")):
        os.symlink(target, tmp_path / name)
    assert refusal(str(tmp_path / "etc")) == refusal(str(tmp_path / "ssh")) == REFUSED
    assert refusal(str(tmp_path / "ssh" / ".." / "real")) is None  # as the kernel resolves it
    fs = FilesystemToolkit()
    fs.initialize({"root_dir": str(tmp_path / "ok")})
    assert fs.root == tmp_path / "real"


def test_the_operators_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When set, a root must be one of its entries or lie in one (after resolving both);
    it never reopens a refused path; set but empty, it allows nothing."""
    for name in ("a/work", "b", "c", "real-b"):
        (tmp_path / name).mkdir(parents=True)
    os.symlink(tmp_path / "c", tmp_path / "a" / "out")  # inside a, resolving outside it
    os.symlink(tmp_path / "real-b", tmp_path / "b" / "link")
    listed = [str(tmp_path / "a"), "relative/ignored", "", str(tmp_path / "b" / "link")]
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join(listed))
    for root in ("a", "a/work", "real-b"):
        assert refusal(str(tmp_path / root)) is None, root
    for root in ("b", "c", "a/out", "a/missing"):
        assert refusal(str(tmp_path / root)) == REFUSED, root
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join(["/", str(tmp_path)]))
    assert refusal("/etc") == REFUSED and refusal(str(tmp_path / "c")) is None
    monkeypatch.setenv(ROOTS_ENV, "")
    assert refusal(str(tmp_path / "a")) == REFUSED
    monkeypatch.delenv(ROOTS_ENV)
    assert refusal(str(tmp_path / "c")) is None


def test_a_refused_root_and_a_missing_one_are_told_apart_by_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever is wrong with a root but its text, one message and keyword: a system
    directory, a hidden one, one the allow-list leaves out, a missing one, one under a
    file, a file, one under a directory the vault cannot search, a symlink loop, `~` of
    no user, a NUL byte. A relative path alone is told apart, by its text."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "locked" / "inner").mkdir(parents=True)
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    cases = [
        "/etc",
        str(tmp_path / ".ssh"),
        str(tmp_path / "missing"),
        str(tmp_path / "missing" / "deeper"),
        str(tmp_path / "file"),
        str(tmp_path / "file" / "deeper"),
        str(tmp_path / "loop"),
        "~no-such-user-tkv/work",
        str(tmp_path / "nul\0byte"),
    ]
    assert {refusal(case) == REFUSED for case in cases} == {True}, [refusal(c) for c in cases]
    (tmp_path / "locked").chmod(0)
    try:
        if os.geteuid() != 0:  # root searches any directory
            assert refusal(str(tmp_path / "locked" / "inner")) == REFUSED
    finally:
        (tmp_path / "locked").chmod(0o700)
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path / "elsewhere"))
    assert refusal(str(tmp_path)) == REFUSED
    assert refusal("relative/dir") == (
        "root_dir must be an absolute path",
        [{"pointer": "/root_dir", "keyword": "absolute"}],
    )


MESSAGES = {
    "absolute": "root_dir must be an absolute path",
    "allowed": NOT_ALLOWED,
}


@pytest.mark.parametrize(
    ("make", "keyword"),
    [
        (lambda tmp: "relative/dir", "absolute"),
        (lambda tmp: str(tmp / "missing"), "allowed"),
        (lambda tmp: str(tmp / "missing" / "deeper"), "allowed"),
        (lambda tmp: str(tmp / "file"), "allowed"),
        (lambda tmp: "/", "allowed"),
        (lambda tmp: "/root/.ssh", "allowed"),
        (lambda tmp: str(tmp / ".ssh"), "allowed"),
    ],
)
def test_configure_refuses_a_root_dir_that_is_not_allowed(
    vault: Vault, tmp_path: Path, make: Callable[[Path], str], keyword: str
) -> None:
    """Like a schema error: RUNTIME_ERROR naming the pointer and a keyword (never the path),
    nothing stored, the refusal audited; the toolkit stays unconfigured."""
    (tmp_path / "file").write_text("")
    (tmp_path / ".ssh").mkdir()
    conn, _ = handshake(vault)
    root_dir = make(tmp_path)
    (error,) = configure(conn, "filesystem", {"root_dir": root_dir})
    assert (error["type"], error["code"]) == ("error", "RUNTIME_ERROR")
    assert error["details"] == [{"pointer": "/root_dir", "keyword": keyword}]
    assert error["message"] == MESSAGES[keyword]  # fixed texts: the path is never in them
    assert listed(conn)["filesystem"] is False
    with vault.store.engine.connect() as db:
        assert db.execute(select(ConfigVersion)).all() == []
        refused = db.execute(
            select(AuditEvent).where(AuditEvent.action == "configure_refused")
        ).one()
    assert json.loads(refused.details)["errors"] == error["details"]
    (ok, _) = configure(conn, "filesystem", {"root_dir": str(tmp_path)})
    assert ok["status"] == "ok" and listed(conn)["filesystem"] is True


def test_every_tool_error_is_one_that_names_no_path(
    toolkit: FilesystemToolkit, tmp_path: Path
) -> None:
    """Outside the root (there or not, as written or through a symlink) and missing inside
    it: one error, one message, no path. A path that climbs out as written is refused
    before anything is looked up: `../probe/../root/f` would otherwise read `f` or not
    depending on whether `probe`, outside, is a symlink."""
    (toolkit.root / "f").write_text("inside")
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere" / "deeper", tmp_path / "probe")
    os.symlink(tmp_path / "elsewhere", toolkit.root / "out")
    messages = set()
    for path in (
        "../outside.txt",
        "../missing.txt",
        "/etc/passwd",
        "/etc/no-such-file",
        "out/deeper",
        "out/missing",
        "missing.txt",
        "../probe/../root/f",
        "../no-probe/../root/f",
    ):
        for call in (toolkit.read_file, toolkit.list_dir):
            with pytest.raises(PathRefused) as refused:
                call(path)
            shown = "".join(traceback.format_exception(refused.value))
            assert str(tmp_path) not in shown and "/etc" not in shown
            messages.add(str(refused.value))
    with pytest.raises(PathRefused) as refused:
        toolkit.write_file("f/under-a-file", "x")
    messages.add(str(refused.value))
    assert messages == {UNAVAILABLE}
    assert toolkit.read_file("sub/../f") == "inside"


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
        _, event = request(connect(restarted, AGENT), hello)
        assert (event["toolkit_name"], event["configured"], event["status"]) == (
            "filesystem",
            False,
            "error",
        )
    finally:
        restarted.store.engine.dispose()
