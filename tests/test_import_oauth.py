"""Imported remote MCP servers get `x-oauth` from their RFC 9728 protected resource
metadata, against real servers on loopback: an MCP-like resource server (werkzeug, here)
whose metadata names the authlib authorization server of `oauth_server`.

The server.json is a published one (`fixtures/mcp/registry/seed.json`, a server with one
streamable-http remote) whose remote URL is pointed at the loopback resource server.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from flask import Flask, jsonify, redirect, request

from cli_support import run_cli
from http_support import loopback_wsgi
from oauth_server import CLIENT_ID, AuthServer
from test_oauth import CALLBACK, Agent, Clock, Rig, consent
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.oauth import oauth_spec, redirect_uri
from toolkit_vault.oauth.client import OAuthFailed
from toolkit_vault.oauth.metadata import server_metadata
from toolkit_vault.oauth.registration import authorization_server_metadata, register_client
from toolkit_vault.oauth.resource import metadata_url, protected_resource, same_resource
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.import_report import describe_toolkit
from toolkit_vault.toolkits.imports import (
    DiscoveryOptions,
    PackageRefused,
    import_package,
    stored_toolkits,
)

pytestmark = pytest.mark.one_database

CORPUS = Path(__file__).resolve().parent / "fixtures" / "mcp"
NAME = "io.github.getcyphrex/cyphrex-mcp"
PUBLIC_URL = CALLBACK.removesuffix("/console/oauth/callback")
# Discovery and connecting, not running: the resource server here is no MCP server.
pytestmark = pytest.mark.usefixtures("stored_only")
# what the report says of every target it could not use (issue 48 item 8)
UNREACHABLE = (
    "{host} cannot be reached (unreachable, no usable answer, or not a public address: "
    "see --allow-private)"
)


@dataclass
class ResourceServer:
    """An MCP-like server: `/mcp` and its protected resource metadata, as `mode` says:
    `well-known` (RFC 9728 3.1), `www-authenticate` (only its 401 points to the metadata),
    `redirect` (the well-known URL redirects to the metadata) or `none`."""

    issuer: str
    mode: str = "well-known"
    resource: str | None = None  # the `resource` the metadata names (None: the server's URL)
    padding: int = 0  # bytes of filler in the metadata document
    pointer: str | None = None  # the resource_metadata URL its 401 names (None: its own)
    base: str = ""
    hits: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def metadata(self) -> dict[str, Any]:
        return {
            "resource": self.resource or self.url,
            "authorization_servers": [self.issuer],
            "scopes_supported": ["mcp.read", "mcp.write"],
            "bearer_methods_supported": ["header"],
            **({"x-padding": "a" * self.padding} if self.padding else {}),
        }

    def app(self) -> Flask:
        app = Flask("tkv_test_resource")

        @app.before_request
        def count() -> None:
            self.hits.append(request.path)

        @app.route("/.well-known/oauth-protected-resource/mcp")
        def well_known() -> Any:
            if self.mode == "redirect":
                return redirect("/elsewhere/metadata", code=302)
            if self.mode != "well-known":
                return "not found", 404
            return jsonify(self.metadata())

        @app.route("/elsewhere/metadata")
        def elsewhere() -> Any:
            return jsonify(self.metadata())

        @app.route("/mcp", methods=["GET", "POST"])
        def mcp() -> Any:
            if self.mode != "www-authenticate":
                return "method not allowed", 405
            where = self.pointer or f"{self.base}/elsewhere/metadata"
            return "unauthorized", 401, {"WWW-Authenticate": f'Bearer resource_metadata="{where}"'}

        return app


@pytest.fixture
def resource(auth: AuthServer) -> Iterator[ResourceServer]:
    server = ResourceServer(auth.issuer)
    with loopback_wsgi(server.app()) as server.base:
        yield server


def server_json(url: str) -> bytes:
    """The published server.json with its remote pointed at `url`."""
    (published,) = [
        s for s in json.loads((CORPUS / "registry" / "seed.json").read_text()) if s["name"] == NAME
    ]
    assert published["remotes"][0]["type"] == "streamable-http"
    published["remotes"][0]["url"] = url
    return json.dumps(published).encode()


def discovering(
    client_id: str | None = CLIENT_ID, *, allow_private: bool = True
) -> DiscoveryOptions:
    """As `toolkits import --allow-private` asks: the test servers listen on loopback."""
    return DiscoveryOptions(client_id=client_id, public_url=PUBLIC_URL, allow_private=allow_private)


def test_a_remote_server_gets_x_oauth_from_its_metadata(
    vault: Vault, resource: ResourceServer, auth: AuthServer
) -> None:
    report = import_package(
        vault.store, vault.registry, server_json(resource.url), "local", discovery=discovering()
    )
    (entry,) = report.toolkits
    schema = vault.registry.get(NAME).schema.schema
    assert schema["x-oauth"] == {
        "issuer": auth.issuer,
        "client_id": CLIENT_ID,
        "scopes": ["mcp.read", "mcp.write"],
        "resource": resource.url,
        "token_field": "/access_token",
    }
    assert oauth_spec(schema) is not None  # the declaration reads as any x-oauth does
    token = schema["properties"]["access_token"]
    assert (token["type"], token["writeOnly"]) == ("string", True)
    assert "access_token" in schema["required"]
    where = f"{resource.base}/.well-known/oauth-protected-resource/mcp"
    assert entry.oauth == {
        "status": "generated",
        "reason": None,
        "issuer": auth.issuer,
        "metadata": where,
        "via": "well-known",
        "client_id_from": "operator",
    }
    shown = describe_toolkit(vault.registry.get(NAME))["oauth"]
    assert (shown["issuer"], shown["discovered"]["metadata"]) == (auth.issuer, where)
    (event,) = [e for e in vault.export_audit(0) if e["action"] == "toolkit_imported"]
    assert event["details"]["oauth"]["metadata"] == where


def test_a_client_config_entry_with_a_url_is_asked_and_a_command_entry_is_not(
    vault: Vault, resource: ResourceServer, auth: AuthServer
) -> None:
    config = {
        "mcpServers": {
            "remote": {"type": "http", "url": resource.url},
            "local": {"command": "npx", "args": ["-y", "some-mcp-server"]},
        }
    }
    data = json.dumps(config).encode()
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    found = {t.name: t.oauth for t in report.toolkits}
    assert found["local"] is None
    assert found["remote"] is not None and found["remote"]["issuer"] == auth.issuer
    assert vault.registry.get("remote").schema.schema["x-oauth"]["resource"] == resource.url
    assert "x-oauth" not in vault.registry.get("local").schema.schema


def test_the_401_points_to_the_metadata_and_the_client_registers_itself(
    home: VaultSettings, resource: ResourceServer, auth: AuthServer
) -> None:
    """No well-known document, no client id: the server's 401 names its metadata (MCP
    authorization 2025-06-18), the client id comes from RFC 7591 registration, and the
    imported toolkit then connects end to end: configure answers partial with an
    intake_url, consent stores the token, the toolkit is configured."""
    resource.mode = "www-authenticate"
    auth.knobs.registration = True
    rig = Rig(auth, Clock())
    side = rig.open(open_vault(home))
    try:
        vault = side.vault
        data = server_json(resource.url)
        report = import_package(
            vault.store, vault.registry, data, "local", discovery=discovering(None)
        )
        (entry,) = report.toolkits
        assert entry.oauth is not None
        assert (entry.oauth["via"], entry.oauth["client_id_from"]) == (
            "www-authenticate",
            "registration",
        )
        (asked,) = auth.registrations
        assert asked["redirect_uris"] == [redirect_uri(CALLBACK, auth.issuer)]
        assert asked["token_endpoint_auth_method"] == "none"
        (client_id,) = auth.registered
        declared = vault.registry.get(NAME).schema.schema["x-oauth"]
        assert declared["client_id"] == client_id
        (secret,) = auth.registered_secrets  # authlib issues one anyway: never kept
        kept = vault.registry.get(NAME).definition.model_dump_json() + json.dumps(
            list(vault.export_audit(0))
        )
        assert secret and secret not in kept and secret not in json.dumps(report.as_json())

        again = import_package(
            vault.store, vault.registry, data, "local", discovery=discovering(None)
        )
        assert again.toolkits[0].outcome == "unchanged"  # the registered client is reused
        assert len(auth.registrations) == 1

        principal = Principal(create_token(vault.store, "agent", "remote")[0], "agent")
        agent = Agent(vault, principal)
        answer = agent.send({"type": "toolkit/configure/req", "toolkit_name": NAME, "config": {}})
        assert answer["status"] == "partial" and answer["intake_url"]
        consent(side, answer["intake_url"])
        assert agent.listed()[NAME] is True
        assert auth.authorize_requests[-1]["client_id"] == client_id
        assert auth.authorize_requests[-1]["resource"] == resource.url  # RFC 8707
        assert auth.token_calls == 1
    finally:
        vault.store.engine.dispose()


def test_metadata_naming_another_resource_is_refused_with_its_reason(
    vault: Vault, resource: ResourceServer
) -> None:
    """RFC 9728 3.3: metadata that speaks for another resource is not believed; the server
    is skipped with the reason and nothing is stored."""
    resource.resource = "https://elsewhere.example.test/mcp"
    data = server_json(resource.url)
    with pytest.raises(PackageRefused) as refused:
        import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert "oauth_refused" in str(refused.value)
    assert "names the resource 'https://elsewhere.example.test/mcp'" in str(refused.value)
    assert "RFC 9728 3.3" in str(refused.value)
    assert NAME not in vault.registry
    assert not [e for e in vault.export_audit(0) if e["action"] == "toolkit_imported"]


def test_an_authorization_server_over_plain_http_is_refused(
    vault: Vault, resource: ResourceServer
) -> None:
    """A token endpoint over plain http to another host would carry the code and the
    tokens in clear: metadata naming one is not used."""
    resource.issuer = "http://auth.example.test"
    data = server_json(resource.url)
    with pytest.raises(PackageRefused, match="authorization servers that are not https URLs"):
        import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert NAME not in vault.registry


def test_plain_http_to_another_host_is_never_asked(vault: Vault, resource: ResourceServer) -> None:
    """The server's URL (not asked at all) and a metadata URL its 401 names (refused by
    the exchange itself): https, or http only to a loopback host."""
    data = server_json("http://mcp.example.test/mcp")
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert report.toolkits[0].oauth == {
        "status": "skipped",
        "reason": "the URL is not https (or http to a loopback host)",
    }
    resource.mode, resource.pointer = "www-authenticate", "http://metadata.example.test/prm"
    data = server_json(resource.url)
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert report.toolkits[0].oauth is not None
    assert report.toolkits[0].oauth["status"] == "failed"
    assert (
        report.toolkits[0]
        .oauth["reason"]
        .startswith("metadata.example.test: only https (or http to loopback) is used")
    )


def test_a_url_with_a_query_is_not_asked(vault: Vault, resource: ResourceServer) -> None:
    data = server_json(resource.url + "?tenant=acme")
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert report.toolkits[0].oauth == {
        "status": "skipped",
        "reason": "the URL carries a query or credentials, which are not sent anywhere else",
    }
    assert resource.hits == []


def test_an_unreachable_server_is_imported_without_x_oauth_and_a_warning(vault: Vault) -> None:
    """Unreachable proves nothing either way: the toolkit is imported as before (no
    x-oauth) and the report says why; importing again later can add it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    data = server_json(f"http://127.0.0.1:{port}/mcp")
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    (entry,) = report.toolkits
    assert entry.oauth is not None and entry.oauth["status"] == "failed"
    assert "cannot be reached" in entry.oauth["reason"]
    assert "x-oauth" not in vault.registry.get(NAME).schema.schema


