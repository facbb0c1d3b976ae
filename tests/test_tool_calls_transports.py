"""`tool/call` over the three transports, in real processes (`serve`: HTTP `/a2e` and the
WebSocket; `stdio`), on SQLite and PostgreSQL: the filesystem's write then read, a path
outside the root refused unechoed, invalid arguments and an unconfigured toolkit refused
before the tool runs, a result carrying the secret withheld (and in no log), calls
running beside each other and cancelled by `tool/cancel/req`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from cli_support import spawn_cli
from test_http import CANARY, Server, running_server
from toolkit_vault.access.principals import revoke
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.core.vault import Vault

TOOL_DIST = Path(__file__).parent / "plugins" / "tool_dist"
BOTH = {"type": "handshake/req", "capabilities": ["toolkits", "tools"]}
CALLING = {"endpoint": "https://api.test", "api_key": CANARY}  # the log scan's canary


@pytest.fixture
def tool_env(cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "PYTHONPATH": os.pathsep.join([str(TOOL_DIST), cli_env["PYTHONPATH"]])}


@pytest.fixture
def server(vault: Vault, tool_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with running_server(tool_env, tmp_path / "serve.log") as base:
        yield Server(base, vault)


def configure(name: str, config: dict[str, Any], ident: str = "k") -> dict[str, Any]:
    return {"type": "toolkit/configure/req", "id": ident, "toolkit_name": name, "config": config}


def call(ident: str, toolkit: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "type": "tool/call/req",
        "id": ident,
        "toolkit_name": toolkit,
        "tool_name": tool,
        "arguments": arguments,
    }


def reason(answer: dict[str, Any]) -> str:
    assert (answer["type"], answer["code"]) == ("error", "RUNTIME_ERROR"), answer
    return str(answer["details"][0]["reason"])


def check_round_trip(ask: Any, root: Path) -> None:
    """The done-when checks, through `ask` (one message in, its answer out)."""
    assert reason(ask(call("u1", "filesystem", "read_file", path="a.txt"))) == "not_configured"
    assert ask(configure("filesystem", {"root_dir": str(root)}))["status"] == "ok"
    written = ask(call("w1", "filesystem", "write_file", path="dir/a.txt", content="héllo"))
    assert (written["type"], written["req_id"], written["is_error"]) == (
        "tool/call/resp",
        "w1",
        False,
    )
    read = ask(call("r1", "filesystem", "read_file", path="dir/a.txt"))
    assert read["content"] == [{"type": "text", "text": "héllo"}]
    (root.parent / "secret-outside.txt").write_text("not for agents")
    outside = ask(call("o1", "filesystem", "read_file", path="../secret-outside.txt"))
    assert "secret-outside" not in json.dumps(outside) and "not for agents" not in json.dumps(
        outside
    )
    assert outside.get("is_error") is True or outside["type"] == "error"
    invalid = ask(call("i1", "filesystem", "write_file", path="b.txt"))  # no content
    assert reason(invalid) == "invalid_arguments"
    assert not (root / "b.txt").exists()
    assert ask(configure("calling", CALLING))["status"] == "ok"
    for form in ("plain", "base64", "hex", "percent", "structured"):
        withheld = ask(call(f"l-{form}", "calling", "leak", form=form))
        assert reason(withheld) == "withheld" and CANARY not in json.dumps(withheld)


def test_over_http(server: Server, root: Path) -> None:
    token = server.token("agent", "caller")
    session = server.post(token, BOTH).json()["session_id"]

    def ask(message: dict[str, Any]) -> dict[str, Any]:
        response = server.post(token, message, session)
        assert response.status_code == 200
        return dict(response.json())

    check_round_trip(ask, root)


def _noted(note: Path, ending: bool = True) -> str:
    """What the `slow` tool noted in `note` (written whole: `tkv_tool_plugins._note`):
    how it ended, or with `ending=False` that it runs; "nothing" (or "started") if it has
    not said so within 10 seconds."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        said = note.read_text() if note.exists() else "nothing"
        if said != "nothing" and not (ending and said == "started"):
            return said
        time.sleep(0.05)
    return note.read_text() if note.exists() else "nothing"


