"""`toolkit-vault serve` end to end: a real server on loopback, real HTTP and WebSocket clients.

Also what only a real process shows: a revocation made by another process (the CLI) reaching
the server's HTTP and its open WebSockets within a second, on one server and across two
replicas; slow request heads cut off; the log redaction filter attached to the server's
own handler.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from cli_support import run_cli, spawn_cli
from toolkit_vault.access.principals import create_token, revoke
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import load_settings

CLI = str(Path(sys.executable).parent / "toolkit-vault")
CANARY = "tkv-canary-http-7d1e"
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
LIST = {"type": "toolkit/list/req"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, base: str, vault: Vault) -> None:
        self.base, self.vault = base, vault
        self.ws_url = base.replace("http://", "ws://") + "/a2e"

    def token(self, role: str, name: str) -> str:
        return create_token(self.vault.store, role, name)[1]  # type: ignore[arg-type]

    def post(self, token: str | None, message: Any, session: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if session:
            headers["A2E-Session"] = session
        body = message if isinstance(message, str | bytes) else json.dumps(message)
        return httpx.post(self.base + "/a2e", content=body, headers=headers, timeout=30)

    def socket(self, token: str | None) -> ClientConnection:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return connect(self.ws_url, additional_headers=headers, open_timeout=10)


@contextlib.contextmanager
def running_server(env: dict[str, str], log_path: Path, *extra: str) -> Iterator[str]:
    """A real `toolkit-vault serve` on a free loopback port; yields its base URL."""
    port = free_port()
    args = ["serve", "--port", str(port), "--rate", "1000", "--connections-per-principal", "4"]
    args += extra
    with log_path.open("w") as log:
        proc = spawn_cli(args, env, stdout=log, stderr=subprocess.STDOUT)  # forked: fast
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert CANARY not in log_path.read_text()


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with running_server(cli_env, tmp_path / "serve.log") as base:
        yield Server(base, vault)


def ask(ws: ClientConnection, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    return dict(json.loads(ws.recv(timeout=30)))


def test_websocket_and_http_a2e_with_push(server: Server) -> None:
    token = server.token("agent", "agent-a")
    with server.socket(token) as ws:
        hello = ask(ws, HELLO)
        assert hello["type"] == "handshake/resp"
        session = hello["session_id"]
        listed = ask(ws, {"type": "toolkit/list/req", "id": "l1"})
        assert listed["req_id"] == "l1"
        assert {t["name"]: t["configured"] for t in listed["toolkits"]}["secretive"] is False
        config = {"endpoint": "https://x.test", "api_key": CANARY}
        done = ask(
            ws, {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
        )
        assert done["type"] == "toolkit/configure/resp" and done["status"] == "ok"
        event = json.loads(ws.recv(timeout=30))
        assert (event["type"], event["configured"]) == ("toolkit/status/event", True)
        # a configure through HTTP reaches this WebSocket as a push event
        over_http = server.post(
            token,
            {
                "type": "toolkit/configure/req",
                "toolkit_name": "filesystem",
                "config": {"root_dir": "/tmp"},
            },
            session,
        )
        assert over_http.status_code == 200 and over_http.json()["status"] == "ok"
        pushed = json.loads(ws.recv(timeout=30))
        assert (pushed["type"], pushed["toolkit_name"], pushed["session_id"]) == (
            "toolkit/status/event",
            "filesystem",
            session,
        )
        listed = server.post(token, {"type": "toolkit/list/req"}, session).json()
        assert {t["name"]: t["configured"] for t in listed["toolkits"]} == {
            "filesystem": True,
            "secretive": True,
        }
        assert CANARY not in json.dumps(listed)


def test_authentication_and_roles(server: Server) -> None:
    agent = server.token("agent", "agent-b")
    auditor = server.token("auditor", "auditor-b")
    revoked = server.token("agent", "gone")
    revoke(server.vault.store, "gone", actor="operator")
    for token, status in ((None, 401), ("tkv_" + "x" * 43, 401), (revoked, 401), (auditor, 403)):
        response = server.post(token, HELLO)
        assert response.status_code == status
        body = response.json()
        assert body["type"] == "error" and body["code"] == "UNAUTHORIZED"
        with server.socket(token) as ws:
            refusal = json.loads(ws.recv(timeout=10))
            assert refusal["code"] == "UNAUTHORIZED"
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
    assert (
        httpx.get(
            server.base + "/v1/history", headers={"Authorization": f"Bearer {agent}"}
        ).status_code
        == 403
    )
    assert httpx.get(server.base + "/v1/history").status_code == 401
    assert httpx.get(server.base + "/healthz").json()["status"] == "ok"


def test_sessions_are_isolated_between_principals(server: Server) -> None:
    alice, mallory = server.token("agent", "alice"), server.token("agent", "mallory")
    hello = server.post(alice, HELLO).json()
    assert hello["type"] == "handshake/resp", hello
    session = hello["session_id"]
    server.post(
        alice,
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "secretive",
            "config": {"endpoint": "e", "api_key": CANARY},
        },
        session,
    )
    unknown = server.post(mallory, {"type": "toolkit/list/req"}, "no-such-session").json()
    foreign = server.post(mallory, {"type": "toolkit/list/req"}, session).json()
    assert unknown["code"] == foreign["code"] == "RUNTIME_ERROR"
    assert unknown["message"] == foreign["message"] == "unknown session"
    steal = server.post(
        mallory,
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "filesystem",
            "config": {"root_dir": "/"},
        },
        session,
    ).json()
    assert steal["message"] == "unknown session"
    with server.socket(mallory) as ws:
        assert ask(ws, {**HELLO, "session_id": session})["message"] == "unknown session"
        own = ask(ws, HELLO)["session_id"]
        wrong = ask(
            ws,
            {
                "type": "toolkit/configure/req",
                "session_id": session,
                "toolkit_name": "filesystem",
                "config": {"root_dir": "/"},
            },
        )
        assert wrong["message"] == "unknown session" and own != session


def test_auditor_sees_history_but_no_secret(server: Server) -> None:
    agent, auditor, operator = (
        server.token("agent", "a"),
        server.token("auditor", "b"),
        server.token("operator", "c"),
    )
    session = server.post(agent, HELLO).json()["session_id"]
    server.post(
        agent,
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "secretive",
            "config": {"endpoint": "e", "api_key": CANARY},
        },
        session,
    )
    bearer = {"Authorization": f"Bearer {auditor}"}
    history = httpx.get(server.base + "/v1/history", headers=bearer, params={"session": session})
    assert history.status_code == 200
    (version,) = history.json()["versions"]
    assert version["status"] == "ok" and "/api_key" in version["secret_fingerprints"]
    verify = httpx.get(server.base + "/v1/audit/verify", headers=bearer).json()
    assert verify["ok"] is True
    assert httpx.get(server.base + "/v1/keys/status", headers=bearer).status_code == 403
    keys = httpx.get(
        server.base + "/v1/keys/status", headers={"Authorization": f"Bearer {operator}"}
    ).json()
    assert keys["keys"][0]["kek_id"] == "vk-1" and keys["vault_keys"][0]["active"]
    check = httpx.get(
        server.base + "/v1/check", headers={"Authorization": f"Bearer {operator}"}
    ).json()
    assert check["intact"] == 1
    for response in (history, httpx.get(server.base + "/openapi.json")):
        assert CANARY not in response.text


def test_limits_give_clear_errors(server: Server) -> None:
    token = server.token("agent", "limited")
    big = json.dumps({"type": "toolkit/list/req", "pad": "x" * (1024 * 1024)})
    too_big = server.post(token, big)
    assert too_big.status_code == 413 and too_big.json()["code"] == "INVALID_MESSAGE"
    deep = '{"type":"toolkit/list/req","x":' + "[" * 200 + "]" * 200 + "}"
    assert "deeper" in server.post(token, deep).json()["message"]
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(server.socket(token)) for _ in range(4)]
        with server.socket(token) as extra:
            refusal = json.loads(extra.recv(timeout=10))
            assert (
                refusal["code"] == "RUNTIME_ERROR"
                and "connections per principal" in refusal["message"]
            )
        ws = sockets[0]
        ask(ws, HELLO)
        assert ask(ws, {"type": "x"})["code"] == "INVALID_MESSAGE"
        ws.send(big)
        assert json.loads(ws.recv(timeout=30))["code"] == "INVALID_MESSAGE"
        assert ask(ws, {"type": "toolkit/list/req"})["type"] == "toolkit/list/resp"  # still usable


def test_refuses_a_public_address_without_tls(cli_env: dict[str, str], home: object) -> None:
    done = run_cli(["serve", "--host", "0.0.0.0"], cli_env, timeout=60)  # noqa: S104 (refused)
    assert done.returncode == 1
    assert "without TLS" in done.stderr and "--insecure" in done.stderr


@pytest.fixture
def replicas(
    fresh_postgres_url: str, plugins_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Server, Server, dict[str, str]]]:
    """Two `serve` replicas on one fresh PostgreSQL database, and their environment."""
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", fresh_postgres_url)
    init_vault(load_settings("file"))
    vault = open_vault(load_settings())
    env = {**os.environ, "PYTHONPATH": str(plugins_path)}
    try:
        with (
            running_server(env, tmp_path / "a.log") as replica_a,
            running_server(env, tmp_path / "b.log") as replica_b,
        ):
            yield Server(replica_a, vault), Server(replica_b, vault), env
    finally:
        vault.store.engine.dispose()


def test_push_events_cross_replicas_on_postgresql(
    replicas: tuple[Server, Server, dict[str, str]],
) -> None:
    a, b, _ = replicas
    token = a.token("agent", "scaled")
    with b.socket(token) as ws:
        session = ask(ws, HELLO)["session_id"]
        time.sleep(0.5)  # the listener subscribes right after start-up
        configure = {
            "type": "toolkit/configure/req",
            "toolkit_name": "filesystem",
            "config": {"root_dir": "/tmp"},
        }
        assert a.post(token, configure, session).json()["status"] == "ok"
        event = json.loads(ws.recv(timeout=30))
        assert (event["type"], event["session_id"], event["configured"]) == (
            "toolkit/status/event",
            session,
            True,
        )


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_serves_tls(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    args = ["serve", "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)]
    proc = spawn_cli(args, cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(
                    f"https://127.0.0.1:{port}/healthz", verify=str(cert), timeout=1
                )
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert response.status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _configure(root: str) -> dict[str, Any]:
    return {
        "type": "toolkit/configure/req",
        "toolkit_name": "filesystem",
        "config": {"root_dir": root},
    }


def _refused_within_a_second(post: Any, revoked_at: float) -> None:
    """Poll until refused; no request started a second or more after the revocation may pass."""
    while True:
        started = time.monotonic()
        status = post().status_code
        if status == 401:
            return
        assert status == 200
        assert started - revoked_at < 1.0, "a revoked token still worked after a second"
        time.sleep(0.05)


def test_a_revocation_by_the_cli_reaches_http_and_open_websockets_within_a_second(
    server: Server, cli_env: dict[str, str]
) -> None:
    token = server.token("agent", "leaving")
    session = server.post(token, HELLO).json()["session_id"]
    with server.socket(token) as ws:
        assert ask(ws, HELLO)["type"] == "handshake/resp"
        assert ask(ws, _configure("/tmp"))["status"] == "ok"
        ws.recv(timeout=30)  # its status event
        assert server.post(token, LIST, session).status_code == 200  # remembered now
        revoked = run_cli(["tokens", "revoke", "leaving"], cli_env)  # another process
        assert revoked.returncode == 0, revoked.stderr
        revoked_at = time.monotonic()
        _refused_within_a_second(lambda: server.post(token, LIST, session), revoked_at)
        refusal = ask(ws, _configure("/"))  # opened before the revocation
        assert (refusal["type"], refusal["code"]) == ("error", "UNAUTHORIZED")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    socket_session = [v for v in history(server.vault.store) if v["session_id"] != session]
    assert [v["public_config"]["root_dir"] for v in socket_session] == ["/tmp"]


def test_a_revocation_reaches_every_replica_within_a_second_on_postgresql(
    replicas: tuple[Server, Server, dict[str, str]],
) -> None:
    a, b, env = replicas
    token = a.token("agent", "everywhere")
    session = a.post(token, HELLO).json()["session_id"]
    with b.socket(token) as ws:
        ask(ws, HELLO)
        for replica in (a, b):  # each replica remembers the token now
            assert replica.post(token, LIST, session).status_code == 200
        revoked = run_cli(["tokens", "revoke", "everywhere"], env)  # a third process
        assert revoked.returncode == 0, revoked.stderr
        revoked_at = time.monotonic()
        for replica in (a, b):
            _refused_within_a_second(
                lambda r=replica: r.post(token, LIST, session),  # type: ignore[misc]
                revoked_at,
            )
        assert ask(ws, LIST)["code"] == "UNAUTHORIZED"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_slow_request_heads_are_cut_off(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """60 connections: half send nothing, half drip a header line every 0.3 s; with a
    1-second header deadline all are closed within 2.5 s, while a client that finishes its
    head in time (in two pieces) and ordinary requests are served throughout (the cap on
    one address's slow connections is raised: this is about the deadline alone)."""
    flags = ("--header-timeout", "1", "--slow-connections-per-ip", "100")
    with running_server(cli_env, tmp_path / "serve.log", *flags) as base:
        port = int(base.rsplit(":", 1)[1])
        started = time.monotonic()
        slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(60)]
        for n, sock in enumerate(slow):
            if n % 2:
                sock.sendall(b"POST /a2e HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.setblocking(False)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as prompt:
            prompt.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            time.sleep(0.3)
            prompt.sendall(b"Connection: close\r\n\r\n")
            assert prompt.recv(1024).startswith(b"HTTP/1.1 200")
        still_open = set(range(len(slow)))
        while still_open and time.monotonic() - started < 2.5:
            assert httpx.get(base + "/healthz", timeout=5).status_code == 200
            for n in list(still_open):
                if _closed(slow[n]):
                    still_open.discard(n)
                elif n % 2:
                    with contextlib.suppress(OSError):
                        slow[n].sendall(b"X-Slow: 1\r\n")
            time.sleep(0.3)
        for sock in slow:
            sock.close()
        assert not still_open, f"{len(still_open)} slow connections still held"


CHATTY_PLUGIN = '''
"""A toolkit that logs its own credential: the server's redaction filter must catch it."""
import logging

class ChattyToolkit:
    definition = {
        "name": "chatty",
        "alias": "chatty",
        "description": "A toolkit that logs what it should not",
        "category": "test",
        "tags": ["test"],
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "writeOnly": True}},
            "required": ["api_key"],
            "additionalProperties": False,
        },
        "tools": ["talk"],
    }

    def initialize(self, config):
        logging.getLogger("tkv_chatty").warning("connecting with key %s", config["api_key"])
'''


def test_the_server_redacts_a_secret_a_plugin_logs(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    plugins = tmp_path / "chatty"
    info = plugins / "tkv_chatty-1.0.dist-info"
    info.mkdir(parents=True)
    (plugins / "tkv_chatty.py").write_text(textwrap.dedent(CHATTY_PLUGIN))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tkv-chatty\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[toolkit_vault.toolkits]\nchatty = tkv_chatty:ChattyToolkit\n"
    )
    env = cli_env | {"PYTHONPATH": os.pathsep.join([str(plugins), cli_env["PYTHONPATH"]])}
    secret = "tkv-canary-logged-by-a-plugin-41c9"
    log = tmp_path / "serve.log"
    with running_server(env, log) as base:
        server = Server(base, vault)
        token = server.token("agent", "chatty-agent")
        session = server.post(token, HELLO).json()["session_id"]
        message = {"type": "toolkit/configure/req", "toolkit_name": "chatty"}
        reply = server.post(token, message | {"config": {"api_key": secret}}, session).json()
        assert reply["status"] == "ok"
    logged = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert "connecting with key [REDACTED]" in [r["message"] for r in logged]
    assert secret not in log.read_text()