def test_metadata_documents_are_read_up_to_64_kib(
    vault: Vault, resource: ResourceServer, auth: AuthServer
) -> None:
    """A protected resource document over the bound is a failure to read it (a warning);
    an authorization server's is no metadata at all (the server is skipped)."""
    data = server_json(resource.url)
    resource.padding = 70_000
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert report.toolkits[0].oauth is not None
    assert report.toolkits[0].oauth["reason"].endswith("answered more than 64 KiB")
    resource.padding = 0
    auth.knobs.metadata_padding = 70_000
    with pytest.raises(PackageRefused, match="the authorization server publishes no metadata"):
        import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    auth.knobs.metadata_padding = 60_000  # under the bound: read
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    assert report.toolkits[0].oauth is not None
    assert report.toolkits[0].oauth["status"] == "generated"


def test_a_redirect_is_not_followed(vault: Vault, resource: ResourceServer) -> None:
    resource.mode = "redirect"
    data = server_json(resource.url)
    report = import_package(vault.store, vault.registry, data, "local", discovery=discovering())
    (entry,) = report.toolkits
    assert entry.oauth is not None and entry.oauth["status"] == "failed"
    assert "redirects are not followed" in entry.oauth["reason"]
    assert "/elsewhere/metadata" not in resource.hits
    assert "x-oauth" not in vault.registry.get(NAME).schema.schema


