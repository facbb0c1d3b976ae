"""OAuth for imported remote MCP servers: an `x-oauth` where the server's own metadata
calls for it (RFC 9728), so its toolkit connects through the intake page's Connect button
like any OAuth toolkit instead of asking a person to paste a token.

`toolkit_package` reads packages without touching the network; this is the one import
step that does, and only for remote servers (a server.json `remotes` entry, a client
config entry with a `url`), at most `MAX_DISCOVERED` per import within `DISCOVERY_BUDGET`,
each exchange bounded (`oauth.fetch`), and never with `--no-discover`. The URLs come
from the package, so no exchange reaches a private, loopback, link-local or NAT64-mapped
address unless the operator says so (`--allow-private`): otherwise a package could make
the import probe the vault's own host and network. The outcome of each is one `Discovery`:
- `generated`: the metadata names an authorization server; the schema gains `x-oauth`
  (issuer: the first one, scopes: `scopes_supported`, resource: the server's URL, a
  client id from `--oauth-client-id`, an earlier import, or RFC 7591 registration) and a
  `writeOnly` token property, and `x-toolkit-package.oauth` records where it came from.
- `none`: the server publishes no metadata (or names no authorization server).
- `failed`: the metadata could not be read (the server unreachable or its address
  refused, in one phrase for all, `oauth.fetch.UNREACHABLE`; redirected; too large): the
  toolkit is imported as before, without `x-oauth` (or with the one an earlier import of
  the name declared, kept), with a warning saying why; importing again when the server
  answers adds it. An unreachable server proves nothing either way, and refusing would
  make an import depend on every remote server being up.
- `refused`: the metadata was read but cannot be believed or used (its `resource` is not
  the server's URL, its authorization server has no metadata, no client id can be had):
  the server is skipped with the reason, since a toolkit without `x-oauth` would be a
  form nobody can fill, and one with it would send consent where the server did not say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from toolkit_package.imported import ImportedServer
from toolkit_package.strategy import StrategyKind
from toolkit_vault.errors import SchemaRefused
from toolkit_vault.oauth.spec import OAuthSpec, oauth_spec, redirect_uri, secure_url
from toolkit_vault.schema.values import pointer_tokens

if TYPE_CHECKING:  # the HTTP side (authlib, httpx) is imported where discovery runs
    from toolkit_vault.oauth.resource import ProtectedResource

__all__ = [
    "DEFAULT_PUBLIC_URL",
    "DISCOVERY_BUDGET",
    "MAX_DISCOVERED",
    "Discovery",
    "DiscoveryOptions",
    "discover_oauth",
    "earlier_spec",
    "remote_url",
    "with_oauth",
]

MAX_DISCOVERED = 20  # remote servers one import asks over the network (a listing has more)
DISCOVERY_BUDGET = 30.0  # seconds for all of one import's discovery (each exchange has 5)
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8600"  # where `serve` answers by default
DEADLINE = 5.0  # oauth.fetch's (a copy: that module imports httpx; a test holds them equal)
CALLBACK_PATH = "/console/oauth/callback"
Status = Literal["generated", "none", "failed", "refused", "skipped"]


@dataclass(frozen=True)
class DiscoveryOptions:
    """The operator's say: discover or not, a client id, the vault's public origin (the
    callback a registration names), the deadline of each exchange, and whether
    non-public addresses may be reached (`--allow-private`)."""

    enabled: bool = True
    client_id: str | None = None
    public_url: str = DEFAULT_PUBLIC_URL
    deadline: float = DEADLINE
    allow_private: bool = False

    @property
    def redirect_uri(self) -> str:
        return self.public_url.rstrip("/") + CALLBACK_PATH


@dataclass(frozen=True)
class Discovery:
    status: Status
    reason: str = ""
    declaration: dict[str, Any] = field(default_factory=dict)  # the x-oauth, when generated
    provenance: dict[str, Any] = field(default_factory=dict)  # where it came from

    def kept_from(self, earlier: Mapping[str, Any] | None) -> Discovery:
        """This failure, keeping the `x-oauth` an earlier import of the name declared."""
        if earlier is None or earlier_spec(earlier) is None:
            return self
        declared = {k: v for k, v in earlier["x-oauth"].items() if k != "token_field"}
        provenance = earlier.get("x-toolkit-package", {}).get("oauth") or {}
        reason = f"{self.reason}; the earlier import's x-oauth is kept"
        return Discovery(self.status, reason, declared, provenance)

    def as_json(self) -> dict[str, Any]:
        found = {"issuer": self.declaration.get("issuer")} if self.declaration else {}
        return {"status": self.status, "reason": self.reason or None, **found, **self.provenance}


def remote_url(doc: Any, server: ImportedServer) -> str | None:
    """The URL of a remote server's entry (`server.location` points at it in `doc`)."""
    if server.strategy is not StrategyKind.REMOTE_MCP:
        return None
    node = doc
    try:
        for token in pointer_tokens(server.location):
            node = node[int(token)] if isinstance(node, list) else node[token]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    url = node.get("url") if isinstance(node, Mapping) else None
    return url if isinstance(url, str) else None


