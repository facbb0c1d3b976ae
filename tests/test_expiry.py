"""Credentials that end (issue 41): an expiry told by an `x-verify` answer (a header, a JSON
field), by a plugin's `verify`, or by a secret that is a JWT is kept as a public fact of the
version, listed as `expires_at`, reminded of ahead of time (`credential_expiring`, once),
and once it has passed the toolkit is unconfigured and its session told, with a link to
renew it. Time is the vault's clock, moved by the tests; nothing sleeps."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any, ClassVar

import pytest
from sqlalchemy import select

from http_support import QuietHandler, loopback_http
from toolkit_vault.access.principals import Principal
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.expiry import EXPIRES_KEY, jwt_expiry, read_expiry
from toolkit_vault.core.reminders import ExpiryReminders
from toolkit_vault.core.vault import Vault
from toolkit_vault.core.verification import VerifyPolicy
from toolkit_vault.protocol import Message
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, ConfigVersion
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource
from toolkit_vault.transports.http_api import create_app

AGENT = Principal("local", "agent")
KEY = "tkv-canary-expiry-key-2c8f"
LOOPBACK = VerifyPolicy.parse("127.0.0.0/8")
SOURCE = ToolkitSource(SourceKind.ENTRY_POINT, "expiry-test")
DAY = 86400.0
T0 = float(int(time.time()))


class KeyApi(QuietHandler):
    """`/me` accepts KEY and says when it ends: as the header `X-Key-Expires` (an HTTP
    date) and in its body at /key/expires_at (ISO 8601)."""

    ends: ClassVar[float] = T0 + 10 * DAY

    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == f"Bearer {KEY}"
        body = json.dumps({"key": {"expires_at": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(KeyApi.ends))}}).encode()  # fmt: skip
        self.send_response(200 if ok else 401)
        self.send_header("X-Key-Expires", formatdate(KeyApi.ends, usegmt=True))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def key_api() -> Iterator[str]:
    with loopback_http(KeyApi) as base:
        yield base


class Seen:
    """A toolkit that keeps the config it was initialized with."""

    configs: ClassVar[list[dict[str, Any]]] = []

    def initialize(self, config: dict[str, Any]) -> None:
        Seen.configs.append(config)


def declared(name: str, expires: dict[str, str] | None) -> type:
    verify: dict[str, Any] = {"url": "{base}/me", "secret": "api_key", "header": "Authorization",
                              "value": "Bearer {secret}"}  # fmt: skip
    if expires is not None:
        verify["expires"] = expires
    schema = {
        "type": "object",
        "properties": {
            "base": {"type": "string"},
            "api_key": {"type": "string", "writeOnly": True},
        },
        "required": ["base", "api_key"],
        "additionalProperties": False,
        "x-verify": verify,
    }

    class Declared(Seen):
        definition: ClassVar[dict[str, Any]] = {"name": name, "schema": schema, "tools": ["call"]}

    return Declared


class JwtHolder(Seen):
    definition: ClassVar[dict[str, Any]] = {
        "name": "jwt-holder",
        "schema": {"type": "object", "properties": {"token": {"type": "string", "x-secret": True}}},
        "tools": ["call"],
    }


class PluginDated(Seen):
    definition: ClassVar[dict[str, Any]] = {
        "name": "plugin-dated",
        "schema": {"type": "object", "properties": {"key": {"type": "string", "x-secret": True}}},
        "tools": ["call"],
    }

    def verify(self, config: dict[str, Any]) -> float:
        return T0 + 3 * DAY


def jwt(exp: float) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': 'x', 'exp': int(exp)})}.c2ln"


@pytest.fixture
def clocked(vault: Vault) -> Vault:
    vault.verify_policy = LOOPBACK
    now = [T0]
    vault.clock = lambda: now[0]
    vault.now = now  # type: ignore[attr-defined]  (the tests move it)
    Seen.configs.clear()
    return vault


def send(conn: A2EConnection, message: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(conn.handle_raw(json.dumps(message))[0]))


def session(
    vault: Vault, heard: list[Message] | None = None, resume: str | None = None
) -> A2EConnection:
    conn = connect(vault, AGENT, heard.append if heard is not None else None)
    hello: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
    send(conn, hello | ({"session_id": resume} if resume else {}))
    return conn


def configure(conn: A2EConnection, name: str, config: dict[str, Any]) -> dict[str, Any]:
    return send(conn, {"type": "toolkit/configure/req", "toolkit_name": name, "config": config})


def listed(conn: A2EConnection) -> dict[str, dict[str, Any]]:
    answer = send(conn, {"type": "toolkit/list/req"})
    return {t["name"]: t for t in answer["toolkits"]}


def reminders_in_trail(vault: Vault) -> list[Any]:
    with vault.store.engine.connect() as db:
        rows = db.execute(select(AuditEvent).where(AuditEvent.action == "credential_expiring"))
        return list(rows)


@pytest.mark.parametrize("where", [{"header": "X-Key-Expires"}, {"json": "/key/expires_at"}])
def test_an_expiry_the_check_tells_is_kept_listed_and_never_seen_by_the_toolkit(
    clocked: Vault, home: VaultSettings, key_api: str, where: dict[str, str]
) -> None:
    clocked.registry.register(declared("dated", where), SOURCE)
    clocked.registry.register(declared("undated", None), SOURCE)
    conn = session(clocked)
    assert configure(conn, "dated", {"base": key_api, "api_key": KEY})["status"] == "ok"
    assert configure(conn, "undated", {"base": key_api, "api_key": KEY})["status"] == "ok"
    toolkits = listed(conn)
    assert toolkits["dated"]["expires_at"] == int(KeyApi.ends)
    assert "expires_at" not in toolkits["undated"]  # a spec-only client sees the spec's shape
    assert "expires_at" not in toolkits["filesystem"]
    with clocked.store.engine.connect() as db:
        publics = {v.toolkit_name: json.loads(v.public_config) for v in
                   db.execute(select(ConfigVersion))}  # fmt: skip
    assert publics["dated"] == {"base": key_api, EXPIRES_KEY: int(KeyApi.ends)}
    assert EXPIRES_KEY not in publics["undated"]
    assert all(EXPIRES_KEY not in seen for seen in Seen.configs)  # the toolkit never sees it
    other = open_vault(home)  # another process resumes: read from the stored version
    other.clock = clocked.clock
    other.registry.register(declared("dated", where), SOURCE)
    again = session(other, resume=conn.session_id)
    assert listed(again)["dated"]["expires_at"] == int(KeyApi.ends)
    other.store.engine.dispose()


def test_a_jwt_s_exp_and_a_plugin_s_answer_are_expiries(clocked: Vault) -> None:
    clocked.registry.register(JwtHolder, SOURCE)
    clocked.registry.register(PluginDated, SOURCE)
    conn = session(clocked)
    assert configure(conn, "jwt-holder", {"token": jwt(T0 + 2 * DAY)})["status"] == "ok"
    assert configure(conn, "plugin-dated", {"key": KEY})["status"] == "ok"
    toolkits = listed(conn)
    assert toolkits["jwt-holder"]["expires_at"] == int(T0 + 2 * DAY)
    assert toolkits["plugin-dated"]["expires_at"] == int(T0 + 3 * DAY)
    expired = configure(conn, "jwt-holder", {"token": jwt(T0 - 60)})
    assert expired["status"] == "error" and "expired" in expired["message"]


def test_reminded_once_ahead_then_ended_with_a_status_event_and_a_renewal_link(
    clocked: Vault, home: VaultSettings, key_api: str
) -> None:
    create_app(clocked, open_provider(home))  # mounts the intake: a renewal gets a link
    clocked.registry.register(declared("dated", {"header": "X-Key-Expires"}), SOURCE)
    heard: list[Message] = []
    conn = session(clocked, heard)
    assert configure(conn, "dated", {"base": key_api, "api_key": KEY})["status"] == "ok"
    reminders = ExpiryReminders(clocked, ahead=7 * DAY)
    now: list[float] = clocked.now  # type: ignore[attr-defined]
    assert reminders.round() == [] and reminders_in_trail(clocked) == []  # ten days left
    now[0] = KeyApi.ends - 6 * DAY
    assert reminders.round() == [f"{conn.session_id}/dated"]
    assert reminders.round() == []  # once
    (reminder,) = reminders_in_trail(clocked)
    details = (
        reminder.details if isinstance(reminder.details, dict) else json.loads(reminder.details)
    )
    assert details["expires_at"] == int(KeyApi.ends) and reminder.version == 1
    assert KEY not in json.dumps(details)
    heard.clear()
    now[0] = KeyApi.ends + 1
    reminders.round()
    (event,) = [e for e in heard if getattr(e, "toolkit_name", "") == "dated"]
    assert event.configured is False and event.status == "error"  # type: ignore[attr-defined]
    assert "expired" in event.message and "renew" in event.message  # type: ignore[attr-defined]
    assert "/console/intake" in (event.intake_url or "")  # type: ignore[attr-defined]
    assert listed(conn)["dated"]["configured"] is False
    resumed = session(clocked, resume=conn.session_id)  # a handshake tries again: refused
    assert listed(resumed)["dated"]["configured"] is False
    assert len(reminders_in_trail(clocked)) == 1


def test_reading_expiries() -> None:
    assert read_expiry("Tue, 01 Jan 2030 00:00:00 GMT") == 1893456000
    assert read_expiry("2030-01-01T00:00:00Z") == 1893456000
    assert read_expiry(1893456000000) == 1893456000  # milliseconds
    assert read_expiry("2030-01-01T00:00:00") is None  # no zone: not guessed
    assert read_expiry(True) is None and read_expiry("soon") is None
    assert jwt_expiry({"/t": jwt(1893456000), "/k": "not.a.jwt"}) == 1893456000
