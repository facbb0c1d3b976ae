"""Shared helpers of the adversarial suite: transports as channels, store snapshots, scans.

A `Channel` is one A2E connection that has completed its handshake, seen from outside:
`exchange(raw)` sends one raw inbound message and returns every message it caused. The
in-process `Connection` and a real `toolkit-vault stdio` process are channels today; the
HTTP and WebSocket transports become channels by adding a class and a fixture parameter.
"""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from sqlalchemy import func, select

from toolkit_vault.models import AuditEvent, ConfigVersion, CurrentConfig
from toolkit_vault.models import Session as SessionRow
from toolkit_vault.protocol import PROTOCOL_VERSION
from toolkit_vault.service import Principal, Vault

AGENT = Principal("local", "agent")
BIN = Path(sys.executable).parent
CLI = str(BIN / "toolkit-vault")
HERE = Path(__file__).parent
ERROR_FIELDS = ["type", "id", "version", "ts", "req_id", "code", "message", "details"]
TIMEOUT = 60.0


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
        self.conn = vault.connect(AGENT)
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
        self.proc = subprocess.Popen(
            argv or [CLI, "stdio"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr is None else stderr,
        )
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
