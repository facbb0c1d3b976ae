"""What toolkits push: checked, stamped with their session and toolkit, bounded in size and
rate, dropped when it carries a decrypted secret, and delivered on every connection of the
session, in process and through real `toolkit-vault stdio` and `toolkit-vault serve`."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from cli_support import Forked, spawn_cli
from spec_support import CANARY, configure, hello, mail_config, spec_module
from test_http import Server, running_server
from toolkit_vault.core.events import EventGate, EventLimits
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import Message, ToolkitListResponse, ToolkitStatusEvent

pytestmark = pytest.mark.one_database

tkv = spec_module()
SuitePlugin, PushingToolkit = tkv.SuitePlugin, tkv.PushingToolkit
NEIGHBOUR_TOKEN = "tkv-canary-neighbour-2c7d"


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    SuitePlugin.instances.clear()
    PushingToolkit.instances.clear()


def _event(**fields: Any) -> ToolkitStatusEvent:
    return ToolkitStatusEvent(
        **{"configured": False, "status": "error", "message": "token expired", **fields}
    )


def _live() -> Any:
    """The plugin instance configured last (each initialization builds its own)."""
    return [p for p in SuitePlugin.instances if p.config is not None][-1]


def _session_with_mail(vault: Vault) -> tuple[list[Message], str, Any]:
    events: list[Message] = []
    conn, session = hello(vault, push=events.append)
    assert configure(conn, "spec-mail", mail_config())[0]["status"] == "ok"
    return events, session, _live()


def test_emit_event_reaches_every_connection_of_its_session_only(spec_vault: Vault) -> None:
    first, session, plugin = _session_with_mail(spec_vault)
    second: list[Message] = []
    hello(spec_vault, session, push=second.append)
    elsewhere, _, other_plugin = _session_with_mail(spec_vault)
    assert other_plugin is not plugin
    sent = _event()
    emitter = threading.Thread(target=plugin.emit_event, args=(sent,))  # the toolkit's thread
    emitter.start()
    emitter.join()
    for got in (first, second):
        assert len(got) == 1 and isinstance(got[0], ToolkitStatusEvent)
        assert got[0].model_dump(exclude={"id", "ts"}) == {
            "type": "toolkit/status/event",
            "version": "1.0",
            "session_id": session,
            "toolkit_name": "spec-mail",
            "configured": False,
            "status": "error",
            "message": "token expired",
        }
        assert got[0].id != sent.id  # rebuilt by the host, not the toolkit's object
    assert elsewhere == []


def test_the_single_toolkit_shape_gets_a_callback_too(spec_vault: Vault) -> None:
    events: list[Message] = []
    conn, session = hello(spec_vault, push=events.append)
    assert configure(conn, "spec-pager", {"pager_key": CANARY})[0]["status"] == "ok"
    pager = PushingToolkit.instances[-1]
    pager.emit({"type": "toolkit/status/event", "status": "partial", "message": "degraded"})
    assert [(e.session_id, e.toolkit_name, e.status, e.message) for e in events] == [
        (session, "spec-pager", "partial", "degraded")
    ]


@pytest.mark.parametrize("field", ["session_id", "toolkit_name"])
def test_a_toolkit_cannot_speak_for_another_session_or_toolkit(
    spec_vault: Vault, field: str
) -> None:
    events, session, plugin = _session_with_mail(spec_vault)
    victim, victim_session, _ = _session_with_mail(spec_vault)
    forged = {"session_id": victim_session, "toolkit_name": "spec-calendar"}[field]
    plugin.emit_event(_event(**{field: forged}, message="forged"))
    plugin.emit_event(_event(session_id=session, toolkit_name="spec-mail", message="own"))
    assert [e.message for e in events] == ["own"]  # type: ignore[attr-defined]
    assert victim == []


def test_an_event_carrying_a_decrypted_secret_is_dropped(
    spec_vault: Vault, caplog: pytest.LogCaptureFixture
) -> None:
    events, _, plugin = _session_with_mail(spec_vault)
    neighbour, _ = hello(spec_vault)
    configure(neighbour, "spec-calendar", {"calendar": "work", "token": NEIGHBOUR_TOKEN})
    for message in (f"expired: {CANARY}", f"x{CANARY}y", f"see {NEIGHBOUR_TOKEN}"):
        plugin.emit_event(_event(message=message))
    plugin.emit_event(_event(message="token expired"))
    assert [e.message for e in events] == ["token expired"]  # type: ignore[attr-defined]
    assert "carries a secret value" in caplog.text
    assert CANARY not in caplog.text and NEIGHBOUR_TOKEN not in caplog.text


@pytest.mark.parametrize(
    "bad",
    [
        "token expired",
        ToolkitListResponse(),
        {"type": "toolkit/status/event", "configured": "yes"},
        {"type": "toolkit/status/event", "status": "fine"},
        {"type": "toolkit/configure/resp", "status": "ok"},
        ToolkitStatusEvent.model_construct(message={"nested": CANARY}),
    ],
    ids=["text", "list-resp", "wrong-type", "bad-status", "other-message", "unvalidated"],
)
def test_malformed_events_are_dropped(spec_vault: Vault, bad: Any) -> None:
    events, _, plugin = _session_with_mail(spec_vault)
    plugin.emit_event(bad)
    assert events == []


def test_events_are_bounded_in_size_and_rate(spec_vault: Vault) -> None:
    events, _, plugin = _session_with_mail(spec_vault)
    plugin.emit_event(_event(message="x" * 5000))
    plugin.emit_event(_event(message="y" * 3000))
    assert [len(e.message) for e in events] == [3000]  # type: ignore[attr-defined]
    events.clear()
    for n in range(25):
        plugin.emit_event(_event(message=f"event {n}"))
    assert [e.message for e in events] == [f"event {n}" for n in range(9)]  # type: ignore[attr-defined]


def test_the_rate_refills_with_time() -> None:
    now, published = [0.0], list[ToolkitStatusEvent]()
    limits = EventLimits(burst=2, per_second=0.5)
    gate = EventGate(published.append, "s", "t", lambda: True, limits, clock=lambda: now[0])
    for _ in range(3):
        gate(_event())
    now[0] += 2.0
    gate(_event())
    gate(_event())
    assert len(published) == 3 and gate.dropped == {"over the event rate": 2}


def test_a_replaced_or_purged_instance_is_silenced(spec_vault: Vault) -> None:
    events: list[Message] = []
    conn, session = hello(spec_vault, push=events.append)
    configure(conn, "spec-mail", mail_config())
    old = _live()
    configure(conn, "spec-mail", mail_config("tkv-canary-second-key"))
    new = _live()
    old.emit_event(_event(message="from the old one"))
    new.emit_event(_event(message="from the new one"))
    assert [e.message for e in events] == ["from the new one"]  # type: ignore[attr-defined]
    spec_vault.purge("operator", session)
    events.clear()
    new.emit_event(_event(message="after the purge"))
    assert events == []


def test_toolkit_events_go_through_publish_to_the_relay(spec_vault: Vault) -> None:
    relayed: list[ToolkitStatusEvent] = []
    spec_vault.relay = relayed.append  # what PgEventRelay.start() sets on PostgreSQL
    events, session, plugin = _session_with_mail(spec_vault)
    plugin.emit_event(_event(message="to every replica"))
    assert [(e.session_id, e.message) for e in relayed][-1] == (session, "to every replica")
    assert relayed[-1] == events[-1]


# -- end to end: real processes ---------------------------------------------------------------


class Lines:
    """JSON lines from a pipe, read on a thread so a test can wait with a timeout."""

    def __init__(self, pipe: IO[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.seen.append(line)
            self.queue.put(line)

    def next(self) -> dict[str, Any]:
        return dict(json.loads(self.queue.get(timeout=30)))


def _drop_event(directory: Path, name: str, **spec: Any) -> None:
    """Write one event file for the plugin's watcher, whole (renamed into place)."""
    partial = directory / f".{name}.tmp"
    partial.write_text(json.dumps(spec))
    partial.rename(directory / f"{name}.json")


