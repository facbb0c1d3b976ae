"""The MCP client of imported servers (mcp_client/, issue 51) against real local servers:
the published ones (PyPI's mcp-server-time and mcp-server-git, npm's server-everything and
server-filesystem, cached by scripts/components/mcp_servers.sh) and ours
(tests/mcp_servers/api_key_server.py), over stdio.

The launches here are the TEST-ONLY unconfined stand-in (tests/mcp_support.py) until the
sandbox lands: the client starts whatever launch it is given.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mcp_support import alive, our_server, published, unconfined
from toolkit_vault.mcp_client import (
    CallCancelled,
    CallTimedOut,
    StdioServer,
    ToolDescription,
    UpstreamFailed,
    UpstreamHandle,
    UpstreamHost,
    compare_pins,
    pin_tools,
)

KEY = "sk-test-7Qz4Vb9LmN2pXc5R"  # the API key our server is given: a canary


def _no_redaction(text: str) -> str:
    return text


def _redact_key(text: str) -> str:
    return text.replace(KEY, "[REDACTED]")


def _open(
    host: UpstreamHost,
    argv: list[str],
    home: Path,
    env: dict[str, str] | None = None,
    **kwargs: object,
) -> UpstreamHandle:
    launch = unconfined(argv, env or {}, home)
    server = StdioServer(label="test", launch=launch, redact=_redact_key)
    return host.open(server, timeout=30, **kwargs)  # type: ignore[arg-type]


def _call(
    handle: UpstreamHandle, name: str, arguments: dict[str, object], seconds: float = 20
) -> dict:  # type: ignore[type-arg]
    return handle.call_tool(name, arguments, deadline=time.monotonic() + seconds)


def _text(result: dict) -> str:  # type: ignore[type-arg]
    return "".join(block.get("text", "") for block in result["content"])


def _names(handle: UpstreamHandle) -> set[str]:
    return {tool.name for tool in handle.tools}


# -- the published servers ------------------------------------------------------------


def test_time_server_lists_and_calls(host: UpstreamHost, tmp_path: Path) -> None:
    handle = _open(host, published("mcp-server-time"), tmp_path)
    assert {"get_current_time", "convert_time"} <= _names(handle)
    tool = next(t for t in handle.tools if t.name == "get_current_time")
    assert tool.input_schema["type"] == "object"
    result = _call(handle, "get_current_time", {"timezone": "UTC"})
    assert result["isError"] is False
    assert json.loads(_text(result))["timezone"] == "UTC"


def test_git_server_lists_and_calls(host: UpstreamHost, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    handle = _open(host, [*published("mcp-server-git"), "--repository", str(repo)], tmp_path)
    assert "git_status" in _names(handle)
    result = _call(handle, "git_status", {"repo_path": str(repo)})
    assert result["isError"] is False
    assert "notes.txt" in _text(result)


def test_everything_server_lists_and_calls(host: UpstreamHost, tmp_path: Path) -> None:
    handle = _open(host, [*published("server-everything"), "stdio"], tmp_path)
    assert "echo" in _names(handle)
    result = _call(handle, "echo", {"message": "over stdio"})
    assert "over stdio" in _text(result)


def test_filesystem_server_lists_and_calls(host: UpstreamHost, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the filesystem server read this")
    handle = _open(host, [*published("server-filesystem"), str(shared)], tmp_path)
    assert "read_text_file" in _names(handle) or "read_file" in _names(handle)
    name = "read_text_file" if "read_text_file" in _names(handle) else "read_file"
    result = _call(handle, name, {"path": str(shared / "notes.txt")})
    assert "the filesystem server read this" in _text(result)


# -- our server that needs API_KEY ------------------------------------------------------


def test_key_from_the_environment_makes_a_call_work(host: UpstreamHost, tmp_path: Path) -> None:
    handle = _open(
        host, our_server("api_key_server.py"), tmp_path, {"API_KEY": KEY, "EXPECTED_KEY": KEY}
    )
    result = _call(handle, "whoami", {})
    assert result == {"content": [{"type": "text", "text": "authorized"}], "isError": False} or (
        _text(result) == "authorized" and result["isError"] is False
    )
    assert handle.session.protocol_version  # negotiated, whichever revision


def test_without_the_key_the_server_does_not_start(host: UpstreamHost, tmp_path: Path) -> None:
    with pytest.raises(UpstreamFailed) as failure:
        _open(host, our_server("api_key_server.py"), tmp_path)
    assert KEY not in str(failure.value)


def test_a_wrong_key_makes_the_call_a_tool_error(host: UpstreamHost, tmp_path: Path) -> None:
    env = {"API_KEY": "not-the-key", "EXPECTED_KEY": KEY}
    handle = _open(host, our_server("api_key_server.py"), tmp_path, env)
    assert _call(handle, "whoami", {})["isError"] is True


def test_a_key_echoed_in_a_result_is_returned_and_never_logged(
    host: UpstreamHost, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Withholding it is the engine's job (tools/withhold.py); the client returns the
    result as it came and logs none of it."""
    caplog.set_level(logging.DEBUG)
    handle = _open(host, our_server("api_key_server.py"), tmp_path, {"API_KEY": KEY})
    assert KEY in _text(_call(handle, "echo_key", {}))
    handle.close()
    assert not [r for r in caplog.records if KEY in r.getMessage()]


