"""MCP clients from npm, nobody's here: the TypeScript SDK's `Client` over `/mcp` on a
real `serve` (bearer token in its request headers), and the MCP Inspector's CLI mode over
`toolkit-vault mcp` (stdio; its HTTP mode sends no headers). Both list the tools under
their MCP names and call `filesystem`'s write then read. Installed once by
scripts/components/mcp_clients.sh (`TKV_MCP_CLIENTS`, else its default cache)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_http import Server, running_server
from test_stdio import CLI
from toolkit_vault.core.vault import Vault

pytestmark = pytest.mark.one_database

CLIENTS = Path(os.environ.get("TKV_MCP_CLIENTS", Path.home() / ".cache/toolkit-vault/mcp-clients"))
SDK = CLIENTS / "node_modules/@modelcontextprotocol/sdk/dist/esm"
INSPECTOR = CLIENTS / "node_modules/.bin/mcp-inspector"

TS_CLIENT = """
import { Client } from "%(sdk)s/client/index.js";
import { StreamableHTTPClientTransport } from "%(sdk)s/client/streamableHttp.js";
const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-sdk-test", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();
const written = await client.callTool({
  name: "filesystem__write_file", arguments: { path: "ts.txt", content: "from typescript" },
});
const read = await client.callTool({
  name: "filesystem__read_file", arguments: { path: "ts.txt" },
});
console.log(JSON.stringify({ names: listed.tools.map((t) => t.name), written, read }));
await client.close();
"""


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not (SDK.is_dir() and INSPECTOR.exists()):  # scripts/test installs them first
        raise RuntimeError("run scripts/components/mcp_clients.sh: the npm clients are missing")


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with running_server(cli_env, tmp_path / "serve.log") as base:
        yield Server(base, vault)


def _configure_filesystem(server: Server, token: str, root: Path) -> None:
    hello = server.post(token, {"type": "handshake/req", "capabilities": ["toolkits"]})
    configure = {
        "type": "toolkit/configure/req",
        "toolkit_name": "filesystem",
        "config": {"root_dir": str(root)},
        "scope": "principal",
    }
    answer = server.post(token, configure, hello.json()["session_id"])
    assert answer.json()["status"] == "ok", answer.text


def test_the_typescript_sdk_client_over_mcp(server: Server, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    token = server.token("agent", "ts-client")
    _configure_filesystem(server, token, root)
    script = tmp_path / "client.mjs"
    script.write_text(TS_CLIENT % {"sdk": SDK.as_posix()})
    done = subprocess.run(
        ["node", str(script), server.base + "/mcp", token],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"filesystem__read_file", "filesystem__write_file"} <= set(answer["names"])
    assert answer["written"].get("isError") is not True, answer
    assert answer["read"]["content"] == [{"type": "text", "text": "from typescript"}]
    assert (root / "ts.txt").read_text() == "from typescript"


def test_the_inspector_cli_over_stdio(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    def inspect(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [str(INSPECTOR), "--cli", CLI, "mcp", *args],
            capture_output=True,
            text=True,
            env=cli_env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        loaded: dict[str, Any] = json.loads(done.stdout)
        return loaded

    names = {tool["name"] for tool in inspect("--method", "tools/list")["tools"]}
    assert {"filesystem__read_file", "filesystem__write_file"} <= names
    called = inspect(
        "--method", "tools/call", "--tool-name", "filesystem__read_file",
        "--tool-arg", "path=a.txt",
    )  # fmt: skip
    assert called["isError"] is True  # stdio has no intake page: a person is told what to do
    assert "filesystem" in called["content"][0]["text"]
