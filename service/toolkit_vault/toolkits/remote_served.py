"""An imported remote MCP server reached through the vault: the toolkit instance of a
server.json `remotes` entry, over streamable HTTP, or the legacy HTTP+SSE transport for an
`sse` remote (revision 2024-11-05's GET stream and POSTed messages; the SDK's clients,
`mcp_client.remote`).

Initializing it connects to the publisher's URL (its placeholders filled from the config,
each value percent-encoded, so a value cannot add a host, path or query) with the headers
the publisher declared, filled from the config, and, when the toolkit has `x-oauth`, the
access token the vault holds as `Authorization: Bearer`. Its own `tools/list` becomes the
toolkit's tools, as for a local server, and is pinned the same way (`tool_pins`): a remote
server is as free to change a tool's description as a local one (more: it changes without
an update anyone installs), so a tool changed or added since the pin, at a connection or
on `notifications/tools/list_changed`, is withheld until an operator accepts it. The HTTP
client is `mcp_client.remote`'s: no redirect to another origin, bounded responses, a 401
told apart.

A 401, at a configure's check, makes the configure an `error` ("the server answered 401")
and stores nothing; during a call it marks the instance `unauthorized`, which the tool
calls then act on (`core.tool_calls`: an OAuth connection is marked for reconnecting, as a
refused refresh is).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolkit_package.placeholders import fill
from toolkit_vault.errors import VaultError
from toolkit_vault.mcp_client import (
    UpstreamError,
    UpstreamFailed,
    UpstreamUnauthorized,
)
from toolkit_vault.oauth.spec import secure_url
from toolkit_vault.plugin import CallContext
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import CompiledSchema
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.toolkits.launches import LaunchRefused, ServerCheckFailed, Values
from toolkit_vault.toolkits.served import (
    START_TIMEOUT,
    VERIFY_TIMEOUT,
    upstream_host,
)
from toolkit_vault.toolkits.served_tools import Listed, PinnedTools, take_listed
from toolkit_vault.toolkits.server_limits import ServerRefused
from toolkit_vault.toolkits.tool_pins import ToolPins

if TYPE_CHECKING:  # the MCP SDK is imported when a server is reached (see `mcp_client`)
    from toolkit_vault.mcp_client import UpstreamHandle

__all__ = ["RemoteServedToolkit", "connect_of"]

log = logging.getLogger(__name__)
RECONNECT_TIMEOUT = 10.0  # a call waits at most this long for its server's session again
RECONNECT_BACKOFF = 5.0  # after a failed reconnect, calls are refused at once this long


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


def transport_of(connect: Mapping[str, Any]) -> str:
    """The remote's transport as the import kept it (`streamable-http` or `sse`)."""
    found = connect["recipe"]["remote"].get("transport")
    return found if isinstance(found, str) else "streamable-http"


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


class RemoteServedToolkit(PinnedTools):
    """The instance of an imported remote server (see the module)."""

    def __init__(
        self,
        definition: ToolkitDefinition,
        tools: Sequence[object],
        connect: Mapping[str, Any],
        pins: ToolPins | None = None,
    ) -> None:
        self.definition = definition
        self.tools = tuple(tools)
        self._connect = connect
        self._handle: UpstreamHandle | None = None
        self._listed = Listed({}, {}, {})
        self._pins = pins  # None: nothing pins its tools (a listing without the store)
        self._relisting = threading.Lock()
        self._config: dict[str, Any] | None = None  # kept to connect again; never shown
        self._reconnecting = threading.Lock()
        self._retry_at = 0.0  # a failed reconnect is not tried again before this instant
        self._stopped = False  # let go of: never connects again
        self.unauthorized = False  # a call was answered 401: the credential is refused

    @property
    def label(self) -> str:
        return self.definition.name[:80]

    def _open(self, config: Mapping[str, Any], timeout: float) -> UpstreamHandle:
        from toolkit_vault.mcp_client import RemoteServer

        url, headers = endpoint(self._connect, self.definition, config)
        server = RemoteServer(self.label, url, headers, transport_of(self._connect))
        return upstream_host().open(server, timeout=timeout)

    def initialize(self, config: dict[str, Any]) -> None:
        """Connect and list the server's tools (shown to its pin); raises (nothing left
        open) when it cannot."""
        self._handle = self._open(config, START_TIMEOUT)
        self._config = config
        self._current()

    def ready(self) -> None:
        """Before a call (`core.tool_calls`, ahead of its withheld check): a session that
        ended (the server closed its stream, restarted, broke the protocol) is opened
        again, its tools listed and shown to the pin, so a call is checked against what
        the server lists now. `ServerRefused` (`unavailable`) when it cannot be reached;
        a 401 marks the instance instead, so the call says 401 and an OAuth connection is
        marked for reconnecting."""
        handle = self._handle
        if handle is None or handle.state == "running" or self.unauthorized:
            return
        with self._reconnecting:
            if self._handle is not handle or self._stopped or self._config is None:
                return
            if time.monotonic() < self._retry_at:
                raise ServerRefused("unavailable", f"{self.label}: the server cannot be reached")
            log.warning("the session with remote server %s ended: connecting again", self.label)
            try:
                fresh = self._open(self._config, RECONNECT_TIMEOUT)
            except UpstreamUnauthorized:
                self.unauthorized = True  # the call says 401; OAuth is marked for reconnecting
                return
            except (UpstreamError, TimeoutError, VaultError):
                self._retry_at = time.monotonic() + RECONNECT_BACKOFF
                raise ServerRefused(
                    "unavailable", f"{self.label}: the server cannot be reached"
                ) from None
            self._handle = fresh
            if self._stopped:  # let go of while connecting (`stop` may have closed it too)
                self._handle = None
                _close_later(fresh)
                return
        _close_later(handle)
        self._current()

    @property
    def connected(self) -> bool:
        """Whether its session is open (one that ended is opened again by `ready`)."""
        return self._handle is not None and self._handle.state == "running"

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

    def input_schema(self, name: str) -> CompiledSchema:
        return self._listed.schemas[name]

    def _current(self) -> Listed:
        """The tools of the session's last list, taken (and shown to the pin) when the
        list changed since (the session lists again on `tools/list_changed`)."""
        handle = self._handle
        described = None if handle is None else handle.tools
        if described is not None and described is not self._listed.source:
            with self._relisting:
                if described is not self._listed.source:
                    self._listed = take_listed(self.label, described, self._pins)
        return self._listed

    def call_tool(self, name: str, arguments: Mapping[str, Any], context: CallContext) -> Any:
        if self._handle is None:
            raise VaultError("the server is not connected")
        if self.unauthorized and self._handle.state != "running":  # refused at reconnecting
            raise UpstreamUnauthorized(f"{self.label}: the server answered 401 (unauthorized)")
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
        self._stopped = True
        handle, self._handle = self._handle, None
        if handle is not None:
            _close_later(handle)


def _close_later(handle: UpstreamHandle) -> None:
    """Close a session off the caller's thread (the live-instance table calls `stop` under
    its lock)."""
    threading.Thread(target=handle.close, name="mcp-remote-stop", daemon=True).start()
