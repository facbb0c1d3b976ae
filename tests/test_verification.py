"""Credential checks before a version is stored (issue 41): a plugin's `verify(config)` and
a schema's `x-verify` request, against a real HTTP server on loopback, over A2E, on SQLite
and PostgreSQL; and the request's SSRF rules (private addresses, redirects, the deadline)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from http_support import QuietHandler, loopback_http
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.core.verification import (
    CredentialRejected,
    PluginChecks,
    VerifyPolicy,
    verify_credential,
)
from toolkit_vault.errors import SchemaRefused
from toolkit_vault.schema import compile_schema
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, ConfigVersion
from toolkit_vault.toolkits.registry import (
    RegisteredToolkit,
    SourceKind,
    ToolkitSource,
    coerce_definition,
)
from toolkit_vault.transports.http_api import create_app

AGENT = Principal("local", "agent")
GOOD = "tkv-canary-verify-good-4b1e"
BAD = "tkv-canary-verify-bad-9d02"
LOOPBACK = VerifyPolicy.parse("127.0.0.0/8")
SOURCE = ToolkitSource(SourceKind.ENTRY_POINT, "verification-test")


class Upstream(QuietHandler):
    """The API a credential is checked against: `/me` wants `Authorization: Bearer GOOD`,
    `/q` wants `?key=GOOD`; `/moved` redirects to `/me`; `/slow` answers after 3 s."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Upstream.seen.append(self.path.split("?")[0])
        if self.path.startswith("/slow"):
            time.sleep(3)
        if self.path.startswith("/moved"):
            self._answer(302, {"Location": "/me"})
        elif self.path == f"/q?key={GOOD}" or self.headers.get("Authorization") == f"Bearer {GOOD}":
            self._answer(200)
        else:
            self._answer(401)

    def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
        body = b'{"echo": "' + self.path.encode() + b'"}'
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with loopback_http(Upstream) as base:
        yield base


def schema(verify: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "base": {"type": "string"},
            "path": {"type": "string"},
            "api_key": {"type": "string", "writeOnly": True},
        },
        "required": ["base", "api_key"],
        "x-verify": verify,
    }


BEARER = {"url": "{base}/{path}", "secret": "api_key", "header": "Authorization",
          "value": "Bearer {secret}"}  # fmt: skip


def declared(name: str, verify: dict[str, Any]) -> type:
    class Declared:
        definition: ClassVar[dict[str, Any]] = {
            "name": name, "description": "checked by x-verify", "schema": schema(verify),
            "tools": ["call"],
        }  # fmt: skip

        def initialize(self, config: dict[str, Any]) -> None:
            return None

    return Declared


