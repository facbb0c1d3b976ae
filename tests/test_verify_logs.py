"""Issue 48, item 1: an `x-verify` secret never reaches a log. The check's request carries
the key in its URL (`?key=`); the HTTP client logged that URL at INFO, whether the check
passed or failed, and for a key a person typed into the intake form. Every secret of an
incoming config is now registered for redaction the moment it is split, and the HTTP
client loggers are held at WARNING in `serve` and `stdio`: checked here on a real `serve`
and `stdio`, their stderr and their log copy (every record, every level), on SQLite and
PostgreSQL."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from starlette.testclient import TestClient

from cli_support import run_cli, spawn_cli
from http_support import QuietHandler, loopback_http
from toolkit_vault import logs
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.core.verification import VerifyPolicy
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource
from toolkit_vault.transports.http_api import create_app

pytestmark = pytest.mark.one_database

HERE = Path(__file__).parent
CHECK_PLUGINS = HERE / "check_plugins"  # not on this process's path: no other test sees it
_loaded = importlib.util.spec_from_file_location(
    "tkv_check_plugins", CHECK_PLUGINS / "tkv_check_plugins.py"
)
assert _loaded is not None and _loaded.loader is not None
check_plugins = importlib.util.module_from_spec(_loaded)
_loaded.loader.exec_module(check_plugins)
QueryChecked = check_plugins.QueryChecked
AGENT = Principal("local", "agent")
RUNNING = re.compile(r"running on http://127\.0\.0\.1:(\d+)")
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}


def canary(label: str) -> str:
    """A fresh canary: the redaction list is the process's, so none is known beforehand."""
    return f"tkv-canary-{label}-{uuid.uuid4().hex[:12]}"


class KeyApi(QuietHandler):
    """`GET /v1/me?key=K` answers 200 for the keys in `good`, else 401."""

    good: ClassVar[set[str]] = set()

    def do_GET(self) -> None:
        key = self.path.partition("?key=")[2]
        self.send_response(200 if self.path.startswith("/v1/me?") and key in self.good else 401)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with loopback_http(KeyApi) as base:
        yield base


def configure(base_url: str, key: str | None) -> dict[str, Any]:
    config = {"base_url": base_url} | ({} if key is None else {"api_key": key})
    return {"type": "toolkit/configure/req", "toolkit_name": "query-checked", "config": config}


def test_an_incoming_secret_is_redacted_from_the_moment_it_is_split(
    vault: Vault, home: VaultSettings, upstream: str
) -> None:
    """A key the check refuses is never stored nor decrypted, yet any log line holding it
    (the check's request URL) is redacted: over A2E and through the intake form."""
    vault.verify_policy = VerifyPolicy.parse("127.0.0.0/8")
    vault.registry.register(QueryChecked, ToolkitSource(SourceKind.ENTRY_POINT, "issue-48"))
    refused, typed = canary("a2e-refused"), canary("form-refused")
    conn = connect(vault, AGENT)
    conn.handle_raw(json.dumps(HELLO))
    answer = json.loads(conn.handle_raw(json.dumps(configure(upstream, refused)))[0])
    assert answer["status"] == "error", answer
    assert logs.redact(f"GET {upstream}/v1/me?key={refused}") == (
        f"GET {upstream}/v1/me?key=[REDACTED]"
    )
    token = create_token(vault.store, "agent", "typing")[1]
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(
        create_app(vault, open_provider(home)), base_url="https://testserver"
    ) as client:
        hello = client.post("/a2e", json=HELLO, headers=auth).json()
        asked = client.post(
            "/a2e",
            json=configure(upstream, None),
            headers=auth | {"A2E-Session": hello["session_id"]},
        ).json()
        url = asked["intake_url"]
        page = client.get(url[url.index("/console/") :])
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None, page.text
        form = {"csrf": csrf.group(1), "link": url.partition("?link=")[2],
                "/base_url": upstream, "/api_key": typed}  # fmt: skip
        assert client.post("/console/intake", data=form).status_code == 422
    assert logs.redact(f"key={typed}") == "key=[REDACTED]"


