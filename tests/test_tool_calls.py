"""`tool/call` in process, on SQLite and PostgreSQL: a call reaches only the instance live
for its session from the current version, its arguments are checked before the tool runs,
a result carrying the scope's secret is withheld, and a purge, a reconfigure, a cancel or
the connection closing ends a call in flight at once. Every call leaves one record."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spec_support import AGENT, configure, hello, send
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core import connection as connection_module
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import ToolCallRequest, parse_message
from toolkit_vault.settings import VaultSettings
from toolkit_vault.tools.calls import CallEngine, CallLimits, CallRecord
from toolkit_vault.tools.withhold import Withholder

TOOL_DIST = Path(__file__).parent / "plugins" / "tool_dist"
KEY = "tkv-canary-call-5e0c9a"
BOTH = ("toolkits", "tools")


@pytest.fixture
def tool_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault with the `calling` toolkit installed (this test only), its call records
    kept in `vault.records`."""
    monkeypatch.syspath_prepend(str(TOOL_DIST))
    opened = open_vault(home)
    records: list[CallRecord] = []
    opened.record_call = records.append
    opened.records = records  # type: ignore[attr-defined]
    calling().invoked.clear()
    calling().saw_cancel.clear()
    calling().started.clear()
    yield opened
    opened.store.close()


def calling() -> Any:
    import tkv_tool_plugins

    return tkv_tool_plugins.CallingToolkit


def call(conn: A2EConnection, toolkit: str, tool: str, **arguments: Any) -> dict[str, Any]:
    message = {
        "type": "tool/call/req",
        "id": f"c-{time.monotonic_ns()}",
        "toolkit_name": toolkit,
        "tool_name": tool,
        "arguments": arguments,
    }
    (answer,) = send(conn, message)
    assert answer["req_id"] == message["id"], answer
    return answer


def reason(answer: dict[str, Any]) -> str:
    assert (answer["type"], answer["code"]) == ("error", "RUNTIME_ERROR"), answer
    return str(answer["details"][0]["reason"])


def configured(vault: Vault, **config: Any) -> tuple[A2EConnection, str]:
    conn, session = hello(vault, capabilities=BOTH)
    config = config or {"endpoint": "https://api.test", "api_key": KEY}
    assert configure(conn, "calling", config)[0]["status"] == "ok"
    return conn, session


def outcomes(vault: Vault) -> list[tuple[str, str]]:
    return [(r.tool, r.outcome) for r in vault.records]  # type: ignore[attr-defined]


def test_tool_list_carries_the_input_schemas(tool_vault: Vault, tmp_path: Path) -> None:
    conn, _ = configured(tool_vault)
    configure(conn, "filesystem", {"root_dir": str(tmp_path)})
    (listed,) = send(conn, {"type": "tool/list/req", "id": "t1"})
    tools = {(t["toolkit"], t["name"]): t for t in listed["tools"]}
    echo = tools[("calling", "echo")]
    assert echo["input_schema"]["required"] == ["text"]
    assert echo["annotations"] == {"readOnlyHint": True} and "output_schema" not in echo
    assert tools[("calling", "slow")]["output_schema"] == {"type": "object"}
    assert tools[("filesystem", "read_file")]["input_schema"]["required"] == ["path"]
    assert KEY not in json.dumps(listed)