# What the CLI prints does not depend on the database (the API tests run on both).
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_cli_reports_oauth_and_no_discover_asks_nothing(
    vault: Vault,
    cli_env: dict[str, str],
    resource: ResourceServer,
    auth: AuthServer,
    tmp_path: Path,
) -> None:
    """`--no-discover` asks nothing; the report and `toolkits show` say where x-oauth came
    from; a failed re-import warns on stderr and keeps the earlier x-oauth."""
    path = tmp_path / "server.json"
    path.write_bytes(server_json(resource.url))

    env = {k: v for k, v in cli_env.items() if k != "TOOLKIT_VAULT_NO_DISCOVER"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(args, env, timeout=60)

    done = cli("toolkits", "import", str(path), "--no-discover", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["toolkits"][0]["oauth"]["status"] == "skipped"
    assert resource.hits == []  # nothing went over the network
    # the suite's own environment: TOOLKIT_VAULT_NO_DISCOVER=1
    offline = run_cli(["toolkits", "import", str(path), "--json"], cli_env, timeout=60)
    assert json.loads(offline.stdout)["toolkits"][0]["oauth"]["status"] == "skipped"
    assert resource.hits == []

    done = cli("toolkits", "import", str(path), "--oauth-client-id", CLIENT_ID, "--json")
    assert done.returncode == 0, done.stderr  # loopback, without --allow-private: not asked
    assert json.loads(done.stdout)["toolkits"][0]["oauth"] == {
        "status": "failed",
        "reason": UNREACHABLE.format(host="127.0.0.1"),
    }
    assert resource.hits == []

    allowed = ("--oauth-client-id", CLIENT_ID, "--allow-private")
    done = cli("toolkits", "import", str(path), *allowed)
    assert done.returncode == 0, done.stderr
    assert f"oauth: x-oauth for {auth.issuer}" in done.stdout
    shown = cli("toolkits", "show", NAME)
    assert shown.returncode == 0, shown.stderr
    assert f"oauth metadata: {resource.base}/.well-known/oauth-protected-resource/mcp" in (
        shown.stdout
    )

    resource.mode = "redirect"
    done = cli("toolkits", "import", str(path), *allowed)
    assert done.returncode == 0, done.stderr
    assert "WARNING" in done.stderr and "redirects are not followed" in done.stderr
    assert "the earlier import's x-oauth is kept" in done.stderr
    vault.registry.load_imported(stored_toolkits(vault.store))
    assert vault.registry.get(NAME).schema.schema["x-oauth"]["issuer"] == auth.issuer


@dataclass
class Listener:
    """A TCP listener on loopback that counts the connections it accepts and answers each
    with `answer` (bytes that are not HTTP), or holds it open answering nothing (None)."""

    answer: bytes | None = b"SSH-2.0-OpenSSH_9.6\r\n"
    port: int = 0
    connections: int = 0


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    found.port = server.getsockname()[1]
    done = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            if found.answer is None:
                done.wait(3)
                return
            conn.settimeout(1)
            try:
                conn.recv(4096)
                conn.sendall(found.answer)
            except OSError:
                pass

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            found.connections += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield found
    done.set()
    thread.join(timeout=5)
    server.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed when the block ends: nothing listens


def discovered(vault: Vault, url: str, options: DiscoveryOptions) -> dict[str, Any]:
    report = import_package(
        vault.store, vault.registry, server_json(url), "local", discovery=options
    )
    (entry,) = report.toolkits
    assert entry.oauth is not None
    return entry.oauth


def resolving(monkeypatch: pytest.MonkeyPatch, names: dict[str, list[str]], port: int) -> list[str]:
    """`socket.getaddrinfo` answering `names` (an address per answer, in turn: the last
    one stays); other names as the system does. Returns the names asked, in order."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def fake(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in names:
            return real(host, *args, **kwargs)
        asked.append(host)
        answers = names[host]
        one = answers[min(asked.count(host), len(answers)) - 1]
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in one.split(",")
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return asked


def test_a_loopback_remote_is_not_asked_without_allow_private(
    vault: Vault, resource: ResourceServer, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48 item 8: a server.json whose remote is on loopback made the import GET a
    path of the package's choosing there. Without --allow-private no connection is made
    to a private, loopback, link-local or NAT64-mapped address, whatever the name
    resolves to (every address is checked), and the report says only: unreachable."""
    strict = discovering(allow_private=False)
    found = discovered(vault, resource.url, strict)
    assert found == {"status": "failed", "reason": UNREACHABLE.format(host="127.0.0.1")}
    assert resource.hits == []
    assert "x-oauth" not in vault.registry.get(NAME).schema.schema
    resolving(
        monkeypatch,
        {
            "nat64.test": ["64:ff9b::7f00:1"],
            "mixed.test": ["127.0.0.1,93.184.216.34"],  # one answer loopback: refused
            "cloud.test": ["169.254.169.254"],
        },
        listener.port,
    )
    for url in (
        f"http://127.0.0.1:{listener.port}/mcp",
        f"http://localhost:{listener.port}/mcp",
        f"http://[::1]:{listener.port}/mcp",
        f"https://nat64.test:{listener.port}/mcp",
        f"https://mixed.test:{listener.port}/mcp",
        f"https://cloud.test:{listener.port}/mcp",
    ):
        host = urlsplit(url).hostname
        assert discovered(vault, url, strict) == {
            "status": "failed",
            "reason": UNREACHABLE.format(host=host),
        }, url
    assert listener.connections == 0
    assert resource.hits == []


def test_every_unreachable_target_reads_the_same(
    vault: Vault, resource: ResourceServer, listener: Listener
) -> None:
    """Issue 48 item 8: the report told a closed port from an open one (a port scanner).
    A refused address, a closed port, a port answering something that is not HTTP, one
    answering nothing, and metadata the server points to that cannot be read: one phrase."""
    quick = replace(discovering(allow_private=False), deadline=0.5)
    allowed = replace(quick, allow_private=True)
    reasons: dict[str, str] = {}
    reasons["refused address, open port"] = discovered(
        vault, f"http://127.0.0.1:{listener.port}/mcp", quick
    )["reason"]
    reasons["refused address, closed port"] = discovered(
        vault, f"http://127.0.0.1:{closed_port()}/mcp", quick
    )["reason"]
    reasons["closed port"] = discovered(vault, f"http://127.0.0.1:{closed_port()}/mcp", allowed)[
        "reason"
    ]
    reasons["not HTTP"] = discovered(vault, f"http://127.0.0.1:{listener.port}/mcp", allowed)[
        "reason"
    ]
    listener.answer = None
    reasons["no answer"] = discovered(vault, f"http://127.0.0.1:{listener.port}/mcp", allowed)[
        "reason"
    ]
    resource.mode = "www-authenticate"
    resource.pointer = f"http://127.0.0.1:{closed_port()}/prm"
    reasons["pointed to a closed port"] = discovered(vault, resource.url, allowed)["reason"]
    resource.pointer = f"{resource.base}/nothing-here"
    reasons["pointed to no document"] = discovered(vault, resource.url, allowed)["reason"]
    assert set(reasons.values()) == {UNREACHABLE.format(host="127.0.0.1")}, reasons


def test_the_connection_goes_to_the_address_that_was_checked(
    vault: Vault, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name answers a public address when checked, then loopback to
    whoever asks again. The name is resolved once and the connection made to the checked
    address (unreachable here), never to the second answer."""
    asked = resolving(monkeypatch, {"rebind.test": ["93.184.216.34", "127.0.0.1"]}, listener.port)
    options = replace(discovering(allow_private=False), deadline=0.5)
    found = discovered(vault, f"https://rebind.test:{listener.port}/mcp", options)
    assert found["status"] == "failed"
    assert listener.connections == 0
    assert asked == ["rebind.test"]


def test_each_import_time_exchange_refuses_a_loopback_address(listener: Listener) -> None:
    """Protected resource metadata, the authorization server's metadata and the
    registration POST: each refuses a non-public address unless allowed, before it
    connects."""
    base = f"http://127.0.0.1:{listener.port}"
    refused = UNREACHABLE.format(host="127.0.0.1")
    with pytest.raises(OAuthFailed) as failed:
        protected_resource(base + "/mcp")
    assert failed.value.message == refused
    with pytest.raises(OAuthFailed) as failed:
        authorization_server_metadata(base)
    assert failed.value.message == refused
    with pytest.raises(OAuthFailed) as failed:
        register_client({"registration_endpoint": base + "/register"}, CALLBACK, ())
    assert failed.value.message == refused
    assert listener.connections == 0


def test_the_connect_time_metadata_read_is_bounded_too(auth: AuthServer) -> None:
    """`oauth.metadata` (a connect's discovery, not the import's) reads at most 64 KiB."""
    auth.knobs.metadata_padding = 70_000
    with pytest.raises(OAuthFailed, match="the authorization server publishes no metadata"):
        server_metadata(auth.issuer)
    auth.knobs.metadata_padding = 60_000
    assert server_metadata(auth.issuer)["issuer"] == auth.issuer


@pytest.mark.parametrize(
    ("named", "url", "same"),
    [
        ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp", True),
        ("https://MCP.example.com:443/mcp/", "https://mcp.example.com/mcp", True),
        ("https://mcp.example.com/", "https://mcp.example.com/mcp", False),  # the origin
        ("https://mcp.example.com/mcp/other", "https://mcp.example.com/mcp", False),
        ("http://mcp.example.com/mcp", "https://mcp.example.com/mcp", False),
        ("https://mcp.example.com:8443/mcp", "https://mcp.example.com/mcp", False),
        ("https://evil.example/mcp", "https://mcp.example.com/mcp", False),
    ],
)
def test_which_resource_is_the_servers_own(named: str, url: str, same: bool) -> None:
    assert same_resource(named, url) is same


def test_the_well_known_url_goes_before_the_path() -> None:
    """RFC 9728 3.1, as its own example and MCP servers under a path use it."""
    assert metadata_url("https://resource.example.com/resource1") == (
        "https://resource.example.com/.well-known/oauth-protected-resource/resource1"
    )
    assert metadata_url("https://mcp.example.com/") == (
        "https://mcp.example.com/.well-known/oauth-protected-resource"
    )
