"""`tools/list` is built once and kept (`core.catalogue`, `transports.mcp.listing`): one
session listing again sees at once what changed meanwhile (an operator narrowing or
widening the principal, a toolkit registered), and each protocol revision gets the fields
its schema has, as the SDK's own serializer gives it."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from test_allowance_calls import tool_vault  # noqa: F401 (a fixture)
from test_mcp_endpoint_names import _principal
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.audit.wording import describe
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.allowances import remove_allowance, set_allowance
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource
from toolkit_vault.transports.mcp.listing import McpLists
from toolkit_vault.transports.mcp.server import vault_mcp_server
from toolkit_vault.transports.mcp.sessions import McpSessions


class Late:
    """A toolkit registered after the session has listed."""

    definition: ClassVar[dict[str, Any]] = {
        "name": "late",
        "schema": {"type": "object", "properties": {}},
        "tools": ["arrive"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        pass


def test_one_session_lists_what_changed_since_its_last_list(
    tool_vault: Vault,  # noqa: F811
) -> None:
    principal = _principal(tool_vault, "relisting")
    server = vault_mcp_server(McpSessions(tool_vault), lambda _ctx: (principal, "same"))
    client = Client(server)

    async def names() -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    def narrow(**allowed: Any) -> None:
        set_allowance(tool_vault.store, "operator", tool_vault.toolkit, "relisting", **allowed)

    async def run() -> None:
        async with client:
            everything = await names()
            assert {"filesystem__read_file", "calling__echo"} <= everything
            assert await names() == everything  # kept: the same again
            await asyncio.to_thread(narrow, tools=[("filesystem", "read_file")])
            assert await names() == {"filesystem__read_file"}  # read in a worker thread
            assert await names() == {"filesystem__read_file"}  # on the loop: nothing new
            await asyncio.to_thread(narrow, toolkits=["calling"])
            assert {n.split("__")[0] for n in await names()} == {"calling"}
            await asyncio.to_thread(remove_allowance, tool_vault.store, "operator", "relisting")
            assert await names() == everything
            tool_vault.registry.register(Late, ToolkitSource(SourceKind.ENTRY_POINT, "late"))
            assert await names() == everything | {"late__arrive"}

    asyncio.run(run())


def test_each_revision_gets_what_the_sdk_would_send_it() -> None:
    """The kept wire form is the SDK's own serializer's for the revision asked, made once."""
    from toolkit_vault.protocol import ToolInfo

    tool = ToolInfo(name="t", toolkit="k", description="d", annotations={"readOnlyHint": True})
    listed = McpLists(128, ()).listing((tool,), set(), set())
    for version in HANDSHAKE_PROTOCOL_VERSIONS + MODERN_PROTOCOL_VERSIONS:
        models = types.ListToolsResult(tools=listed.models()).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        expected = serialize_server_result("tools/list", version, models)["tools"]
        assert listed.wire(version) == expected
        assert listed.wire(version) is listed.wire(version)  # made once
        assert expected[0]["title"] == "k: t" and expected[0]["name"] == "k__t"


def test_an_operator_ending_a_session_on_another_replica_is_audited_and_refused(
    tool_vault: Vault,  # noqa: F811
    home: VaultSettings,
) -> None:
    """The session lives in replica B; the operator's End reaches replica A (a console page
    another replica served): audited with its wording, kept in the chain, and B refuses the
    session's next message and ends its A2E connection."""
    principal = _principal(tool_vault, "ended-elsewhere")
    replica_b = open_vault(home)
    try:
        sessions_b = McpSessions(replica_b)
        client = Client(vault_mcp_server(sessions_b, lambda _ctx: (principal, "held-by-b")))

        async def run() -> None:
            async with client:
                assert (await client.list_tools()).tools
                held = sessions_b.open_sessions()[0]
                a2e = held.a2e_session
                replica_a = McpSessions(tool_vault)
                here = await asyncio.to_thread(replica_a.end_by_operator, "held-by-b", "op-1")
                assert here is False  # not open on A
                with pytest.raises(MCPError, match="operator ended"):
                    await client.list_tools()
                assert held.connection.session_id is None and sessions_b.open_sessions() == []
                with pytest.raises(MCPError, match="operator ended"):
                    await client.call_tool("filesystem__read_file", {"path": "x"})
                return a2e

        a2e = asyncio.run(run())
    finally:
        replica_b.store.close()
    (event,) = list_events(tool_vault.store, EventFilter(actions=("mcp_session_ended",))).events
    assert event.details == {"mcp_session": "held-by-b"} and event.actor == "op-1"
    assert a2e  # B knew the A2E session; A, where the End landed, did not
    assert describe(event) == (
        "MCP session held-by-b ended by an operator: its next message is refused on every replica"
    )
