"""An imported remote MCP server reached through the vault: the toolkit instance of a
server.json `remotes` entry, over streamable HTTP. An `sse` remote is tried with the same
client: a server that speaks only the old HTTP+SSE transport fails its configure's check
(an SSE client is not built yet).

Initializing it connects to the publisher's URL (its placeholders filled from the config,
each value percent-encoded, so a value cannot add a host, path or query) with the headers
the publisher declared, filled from the config, and, when the toolkit has `x-oauth`, the
access token the vault holds as `Authorization: Bearer`. Its own `tools/list` becomes the
toolkit's tools, as for a local server. The HTTP client is `mcp_client.remote`'s: no
redirect to another origin, bounded responses, a 401 told apart.

A 401, at a configure's check, makes the configure an `error` ("the server answered 401")
and stores nothing; during a call it marks the instance `unauthorized`, which the tool
calls then act on (`core.tool_calls`: an OAuth connection is marked for reconnecting, as a
refused refresh is).
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolkit_package.placeholders import fill
from toolkit_vault.errors import SchemaRefused, VaultError
from toolkit_vault.mcp_client import UpstreamError, UpstreamFailed, UpstreamUnauthorized
from toolkit_vault.oauth.spec import secure_url
from toolkit_vault.plugin import CallContext, Tool
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import CompiledSchema, compile_schema
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.toolkits.launches import LaunchRefused, ServerCheckFailed, Values
from toolkit_vault.toolkits.served import START_TIMEOUT, VERIFY_TIMEOUT, upstream_host

if TYPE_CHECKING:  # the MCP SDK is imported when a server is reached (see `mcp_client`)
    from toolkit_vault.mcp_client import UpstreamHandle

__all__ = ["RemoteServedToolkit", "connect_of"]

log = logging.getLogger(__name__)


def connect_of(definition: ToolkitDefinition) -> Mapping[str, Any] | None:
    """The stored connection recipe of an imported remote server, or None."""
    package = definition.config_schema.get("x-toolkit-package")
    found = package.get("connect") if isinstance(package, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(found.get("fields"), Mapping):
        return None
    recipe = found.get("recipe")
    if not isinstance(recipe, Mapping) or not isinstance(recipe.get("remote"), Mapping):
        return None
    return found


def _secret_fields(definition: ToolkitDefinition) -> set[str]:
    properties = definition.config_schema.get("properties", {})
    return {name for name, prop in properties.items() if prop.get("writeOnly")}


def endpoint(
    connect: Mapping[str, Any], definition: ToolkitDefinition, config: Mapping[str, Any]
) -> tuple[str, dict[str, str]]:
    """The URL and headers of one connection (raises LaunchRefused); never shown."""
    recipe, fields = connect["recipe"], connect["fields"]
    values = Values(config, fields, _secret_fields(definition))
    address = recipe["remote"]["url"]
    if "text" in address:
        url = str(address["text"])
    else:
        found: dict[str, str] = dict(address.get("fixed", {}))
        for name in address.get("inputs", ()):
            value = values.part({"input": name})
            if value is None:
                raise LaunchRefused("the server's URL needs a field that has no value")
            found[name] = urllib.parse.quote(" ".join(value), safe="")
        url = fill(address["template"], found)
    if not secure_url(url):
        raise LaunchRefused("the server's URL is not https (or http to a loopback host)")
    headers: dict[str, str] = {}
    for name, part in recipe.get("headers", {}).items():
        value = values.part(part)
        if value is not None:
            headers[name] = " ".join(value)
    spec = definition.config_schema.get("x-oauth")
    if isinstance(spec, Mapping) and isinstance(spec.get("token_field"), str):
        node: Any = config
        for token in pointer_tokens(spec["token_field"]):
            node = node.get(token) if isinstance(node, Mapping) else None
        if isinstance(node, str) and node:
            headers["Authorization"] = f"Bearer {node}"
    return url, headers


class RemoteServedToolkit:
    """The instance of an imported remote server (see the module)."""

    def __init__(
        self, definition: ToolkitDefinition, tools: Sequence[object], connect: Mapping[str, Any]
    ) -> None:
        self.definition = definition
        self.tools = tuple(tools)
        self._connect = connect
        self._handle: UpstreamHandle | None = None
        self._schemas: dict[str, CompiledSchema] = {}
        self._served: dict[str, Tool] = {}
        self.unauthorized = False  # a call was answered 401: the credential is refused

    @property
    def label(self) -> str:
        return self.definition.name[:80]

    def _open(self, config: Mapping[str, Any], timeout: float) -> UpstreamHandle:
        from toolkit_vault.mcp_client import RemoteServer

        url, headers = endpoint(self._connect, self.definition, config)
        return upstream_host().open(RemoteServer(self.label, url, headers), timeout=timeout)

    def initialize(self, config: dict[str, Any]) -> None:
        """Connect and list the server's tools; raises (nothing left open) when it cannot."""
        self._handle = self._open(config, START_TIMEOUT)
        for tool in self._handle.tools:
            try:
                self._schemas[tool.name] = compile_schema(tool.input_schema)
            except SchemaRefused as exc:
                log.warning("a tool of %s is left out: %s", self.label, exc.message)
                continue
            self._served[tool.name] = Tool(tool.name, tool.description, tool.input_schema)

    def verify(self, config: dict[str, Any]) -> None:
        """A configure's check: connect with the candidate config and list the tools. A
        401 or a server that cannot be used fails it; one slow to answer passes (logged)."""
        try:
            handle = self._open(config, VERIFY_TIMEOUT)
        except UpstreamUnauthorized:
            raise ServerCheckFailed("the server answered 401 (unauthorized)") from None
        except (UpstreamFailed, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) or "no answer in time" in exc.message:
                log.warning("remote server %s is slow to answer: not checked", self.label)
                return None
            raise ServerCheckFailed(f"the server could not be used ({exc.reason})") from None
        except UpstreamError as exc:
            raise ServerCheckFailed(f"the server could not be used ({exc.reason})") from None
        except VaultError as exc:
            raise ServerCheckFailed(f"the server cannot be reached: {exc.message}") from None
        threading.Thread(target=handle.close, name="mcp-remote-checked", daemon=True).start()
        return None

    def served_tools(self) -> Mapping[str, Tool]:
        return self._served

    def input_schema(self, name: str) -> CompiledSchema:
        return self._schemas[name]

    def call_tool(self, name: str, arguments: Mapping[str, Any], context: CallContext) -> Any:
        if self._handle is None:
            raise VaultError("the server is not connected")
        try:
            return self._handle.call_tool(
                name,
                arguments,
                deadline=context.deadline,
                cancel=context.cancelled,
                progress=context.progress,
            )
        except UpstreamUnauthorized:
            self.unauthorized = True
            raise

    def stop(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            threading.Thread(target=handle.close, name="mcp-remote-stop", daemon=True).start()
