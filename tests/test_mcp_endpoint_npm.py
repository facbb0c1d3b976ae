"""MCP clients from npm, nobody's here: the TypeScript SDK's `Client` over `/mcp` on a
real `serve` (bearer token in its request headers), and the MCP Inspector's CLI mode over
`toolkit-vault mcp` (stdio; its HTTP mode sends no headers). Both list the tools under
their MCP names, call `filesystem`'s write then read, and call an imported server's tools
(our API_KEY test server, run in the sandbox by the vault): `whoami` answers "authorized"
(it has a key) and `echo_key`'s result is withheld (that key is the principal's). Over
stdio the calls are first refused (no configs; no intake page there), then succeed once
the local principal's configs are stored. Installed once by scripts/components/mcp_clients.sh
(`TKV_MCP_CLIENTS`, else its default cache)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spec_support import hello, send
from test_http import Server, running_server
from test_imported_servers import KEY, NAME, served_vault  # noqa: F401 (a fixture)
from test_mcp_endpoint_imported import configure_requests, served_env  # noqa: F401 (a fixture)
from test_stdio import CLI
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available

pytestmark = [
    pytest.mark.one_database,
    pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine"),
]

CLIENTS = Path(os.environ.get("TKV_MCP_CLIENTS", Path.home() / ".cache/toolkit-vault/mcp-clients"))
SDK = CLIENTS / "node_modules/@modelcontextprotocol/sdk/dist/esm"
INSPECTOR = CLIENTS / "node_modules/.bin/mcp-inspector"

TS_CLIENT = """
import { Client } from "%(sdk)s/client/index.js";
import { StreamableHTTPClientTransport } from "%(sdk)s/client/streamableHttp.js";
const [url, token, imported] = process.argv.slice(2);
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
const whoami = await client.callTool({ name: `${imported}__whoami`, arguments: {} });
const echoed = await client.callTool({ name: `${imported}__echo_key`, arguments: {} });
const names = listed.tools.map((t) => t.name);
console.log(JSON.stringify({ names, written, read, whoami, echoed }));
await client.close();
"""


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not (SDK.is_dir() and INSPECTOR.exists()):  # scripts/test installs them first
        raise RuntimeError("run scripts/components/mcp_clients.sh: the npm clients are missing")


@pytest.fixture
def server(
    served_vault: Vault,  # noqa: F811
    served_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> Iterator[Server]:
    with running_server(served_env, tmp_path / "serve.log") as base:
        yield Server(base, served_vault)


def _configure(server: Server, token: str, root: Path) -> None:
    hello = server.post(token, {"type": "handshake/req", "capabilities": ["toolkits"]})
    for configure in configure_requests(root):
        answer = server.post(token, configure, hello.json()["session_id"])
        assert answer.json()["status"] == "ok", answer.text


def test_the_typescript_sdk_client_over_mcp(server: Server, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    token = server.token("agent", "ts-client")
    _configure(server, token, root)
    script = tmp_path / "client.mjs"
    script.write_text(TS_CLIENT % {"sdk": SDK.as_posix()})
    done = subprocess.run(
        ["node", str(script), server.base + "/mcp", token, NAME],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"filesystem__read_file", "filesystem__write_file", f"{NAME}__whoami"} <= set(
        answer["names"]
    )
    assert answer["written"].get("isError") is not True, answer
    assert answer["read"]["content"] == [{"type": "text", "text": "from typescript"}]
    assert (root / "ts.txt").read_text() == "from typescript"
    assert answer["whoami"].get("isError") is not True, answer
    assert answer["whoami"]["content"] == [{"type": "text", "text": "authorized"}]
    assert answer["echoed"]["isError"] is True, answer
    assert "withheld" in answer["echoed"]["content"][0]["text"]
    assert KEY not in done.stdout


def test_the_inspector_cli_over_stdio(
    served_vault: Vault,  # noqa: F811
    served_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    def inspect(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [str(INSPECTOR), "--cli", CLI, "mcp", *args],
            capture_output=True,
            text=True,
            env=served_env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        assert KEY not in done.stdout + done.stderr
        loaded: dict[str, Any] = json.loads(done.stdout)
        return loaded

    def call(tool: str, *arguments: str) -> dict[str, Any]:
        pairs = [part for argument in arguments for part in ("--tool-arg", argument)]
        return inspect("--method", "tools/call", "--tool-name", tool, *pairs)

    names = {tool["name"] for tool in inspect("--method", "tools/list")["tools"]}
    assert {"filesystem__read_file", "filesystem__write_file"} <= names
    called = call("filesystem__read_file", "path=a.txt")
    assert called["isError"] is True  # stdio has no intake page: a person is told what to do
    assert "filesystem" in called["content"][0]["text"]

    root = tmp_path / "root"
    root.mkdir()
    conn, _ = hello(served_vault)  # the local principal, as `toolkit-vault mcp` runs
    for configure in configure_requests(root):
        assert send(conn, configure)[0]["status"] == "ok"
    names = {tool["name"] for tool in inspect("--method", "tools/list")["tools"]}
    assert f"{NAME}__whoami" in names  # known once the vault has run the server
    written = call("filesystem__write_file", "path=inspector.txt", "content=from the inspector")
    assert written.get("isError") is not True, written
    assert (root / "inspector.txt").read_text() == "from the inspector"
    read = call("filesystem__read_file", "path=inspector.txt")
    assert read.get("isError") is not True, read
    assert read["content"] == [{"type": "text", "text": "from the inspector"}]
    whoami = call(f"{NAME}__whoami")
    assert whoami.get("isError") is not True, whoami
    assert whoami["content"] == [{"type": "text", "text": "authorized"}]
    echoed = call(f"{NAME}__echo_key")  # withheld: the server holds the principal's key
    assert echoed["isError"] is True and "withheld" in echoed["content"][0]["text"]
