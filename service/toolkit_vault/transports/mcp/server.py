"""The vault as an MCP server: `tools/list` and `tools/call` over the official SDK's
low-level server (`mcp.server.lowlevel.Server`), whatever the transport (`over_http`,
`over_stdio`). The protocol is MCP's; the calls are the vault's: a list is every tool the
principal may call (`Vault.tool_catalogue`, the same allow-list as `tool/list`), a call
runs through the session's `A2EConnection` and so the tool engine (arguments checked,
deadline, withholding, audit, cancellation).

A call of a tool whose toolkit is not configured asks a person for the credential through
the vault's intake page, never through the client: URL-mode elicitation, as the revision
the client negotiated defines it (`UrlElicitationRequiredError`, -32042); a client without
URL elicitation gets the link in an `isError` result a person can open. Past
`DEFAULT_TOOL_LIMIT` tools, the list is the configured toolkits' tools (and those asked
for) plus two discovery tools that find and enable the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from toolkit_vault import __version__
from toolkit_vault.access.principals import Principal
from toolkit_vault.errors import VaultError
from toolkit_vault.plugin import Progress
from toolkit_vault.protocol import (
    ErrorMessage,
    IntakeOptions,
    Message,
    ToolCallRequest,
    ToolCallResponse,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
)
from toolkit_vault.store.call_records import RecordsToCome, expected_call
from toolkit_vault.store.storage import Store
from toolkit_vault.tools.calls import Cancellation
from toolkit_vault.transports.mcp.listing import McpList, McpLists, PrebuiltLists, hand_over
from toolkit_vault.transports.mcp.sessions import McpSession, McpSessions

__all__ = ["DEFAULT_TOOL_LIMIT", "ENABLE", "FIND", "Caller", "vault_mcp_server"]

DEFAULT_TOOL_LIMIT = 128
FIND, ENABLE = "vault__find_tools", "vault__enable_toolkit"
URL_ELICITATION_UNTIL = "2025-11-25"  # the last revision with -32042 (later: InputRequiredResult)

# Who is asking: the principal and the key of its MCP session, from the request context.
Caller = Callable[[ServerRequestContext[Any, Any]], tuple[Principal, str]]

_DISCOVERY = [
    types.Tool(
        name=FIND,
        description="Find the vault's tools not listed here (more than the list shows): "
        "by words in a toolkit's or tool's name or description.",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 200}},
            "required": ["query"],
        },
    ),
    types.Tool(
        name=ENABLE,
        description="Add a toolkit's tools to this session's list; a person is asked for "
        "its credential in the vault's own page when it has none.",
        input_schema={
            "type": "object",
            "properties": {"toolkit": {"type": "string", "maxLength": 200}},
            "required": ["toolkit"],
        },
    ),
]


def vault_mcp_server(
    sessions: McpSessions, caller: Caller, tool_limit: int = DEFAULT_TOOL_LIMIT
) -> Server[Any]:
    """An MCP server over `sessions`' vault; `caller` says who asks in which session."""

    async def session_of(ctx: ServerRequestContext[Any, Any]) -> McpSession:
        principal, key = caller(ctx)
        try:
            await sessions.refuse_if_ended(key)
            session = sessions.known(key, principal)
        except VaultError as exc:  # ended by an operator, or another principal's
            raise MCPError(code=types.INVALID_REQUEST, message=exc.message) from None
        if session is None:
            session = await anyio.to_thread.run_sync(sessions.session, key, principal)
        if session.notify is None:  # the client's own channel, for list changes later
            outbound = ctx.session

            async def notify(method: str, params: dict[str, Any] | None) -> None:
                if method == "notifications/tools/list_changed":
                    await outbound.send_tool_list_changed()
                else:
                    await outbound.send_elicit_complete(str((params or {})["elicitationId"]))

            session.notify, session.loop = notify, _running_loop()
            info = ctx.session.client_params
            if info is not None:
                session.client = f"{info.client_info.name} {info.client_info.version}"
        return session

    lists = McpLists(tool_limit, _DISCOVERY)

    def listing(session: McpSession) -> tuple[McpList, set[str]]:
        catalogue, configured = sessions.vault.tool_catalogue(session.principal, session.session_id)
        return lists.listing(catalogue, configured, session.shown), configured

    async def listing_now(session: McpSession) -> tuple[McpList, set[str]]:
        """`listing`, on the loop when nothing was committed since the session's last read
        (`tool_catalogue_without_blocking`), else in a worker thread."""
        vault = sessions.vault
        found = vault.tool_catalogue_without_blocking(
            session.principal, session.session_id, await vault.mark_on_loop()
        )
        if found is None:  # something to read first: off the loop
            return await anyio.to_thread.run_sync(listing, session)
        return lists.listing(found[0], found[1], session.shown), found[1]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = await session_of(ctx)
        listed, _ = await listing_now(session)
        return hand_over(listed, ctx.protocol_version)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        session = await session_of(ctx)
        sessions.called(session)
        listed, configured = await listing_now(session)
        arguments = dict(params.arguments or {})
        if listed.limited and params.name == FIND:
            return await anyio.to_thread.run_sync(_find, sessions, session, arguments)
        if listed.limited and params.name == ENABLE:
            toolkit = str(arguments.get("toolkit", ""))
            return await _enable(ctx, sessions, session, toolkit, configured)
        pair = listed.names.tool(params.name)
        if pair is None:
            return _refused("unknown_tool", "no tool of that name in this session's list")
        request = ToolCallRequest(
            id=str(uuid.uuid4()), toolkit_name=pair[0], tool_name=pair[1], arguments=arguments
        )
        answer = await _run(sessions.vault.store, session, request, _progress_of(ctx))
        if isinstance(answer, ErrorMessage):
            reason = str(answer.details[0].get("reason", "")) if answer.details else ""
            if reason == "not_configured":
                return await _ask_for_credential(ctx, sessions, session, pair[0])
            return _refused(reason or answer.code.lower(), answer.message)
        assert isinstance(answer, ToolCallResponse)
        return types.CallToolResult(
            content=[_content(block) for block in answer.content],
            structured_content=answer.structured_content,
            is_error=answer.is_error,
        )

    server: Server[Any] = Server(
        "toolkit-vault",
        version=__version__,
        instructions="Tools of the toolkits in the vault; their credentials stay inside it. "
        "A tool whose toolkit has no credential yet sends a person a link to the vault's "
        "own page to enter it.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware.append(PrebuiltLists())  # after the SDK's own (its tracing sees all)
    return server


def initialization(server: Server[Any]) -> Any:
    """What `initialize` answers: tools, and that their list changes."""
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def _progress_of(ctx: ServerRequestContext[Any, Any]) -> Progress | None:
    """Where a tool's progress goes when the client asked for it (a `progressToken`): to
    the client as `notifications/progress` of this request, hopped onto this loop from
    whichever thread reports it (an imported server's, through `toolkits.served`)."""
    if progress_token_from_params(ctx.params) is None:
        return None
    loop, outbound = _running_loop(), ctx.session

    def progress(done: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
            asyncio.run_coroutine_threadsafe(outbound.report_progress(done, total, message), loop)

    return progress


async def _run(
    store: Store, session: McpSession, request: ToolCallRequest, progress: Progress | None = None
) -> Message:
    """The call through the session's connection, in a worker thread; the client
    cancelling it (`notifications/cancelled`) or leaving cancels it in the engine too. A
    record that joined another call's batch is waited for here, on the loop, not on the
    thread (`RecordsToCome`): answered only once committed, else with the store's error."""
    cancellation = Cancellation(progress)
    expected = store.expect_call()  # its record shares a commit
    to_come = RecordsToCome()  # a record left in another's batch: waited for here
    try:
        with expected_call(expected, to_come):  # the worker thread's context carries them
            answer = await anyio.to_thread.run_sync(
                session.connection.handle, request, cancellation, abandon_on_cancel=True
            )
        not_written = await to_come.committed()  # answered only once recorded
        if not_written is not None:
            return ErrorMessage(
                req_id=request.id, code="RUNTIME_ERROR", message=not_written, details=[]
            )
        return answer
    except anyio.get_cancelled_exc_class():
        cancellation.cancel()
        raise
    finally:
        expected.end()


async def _ask_for_credential(
    ctx: ServerRequestContext[Any, Any], sessions: McpSessions, session: McpSession, toolkit: str
) -> types.CallToolResult | types.InputRequiredResult:
    """An intake link for `toolkit` in this session, as URL-mode elicitation when the
    client takes it (up to 2025-11-25 the call is answered -32042 and the person's
    submission completes it; from 2026-07-28 an `InputRequiredResult` the client retries
    after), else in an `isError` result a person can open. A stateless request's session
    ends with it, so its link configures the principal (every session of it)."""
    configure = ToolkitConfigureRequest(
        id=str(uuid.uuid4()),
        toolkit_name=toolkit,
        intake=IntakeOptions(),
        scope="principal" if session.for_one_request else "session",
    )
    answer = await anyio.to_thread.run_sync(session.connection.handle, configure)
    url = answer.intake_url if isinstance(answer, ToolkitConfigureResponse) else None
    if url is None:
        why = answer.message if isinstance(answer, ErrorMessage) else "no intake link"
        return _refused("not_configured", f"the toolkit {toolkit} has no credential here ({why})")
    message = f"Enter the credential for {toolkit} in the vault's own page (never in this chat)."
    capabilities = ctx.session.client_capabilities
    takes_url = bool(
        capabilities and capabilities.elicitation and capabilities.elicitation.url is not None
    )
    elicitation = str(uuid.uuid4())
    asked = types.ElicitRequestURLParams(
        mode="url", message=message, url=url, elicitation_id=elicitation
    )
    if takes_url and ctx.session.protocol_version <= URL_ELICITATION_UNTIL:
        session.waiting[toolkit] = elicitation
        raise UrlElicitationRequiredError([asked])
    if takes_url:  # 2026-07-28: the client asks the person, then calls again
        return types.InputRequiredResult(
            input_requests={elicitation: types.ElicitRequest(params=asked)},
            request_state=toolkit,
        )
    session.waiting[toolkit] = ""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{message} Open: {url} then call again.")],
        is_error=True,
    )


async def _enable(
    ctx: ServerRequestContext[Any, Any],
    sessions: McpSessions,
    session: McpSession,
    toolkit: str,
    configured: set[str],
) -> types.CallToolResult | types.InputRequiredResult:
    try:
        await anyio.to_thread.run_sync(sessions.vault.toolkit, toolkit)
    except VaultError:
        return _refused("unknown_toolkit", "no such toolkit")
    session.shown.add(toolkit)
    if session.notify is not None:
        await session.notify("notifications/tools/list_changed", None)
    if toolkit in configured:
        return types.CallToolResult(content=[_text(f"{toolkit}'s tools are listed now.")])
    return await _ask_for_credential(ctx, sessions, session, toolkit)


def _find(sessions: McpSessions, session: McpSession, arguments: dict[str, Any]) -> Any:
    words = str(arguments.get("query", "")).lower().split()
    tools, configured = sessions.vault.tool_catalogue(session.principal, session.session_id)
    found = [
        {"toolkit": t.toolkit, "tool": t.name, "configured": t.toolkit in configured}
        for t in tools
        if all(w in f"{t.toolkit} {t.name} {t.description or ''}".lower() for w in words)
    ][:50]
    return types.CallToolResult(
        content=[_text(json.dumps(found))], structured_content={"tools": found}
    )


def _content(block: dict[str, Any]) -> Any:
    return types.TextContent.model_validate(block) if block.get("type") == "text" else block


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _refused(reason: str, message: str) -> types.CallToolResult:
    """A call the vault refused, as a result the model can read (its one-word reason)."""
    return types.CallToolResult(content=[_text(f"refused ({reason}): {message}")], is_error=True)
