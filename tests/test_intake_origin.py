"""The `Host` header never chooses the origin of an intake URL (issue 35).

A configure that leaves out a secret answers with a link a person opens to type it; were
the link's origin taken from the request, a client sending `Host: evil.example` (or
`X-Forwarded-Host`, `X-Forwarded-Proto`, `Forwarded`) would send that person, and the
secret, elsewhere. The origin is `serve --public-url`, else the address `serve` binds,
else (a wildcard address, port 0, an app run in process) the local address of the socket
the request came in on; never a header.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from websockets.sync.client import connect

from cli_support import run_cli, spawn_cli
from test_http import free_port, running_server
from toolkit_vault.access.principals import create_token
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.transports.http_api import create_app

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # transport only

HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
PARTIAL = {
    "type": "toolkit/configure/req",
    "toolkit_name": "secretive",
    "config": {"endpoint": "e"},
}
HOSTILE = {
    "Host": "evil.example:8443",
    "X-Forwarded-Host": "evil.example",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Port": "8443",
    "Forwarded": "host=evil.example;proto=https",
}


def _link_of(answer: dict[str, Any]) -> str:
    assert answer.get("status") == "partial", answer
    url: str = answer["intake_url"]
    assert "evil" not in url and "evil" not in answer["message"], answer
    return url


def _over_http(base: str, token: str, headers: dict[str, str] | None = None) -> str:
    auth = {"Authorization": f"Bearer {token}"} | (headers or {})
    with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
        session = client.post("/a2e", json=HELLO).json()["session_id"]
        answer = client.post("/a2e", json=PARTIAL, headers={"A2E-Session": session}).json()
    return _link_of(answer)


def _over_websocket(base: str, token: str, headers: dict[str, str]) -> str:
    url = base.replace("http://", "ws://") + "/a2e"
    extra = {"Authorization": f"Bearer {token}"} | {k: v for k, v in headers.items() if k != "Host"}
    with connect(url, additional_headers=extra, open_timeout=10) as ws:  # Host: from the URL
        ws.send(json.dumps(HELLO))
        ws.recv(timeout=30)
        ws.send(json.dumps(PARTIAL))
        return _link_of(json.loads(ws.recv(timeout=30)))


@pytest.mark.parametrize("public_url", [None, "https://vault.example.com"])
def test_in_process_the_link_names_the_server_never_a_header(
    vault: Vault, home: VaultSettings, public_url: str | None
) -> None:
    token = create_token(vault.store, "agent", "hostile-host")[1]
    origin = public_url or "http://testserver"  # the address TestClient's socket has
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(vault, open_provider(home), public_url=public_url)) as client:
        session = client.post("/a2e", json=HELLO, headers=auth | HOSTILE).json()["session_id"]
        answer = client.post(
            "/a2e", json=PARTIAL, headers=auth | HOSTILE | {"A2E-Session": session}
        )
        assert _link_of(answer.json()).startswith(f"{origin}/console/intake?link=")
        with client.websocket_connect("/a2e", headers=auth | HOSTILE) as ws:
            ws.send_json(HELLO)
            ws.receive_json()
            ws.send_json(PARTIAL)
            assert _link_of(ws.receive_json()).startswith(f"{origin}/console/intake?link=")


def test_serve_names_its_own_address_or_its_public_url(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    token = create_token(vault.store, "agent", "served")[1]
    with running_server(cli_env, tmp_path / "bound.log") as base:
        for link in (_over_http(base, token, HOSTILE), _over_websocket(base, token, HOSTILE)):
            assert link.startswith(f"{base}/console/intake?link="), link
        # the link works where it points (and a person typing the secret would land here)
        assert httpx.get(_over_http(base, token), timeout=10).status_code == 200
    public = "https://vault.example.test"
    flags = ("--public-url", public + "/")
    with running_server(cli_env, tmp_path / "public.log", *flags) as base:
        for link in (_over_http(base, token, HOSTILE), _over_websocket(base, token, HOSTILE)):
            assert link.startswith(f"{public}/console/intake?link="), link


def test_on_port_0_the_link_names_the_socket_not_a_forwarded_header(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """No one origin to configure (port 0, as for a wildcard address): the socket's local
    address and scheme; uvicorn's X-Forwarded-* handling (which trusts 127.0.0.1) is off."""
    token = create_token(vault.store, "agent", "port-zero")[1]
    port = None
    args = ["serve", "--host", "127.0.0.1", "--port", "0"]
    proc = spawn_cli(args, cli_env, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "running on http://127.0.0.1:" in line:
                port = int(line.split("running on http://127.0.0.1:")[1].split()[0])
                break
        assert port is not None, "serve did not start"
        base = f"http://127.0.0.1:{port}"
        for link in (_over_http(base, token, HOSTILE), _over_websocket(base, token, HOSTILE)):
            assert link.startswith(f"{base}/console/intake?link="), link
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "https://user:pw@vault.example.com",
        "https://vault.example.com/?next=evil",
        "https://vault.example.com/<script>",
        "vault.example.com",
    ],
)
def test_a_public_url_that_is_not_one_is_refused(
    vault: Vault, cli_env: dict[str, str], url: str
) -> None:
    done = run_cli(["serve", "--port", str(free_port()), "--public-url", url], cli_env, timeout=60)
    assert done.returncode != 0
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--public-url must look like https://vault.example.com[:port][/path]")
    ), done.stderr
