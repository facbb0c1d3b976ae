"""OpenTelemetry traces (issue 54), taken with the SDK's in-memory exporter: a span per
request on stdio and HTTP with storage spans beneath it, W3C trace context taken from a
caller's `traceparent` and passed on (`inject`), a failure marked by its type only, no
attribute carrying a value (the secret, the session id, the token), and nothing at all
while tracing is off. The tool-call and MCP upstream spans are the engine's to open
(`traces.span("tool_call", ...)`, `"mcp.upstream"`)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from test_http_app import app_for
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.telemetry import traces
from toolkit_vault.transports.stdio import serve_stdio

pytestmark = pytest.mark.one_database

CANARY = "tkv-canary-trace-5e1b"
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
CONFIGURE = {
    "type": "toolkit/configure/req",
    "toolkit_name": "secretive",
    "config": {"endpoint": "https://x.test", "api_key": CANARY},
}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    taken = InMemorySpanExporter()
    assert traces.configure_tracing(taken)
    yield taken
    traces.stop_tracing()


def attributes_hold_no_value(spans: list[ReadableSpan], *never: str) -> None:
    for span in spans:
        assert span.name in traces.SPANS
        attributes = dict(span.attributes or {})
        assert set(attributes) <= traces.ATTRIBUTES | {"error.type"}, attributes
        said = json.dumps(attributes)
        for value in never:
            assert value not in said, (span.name, attributes)


def test_stdio_requests_have_spans_with_storage_beneath_and_no_value(
    vault: Vault, exporter: InMemorySpanExporter
) -> None:
    lines = [HELLO, CONFIGURE, {"type": "toolkit/list/req"}]
    stdin = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines) + b"{oops\n")
    stdout = io.StringIO()
    serve_stdio(vault, Principal("local", "agent"), stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    session = answers[0]["session_id"]
    assert [a["type"] for a in answers if a["type"] != "toolkit/status/event"] == [
        "handshake/resp", "toolkit/configure/resp", "toolkit/list/resp", "error",
    ]  # fmt: skip
    spans = list(exporter.get_finished_spans())
    requests = [s for s in spans if s.name == "request"]
    assert [(s.attributes or {}).get("message.type") for s in requests] == [
        "handshake/req", "toolkit/configure/req", "toolkit/list/req", "invalid",
    ]  # fmt: skip
    assert {(s.attributes or {}).get("transport") for s in requests} == {"stdio"}
    configure = requests[1]
    beneath = [s for s in spans if s.parent and s.parent.span_id == configure.context.span_id]
    assert "storage.write" in {s.name for s in beneath}
    assert all(s.context.trace_id == configure.context.trace_id for s in beneath)
    attributes_hold_no_value(spans, CANARY, session)


def test_http_continues_the_callers_trace_and_says_nothing_more(
    vault: Vault, home: VaultSettings, exporter: InMemorySpanExporter
) -> None:
    token = create_token(vault.store, "agent", "traced")[1]
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {
        "Authorization": f"Bearer {token}",
        "traceparent": f"00-{trace_id}-{parent_id}-01",
    }
    with TestClient(app_for(vault, home)) as client:
        hello = client.post("/a2e", json=HELLO, headers=headers).json()
        session = hello["session_id"]
        done = client.post("/a2e", json=CONFIGURE, headers={**headers, "A2E-Session": session})
        assert done.json()["status"] == "ok"
    spans = list(exporter.get_finished_spans())
    requests = [s for s in spans if s.name == "request"]
    assert len(requests) == 2
    for span in requests:
        assert f"{span.context.trace_id:032x}" == trace_id  # the caller's trace, continued
        assert span.parent is not None and f"{span.parent.span_id:016x}" == parent_id
        attributes = dict(span.attributes or {})
        assert attributes["transport"] == "http" and attributes["http.response.status_code"] == 200
    assert [(s.attributes or {}).get("message.type") for s in requests] == [
        "handshake/req", "toolkit/configure/req",
    ]  # fmt: skip
    assert any(s.name == "storage.write" for s in spans)
    attributes_hold_no_value(spans, CANARY, session, token)


def test_context_passed_on_and_a_failure_marked_by_its_type_only(
    exporter: InMemorySpanExporter,
) -> None:
    with traces.span("request", transport="mcp", message__type="tools/call") as outer:
        carrier = traces.inject({})
        assert traces.environment() == {"TRACEPARENT": carrier["traceparent"]}  # a child's
        outer.set(toolkit="github", tool=f"say {CANARY}", outcome="ok", session="s-1")
    (done,) = exporter.get_finished_spans()
    version, trace_id, span_id, _flags = carrier["traceparent"].split("-")
    assert (version, trace_id) == ("00", f"{done.context.trace_id:032x}")
    assert span_id == f"{done.context.span_id:016x}"
    assert dict(done.attributes or {}) == {
        "transport": "mcp",
        "message.type": "tools/call",
        "toolkit": "github",
        "outcome": "ok",
    }  # fmt: skip: a tool named with a space is not a name; `session` is no attribute
    with (
        traces.continued(carrier),
        pytest.raises(ValueError),
        traces.span("mcp.upstream", toolkit="github"),
    ):
        raise ValueError(f"the upstream said {CANARY}")
    child = exporter.get_finished_spans()[-1]
    assert child.parent is not None and child.parent.span_id == done.context.span_id
    assert child.status.status_code.name == "ERROR" and child.status.description is None
    assert dict(child.attributes or {}) == {"toolkit": "github", "error.type": "ValueError"}
    assert not child.events  # no exception event: its message may hold a value
    attributes_hold_no_value(list(exporter.get_finished_spans()), CANARY)


def test_nothing_is_traced_while_tracing_is_off() -> None:
    taken = InMemorySpanExporter()
    assert traces.configure_tracing(taken)
    traces.stop_tracing()
    with traces.span("request", transport="http") as span:
        span.set(outcome="ok")
        assert traces.inject({}) == {} and traces.environment() == {}
    assert not taken.get_finished_spans() and not traces.tracing()
    assert traces.span("not-a-span-name") is traces.span("request")  # the no-op, shared
