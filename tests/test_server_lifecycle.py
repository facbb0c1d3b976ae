"""The life of an imported local server (issue 51), with real processes in the real sandbox:
our API_KEY test server (tests/mcp_servers/api_key_server.py), imported from a client
config entry and configured over A2E, is launched once by a configure (its check's process
runs on, taken only by an instance of that very launch) or else at its first need, is one
process for every session of a principal's config, lets a call on the old version finish
after a reconfigure while new calls reach the new version's process, stops when idle and
starts again on demand, is restarted after a crash (the session hears of it), is refused
`busy` beyond the cap, and shows its state in `toolkits show` and `/v1/toolkits/{name}`.
An unconfined launch is audited, and `serve` says the sandbox is off at start-up.

Lifecycle tests run on SQLite (the store plays no part in them); the audit test runs on
both databases.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from starlette.testclient import TestClient

from mcp_support import OUR_SERVERS, alive
from spec_support import AGENT, hello, send
from test_imported_servers import KEY, NAME, SITE, call, client_config, text
from toolkit_vault import sandbox
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.wording import SENTENCES
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.telemetry.metrics import METRICS
from toolkit_vault.toolkits import served, server_launch
from toolkit_vault.toolkits.checked_servers import CheckedServers
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.toolkits.server_launch import stop_started
from toolkit_vault.toolkits.server_limits import IDLE_ENV, MAX_SERVERS_ENV, ServerLimits
from toolkit_vault.transports.http_api import Limits, create_app

BOTH = ("toolkits", "tools")
SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine")


@pytest.fixture
def life(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault with our API_KEY server imported; what the test set in the environment
    (idle time, cap, sandbox) is read when it opens."""
    private = Path(tempfile.mkdtemp(prefix="tkv-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox user passes through, as root)
    monkeypatch.setenv(served.SERVERS_DIR_ENV, str(private))
    monkeypatch.setenv(served.SERVER_BINDS_ENV, f"{SITE}:{OUR_SERVERS}")
    vault = open_vault(home)
    vault.record_call = lambda record: None
    import_package(vault.store, vault.registry, client_config(), "local")
    yield vault
    vault.instances.drop(lambda *_: True)  # every server this test started stops
    vault.store.engine.dispose()


def session_with(vault: Vault, push: Callable[[Any], None] | None = None) -> A2EConnection:
    conn, _ = hello(vault, capabilities=BOTH, push=push)
    return conn


def configured(vault: Vault, key: str = KEY, **extra: Any) -> A2EConnection:
    conn = session_with(vault)
    answer = configure_as(conn, key, **extra)
    assert answer["status"] == "ok", answer
    return conn


def configure_as(conn: A2EConnection, key: str, **extra: Any) -> dict[str, Any]:
    message = {
        "type": "toolkit/configure/req",
        "toolkit_name": NAME,
        "config": {"api_key": key, "pythonpath": str(SITE)},
        **extra,
    }
    return send(conn, message)[0]


def instance(vault: Vault, conn: A2EConnection) -> served.ServedToolkit:
    found = vault.instances.instance(conn.session_id or "", NAME)
    assert isinstance(found, served.ServedToolkit)
    return found


def until(check: Callable[[], bool], seconds: float) -> bool:
    ends = time.monotonic() + seconds
    while not check():
        if time.monotonic() > ends:
            return False
        time.sleep(0.02)
    return True


def patient_checks(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configure's check waits for the server however loaded the machine (a check that
    gives up passes as "slow to start: not checked", and keeps nothing)."""
    monkeypatch.setattr(served, "VERIFY_TIMEOUT", 50.0)
    vault.verify_policy = dataclasses.replace(vault.verify_policy, deadline=60.0)


def counted_launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every launch of a server from now on (its argv), through the sandbox's `launch`."""
    launches: list[tuple[str, ...]] = []
    real = sandbox.launch  # what server_launch calls

    def counting(argv: Any, *args: Any, **kwargs: Any) -> Any:
        launches.append(tuple(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(server_launch, "launch", counting)
    return launches


@SQLITE
def test_a_configure_launches_its_server_once_the_checked_process_runs_on(
    life: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    patient_checks(life, monkeypatch)
    launches = counted_launches(monkeypatch)
    conn = configured(life)  # its check starts the server with the config
    server = instance(life, conn)
    assert len(launches) == 1 and server.pid is not None and alive(server.pid)
    assert (server.state or {})["state"] == "running"
    pid = server.pid
    assert text(call(conn, "whoami")) == "authorized"
    assert server.pid == pid and len(launches) == 1  # no second launch
    assert served._checked.waiting() == 0


@SQLITE
def test_a_checked_server_is_taken_only_by_its_own_launch_and_stopped_when_not(
    life: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(served, "_checked", CheckedServers(stop_started, keep=1.0))
    patient_checks(life, monkeypatch)
    checker = life.registry.get(NAME).factory()
    assert isinstance(checker, served.ServedToolkit)
    checker.verify({"api_key": KEY, "pythonpath": str(SITE)})  # kept, not stopped
    ((kept, _),) = served._checked._waiting.values()
    assert kept[0].pid is not None and alive(kept[0].pid)
    other = life.registry.get(NAME).factory()
    assert isinstance(other, served.ServedToolkit)
    other.initialize({"api_key": "sk-another-key", "pythonpath": str(SITE)})
    other.serve_from(life.servers, ("another-scope", 1))  # another config: not its server
    assert other.pid is None and served._checked.waiting() == 1
    assert until(lambda: not alive(kept[0].pid or 0), 5.0)  # not taken: stopped
    assert served._checked.waiting() == 0
    other.stop()


@SQLITE
def test_a_server_no_check_left_running_starts_at_its_first_need(
    life: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(served, "_checked", CheckedServers(stop_started, keep=0.5))
    monkeypatch.setattr(served._checked, "take", lambda digest: None)  # as if none was kept
    conn = configured(life)
    server = instance(life, conn)
    assert server.pid is None and (server.state or {})["state"] == "stopped"
    assert text(call(conn, "whoami")) == "authorized"
    assert server.pid is not None and alive(server.pid)
    assert (server.state or {})["state"] == "running"


@SQLITE
def test_a_server_a_configure_check_started_is_adopted_not_launched_again(life: Vault) -> None:
    made = life.registry.get(NAME).factory()
    assert isinstance(made, served.ServedToolkit)
    made.initialize({"api_key": KEY, "pythonpath": str(SITE)})
    started = made.start_server()  # as a configure's check would
    made.adopt(started)
    made.serve_from(life.servers, ("a-scope", 1))
    pid = started[0].pid
    assert pid is not None and made.pid == pid  # the table runs the one it was handed
    made.ready()
    assert made.pid == pid and "whoami" in made.served_tools()
    made.stop()
    assert until(lambda: not alive(pid), 1.0)


@SQLITE
def test_the_sessions_of_a_principals_config_share_one_process(life: Vault) -> None:
    first = configured(life, scope="principal")
    second = session_with(life)
    assert text(call(first, "whoami")) == "authorized"
    assert text(call(second, "whoami")) == "authorized"
    assert instance(life, first).pid == instance(life, second).pid
    (process,) = life.servers.processes()
    assert process.shown()["instances"] == 2 and process.key[0].startswith("principal:")


@SQLITE
def test_a_reconfigure_lets_the_old_versions_call_finish(
    life: Vault,
) -> None:
    conn = configured(life)
    old = instance(life, conn)
    assert text(call(conn, "whoami")) == "authorized"
    old_pid = old.pid
    assert old_pid is not None
    answers: list[dict[str, Any]] = []
    slow = threading.Thread(target=lambda: answers.append(call(conn, "sleep", seconds=3)))
    slow.start()
    assert until(lambda: life.servers.processes()[0].shown()["calls"] == 1, 5)
    other = connect(life, AGENT)
    other.bind(conn.session_id or "")
    assert configure_as(other, KEY + "-2")["status"] == "ok"
    assert text(call(other, "whoami")) == "authorized"
    new_pid = instance(life, other).pid
    assert new_pid is not None and new_pid != old_pid
    if slow.is_alive():  # (on a loaded machine the call may have ended by now)
        assert alive(old_pid)  # still answering the slow call
    slow.join(10)
    assert text(answers[0]) == "slept"  # the old version's call finished there
    assert until(lambda: not alive(old_pid), 1.5)  # then its process stopped
    assert alive(new_pid)


@SQLITE
def test_a_purge_during_a_call_stops_the_process_within_a_second(life: Vault) -> None:
    conn = configured(life, scope="principal")
    second = session_with(life)
    assert text(call(second, "whoami")) == "authorized"  # two sessions hold one process
    pid = instance(life, conn).pid
    assert pid is not None
    answers: list[dict[str, Any]] = []
    slow = threading.Thread(target=lambda: answers.append(call(conn, "sleep", seconds=5)))
    slow.start()
    assert until(lambda: life.servers.processes()[0].shown()["calls"] == 1, 5)
    life.purge_principal("operator", AGENT.principal_id, NAME)
    assert until(lambda: not alive(pid), 1.0)  # at once: the call does not hold it
    slow.join(5)
    assert answers[0]["type"] == "error" and answers[0]["details"][0]["reason"] == "cancelled"
    assert call(second, "whoami")["type"] == "error"  # no call reaches it after


@SQLITE
def test_a_purge_after_a_reconfigure_stops_the_draining_version_too(life: Vault) -> None:
    conn = configured(life)
    assert text(call(conn, "whoami")) == "authorized"
    old_pid = instance(life, conn).pid
    # long enough to outlive the reconfigure on a loaded machine: the purge cuts it short
    slow = threading.Thread(target=lambda: call(conn, "sleep", seconds=20))
    slow.start()
    assert until(lambda: life.servers.processes()[0].shown()["calls"] == 1, 5)
    other = connect(life, AGENT)
    other.bind(conn.session_id or "")
    assert configure_as(other, KEY + "-2")["status"] == "ok"
    assert text(call(other, "whoami")) == "authorized"
    new_pid = instance(life, other).pid
    assert old_pid is not None and new_pid is not None and alive(old_pid)  # draining
    life.purge("operator", conn.session_id or "", NAME)
    assert until(lambda: not alive(old_pid) and not alive(new_pid), 1.0)
    slow.join(5)


@SQLITE
def test_an_idle_server_stops_and_starts_again_on_demand(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv(IDLE_ENV, "0.5")
    life = request.getfixturevalue("life")
    conn = configured(life)
    assert text(call(conn, "whoami")) == "authorized"
    server = instance(life, conn)
    first = server.pid
    assert first is not None
    assert until(lambda: not alive(first), 3)
    state = server.state or {}
    assert state["state"] == "stopped" and "idle" in state["reason"]
    (listed,) = send(conn, {"type": "tool/list/req"})
    assert "whoami" in {t["name"] for t in listed["tools"] if t["toolkit"] == NAME}
    assert server.pid is None  # its tools were remembered: a list does not wake it
    assert text(call(conn, "whoami")) == "authorized"
    assert server.pid is not None and server.pid != first


@SQLITE
def test_a_crashed_server_is_restarted_and_its_session_hears_of_it(life: Vault) -> None:
    events: list[Any] = []
    conn = session_with(life, push=events.append)
    assert configure_as(conn, KEY)["status"] == "ok"
    assert text(call(conn, "whoami")) == "authorized"
    server = instance(life, conn)
    pid = server.pid
    assert pid is not None
    restarted = METRICS.mcp_events.labels(NAME, "restarted")._value.get()
    os.killpg(pid, signal.SIGKILL)

    def told(status: str) -> bool:
        return any(getattr(e, "status", None) == status for e in events)

    assert until(lambda: told("error"), 3), events
    (crashed,) = [e for e in events if e.status == "error"]
    assert crashed.toolkit_name == NAME and crashed.configured is True
    assert "stopped unexpectedly" in (crashed.message or "")
    assert until(lambda: told("ok") and server.pid not in (None, pid), 5), events
    assert KEY not in json.dumps([e.model_dump(mode="json") for e in events])
    assert text(call(conn, "whoami")) == "authorized"
    assert METRICS.mcp_events.labels(NAME, "restarted")._value.get() == restarted + 1
    assert (server.state or {})["restarts"] == 1


@SQLITE
def test_a_server_beyond_the_cap_is_refused_busy(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv(MAX_SERVERS_ENV, "1")
    life = request.getfixturevalue("life")
    first, second = configured(life), configured(life, KEY + "-b")
    assert text(call(first, "whoami")) == "authorized"
    refused = call(second, "whoami")
    assert refused["type"] == "error" and refused["details"][0]["reason"] == "busy", refused
    assert "limit of 1 local servers" in refused["message"]
    life.purge("operator", first.session_id or "", NAME)
    assert text(call(second, "whoami")) == "authorized"  # a slot was freed at once


@SQLITE
def test_a_servers_state_shows_in_toolkits_show_and_v1(life: Vault, home: VaultSettings) -> None:
    conn = configured(life)
    assert text(call(conn, "whoami")) == "authorized"
    shown = CliRunner().invoke(main, ["toolkits", "show", NAME, "--json"])
    assert shown.exit_code == 0, shown.output
    (state,) = json.loads(shown.stdout)["servers"]
    assert (state["state"], state["version"], state["scope"]) == ("running", 1, conn.session_id)
    human = CliRunner().invoke(main, ["toolkits", "show", NAME])
    assert f"server: running for session {(conn.session_id or '')[:8]} v1" in human.stdout
    _, token = create_token(life.store, "auditor", "watcher")
    app = create_app(life, open_provider(home), Limits(requests_per_second=1000, burst=1000))
    with TestClient(app) as client:
        answer = client.get(f"/v1/toolkits/{NAME}", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert [s["state"] for s in answer.json()["servers"]] == ["running"]
    for output in (shown.stdout, human.stdout, answer.text):
        assert KEY not in output


def test_an_unconfined_launch_is_audited(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv(served.SANDBOX_ENV, "off")
    life = request.getfixturevalue("life")
    conn = configured(life)
    assert text(call(conn, "whoami")) == "authorized"
    with life.store.read() as db:
        query = select(AuditEvent).where(AuditEvent.action == AuditAction.SERVER_UNCONFINED)
        (event,) = db.execute(query).all()
    assert (event.session_id, event.toolkit_name, event.version) == (conn.session_id, NAME, 1)
    assert AuditAction.SERVER_UNCONFINED in SENTENCES
    assert KEY not in json.dumps(event.details)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@SQLITE
def test_serve_states_at_start_up_that_the_sandbox_is_off(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, served.SANDBOX_ENV: "off"}
    with subprocess.Popen(
        [ROOT / "scripts" / "serve", "--port", str(free_port())],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        seen: list[str] = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if "serving A2E" in line:
                    break
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    warning = [line for line in seen if "sandbox is off" in line]
    assert warning and warning[0].startswith("toolkit-vault: WARNING:"), seen
    assert seen.index(warning[0]) < len(seen) - 1  # before it serves


def test_the_servers_bounds_are_read_from_the_environment_and_bad_ones_refused() -> None:
    assert ServerLimits.from_environment({}) == ServerLimits(600.0, 32)
    given = {IDLE_ENV: "30", MAX_SERVERS_ENV: "4"}
    assert ServerLimits.from_environment(given) == ServerLimits(30.0, 4)
    for bad in ({IDLE_ENV: "soon"}, {MAX_SERVERS_ENV: "0"}, {IDLE_ENV: "-1"}):
        with pytest.raises(VaultError, match="TOOLKIT_VAULT_"):
            ServerLimits.from_environment(bad)
