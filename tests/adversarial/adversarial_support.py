"""Shared helpers of the adversarial suite: transports as channels, store snapshots, scans.

A `Channel` is one A2E connection that has completed its handshake, seen from outside:
`exchange(raw)` sends one raw inbound message and returns every message it caused. The
in-process `Connection`, a real `toolkit-vault stdio` process, and HTTP POST and a WebSocket
on a real `toolkit-vault serve` (`ServeProcess`, loopback only) are channels.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from sqlalchemy import func, select
from websockets.sync.client import connect as ws_connect

from cli_support import Forked, spawn_cli
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import MAX_MESSAGE_BYTES, PROTOCOL_VERSION
from toolkit_vault.store.models import AuditEvent, ConfigVersion, CurrentConfig, SessionRow

AGENT = Principal("local", "agent")
BIN = Path(sys.executable).parent
CLI = str(BIN / "toolkit-vault")
HERE = Path(__file__).parent
ERROR_FIELDS = ["type", "id", "version", "ts", "req_id", "code", "message", "details"]
TIMEOUT = 60.0
_TOO_BIG = [{"limit": "message_bytes", "max": MAX_MESSAGE_BYTES}]


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


class Channel(Protocol):
    name: str
    session_id: str

    def exchange(self, raw: bytes) -> list[dict[str, Any]]:
        """Send one raw message; every message it caused (response first, then events)."""

    def close(self) -> str:
        """End the connection; what the transport wrote besides protocol (stderr)."""


class ConnectionChannel:
    """The service API's `Connection.handle_raw`, in this process."""

    name = "connection"

    def __init__(self, vault: Vault, session_id: str | None = None) -> None:
        self.conn = connect(vault, AGENT)
        hello = _handshake_message(session_id)
        (response, *_) = self.exchange(hello)
        assert response["type"] == "handshake/resp", response
        self.session_id: str = response["session_id"]

    def exchange(self, raw: bytes) -> list[dict[str, Any]]:
        return [json.loads(out) for out in self.conn.handle_raw(raw)]

    def close(self) -> str:
        self.conn.close()
        return ""


