"""A tool call to an imported server, traced (issue 54), taken with the OpenTelemetry SDK's
in-memory exporter: over stdio, a `request` span per message; beneath the call's, a
`tool_call` span; beneath that, storage spans and an `mcp.upstream` span whose W3C context
reaches the server (our API_KEY test server answers the `traceparent` its request's
`_meta` carried). No attribute holds the key, the session id or an argument."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_support import OUR_SERVERS
from test_imported_servers import KEY, NAME, SITE, client_config
from test_traces_otel import attributes_hold_no_value
from toolkit_vault.access.principals import Principal
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.settings import VaultSettings
from toolkit_vault.telemetry import traces
from toolkit_vault.toolkits import served
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.transports.stdio import serve_stdio

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine")
ARGUMENT = "tkv-canary-argument-0c7d"


@pytest.fixture
def served_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """test_imported_servers' vault, its calls audited in the store (not a list): the
    audit record's write is one of a call's storage spans."""
    private = Path(tempfile.mkdtemp(prefix="tkv-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox user passes through, as root)
    monkeypatch.setenv(served.SERVERS_DIR_ENV, str(private))
    monkeypatch.setenv(served.SERVER_BINDS_ENV, f"{SITE}:{OUR_SERVERS}")
    monkeypatch.delenv(served.SANDBOX_ENV, raising=False)
    vault = open_vault(home)
    import_package(vault.store, vault.registry, client_config(), "local")
    yield vault
    vault.instances.drop(lambda *_: True)
    vault.store.close()
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    taken = InMemorySpanExporter()
    assert traces.configure_tracing(taken)
    yield taken
    traces.stop_tracing()


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"type": "tool/call/req", "id": f"c-{tool}", "toolkit_name": NAME, "tool_name": tool,
            "arguments": arguments}  # fmt: skip


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent and s.parent.span_id == parent.context.span_id]


def test_a_call_to_an_imported_server_is_one_trace_that_reaches_the_server(
    served_vault: Vault, exporter: InMemorySpanExporter
) -> None:
    lines = [
        {"type": "handshake/req", "capabilities": ["toolkits", "tools"]},
        {"type": "toolkit/configure/req", "toolkit_name": NAME,
         "config": {"api_key": KEY, "pythonpath": str(SITE)}},
        call("trace_context"),
        call("try_read", path=f"/nowhere/{ARGUMENT}"),
    ]  # fmt: skip
    stdin = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    stdout = io.StringIO()
    serve_stdio(served_vault, Principal("local", "agent"), stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    session = answers[0]["session_id"]
    results = {a["req_id"]: a for a in answers if a["type"] == "tool/call/resp"}
    assert set(results) == {"c-trace_context", "c-try_read"}, answers
    told = results["c-trace_context"]["content"][0]["text"]

    spans = list(exporter.get_finished_spans())
    requests = [s for s in spans if s.name == "request"]
    kinds = sorted(str((s.attributes or {}).get("message.type")) for s in requests)
    assert kinds == ["handshake/req", "tool/call/req", "tool/call/req", "toolkit/configure/req"]
    calls = {str((s.attributes or {}).get("tool")): s for s in spans if s.name == "tool_call"}
    assert set(calls) == {"trace_context", "try_read"}  # one each, in either order
    for tool, tool_call in calls.items():
        (request,) = [s for s in requests if s.context.span_id == tool_call.parent.span_id]
        assert (request.attributes or {})["message.type"] == "tool/call/req"
        assert dict(tool_call.attributes or {}) == {"toolkit": NAME, "tool": tool, "outcome": "ok"}
        beneath = children(spans, tool_call)
        (upstream,) = [s for s in beneath if s.name == "mcp.upstream"]
        assert dict(upstream.attributes or {}) == {"toolkit": NAME, "tool": tool}
        assert "storage.write" in {s.name for s in beneath}, beneath  # its record's write
        assert {s.context.trace_id for s in (request, tool_call, *beneath)} == {
            request.context.trace_id
        }
        if tool == "trace_context":  # the server was handed the upstream span's context
            trace_id = f"{upstream.context.trace_id:032x}"
            span_id = f"{upstream.context.span_id:016x}"
            version, told_trace, told_span, flags = told.split("-")
            assert (version, told_trace, told_span) == ("00", trace_id, span_id), told
            assert int(flags, 16) & 1  # sampled
    attributes_hold_no_value(spans, KEY, session, ARGUMENT, "/nowhere")


def test_a_plugin_tool_runs_on_the_engines_thread_within_the_calls_trace(
    home: VaultSettings, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An imported server's call is waited for on the caller's thread; a plugin's tool runs
    on one of the engine's threads, which starts with no trace of its own: the call's
    context is carried there (its spans are the `tool_call`'s children)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins" / "tool_dist"))
    import tkv_tool_plugins
    from opentelemetry import trace

    seen: list[tuple[int, int]] = []
    answer = tkv_tool_plugins.CallingToolkit.call_tool

    def observed(self: Any, name: str, arguments: dict[str, Any], context: Any) -> Any:
        current = trace.get_current_span().get_span_context()
        seen.append((current.trace_id, current.span_id))
        return answer(self, name, arguments, context)

    monkeypatch.setattr(tkv_tool_plugins.CallingToolkit, "call_tool", observed)
    vault = open_vault(home)
    try:
        lines = [
            {"type": "handshake/req", "capabilities": ["toolkits", "tools"]},
            {"type": "toolkit/configure/req", "toolkit_name": "calling",
             "config": {"endpoint": "https://api.test", "api_key": KEY}},
            {"type": "tool/call/req", "id": "c-echo", "toolkit_name": "calling",
             "tool_name": "echo", "arguments": {"text": "hi"}},
        ]  # fmt: skip
        stdin = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
        stdout = io.StringIO()
        serve_stdio(vault, Principal("local", "agent"), stdin, stdout)
    finally:
        vault.store.close()
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["type"] for a in answers][-1] == "tool/call/resp", answers
    (tool_call,) = [s for s in exporter.get_finished_spans() if s.name == "tool_call"]
    assert seen == [(tool_call.context.trace_id, tool_call.context.span_id)]