def _expected(session: str, message: str) -> dict[str, Any]:
    return {
        "type": "toolkit/status/event",
        "version": "1.0",
        "session_id": session,
        "toolkit_name": "spec-mail",
        "configured": False,
        "status": "error",
        "message": message,
    }


def _stdio_session(
    env: dict[str, str], log: Path, session: str | None, config: dict[str, Any] | None
) -> tuple[Forked, Lines, str]:
    with log.open("a") as stderr:
        proc = spawn_cli(
            ["stdio"], env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    assert proc.stdin is not None and proc.stdout is not None
    lines = Lines(proc.stdout)
    hello_req: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
    if session:
        hello_req["session_id"] = session
    proc.stdin.write(json.dumps(hello_req) + "\n")
    proc.stdin.flush()
    answer = lines.next()
    assert answer["type"] == "handshake/resp", answer
    if config is not None:
        request = {"type": "toolkit/configure/req", "toolkit_name": "spec-mail", "config": config}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        assert lines.next()["status"] == "ok"
        assert lines.next()["type"] == "toolkit/status/event"
    return proc, lines, str(answer["session_id"])


def _finish(proc: Forked) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_emit_event_reaches_a_stdio_client_also_after_resume_in_a_new_process(
    home: object, spec_cli_env: dict[str, str], tmp_path: Path
) -> None:
    watch, log = tmp_path / "watch", tmp_path / "stdio.log"
    watch.mkdir()
    config = mail_config(watch=str(watch))
    proc, lines, session = _stdio_session(spec_cli_env, log, None, config)
    _drop_event(watch, "01", message="leaking", leak=True)
    _drop_event(watch, "02", message="token expired at {endpoint}")
    event = lines.next()
    assert set(event) == {*_expected(session, ""), "id", "ts"}
    assert {k: event[k] for k in _expected(session, "")} == _expected(
        session, "token expired at https://mail.example.test"
    )
    _finish(proc)
    for old in watch.glob("*.json"):
        old.unlink()
    again, again_lines, same = _stdio_session(spec_cli_env, log, session, None)
    assert same == session  # re-initialized from the store in this new process
    _drop_event(watch, "03", message="expired again", leak=True)
    _drop_event(watch, "04", message="expired again at {endpoint}")
    event = again_lines.next()
    assert {k: event[k] for k in _expected(session, "")} == _expected(
        session, "expired again at https://mail.example.test"
    )
    _finish(again)
    output = "".join(lines.seen + again_lines.seen) + log.read_text()
    assert CANARY not in output and "leaking" not in output
    assert log.read_text().count("carries a secret value") == 2  # emitted, and dropped
    assert "spec_suite" not in log.read_text()  # loaded, not "failed to load"


def test_emit_event_reaches_two_websocket_clients_of_the_session(
    vault: Vault, spec_cli_env: dict[str, str], tmp_path: Path
) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    with running_server(spec_cli_env, tmp_path / "serve.log") as base:
        server = Server(base, vault)
        token = server.token("agent", "spec-agent")
        with server.socket(token) as first, server.socket(token) as second:
            first.send(json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]}))
            session = json.loads(first.recv(timeout=30))["session_id"]
            configure_req = {
                "type": "toolkit/configure/req",
                "toolkit_name": "spec-mail",
                "config": mail_config(watch=str(watch)),
            }
            first.send(json.dumps(configure_req))
            assert json.loads(first.recv(timeout=30))["status"] == "ok"
            assert json.loads(first.recv(timeout=30))["type"] == "toolkit/status/event"
            resume = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
            second.send(json.dumps(resume))
            assert json.loads(second.recv(timeout=30))["session_id"] == session
            _drop_event(watch, "01", message="leaking", leak=True)
            _drop_event(watch, "02", message="token expired at {endpoint}")
            for socket in (first, second):
                event = json.loads(socket.recv(timeout=30))
                assert {k: event[k] for k in _expected(session, "")} == _expected(
                    session, "token expired at https://mail.example.test"
                )
    log = (tmp_path / "serve.log").read_text()
    assert CANARY not in log and "carries a secret value" in log