def test_filesystem_write_then_read_and_a_path_outside_is_refused_unechoed(
    tool_vault: Vault, tmp_path: Path
) -> None:
    conn, _ = hello(tool_vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": str(tmp_path)})
    written = call(conn, "filesystem", "write_file", path="notes/a.txt", content="hello there")
    assert (written["type"], written["is_error"]) == ("tool/call/resp", False), written
    assert (tmp_path / "notes" / "a.txt").read_text() == "hello there"
    read = call(conn, "filesystem", "read_file", path="notes/a.txt")
    assert read["content"] == [{"type": "text", "text": "hello there"}]
    assert (read["toolkit_name"], read["tool_name"]) == ("filesystem", "read_file")
    (tmp_path.parent / "outside-secret.txt").write_text("not yours")
    for path in ("../outside-secret.txt", "/etc/passwd-probe-7f3"):
        outside = call(conn, "filesystem", "read_file", path=path)
        assert outside["type"] in ("tool/call/resp", "error")
        text = json.dumps(outside)
        assert (
            "outside-secret" not in text and "passwd-probe" not in text and "not yours" not in text
        )
        if outside["type"] == "tool/call/resp":
            assert outside["is_error"] is True
    assert outcomes(tool_vault)[:2] == [("write_file", "ok"), ("read_file", "ok")]


def test_refusals_before_the_tool_runs(tool_vault: Vault, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    conn, _ = hello(tool_vault, capabilities=BOTH)
    assert reason(call(conn, "calling", "echo", text="hi")) == "not_configured"
    assert reason(call(conn, "nope", "echo", text="hi")) == "unknown_toolkit"
    configure(conn, "calling", {"endpoint": "https://api.test", "api_key": KEY})
    assert reason(call(conn, "calling", "nope")) == "unknown_tool"
    bad = call(conn, "calling", "echo", text="x" * 101, value="tkv-canary-argument-1f2e")
    assert reason(bad) == "invalid_arguments"
    assert {d.get("keyword") for d in bad["details"][1:]} == {"maxLength", "additionalProperties"}
    assert "tkv-canary-argument" not in json.dumps(bad) + caplog.text
    assert calling().invoked == []  # none of them reached the tool
    assert call(conn, "calling", "echo", text="hi")["content"][0]["text"] == "hi"
    assert calling().invoked == ["echo"]
    assert [o for _, o in outcomes(tool_vault)] == ["refused"] * 4 + ["ok"]


def test_a_tool_named_but_not_declared_takes_any_object(tool_vault: Vault) -> None:
    conn, _ = configured(tool_vault)
    answer = call(conn, "calling", "undeclared", b=1, a={"x": [1]})
    assert answer["structured_content"] == {"keys": ["a", "b"]}


def test_a_toolkit_without_calls_is_refused_before_anything_runs(tool_vault: Vault) -> None:
    conn, _ = hello(tool_vault, capabilities=BOTH)
    config = {"endpoint": "https://x.test", "api_key": KEY}
    assert configure(conn, "secretive", config)[0]["status"] == "ok"
    assert reason(call(conn, "secretive", "call_api")) == "unavailable"
    assert outcomes(tool_vault) == [("call_api", "refused")]


def test_tool_call_needs_the_tools_capability(tool_vault: Vault) -> None:
    conn, _ = hello(tool_vault)  # toolkits only
    configure(conn, "calling", {"endpoint": "https://api.test", "api_key": KEY})
    answer = call(conn, "calling", "echo", text="hi")
    assert answer["code"] == "CAPABILITY_NOT_NEGOTIATED"
    assert calling().invoked == []


@pytest.mark.parametrize(
    "form", ["plain", "base64", "base64url", "hex", "percent", "structured", "key", "vault_error"]
)
def test_a_result_carrying_the_secret_is_withheld(
    tool_vault: Vault, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    conn, _ = configured(tool_vault)
    answer = call(conn, "calling", "leak", form=form)
    assert reason(answer) == "withheld"
    assert calling().invoked == ["leak"]
    assert KEY not in json.dumps(answer) + caplog.text
    assert outcomes(tool_vault) == [("leak", "withheld")]
    assert KEY not in json.dumps([r.fields() for r in tool_vault.records])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("secret", "value", "found"),
    [
        ("sk-plain-0123", [[{"type": "text", "text": "a sk-plain-0123 b"}], None], True),
        ("sk-plain-0123", [[], {"sk-plain-0123": 1}], True),  # a key
        ("sk-plain-0123", [[{"type": "text", "text": "c2stcGxhaW4tMDEyMw"}], None], True),
        ("sk-plain-0123", [[{"type": "text", "text": "nothing"}], {"n": 1.5}], False),
        ("12,345,678", [[], {"n": [12, 345, 678]}], False),  # in the text, in no value
        ("4567890", [[], {"n": 1234567890}], True),  # a number's text
        ('pa"ss-word', [[{"type": "text", "text": 'x pa"ss-word y'}], None], True),
        ("back\\slash", [[{"type": "text", "text": "back\\slash"}], None], True),
        ("line\nbreak", [[], {"t": "line\nbreak"}], True),
        ("line\nbreak", [[], {"t": "line break"}], False),
    ],
)
def test_the_results_text_is_searched_as_its_values_are(
    secret: str, value: list[Any], found: bool
) -> None:
    """The withheld check searches the result's JSON text once (`withholds_json`) and the
    values one by one only where that text cannot answer: the same verdict either way,
    for secrets JSON escapes too (a quote, a backslash, a control character)."""
    withholder = Withholder([secret])
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert withholder.withholds(value) is found
    assert withholder.withholds_json(text, value) is found


def test_a_tool_that_fails_says_only_how(
    tool_vault: Vault, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    conn, _ = configured(tool_vault)
    answer = call(conn, "calling", "leak", form="error")
    assert answer["is_error"] is True
    assert answer["content"] == [{"type": "text", "text": "the tool failed (RuntimeError)"}]
    assert KEY not in caplog.text
    assert outcomes(tool_vault) == [("leak", "tool_error")]


def test_a_result_is_sent_as_plain_json_or_not_at_all(tool_vault: Vault) -> None:
    conn, _ = configured(tool_vault)
    odd = call(conn, "calling", "leak", form="not_json")
    assert (odd["is_error"], odd["structured_content"]) == (True, None)
    assert odd["content"] == [
        {"type": "text", "text": "the tool did not answer with a tool result"}
    ]
    keyed = call(conn, "calling", "leak", form="int_key")  # a key JSON cannot carry as is
    assert (keyed["is_error"], keyed["structured_content"]) == (True, None)


def test_another_session_cannot_reach_the_instance(tool_vault: Vault) -> None:
    configured(tool_vault)
    other, _ = hello(tool_vault, capabilities=BOTH)
    assert reason(call(other, "calling", "echo", text="hi")) == "not_configured"
    assert calling().invoked == []


def test_a_principal_config_serves_its_sessions(tool_vault: Vault) -> None:
    conn, _ = hello(tool_vault, capabilities=BOTH)
    message = {
        "type": "toolkit/configure/req",
        "toolkit_name": "calling",
        "scope": "principal",
        "config": {"endpoint": "https://api.test", "api_key": KEY},
    }
    assert send(conn, message)[0]["status"] == "ok"
    later, _ = hello(tool_vault, capabilities=BOTH)
    assert call(later, "calling", "echo", text="hi")["content"][0]["text"] == "hi"
    assert reason(call(later, "calling", "leak", form="plain")) == "withheld"


def test_a_purge_made_by_another_process_is_seen_before_the_call(
    tool_vault: Vault, home: VaultSettings
) -> None:
    conn, session = configured(tool_vault)
    assert call(conn, "calling", "echo", text="hi")["is_error"] is False
    elsewhere = open_vault(home)
    try:
        elsewhere.purge("operator", session, "calling")
    finally:
        elsewhere.store.close()
    assert reason(call(conn, "calling", "echo", text="again")) == "not_configured"
    assert calling().invoked == ["echo"]


def _in_flight(
    conn: A2EConnection, tool: str = "slow", **arguments: Any
) -> tuple[threading.Thread, list[dict[str, Any]]]:
    answers: list[dict[str, Any]] = []
    message = {
        "type": "tool/call/req",
        "id": "slow-1",
        "toolkit_name": "calling",
        "tool_name": tool,
        "arguments": arguments or {"seconds": 30},
    }
    thread = threading.Thread(target=lambda: answers.extend(send(conn, message)))
    thread.start()
    assert calling().started.wait(10)
    return thread, answers


def _answered_at_once(thread: threading.Thread, answers: list[dict[str, Any]]) -> str:
    thread.join(5)
    assert not thread.is_alive()
    (answer,) = answers
    return reason(answer)


def test_a_purge_during_a_slow_call_cancels_it(tool_vault: Vault) -> None:
    conn, session = configured(tool_vault)
    thread, answers = _in_flight(conn)
    tool_vault.purge("operator", session, "calling")
    assert _answered_at_once(thread, answers) == "cancelled"
    deadline = time.monotonic() + 5
    while not calling().saw_cancel and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calling().saw_cancel == [True]  # the tool was told
    assert outcomes(tool_vault) == [("slow", "cancelled")]
    assert reason(call(conn, "calling", "echo", text="hi")) == "not_configured"


def test_a_reconfigure_during_a_slow_call_cancels_it(tool_vault: Vault) -> None:
    conn, _ = configured(tool_vault)
    thread, answers = _in_flight(conn)
    other = connect(tool_vault, AGENT)
    other.bind(conn.session_id or "")
    configure(other, "calling", {"endpoint": "https://api2.test", "api_key": KEY + "-2"})
    assert _answered_at_once(thread, answers) == "cancelled"
    assert call(conn, "calling", "echo", text="hi")["is_error"] is False


def test_tool_cancel_and_closing_the_connection_cancel(tool_vault: Vault) -> None:
    conn, _ = configured(tool_vault)
    thread, answers = _in_flight(conn)
    (cancelled,) = send(conn, {"type": "tool/cancel/req", "id": "x1", "call_id": "slow-1"})
    assert (cancelled["type"], cancelled["cancelled"]) == ("tool/cancel/resp", True)
    assert _answered_at_once(thread, answers) == "cancelled"
    (nothing,) = send(conn, {"type": "tool/cancel/req", "id": "x2", "call_id": "slow-1"})
    assert nothing["cancelled"] is False
    calling().started.clear()
    thread, answers = _in_flight(conn)
    conn.close()
    assert _answered_at_once(thread, answers) == "cancelled"


def test_calls_beyond_a_connections_limit_are_refused_busy_and_recorded(
    tool_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection_module, "CALLS_IN_FLIGHT", 1)
    conn, _ = configured(tool_vault)
    thread, answers = _in_flight(conn)
    assert reason(call(conn, "calling", "echo", text="one more")) == "busy"
    conn.close()
    assert _answered_at_once(thread, answers) == "cancelled"
    assert sorted(outcomes(tool_vault)) == [("echo", "refused"), ("slow", "cancelled")]
    assert calling().invoked == ["slow"]


def test_a_call_past_its_deadline_answers_timeout(tool_vault: Vault) -> None:
    tool_vault.call_engine = CallEngine(CallLimits(deadline=30, deadlines={"calling": 0.3}))
    conn, _ = configured(tool_vault)
    started = time.monotonic()
    assert reason(call(conn, "calling", "slow", seconds=20)) == "timeout"
    assert time.monotonic() - started < 5
    assert outcomes(tool_vault) == [("slow", "timeout")]


def test_a_result_over_the_limit_is_refused(tool_vault: Vault) -> None:
    tool_vault.call_engine = CallEngine(CallLimits(result_bytes=64))
    conn, _ = configured(tool_vault)
    assert reason(call(conn, "calling", "echo", text="y" * 90)) == "too_large"


def test_call_limits_are_read_from_the_environment() -> None:
    limits = CallLimits.from_environment(
        {"TOOLKIT_VAULT_TOOL_DEADLINE": "12", "TOOLKIT_VAULT_TOOL_DEADLINES": "a=1.5, b=60"}
    )
    assert (limits.deadline_of("a"), limits.deadline_of("b"), limits.deadline_of("c")) == (
        1.5,
        60,
        12,
    )
    for bad in ({"TOOLKIT_VAULT_TOOL_DEADLINE": "0"}, {"TOOLKIT_VAULT_TOOL_DEADLINES": "a"}):
        with pytest.raises(ValueError):
            CallLimits.from_environment(bad)


def test_an_expiry_during_a_slow_call_cancels_it(tool_vault: Vault) -> None:
    conn, session = configured(tool_vault)
    thread, answers = _in_flight(conn)
    source = tool_vault.instances.source(session, "calling")
    assert source is not None
    tool_vault.end_expired(session, "calling", source, time.time())
    assert _answered_at_once(thread, answers) == "cancelled"
    assert reason(call(conn, "calling", "echo", text="hi")) == "not_configured"


def test_a_principal_purge_cancels_the_calls_made_from_its_config(tool_vault: Vault) -> None:
    conn, _ = hello(tool_vault, capabilities=BOTH)
    message = {
        "type": "toolkit/configure/req",
        "toolkit_name": "calling",
        "scope": "principal",
        "config": {"endpoint": "https://api.test", "api_key": KEY},
    }
    assert send(conn, message)[0]["status"] == "ok"
    thread, answers = _in_flight(conn)
    tool_vault.purge_principal("operator", AGENT.principal_id, "calling")
    assert _answered_at_once(thread, answers) == "cancelled"
    assert reason(call(conn, "calling", "echo", text="hi")) == "not_configured"


def test_a_tool_that_never_returns_does_not_keep_the_process_from_ending() -> None:
    """Past its deadline the caller is answered, and the process can still end: the tool's
    thread is a daemon (a `ThreadPoolExecutor`'s is joined at exit, forever here)."""
    script = """
import threading
from toolkit_vault.tools.calls import CallEngine, CallLimits, Cancellation
from toolkit_vault.tools.refusals import CallRefused
from toolkit_vault.tools.withhold import Withholder
engine = CallEngine(CallLimits(deadline=0.2))
try:
    forever = lambda context: threading.Event().wait()
    engine.run("x", forever, Cancellation(), lambda: Withholder([]))
except CallRefused as exc:
    print(exc.reason)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == "timeout"


def test_a_cancel_read_before_its_calls_thread_runs_still_cancels_it(tool_vault: Vault) -> None:
    """A transport registers a call as it reads it (`expect_call`), so a `tool/cancel/req`
    read next finds it even when the call's own thread has not started yet (a busy machine):
    the call then ends `cancelled` at once and its tool never runs."""
    conn, _ = configured(tool_vault)
    request = parse_message(json.dumps(
        {"type": "tool/call/req", "id": "s1", "toolkit_name": "calling", "tool_name": "slow",
         "arguments": {"seconds": 30}}
    ))  # fmt: skip
    assert isinstance(request, ToolCallRequest)
    cancellation = conn.expect_call(request)
    (cancelled,) = send(conn, {"type": "tool/cancel/req", "id": "x1", "call_id": "s1"})
    assert cancelled["cancelled"] is True
    started = time.monotonic()
    (answer,) = conn.call(request, cancellation).lines()
    assert reason(json.loads(answer)) == "cancelled"
    assert time.monotonic() - started < 5
    assert calling().invoked == []


def test_a_call_never_waits_behind_a_running_one_while_threads_are_left() -> None:
    """A job submitted while an idle thread is taking another gets a thread of its own: it
    waited out the first one's tool when the idle thread was counted for both (a quick call
    stuck behind a slow one on a busy machine). The window is widened here: a thread pauses
    between taking a job and saying so."""
    from toolkit_vault.tools.calls import _ToolThreads

    class Slowly:
        def __init__(self, jobs: Any) -> None:
            self.jobs = jobs

        def put(self, item: Any) -> None:
            self.jobs.put(item)

        def get(self) -> Any:
            item = self.jobs.get()
            time.sleep(0.2)  # taken, not yet counted as taken
            return item

    threads = _ToolThreads(64, "test-tool")
    threads._jobs = Slowly(threads._jobs)  # type: ignore[assignment]
    threads.submit(lambda: None).result(timeout=5)  # one thread started, now idle
    time.sleep(0.3)
    release = threading.Event()
    slow = threads.submit(release.wait, 10)
    quick = threads.submit(lambda: "quick")  # while the idle thread is taking `slow`
    try:
        assert quick.result(timeout=5) == "quick"
    finally:
        release.set()
        slow.result(timeout=5)
