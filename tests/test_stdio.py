"""End to end over `toolkit-vault stdio` in real processes (forked: `cli_support`), on SQLite
and PostgreSQL."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cli_support import run_cli
from toolkit_vault.settings import VaultSettings

VECTORS = json.loads((Path(__file__).parent / "vectors" / "wire_examples.json").read_text())
SPEC_LIST_REQ = VECTORS["messages"][0]["json"]
SPEC_LIST_RESP = json.loads(VECTORS["messages"][1]["json"])
SPEC_CONFIGURE_REQ = json.loads(VECTORS["messages"][2]["json"])

CLI = str(Path(sys.executable).parent / "toolkit-vault")  # for the modules that need a real start


def run_stdio(env: dict[str, str], *lines: str) -> tuple[list[dict[str, Any]], str]:
    done = run_cli(["stdio"], env, input="".join(line + "\n" for line in lines), timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def handshake(session_id: str | None = None) -> str:
    msg: dict[str, Any] = {"type": "handshake/req", "id": "h1", "capabilities": ["toolkits"]}
    if session_id:
        msg["session_id"] = session_id
    return json.dumps(msg)


def test_spec_flow_then_resume_in_a_new_process(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    # the spec's example root (/home/user/workspace) need not exist here: one that does
    configure_req = {**SPEC_CONFIGURE_REQ, "session_id": "", "config": {"root_dir": str(tmp_path)}}
    out, stderr = run_stdio(
        cli_env, handshake(), SPEC_LIST_REQ, json.dumps(configure_req), SPEC_LIST_REQ
    )
    assert '"type":"handshake/req"' not in stderr  # the guide is for a terminal, not a pipe
    hello, listed, configured, event, listed_again = out
    assert hello["type"] == "handshake/resp" and hello["capabilities"] == ["toolkits"]
    session = hello["session_id"]
    spec_fs = SPEC_LIST_RESP["toolkits"][0]
    filesystem = next(t for t in listed["toolkits"] if t["name"] == "filesystem")
    assert filesystem == spec_fs and listed["req_id"] == "tk1"
    assert (configured["type"], configured["req_id"], configured["status"]) == (
        "toolkit/configure/resp",
        "tk3",
        "ok",
    )
    assert (event["type"], event["session_id"], event["configured"]) == (
        "toolkit/status/event",
        session,
        True,
    )
    again = next(t for t in listed_again["toolkits"] if t["name"] == "filesystem")
    assert again == {**spec_fs, "configured": True}

    resumed, _ = run_stdio(cli_env, handshake(session), SPEC_LIST_REQ)
    assert resumed[0]["type"] == "handshake/resp" and resumed[0]["session_id"] == session
    assert (
        next(t for t in resumed[1]["toolkits"] if t["name"] == "filesystem")["configured"] is True
    )

    other, _ = run_stdio(cli_env, handshake(), SPEC_LIST_REQ)
    assert next(t for t in other[1]["toolkits"] if t["name"] == "filesystem")["configured"] is False


def test_errors_over_stdio(home: VaultSettings, cli_env: dict[str, str]) -> None:
    out, _ = run_stdio(
        cli_env,
        SPEC_LIST_REQ,
        handshake(),
        '{"type":"toolkit/unknown/req","id":"u1"}',
        "not json at all",
        json.dumps({**SPEC_CONFIGURE_REQ, "session_id": "", "toolkit_name": "nope"}),
        json.dumps({**SPEC_CONFIGURE_REQ, "session_id": "", "config": {}}),
        json.dumps({"type": "toolkit/list/req", "pad": "x" * (1024 * 1024 + 10)}),
        SPEC_LIST_REQ,
    )
    codes = [(m["type"], m.get("code")) for m in out]
    assert codes == [
        ("error", "CAPABILITY_NOT_NEGOTIATED"),
        ("handshake/resp", None),
        ("error", "INVALID_MESSAGE"),
        ("error", "INVALID_MESSAGE"),
        ("error", "RUNTIME_ERROR"),
        ("error", "RUNTIME_ERROR"),
        ("error", "INVALID_MESSAGE"),
        ("toolkit/list/resp", None),  # the connection stays usable
    ]
    assert out[2]["req_id"] == "u1"
    assert out[5]["details"] == [{"pointer": "/root_dir", "keyword": "required"}]


def test_stdio_refuses_without_init(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {**cli_env, "TOOLKIT_VAULT_HOME": str(tmp_path / "elsewhere")}
    done = run_cli(["stdio"], env, timeout=60)
    assert done.returncode == 1
    elsewhere = tmp_path / "elsewhere"
    assert done.stderr.strip().splitlines() == [
        f"toolkit-vault: error: no vault in {elsewhere}: run `toolkit-vault init` first"
    ]