def test_an_http_client_that_leaves_cancels_its_call(server: Server, tmp_path: Path) -> None:
    token = server.token("agent", "leaver")
    session = server.post(token, BOTH).json()["session_id"]
    assert server.post(token, configure("calling", CALLING), session).json()["status"] == "ok"
    note = tmp_path / "slow-note"
    body = json.dumps(call("s1", "calling", "slow", seconds=20, note=str(note))).encode()
    head = (
        f"POST /a2e HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"A2E-Session: {session}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    where = urlsplit(server.base)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        # it leaves once the tool runs (had it left before, there would be nothing to cancel)
        assert _noted(note, ending=False) == "started"
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):  # no answer yet: the tool waits 20 s
            sock.recv(1)
    assert _noted(note) == "cancelled"


def test_a_call_outliving_its_token_is_not_answered(server: Server, tmp_path: Path) -> None:
    token = server.token("agent", "revoked-meanwhile")
    with server.socket(token) as ws:
        ws.send(json.dumps(BOTH))
        assert json.loads(ws.recv(timeout=30))["type"] == "handshake/resp"
        ws.send(json.dumps(configure("calling", CALLING)))
        assert json.loads(ws.recv(timeout=30))["status"] == "ok"
        json.loads(ws.recv(timeout=30))  # its status event
        note = tmp_path / "slow-note"
        ws.send(json.dumps(call("s1", "calling", "slow", seconds=3, note=str(note))))
        revoke(server.vault.store, "revoked-meanwhile")
        answer = json.loads(ws.recv(timeout=30))
        assert (answer["type"], answer["code"]) == ("error", "UNAUTHORIZED"), answer
        assert _noted(note) == "done"  # the tool answered; the answer reached no one


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = tmp_path / "root"
    made.mkdir()
    return made


def test_over_websocket_with_calls_side_by_side(server: Server, root: Path) -> None:
    token = server.token("agent", "caller")
    with server.socket(token) as ws:

        def receive() -> dict[str, Any]:
            message = dict(json.loads(ws.recv(timeout=30)))
            while message["type"] == "toolkit/status/event":
                message = dict(json.loads(ws.recv(timeout=30)))
            return message

        def ask(message: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(message))
            return receive()

        assert ask(BOTH)["type"] == "handshake/resp"
        check_round_trip(ask, root)
        ws.send(json.dumps(call("s1", "calling", "slow", seconds=30)))
        echoed = ask(call("e1", "calling", "echo", text="while waiting"))
        assert (echoed["req_id"], echoed["content"][0]["text"]) == ("e1", "while waiting")
        ws.send(json.dumps({"type": "tool/cancel/req", "id": "x1", "call_id": "s1"}))
        answers = {m["req_id"]: m for m in (receive(), receive())}
        assert answers["x1"]["cancelled"] is True
        assert reason(answers["s1"]) == "cancelled"


