"""Refresh once across processes: two real `toolkit-vault serve` processes on one database
(SQLite, and PostgreSQL), 50 agents opening new sessions of one principal at the same
time, half on each server, after the principal's OAuth token expired: exactly one refresh
request reaches the authorization server, and every session is configured.

The consent is driven over plain HTTP (the browser test does it in Chromium).
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from cli_support import spawn_cli
from oauth_server import AuthServer
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource

from web_support import Server, agent, free_port, web_registry

OAUTH_PLUGINS = Path(__file__).resolve().parents[1] / "oauth_plugins"
AGENTS = 50


def _calendar() -> ModuleType:
    """The OAuth test toolkit, imported by path (never on sys.path: see the browser test)."""
    found = sys.modules.get("tkv_oauth_plugins")
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location(
        "tkv_oauth_plugins", OAUTH_PLUGINS / "tkv_oauth_plugins.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tkv_oauth_plugins"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
def vault(
    home: VaultSettings, auth: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Vault]:
    monkeypatch.setenv("TKV_OAUTH_ISSUER", auth.issuer)
    registry = web_registry()
    source = ToolkitSource(SourceKind.ENTRY_POINT, "test")
    registry.register(_calendar().CalendarToolkit, source)
    opened = open_vault(home, registry)
    yield opened
    opened.store.engine.dispose()


@pytest.fixture
def servers(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path, auth: AuthServer
) -> Iterator[list[Server]]:
    env = {
        **cli_env,
        "TKV_OAUTH_ISSUER": auth.issuer,
        "PYTHONPATH": os.pathsep.join([str(OAUTH_PLUGINS), cli_env.get("PYTHONPATH", "")]),
    }
    with contextlib.ExitStack() as stack:
        running = []
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            running.append(stack.enter_context(_serve(env, tmp_path / name, vault)))
        yield running


@contextlib.contextmanager
def _serve(env: dict[str, str], workdir: Path, vault: Vault) -> Iterator[Server]:
    """`web_support.serve`, with room for every agent of the principal at once."""
    port = free_port()
    proofs = workdir / "proofs"
    proofs.mkdir()
    env = {**env, "TKV_WEB_PROOF_DIR": str(proofs)}
    log = workdir / "serve.log"
    args = ["serve", "--port", str(port), "--rate", "1000"]
    args += ["--connections-per-principal", str(AGENTS)]
    with log.open("w") as out:
        proc = spawn_cli(args, env, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        try:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            yield Server(base, vault, log, proofs)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def consent_over_http(server: Server, intake_url: str) -> None:
    """The person's browser, as plain requests: the intake page, Connect, the consent."""
    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        page = browser.get(intake_url)
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, page.text
        link = parse_qs(urlsplit(intake_url).query)["link"][0]
        # the CSRF cookie is Secure: a browser sends it to 127.0.0.1, httpx's jar would not
        nonce = "; ".join(c.split(";")[0] for c in page.headers.get_list("set-cookie"))
        started = browser.post(
            server.base + "/console/oauth/start",
            data={"csrf": found.group(1), "link": link},
            headers={"Origin": server.base, "Cookie": nonce},
        )
        assert started.status_code == 200, started.text
        moved = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', started.text)
        assert moved, started.text
        authorize = html.unescape(moved.group(1))
        consent = browser.post(authorize, data={"confirm": "yes"})
        assert consent.status_code == 302, consent.text
        flow = "; ".join(c.split(";")[0] for c in started.headers.get_list("set-cookie"))
        done = browser.get(consent.headers["location"], headers={"Cookie": flow})
        assert "Settings saved" in done.text, done.text


def test_fifty_sessions_on_two_servers_refresh_an_expired_token_once(
    servers: list[Server], auth: AuthServer
) -> None:
    one, _ = servers
    token = one.token("agent", "crowd")
    with agent(one, token) as bot:
        answer = bot.configure("calendar", {"calendar": "team"}, scope="principal")
        auth.knobs.expires_in = 62  # refreshed by any initialization two seconds from now
        consent_over_http(one, answer["intake_url"])
        assert bot.next()["configured"] is True  # the status event
        assert bot.configured()["calendar"] is True
    assert auth.token_calls == 1
    auth.knobs.expires_in = 3600
    auth.knobs.token_delay = 0.3
    time.sleep(2.5)

    barrier = threading.Barrier(AGENTS)
    results: list[bool] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def hello(server: Server) -> None:
        try:
            barrier.wait(timeout=60)
            with agent(server, token) as each:
                configured = each.configured()["calendar"]
            with lock:
                results.append(configured)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=hello, args=(servers[i % 2],)) for i in range(AGENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    took = time.monotonic() - started
    assert not failures, failures[:3]
    assert results == [True] * AGENTS
    print(f"{AGENTS} sessions on 2 servers: token requests {auth.token_calls}, took {took:.1f}s")
    assert (auth.token_calls, auth.refresh_calls) == (2, 1)  # the connect, one refresh