def _unusable(url: str) -> str | None:
    """Why `url` is not asked: a template, credentials or a query, or not https."""
    if "{" in url or "}" in url:
        return "the URL is a template (it has placeholders)"
    parts = urlsplit(url)
    if parts.query or parts.username or parts.password:
        return "the URL carries a query or credentials, which are not sent anywhere else"
    if not secure_url(url):
        return "the URL is not https (or http to a loopback host)"
    return None


def _client_id(
    earlier: Mapping[str, Any] | None, found: ProtectedResource, options: DiscoveryOptions
) -> tuple[str, str]:
    """(client id, where from); raises OAuthFailed when none can be had. An earlier
    import's client id is reused (and said to come from where it came then), so importing
    again registers no new client and changes nothing."""
    from toolkit_vault.oauth.client import OAuthFailed
    from toolkit_vault.oauth.registration import authorization_server_metadata, register_client

    issuer = found.authorization_servers[0]
    metadata = authorization_server_metadata(  # it must exist for a connect
        issuer, deadline=options.deadline, allow_private=options.allow_private
    )
    if options.client_id:
        return options.client_id, "operator"
    spec = earlier_spec(earlier) if earlier is not None else None
    if spec is not None and spec.issuer == issuer and spec.resource == found.resource:
        assert earlier is not None
        then = earlier.get("x-toolkit-package", {}).get("oauth") or {}
        return spec.client_id, str(then.get("client_id_from", "earlier import"))
    callback = redirect_uri(options.redirect_uri, issuer)  # this server's own (RFC 9700 4.4)
    registered = register_client(
        metadata,
        callback,
        found.scopes,
        deadline=options.deadline,
        allow_private=options.allow_private,
    )
    if registered is None:
        raise OAuthFailed(
            "no_client_id",
            "the authorization server offers no client registration: give --oauth-client-id",
        )
    return registered, "registration"


def discover_oauth(
    url: str | None, options: DiscoveryOptions, earlier: Mapping[str, Any] | None = None
) -> Discovery:
    """What the metadata of the remote server at `url` says (`earlier`: the schema an
    earlier import of the name stored); never raises for the network."""
    from toolkit_vault.oauth.client import OAuthFailed
    from toolkit_vault.oauth.resource import protected_resource

    if url is None:
        return Discovery("skipped", "the server's URL is not in the input")
    if not options.enabled:
        return Discovery("skipped", "--no-discover")
    if (why := _unusable(url)) is not None:
        return Discovery("skipped", why)
    try:
        found = protected_resource(
            url, deadline=options.deadline, allow_private=options.allow_private
        )
    except OAuthFailed as exc:
        if exc.code in ("resource_mismatch", "metadata"):
            return Discovery("refused", exc.message)
        return Discovery("failed", exc.message).kept_from(earlier)
    if found is None or not found.authorization_servers:
        return Discovery("none", "the server publishes no protected resource metadata")
    try:
        client_id, client_from = _client_id(earlier, found, options)
    except OAuthFailed as exc:
        return Discovery("refused", exc.message)
    declaration = {
        "issuer": found.authorization_servers[0],
        "client_id": client_id,
        "scopes": list(found.scopes),
        "resource": found.resource,
    }
    provenance = {"metadata": found.metadata_url, "via": found.via, "client_id_from": client_from}
    return Discovery("generated", "", declaration, provenance)


def earlier_spec(schema: Mapping[str, Any]) -> OAuthSpec | None:
    """The `x-oauth` an earlier import of the same name declared, if it still reads."""
    try:
        return oauth_spec(schema)
    except SchemaRefused:
        return None


def _token_field(properties: Mapping[str, Any]) -> str:
    name, n = "access_token", 1
    while name in properties:
        n += 1
        name = f"access_token_{n}"
    return name


def with_oauth(definition: dict[str, Any], found: Discovery) -> dict[str, Any]:
    """`definition` whose schema declares the discovered `x-oauth`, its token a new
    required `writeOnly` property; unchanged unless `found` holds one (generated, or an
    earlier one kept)."""
    if not found.declaration:
        return definition
    schema = dict(definition["schema"])
    properties = dict(schema.get("properties", {}))
    name = _token_field(properties)
    properties[name] = {
        "type": "string",
        "title": "OAuth access token",
        "description": "Stored by the Connect button of the intake page, never typed in.",
        "writeOnly": True,
        "x-order": len(properties),
        "x-toolkit-input": {
            "kind": "oauth",
            "name": name,
            "in_argv": False,
            "secret": True,
            "reason": "OAuth access token (RFC 9728 protected resource metadata)",
        },
    }
    schema["properties"] = properties
    schema["required"] = [*schema.get("required", []), name]
    schema["x-oauth"] = {**found.declaration, "token_field": f"/{name}"}
    schema["x-toolkit-package"] = {**schema["x-toolkit-package"], "oauth": found.provenance}
    return {**definition, "schema": schema}