class StdioChannel:
    """A real `toolkit-vault stdio` process, fed many messages over its whole life.

    Every message is followed by a list request with a fresh id: everything before that
    probe's response was caused by the message, and the response proves the connection
    still works. A message that must not be answered (a blank line) cannot be sent.
    """

    name = "stdio"

    def __init__(
        self,
        env: dict[str, str],
        session_id: str | None = None,
        argv: list[str] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> None:
        self._stderr_sink = stderr
        streams: dict[str, Any] = {
            "stdin": subprocess.PIPE,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE if stderr is None else stderr,
        }
        self.proc: subprocess.Popen[bytes] | Forked
        if argv is None:  # the console script's own `stdio`: forked, without its start-up
            self.proc = spawn_cli(["stdio"], env, text=False, **streams)
        else:
            self.proc = subprocess.Popen(argv, env=env, **streams)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._probes = 0
        self.raw_stdout = bytearray()
        self._stderr = bytearray()
        threading.Thread(target=self._pump, daemon=True).start()
        if stderr is None:
            threading.Thread(target=self._pump_stderr, daemon=True).start()
        (response, *_) = self.exchange(_handshake_message(session_id))
        assert response["type"] == "handshake/resp", response
        self.session_id = response["session_id"]

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for out in self.proc.stdout:
            self.raw_stdout += out
            self._lines.put(out)
        self._lines.put(b"")

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for out in self.proc.stderr:
            self._stderr += out

    def _read(self) -> dict[str, Any]:
        try:
            out = self._lines.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError("the stdio process stopped answering") from None
        assert out, f"the stdio process exited: {bytes(self._stderr)[-2000:]!r}"
        message: dict[str, Any] = json.loads(out)
        return message

    def send(self, raw: bytes) -> None:
        assert b"\n" not in raw and raw.strip(), "stdio frames one message per non-blank line"
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def exchange(self, raw: bytes) -> list[dict[str, Any]]:
        self._probes += 1
        probe = f"probe-{self._probes}"
        self.send(raw)
        self.send(line({"type": "toolkit/list/req", "id": probe}))
        caused: list[dict[str, Any]] = []
        while True:
            message = self._read()
            if message.get("req_id") == probe and message["type"] == "toolkit/list/resp":
                return caused
            caused.append(message)

    def close(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=TIMEOUT)
        assert code == 0, bytes(self._stderr)[-2000:]
        return bytes(self._stderr).decode(errors="replace")


class ServeProcess:
    """A real `toolkit-vault serve` on 127.0.0.1, on a port the OS picks (no race between
    test workers), with an agent token; everything it writes to stdout and stderr is kept.
    Started afresh, not forked (`cli_support.spawn_cli`): `peak_rss` is then its own, not
    a high-water mark a fork server's memory set before it began."""

    def __init__(self, vault: Vault, env: dict[str, str], argv: list[str] | None = None) -> None:
        self.token = create_token(vault.store, "agent", "adversarial-agent")[1]
        args = [*(argv or [CLI, "serve"]), "--host", "127.0.0.1", "--port", "0"]
        args += ["--rate", "1000", "--connections-per-principal", "4"]
        self.proc = subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.stdout, self.stderr = bytearray(), bytearray()
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        deadline = time.monotonic() + TIMEOUT
        while not (found := re.search(rb"running on http://127\.0\.0\.1:(\d+)", self.stderr)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"serve did not start: {bytes(self.stderr)[-2000:]!r}")
            time.sleep(0.05)
        self.port = int(found.group(1))
        self.ws_url = f"ws://127.0.0.1:{self.port}/a2e"

    def peak_rss(self) -> int:
        """The server's peak resident memory so far, in bytes (Linux)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        found = re.search(r"VmHWM:\s*(\d+) kB", status)
        assert found, status
        return int(found.group(1)) * 1024

    @staticmethod
    def _pump(stream: IO[bytes] | None, into: bytearray) -> None:
        assert stream is not None
        for out in stream:
            into += out

    def stop(self) -> str:
        """Stop it (SIGTERM, as an operator would); what it wrote to stderr."""
        self.proc.terminate()
        code = self.proc.wait(timeout=TIMEOUT)
        for pump in self._pumps:
            pump.join(timeout=TIMEOUT)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert code in (0, -signal.SIGTERM), bytes(self.stderr)[-2000:]
        assert b"Finished server process" in self.stderr, bytes(self.stderr)[-2000:]
        return bytes(self.stderr).decode(errors="replace")


class HttpChannel:
    """POST /a2e on one kept-alive HTTP/1.1 connection; the session in the A2E-Session header.

    HTTP answers each message with exactly one message and pushes nothing. The connection
    must survive every answer: the server closing it counts as a broken channel.
    """

    name = "http"

    def __init__(self, server: ServeProcess, session_id: str | None = None) -> None:
        self.server, self.token = server, server.token
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
        self.responses: list[bytes] = []  # status line, headers and body of every answer
        self.session_id = ""
        (response,) = self.exchange(_handshake_message(session_id))
        assert response["type"] == "handshake/resp", response
        self.session_id = response["session_id"]

    def post(
        self,
        raw: bytes | Iterator[bytes],
        path: str = "/a2e",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """POST one body (bytes, or chunks sent without a length); the status and body."""
        sent = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if self.session_id:
            sent["A2E-Session"] = self.session_id
        sent |= headers or {}
        sock = self.conn.sock
        chunked = not isinstance(raw, bytes)
        self.conn.request("POST", path, body=raw, headers=sent, encode_chunked=chunked)
        response = self.conn.getresponse()
        body = response.read()
        head = f"{response.status} {response.reason}\n{response.headers}".encode()
        self.responses.append(head + body)
        assert sock is None or self.conn.sock is sock, "the server closed the connection"
        assert not response.will_close, f"the server closes the connection: {body[:300]!r}"
        assert response.headers.get_content_type() == "application/json", head
        return response.status, body

    def exchange(self, raw: bytes) -> list[dict[str, Any]]:
        status, body = self.post(raw)
        message: dict[str, Any] = json.loads(body)
        assert status == (413 if message.get("details") == _TOO_BIG else 200), (status, body)
        return [message]

    def close(self) -> str:
        self.conn.close()
        return ""


class WebSocketChannel:
    """A WebSocket on /a2e, fed many messages over its life (probed as stdio is).

    A message that is valid UTF-8 goes as a text frame, or as a binary frame every other
    time; any other bytes go as a binary frame (a text frame cannot carry them).
    """

    name = "websocket"

    def __init__(self, server: ServeProcess, session_id: str | None = None) -> None:
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            ws_connect(
                server.ws_url,
                additional_headers={"Authorization": f"Bearer {server.token}"},
                open_timeout=TIMEOUT,
                max_size=None,
            )
        )
        self.frames: list[bytes] = []  # every frame the server sent
        self._probes = 0
        (response, *_) = self.exchange(_handshake_message(session_id))
        assert response["type"] == "handshake/resp", response
        self.session_id: str = response["session_id"]

    def send(self, raw: bytes) -> None:
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            self.ws.send(raw)
            return
        self.ws.send(raw if self._probes % 2 else text)

    def _read(self) -> dict[str, Any]:
        frame = self.ws.recv(timeout=TIMEOUT)
        self.frames.append(frame.encode() if isinstance(frame, str) else frame)
        assert isinstance(frame, str), "the server answers in text frames"
        message: dict[str, Any] = json.loads(frame)
        return message

    def exchange(self, raw: bytes) -> list[dict[str, Any]]:
        self._probes += 1
        probe = f"probe-{self._probes}"
        self.send(raw)
        self.ws.send(line({"type": "toolkit/list/req", "id": probe}).decode())
        caused: list[dict[str, Any]] = []
        while True:
            message = self._read()
            if message.get("req_id") == probe and message["type"] == "toolkit/list/resp":
                return caused
            caused.append(message)

    def close(self) -> str:
        self._stack.close()
        return ""


def _handshake_message(session_id: str | None) -> bytes:
    message: dict[str, Any] = {"type": "handshake/req", "id": "hello", "capabilities": ["toolkits"]}
    if session_id is not None:
        message["session_id"] = session_id
    return line(message)


def assert_error(message: dict[str, Any], code: str, req_id: str | None = None) -> None:
    """A well-formed `error` message: the spec's fields in order, value-free details."""
    assert list(message) == ERROR_FIELDS, message
    assert message["type"] == "error" and message["code"] == code, message
    assert message["version"] == PROTOCOL_VERSION
    assert isinstance(message["id"], str) and len(message["id"]) == 36
    assert isinstance(message["ts"], float)
    assert isinstance(message["req_id"], str)
    assert isinstance(message["message"], str) and message["message"]
    assert isinstance(message["details"], list)
    for detail in message["details"]:
        assert isinstance(detail, dict) and set(detail) <= {"pointer", "keyword", "limit", "max"}
    if req_id is not None:
        assert message["req_id"] == req_id, message


# -- the store -------------------------------------------------------------------------------


def counts(vault: Vault) -> dict[str, int]:
    tables = {
        "config_versions": ConfigVersion,
        "current_configs": CurrentConfig,
        "sessions": SessionRow,
        "audit_events": AuditEvent,
    }
    with vault.store.engine.connect() as db:
        return {
            name: int(db.execute(select(func.count()).select_from(model)).scalar_one())
            for name, model in tables.items()
        }


def config_rows(vault: Vault) -> list[tuple[Any, ...]]:
    """Every config version and current pointer, as plain tuples (for before/after)."""
    with vault.store.engine.connect() as db:
        versions = db.execute(select(ConfigVersion).order_by(ConfigVersion.id)).all()
        pointers = db.execute(
            select(CurrentConfig).order_by(CurrentConfig.session_id, CurrentConfig.toolkit_name)
        ).all()
    return [tuple(row) for row in versions] + [tuple(row) for row in pointers]


def audit_actions(vault: Vault) -> list[str]:
    with vault.store.engine.connect() as db:
        return list(db.execute(select(AuditEvent.action).order_by(AuditEvent.seq)).scalars())


# -- leak scanning -------------------------------------------------------------------------


def encodings(secret: str | bytes) -> dict[str, bytes]:
    """Every spelling of a secret worth looking for in bytes someone could read.

    Base64 is looked for at each of the three alignments a value can have inside a longer
    encoded string (only the characters that do not depend on the neighbours).
    """
    raw = secret.encode() if isinstance(secret, str) else secret
    found = {
        "raw": raw,
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "url": urllib.parse.quote(raw, safe="").encode(),
        "url/": urllib.parse.quote(raw).encode(),  # a path keeps its slashes
        "url+": urllib.parse.quote_plus(raw).encode(),
        "json": json.dumps(raw.decode(errors="replace")).encode()[1:-1],
        "repr": repr(raw)[2:-1].encode(),
    }
    for offset in range(3):
        for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            encoded = encode(b"\0" * offset + raw)
            start = -(-offset * 8 // 6)  # first character with no bit of the bytes before
            end = (offset + len(raw)) * 8 // 6  # past the last with no bit of those after
            found[f"{name}@{offset}"] = encoded[start:end]
    return found


def scan(blobs: Iterable[tuple[str, bytes]], secrets: dict[str, str | bytes]) -> list[str]:
    """Where any spelling of any secret occurs: `[]` means no leak."""
    needles = [
        (label, kind, needle)
        for label, secret in secrets.items()
        for kind, needle in encodings(secret).items()
        if len(needle) >= 8
    ]
    hits = []
    for where, data in blobs:
        for label, kind, needle in needles:
            if needle in data:
                hits.append(f"{label} ({kind}) in {where}")
    return hits


def files_under(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes()
