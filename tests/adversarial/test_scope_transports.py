"""Principal scopes through every transport: the in-process `Connection`, `toolkit-vault
stdio` (the local principal), HTTP POST (each request bound to its session by
`Connection.bind`, from the `A2E-Session` header) and a WebSocket on a real `serve`. The same
rules on each: configured once for the principal, a new and a resumed session of it are
configured; a principal scope id is no session, in a handshake or in the header."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adversarial_support import CLI, TIMEOUT, Channel, HttpChannel, WebSocketChannel, line
from websockets.sync.client import connect as ws_connect

from toolkit_vault.access.principals import Principal, list_principals
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault

UNKNOWN = ("error", "RUNTIME_ERROR", "unknown session")


def configured(channel: Channel) -> dict[str, bool]:
    caused = channel.exchange(line({"type": "toolkit/list/req", "id": "scopes-list"}))
    (answer,) = [m for m in caused if m.get("req_id") == "scopes-list"]
    return {t["name"]: t["configured"] for t in answer["toolkits"]}


def refused(answer: dict[str, Any]) -> tuple[str, str, str]:
    return answer["type"], answer.get("code", ""), answer.get("message", "")


def hello(session_id: str) -> bytes:
    return line({"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session_id})


def test_every_transport_follows_the_scope_rules(
    open_channel: Callable[..., Channel],
    transport: str,
    vault: Vault,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    first = open_channel()
    message = {
        "type": "toolkit/configure/req",
        "toolkit_name": "filesystem",
        "config": {"root_dir": str(tmp_path)},
        "scope": "principal",
    }
    response, *caused = first.exchange(line(message))
    assert (response["type"], response["status"]) == ("toolkit/configure/resp", "ok"), response
    heard = [(e["toolkit_name"], e["configured"]) for e in caused]
    assert heard == ([] if transport == "http" else [("filesystem", True)])  # HTTP pushes nothing
    assert configured(first)["filesystem"] is True
    assert configured(open_channel())["filesystem"] is True  # a new session
    assert configured(open_channel(first.session_id))["filesystem"] is True  # a resumed one

    owner = "local" if transport in ("connection", "stdio") else "adversarial-agent"
    principal_id = next(
        p.principal_id for p in list_principals(vault.store) if owner in (p.name, p.principal_id)
    )
    scope_id = f"principal:{principal_id}"
    if transport == "connection":
        conn = connect(vault, Principal(principal_id, "agent"))
        (answer,) = [json.loads(out) for out in conn.handle_raw(hello(scope_id))]
    elif transport == "stdio":
        done = subprocess.run(
            [CLI, "stdio"],
            input=hello(scope_id) + b"\n",
            capture_output=True,
            env=cli_env,
            timeout=TIMEOUT,
            check=True,
        )
        (answer,) = [json.loads(out) for out in done.stdout.splitlines()]
    elif transport == "http":
        assert isinstance(first, HttpChannel)
        listing = line({"type": "toolkit/list/req"})
        status, body = first.post(listing, headers={"A2E-Session": scope_id})
        assert status == 200 and refused(json.loads(body)) == UNKNOWN
        status, body = first.post(hello(scope_id), headers={"A2E-Session": ""})
        answer = json.loads(body)
    else:
        assert isinstance(first, WebSocketChannel)
        opening = first.ws.request
        assert opening is not None
        port = first.ws.remote_address[1]
        with ws_connect(
            f"ws://127.0.0.1:{port}/a2e",
            additional_headers={"Authorization": opening.headers["Authorization"]},
            open_timeout=TIMEOUT,
        ) as ws:
            ws.send(hello(scope_id).decode())
            answer = json.loads(ws.recv(timeout=TIMEOUT))
    assert refused(answer) == UNKNOWN