def test_stderr_with_the_key_is_logged_redacted(
    host: UpstreamHost, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handle = _open(host, our_server("api_key_server.py"), tmp_path, {"API_KEY": KEY})
    _call(handle, "leak_to_stderr", {})
    handle.close()  # the stderr reader has drained by then
    lines = [r.getMessage() for r in caplog.records if "stderr" in r.name]
    assert any("debug: using API_KEY=[REDACTED] now" in line for line in lines), lines
    assert not [r for r in caplog.records if KEY in r.getMessage()]


def test_cancellation_reaches_the_server(host: UpstreamHost, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    handle = _open(host, our_server("api_key_server.py", str(record)), tmp_path, {"API_KEY": KEY})
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(CallCancelled):
        handle.call_tool("sleep", {"seconds": 30}, deadline=time.monotonic() + 20, cancel=cancel)
    assert time.monotonic() - started < 5
    _wait_for(record / "sleep-cancelled")


def test_a_deadline_cancels_the_call_at_the_server(host: UpstreamHost, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    handle = _open(host, our_server("api_key_server.py", str(record)), tmp_path, {"API_KEY": KEY})
    with pytest.raises(CallTimedOut):
        handle.call_tool("sleep", {"seconds": 30}, deadline=time.monotonic() + 0.5)
    _wait_for(record / "sleep-cancelled")
    assert _text(_call(handle, "noop", {})) == "ok"  # the session goes on


def test_shutdown_kills_the_process_group_within_a_second(
    host: UpstreamHost, tmp_path: Path
) -> None:
    handle = _open(host, our_server("api_key_server.py"), tmp_path, {"API_KEY": KEY})
    child = int(_text(_call(handle, "spawn_child", {})))
    process = handle.pid
    assert process is not None
    assert alive(child) and alive(process)
    started = time.monotonic()
    handle.close()
    assert time.monotonic() - started < 1.0
    assert not alive(process)
    while alive(child) and time.monotonic() - started < 1.0:  # the group's SIGKILL is sent;
        time.sleep(0.01)  # the child's own death follows it, within the second promised
    assert not alive(child)
    assert handle.state == "stopped"
    with pytest.raises(UpstreamFailed):
        _call(handle, "noop", {})


def test_tools_list_changed_is_followed_and_the_pin_names_the_change(
    host: UpstreamHost, tmp_path: Path
) -> None:
    lists: list[tuple[ToolDescription, ...]] = []
    changed = threading.Event()

    def on_change(tools: tuple[ToolDescription, ...]) -> None:
        lists.append(tools)
        changed.set()

    handle = _open(
        host,
        our_server("api_key_server.py"),
        tmp_path,
        {"API_KEY": KEY},
        on_tools_changed=on_change,
    )
    pinned = pin_tools(handle.tools)
    _call(handle, "change_tools", {})
    assert changed.wait(10), "the list change was not followed"
    noop = next(t for t in lists[-1] if t.name == "noop")
    assert noop.description == "Does nothing, now with new instructions."
    changes = compare_pins(pinned, pin_tools(lists[-1]))
    assert changes.changed == ("noop",)
    assert not changes.added and not changes.removed
    assert handle.tools == lists[-1]


def _wait_for(path: Path, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)