class PluginChecked:
    """A plugin with its own `verify(config)`: the key must be GOOD; `slow` never answers
    in time; `raise` raises with the key in its text."""

    definition: ClassVar[dict[str, Any]] = {
        "name": "plugin-checked",
        "description": "checked by its plugin",
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "x-secret": True}},
        },
        "tools": ["call"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        return None

    def verify(self, config: dict[str, Any]) -> bool:
        if config["api_key"] == "slow":
            time.sleep(2)
        if config["api_key"] == "raise":
            raise RuntimeError(f"refused {BAD}")
        return bool(config["api_key"] == GOOD)


def registered(vault: Vault, factory: type) -> RegisteredToolkit:
    return vault.registry.register(factory, SOURCE)


def send(conn: A2EConnection, message: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(conn.handle_raw(json.dumps(message))[0]))


def configure(vault: Vault, name: str, config: dict[str, Any]) -> dict[str, Any]:
    conn = connect(vault, AGENT)
    send(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    return send(conn, {"type": "toolkit/configure/req", "toolkit_name": name, "config": config})


def stored(vault: Vault) -> list[Any]:
    with vault.store.engine.connect() as db:
        return list(db.execute(select(ConfigVersion)))


def audit_text(vault: Vault) -> str:
    with vault.store.engine.connect() as db:
        rows = db.execute(select(AuditEvent)).all()
    return "\n".join(repr(tuple(row)) for row in rows)


def test_a_check_that_passes_stores_the_version(vault: Vault, upstream: str) -> None:
    vault.verify_policy = LOOPBACK
    registered(vault, declared("bearer", BEARER))
    answer = configure(vault, "bearer", {"base": upstream, "path": "me", "api_key": GOOD})
    assert answer["status"] == "ok", answer
    assert len(stored(vault)) == 1


def test_a_check_that_fails_stores_nothing_and_says_why(vault: Vault, upstream: str) -> None:
    vault.verify_policy = LOOPBACK
    registered(vault, declared("bearer", BEARER))
    answer = configure(vault, "bearer", {"base": upstream, "path": "me", "api_key": BAD})
    assert answer["type"] == "toolkit/configure/resp"
    assert answer["status"] == "error"
    assert answer["message"] == "the credential check failed: HTTP 401 from 127.0.0.1"
    assert stored(vault) == []
    trail = audit_text(vault)
    assert "configure_refused" in trail and "CredentialRejected" in trail
    assert BAD not in trail and BAD not in json.dumps(answer)


def test_the_secret_as_a_query_parameter(vault: Vault, upstream: str) -> None:
    vault.verify_policy = LOOPBACK
    query = {"url": "{base}/q", "secret": "api_key", "query": "key", "expect": [200, 204]}
    registered(vault, declared("query", query))
    assert configure(vault, "query", {"base": upstream, "api_key": GOOD})["status"] == "ok"
    answer = configure(vault, "query", {"base": upstream, "api_key": BAD})
    assert answer["status"] == "error" and BAD not in answer["message"]
    assert len(stored(vault)) == 1


def test_loopback_and_private_addresses_are_refused_by_default(vault: Vault, upstream: str) -> None:
    registered(vault, declared("bearer", BEARER))
    Upstream.seen.clear()
    private = ("http://10.1.2.3", "http://169.254.169.254", "http://[::1]:9", "http://localhost:9")
    for base in (upstream, *private):  # an address, or a name that resolves to one
        answer = configure(vault, "bearer", {"base": base, "path": "me", "api_key": GOOD})
        assert answer["status"] == "error", base
        assert "its address is not public" in answer["message"]
    assert Upstream.seen == []  # nothing was asked: refused before connecting
    assert stored(vault) == []


def test_a_redirect_is_not_followed(vault: Vault, upstream: str) -> None:
    vault.verify_policy = LOOPBACK
    registered(vault, declared("bearer", BEARER))
    Upstream.seen.clear()
    answer = configure(vault, "bearer", {"base": upstream, "path": "moved", "api_key": GOOD})
    assert answer["message"] == (
        "the credential check failed: HTTP 302 from 127.0.0.1 (redirects are not followed)"
    )
    assert Upstream.seen == ["/moved"]
    assert stored(vault) == []


def test_a_slow_endpoint_is_cut_at_the_deadline(vault: Vault, upstream: str) -> None:
    vault.verify_policy = VerifyPolicy(LOOPBACK.allow, deadline=0.5)
    registered(vault, declared("bearer", BEARER))
    started = time.monotonic()
    answer = configure(vault, "bearer", {"base": upstream, "path": "slow", "api_key": GOOD})
    assert time.monotonic() - started < 2
    assert answer["message"] == "the credential check did not answer within 0.5 s (127.0.0.1)"
    assert stored(vault) == []


def test_a_url_value_cannot_add_a_path_or_host(upstream: str) -> None:
    factory = declared("bearer", BEARER)
    toolkit = RegisteredToolkit(coerce_definition(factory.definition), factory, SOURCE)
    Upstream.seen.clear()  # "../moved" unencoded would be "/moved", a redirect: refused
    verify_credential(toolkit, {"base": upstream, "path": "../moved", "api_key": GOOD}, LOOPBACK)
    assert Upstream.seen == ["/..%2Fmoved"]


def test_the_plugin_s_own_check(vault: Vault) -> None:
    vault.verify_policy = VerifyPolicy(deadline=0.5)
    registered(vault, PluginChecked)
    assert configure(vault, "plugin-checked", {"api_key": GOOD})["status"] == "ok"
    refused = configure(vault, "plugin-checked", {"api_key": BAD})
    assert refused["message"] == "the credential check failed: the toolkit refused it"
    raised = configure(vault, "plugin-checked", {"api_key": "raise"})
    assert raised["message"] == "the credential check failed (RuntimeError)"
    late = configure(vault, "plugin-checked", {"api_key": "slow"})
    assert late["message"] == "the credential check did not answer within 0.5 s"
    assert len(stored(vault)) == 1
    assert BAD not in audit_text(vault)


@pytest.mark.parametrize(
    ("verify", "why"),
    [
        ({**BEARER, "url": "{base}/{api_key}"}, "not a public property"),
        ({**BEARER, "secret": "base"}, "/secret"),
        ({**BEARER, "value": "Bearer {base}"}, "/value"),
        ({**BEARER, "header": "Host"}, "belongs to the request"),
        ({**BEARER, "query": "key"}, "exactly one of header or query"),
        ({**BEARER, "expect": 302}, "/expect"),
        ({**BEARER, "url": "ftp://{base}"}, "/url"),
        ({**BEARER, "url": "{base!r}/x"}, "plain {name}"),
        ({**BEARER, "method": "DELETE"}, "/method"),
    ],
)
def test_an_x_verify_that_could_leak_is_refused_at_compile(
    verify: dict[str, Any], why: str
) -> None:
    with pytest.raises(SchemaRefused, match="x-verify") as refused:
        compile_schema(schema(verify))
    assert why in refused.value.message


def test_policy_ranges() -> None:
    import ipaddress

    assert not VerifyPolicy().permits(ipaddress.ip_address("127.0.0.1"))
    assert not VerifyPolicy().permits(ipaddress.ip_address("::ffff:10.0.0.1"))
    assert VerifyPolicy().permits(ipaddress.ip_address("93.184.216.34"))
    assert VerifyPolicy.parse("10.0.0.0/8").permits(ipaddress.ip_address("::ffff:10.0.0.1"))


def test_the_intake_form_shows_the_failed_check_and_the_link_stays_good(
    vault: Vault, home: VaultSettings, upstream: str
) -> None:
    vault.verify_policy = LOOPBACK
    registered(vault, declared("bearer", BEARER))
    token = create_token(vault.store, "agent", "verifying")[1]
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(vault, open_provider(home))
    with TestClient(app, base_url="https://testserver") as client:
        hello = client.post("/a2e", json={"type": "handshake/req", "capabilities": ["toolkits"]},
                            headers=auth).json()  # fmt: skip
        public = {"base": upstream, "path": "me"}
        ask = {"type": "toolkit/configure/req", "toolkit_name": "bearer", "config": public}
        answer = client.post("/a2e", json=ask, headers=auth | {"A2E-Session": hello["session_id"]})
        url = answer.json()["intake_url"]
        path, link = url[url.index("/console/") :], url.partition("?link=")[2]

        def submit(key: str) -> Any:
            page = client.get(path)
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None, page.text
            form = {"csrf": csrf.group(1), "link": link, **public, "api_key": key}
            form = {("/" + k if k not in ("csrf", "link") else k): v for k, v in form.items()}
            return client.post("/console/intake", data=form)

        refused = submit(BAD)
        assert refused.status_code == 422
        assert "the credential check failed: HTTP 401 from 127.0.0.1: nothing was saved" in (
            refused.text
        )
        assert BAD not in refused.text
        assert [v.status for v in stored(vault)] == ["intake"]  # only the link's own row
        saved = submit(GOOD)
        assert saved.status_code == 200 and "Settings saved" in saved.text
    assert BAD not in audit_text(vault) and "intake_refused" in audit_text(vault)


class SpecChecked:
    """The spec's plugin shape (`_list_toolkits`, `_configure_toolkit`) with `verify`."""

    def _list_toolkits(self, msg: Any) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"api_key": {"type": "string", "x-secret": True}}}
        toolkit = {"name": "spec-checked", "schema": schema, "tools": ["ping"]}
        return {"type": "toolkit/list/resp", "req_id": msg.id, "toolkits": [toolkit]}

    def _configure_toolkit(self, msg: Any) -> dict[str, Any]:
        return {"type": "toolkit/configure/resp", "toolkit_name": msg.toolkit_name, "status": "ok"}

    def verify(self, config: dict[str, Any]) -> bool:
        return bool(config.get("api_key") == GOOD)