@contextlib.contextmanager
def serving(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """A real `toolkit-vault serve` on a free loopback port (stderr to `log_path`)."""
    with log_path.open("w") as log:
        proc = spawn_cli(["serve", "--port", "0", "--rate", "1000"], env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while not (found := RUNNING.search(log_path.read_text())):
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            base = f"http://127.0.0.1:{found.group(1)}"
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def check_env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """`cli_env` with the x-verify toolkit installed, loopback checks allowed, and a log
    copy of this test's own (read below; the session's scan reads its own directory)."""
    copies = tmp_path / "log-copy"
    copies.mkdir()
    return cli_env | {
        "PYTHONPATH": os.pathsep.join([str(CHECK_PLUGINS), cli_env["PYTHONPATH"]]),
        "TOOLKIT_VAULT_VERIFY_ALLOW": "127.0.0.0/8",
        "TOOLKIT_VAULT_LOG_COPY": str(copies),
    }


def read_logs(*paths: Path) -> str:
    return "\n".join(p.read_text() for p in paths)


def assert_no_leak(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in text, "a verify secret is in the log"
    assert "HTTP Request" not in text and "/v1/me" not in text  # no library logged the URL


def test_serve_logs_no_verify_secret_and_no_request_url(
    vault: Vault, check_env: dict[str, str], tmp_path: Path, upstream: str
) -> None:
    good, bad, typed = canary("serve-good"), canary("serve-bad"), canary("serve-typed")
    KeyApi.good.add(good)
    token = create_token(vault.store, "agent", "checking")[1]
    auth = {"Authorization": f"Bearer {token}"}
    log_path = tmp_path / "serve.log"
    with serving(check_env, log_path) as base, httpx.Client(base_url=base, timeout=30) as client:
        session = client.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        bound = auth | {"A2E-Session": session}
        assert (
            client.post("/a2e", json=configure(upstream, good), headers=bound).json()["status"]
            == "ok"
        )
        assert (
            client.post("/a2e", json=configure(upstream, bad), headers=bound).json()["status"]
            == "error"
        )
        url = client.post("/a2e", json=configure(upstream, None), headers=bound).json()[
            "intake_url"
        ]
        page = client.get(url)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None, page.text
        form = {"csrf": csrf.group(1), "link": url.partition("?link=")[2],
                "/base_url": upstream, "/api_key": typed}  # fmt: skip
        cookies = "; ".join(f"{k}={v}" for k, v in page.cookies.items())  # Secure: sent by hand
        client.cookies.clear()
        submitted = client.post(
            "/console/intake", data=form, headers={"Origin": base, "Cookie": cookies}
        )
        assert submitted.status_code == 422, submitted.text
        assert "the credential check failed: HTTP 401" in submitted.text
    copies = sorted((tmp_path / "log-copy").glob("serve-*.log"))
    assert len(copies) == 1
    copy = copies[0].read_text()
    assert '"logger":"toolkit_vault' in copy  # the copy holds the server's own records
    assert_no_leak(read_logs(log_path, *copies), [good, bad, typed])


def test_stdio_logs_no_verify_secret_and_no_request_url(
    vault: Vault, check_env: dict[str, str], tmp_path: Path, upstream: str
) -> None:
    good, bad = canary("stdio-good"), canary("stdio-bad")
    KeyApi.good.add(good)
    lines = [HELLO, configure(upstream, good), configure(upstream, bad)]
    done = run_cli(["stdio"], check_env, input="".join(json.dumps(m) + "\n" for m in lines))
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    statuses = [a.get("status") for a in answers if a["type"] == "toolkit/configure/resp"]
    assert statuses == ["ok", "error"], done.stdout
    copies = sorted((tmp_path / "log-copy").glob("stdio-*.log"))
    assert len(copies) == 1
    assert_no_leak(done.stderr + read_logs(*copies), [good, bad])