def test_a_websocket_call_past_its_deadline_answers_timeout_once_recorded(
    vault: Vault, tool_env: dict[str, str], tmp_path: Path
) -> None:
    """The event loop's waiter answers a call whose deadline passed (the call runs whole on
    a tool thread): `timeout` at once, the tool told, its slot given back (one call at a
    time per instance here), and its `tool_called` record committed before the answer."""
    env = {**tool_env, "TOOLKIT_VAULT_TOOL_DEADLINE": "1", "TOOLKIT_VAULT_CALL_CONCURRENCY": "1"}
    with running_server(env, tmp_path / "serve.log") as base:
        server = Server(base, vault)
        with server.socket(server.token("agent", "late")) as ws:

            def ask(message: dict[str, Any]) -> dict[str, Any]:
                ws.send(json.dumps(message))
                answer = dict(json.loads(ws.recv(timeout=30)))
                while answer["type"] == "toolkit/status/event":
                    answer = dict(json.loads(ws.recv(timeout=30)))
                return answer

            assert ask(BOTH)["type"] == "handshake/resp"
            assert ask(configure("calling", CALLING))["status"] == "ok"
            note = tmp_path / "slow-note"
            started = time.monotonic()
            late = ask(call("s1", "calling", "slow", seconds=20, note=str(note)))
            assert reason(late) == "timeout" and time.monotonic() - started < 10
            events = list_events(vault.store, EventFilter(actions=("tool_called",))).events
            assert [e.details["outcome"] for e in events] == ["timeout"]  # before the answer
            assert _noted(note) == "cancelled"
            assert ask(call("e1", "calling", "echo", text="next"))["type"] == "tool/call/resp"
        # the tool's thread, told after the waiter answered, recorded nothing of its own
        events = list_events(vault.store, EventFilter(actions=("tool_called",))).events
        assert [e.details["outcome"] for e in events] == ["timeout", "ok"]


class Stdio:
    """`toolkit-vault stdio` in a process of its own, spoken to line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = spawn_cli(
            ["stdio"], env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message) + "\n")
        self.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(30)
        assert box and box[0], "stdio answered nothing"
        message = dict(json.loads(box[0]))
        if message["type"] == "toolkit/status/event":
            return self.receive()
        return message

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive()

    def close(self) -> str:
        self.stdin.close()
        self.proc.wait(timeout=30)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def test_over_stdio_with_a_cancel(vault: Vault, tool_env: dict[str, str], root: Path) -> None:
    stdio = Stdio(tool_env)
    try:
        assert stdio.ask(BOTH)["type"] == "handshake/resp"
        check_round_trip(stdio.ask, root)
        stdio.send(call("s1", "calling", "slow", seconds=30))
        echoed = stdio.ask(call("e1", "calling", "echo", text="meanwhile"))
        assert echoed["req_id"] == "e1"
        stdio.send({"type": "tool/cancel/req", "id": "x1", "call_id": "s1"})
        answers = {m["req_id"]: m for m in (stdio.receive(), stdio.receive())}
        assert answers["x1"]["cancelled"] is True and reason(answers["s1"]) == "cancelled"
    finally:
        stderr = stdio.close()
    assert CANARY not in stderr


def test_stdio_answers_a_call_only_once_its_record_is_committed(
    vault: Vault, tool_env: dict[str, str]
) -> None:
    """While another process holds the store's write lock, stdio's call runs but its
    `tool_called` record cannot commit, and nothing is answered; once the lock is let go,
    the record commits and the answer follows it. (On PostgreSQL a call's record goes to its
    process's own call chain, not under the chain's lock: the test holds that table.)"""
    stdio = Stdio(tool_env)
    try:
        assert stdio.ask(BOTH)["type"] == "handshake/resp"
        assert stdio.ask(configure("calling", CALLING))["status"] == "ok"
        assert stdio.ask(call("e0", "calling", "echo", text="warm"))["type"] == "tool/call/resp"
        assert stdio.proc.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdio.proc.stdout.readline()))  # type: ignore[union-attr]
        with vault.store.write() as held:  # the chain's write lock (BEGIN IMMEDIATE, advisory)
            if held.dialect.name == "postgresql":
                held.execute(text("LOCK TABLE call_records IN EXCLUSIVE MODE"))
            stdio.send(call("e1", "calling", "echo", text="held"))
            reader.start()
            reader.join(2.0)
            assert not lines, "stdio answered before the call's record could be committed"
        reader.join(30)
        answer = json.loads(lines[0])
        assert (answer["type"], answer["req_id"]) == ("tool/call/resp", "e1"), answer
        events = list_events(vault.store, EventFilter(actions=("tool_called",))).events
        assert [e.details["outcome"] for e in events] == ["ok", "ok"]
    finally:
        stdio.close()