def test_a_spec_plugin_s_own_check(vault: Vault) -> None:
    vault.registry.register_plugin(SpecChecked, SOURCE)
    refused = configure(vault, "spec-checked", {"api_key": BAD})
    assert refused["message"] == "the credential check failed: the toolkit refused it"
    assert stored(vault) == []
    assert configure(vault, "spec-checked", {"api_key": GOOD})["status"] == "ok"


class Counted:
    """A toolkit without a check of its own that counts its instances."""

    made: ClassVar[int] = 0
    definition: ClassVar[dict[str, Any]] = {
        "name": "counted",
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "x-secret": True}},
        },
        "tools": ["call"],
    }

    def __init__(self) -> None:
        Counted.made += 1

    def initialize(self, config: dict[str, Any]) -> None:
        return None


def test_who_has_a_check_is_looked_up_once_per_registered_toolkit(vault: Vault) -> None:
    registered(vault, Counted)
    Counted.made = 0
    for _ in range(3):
        assert configure(vault, "counted", {"api_key": GOOD})["status"] == "ok"
    assert Counted.made == 3 + 1  # one instance per initialization, one to look for `verify`


def test_a_replaced_toolkit_is_looked_at_again() -> None:
    """The live registry replaces a re-imported toolkit by a new object: what was learnt of
    the old one (no check) must not skip the new one's check."""
    checks = PluginChecks()
    without = RegisteredToolkit(coerce_definition(Counted.definition), Counted, SOURCE)
    assert checks.instance(without) is None
    assert checks.instance(without) is None

    class Replaced(Counted):
        def verify(self, config: dict[str, Any]) -> bool:
            return False

    replaced = RegisteredToolkit(coerce_definition(Counted.definition), Replaced, SOURCE)
    assert isinstance(checks.instance(replaced), Replaced)
    with pytest.raises(CredentialRejected, match="the toolkit refused it"):
        verify_credential(replaced, {"api_key": GOOD}, LOOPBACK, checks)


def test_a_name_rebound_to_loopback_after_the_check_is_not_followed(
    vault: Vault, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: `rebind.test` answers an address the operator allowed when the check
    resolves it, then loopback (where the upstream listens) to anyone who asks again. The
    request must go to the address that was checked (unroutable here: it fails), never
    to the second answer."""
    import socket

    real = socket.getaddrinfo
    asked: list[str] = []
    port = int(upstream.rsplit(":", 1)[1])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        asked.append(host)
        address = "198.51.100.7" if len(asked) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    vault.verify_policy = VerifyPolicy(VerifyPolicy.parse("198.51.100.7/32").allow, deadline=0.5)
    registered(vault, declared("bearer", BEARER))
    Upstream.seen.clear()
    base = f"http://rebind.test:{port}"
    answer = configure(vault, "bearer", {"base": base, "path": "me", "api_key": GOOD})
    assert answer["status"] == "error", answer
    assert "rebind.test" in answer["message"]
    assert Upstream.seen == []  # loopback was never reached
    assert asked == ["rebind.test"]  # resolved once, by the check
    assert stored(vault) == []
