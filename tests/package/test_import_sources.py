"""`toolkits import URL`: a registry's list API, page by page, served from loopback only.

The registry here is a real HTTP server on 127.0.0.1 serving the registry's own seed data in
the shape of its list API (`{"servers": [...], "metadata": {"nextCursor": ...}}`); nothing
leaves the machine.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cli_support import run_cli
from http_support import loopback_http
from toolkit_vault.toolkits import package_sources
from toolkit_vault.toolkits.imports import PackageRefused
from toolkit_vault.toolkits.package_sources import fetch_listing

SEED = Path(__file__).resolve().parents[1] / "fixtures/mcp/registry/seed_2025_05_16.json"
PAGE = 100


class Registry(BaseHTTPRequestHandler):
    entries: ClassVar[list[Any]] = json.loads(SEED.read_text())
    seen: ClassVar[list[str]] = []
    mode = "listing"

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(self.path)
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if self.mode == "redirect":
            return self._send(302, {}, {"Location": "http://127.0.0.1:1/elsewhere"})
        if url.path == "/v0/servers/one":
            return self._send(200, self.entries[0])
        if url.path != "/v0/servers":
            return self._send(404, {"error": "not found"})
        search = query.get("search", "")
        found = [e for e in self.entries if search in (e.get("name") or "")]
        start = int(query.get("cursor", "0"))
        page = found[start : start + PAGE]
        cursor = str(start + PAGE) if start + PAGE < len(found) else None
        if self.mode == "loop":
            cursor = "0"
        self._send(200, {"servers": page, "metadata": {"nextCursor": cursor, "count": len(page)}})


@pytest.fixture
def registry() -> Iterator[str]:
    Registry.seen = []
    Registry.mode = "listing"
    with loopback_http(Registry) as url:
        yield url


def vault_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, input=None)


def test_a_registry_url_imports_every_page(
    registry: str, cli_env: dict[str, str], home: Any
) -> None:
    done = vault_cli(cli_env, "toolkits", "import", f"{registry}/v0/servers", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "mcp_registry_list"
    assert len(report["toolkits"]) == 472  # as many as the file itself gives
    assert Registry.seen == [
        "/v0/servers",
        *(f"/v0/servers?cursor={n}" for n in range(PAGE, 471, PAGE)),
    ]


def test_search_is_kept_across_pages(registry: str) -> None:
    listing = json.loads(fetch_listing(f"{registry}/v0/servers?search=io.github"))
    names = [e["name"] for e in listing["servers"]]
    assert names and all("io.github" in n for n in names)
    assert len(Registry.seen) > 1
    assert all("search=io.github" in path for path in Registry.seen)


def test_bounds_and_refusals(registry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Registry.mode = "loop"
    with pytest.raises(PackageRefused, match="the listing's cursor repeats"):
        fetch_listing(f"{registry}/v0/servers")
    Registry.mode = "listing"
    monkeypatch.setattr(package_sources, "MAX_PAGES", 2)
    with pytest.raises(PackageRefused, match="more than 2 pages"):
        fetch_listing(f"{registry}/v0/servers")
    monkeypatch.setattr(package_sources, "MAX_IMPORT_BYTES", 50_000)
    monkeypatch.setattr(package_sources, "MAX_PAGES", 100)
    with pytest.raises(PackageRefused, match="input_too_large"):
        fetch_listing(f"{registry}/v0/servers")
    with pytest.raises(PackageRefused, match="answered HTTP 404"):
        fetch_listing(f"{registry}/v1/nothing")
    Registry.mode = "redirect"
    with pytest.raises(PackageRefused, match="answered HTTP 302"):
        fetch_listing(f"{registry}/v0/servers")
    before = len(Registry.seen)
    for url, message in [
        ("http://registry.example.com/v0/servers", "only https"),
        ("ftp://127.0.0.1/x", "only https"),
        ("https://user:pw@registry.example.com/v0/servers", "user-info is not accepted"),
    ]:
        with pytest.raises(PackageRefused, match=message) as info:
            fetch_listing(url)
        assert "pw" not in info.value.message and "/v0" not in info.value.message
    assert len(Registry.seen) == before  # refused before any request


def test_a_url_answering_one_server_json(registry: str) -> None:
    data = fetch_listing(f"{registry}/v0/servers/one")
    assert json.loads(data)["name"] == Registry.entries[0]["name"]
