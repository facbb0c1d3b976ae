"""A running server follows `toolkits import` and `toolkits remove` made by another process
(issue 37), on SQLite and PostgreSQL.

Against a real `toolkit-vault serve` (one, and two replicas on PostgreSQL) the imports and
removals are made by the real CLI, in processes of their own. Where a test must see what a
toolkit's `initialize` receives, or reach between two steps of a configure, the server is
a vault opened here, with a registry whose imported toolkits record every config they are
initialized with, and the changes are made through another vault on the same home and
database (another process, as far as every cache goes). Each change is seen within a
second (polled, never slept for), a reclassified field applies to the next configure, and
a removed toolkit's old credential never reaches a toolkit again: not after it is imported
again, not after a restart, not through a configure that raced the removal.
"""

from __future__ import annotations

import gc
import json
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from websockets.sync.client import ClientConnection

from cli_support import run_cli
from test_http import HELLO, Server, replicas, running_server
from test_import import CASES, ENV, VECTORS
from test_vault import AGENT, configure, handshake, listed, request
from toolkit_package.selection import Selection
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect, read_request
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ToolkitNotFound, VaultError
from toolkit_vault.protocol import Message, ToolkitStatusEvent
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import ConfigVersion, CurrentConfig
from toolkit_vault.toolkits.imports import import_package, remove_toolkit
from toolkit_vault.toolkits.registry import ToolkitFactory, ToolkitRegistry, ToolkitSource

__all__ = ["replicas"]  # the fixture, from test_http

# These follow what is imported and removed, not running servers: the package is made up.
pytestmark = pytest.mark.usefixtures("stored_only")
NAME, CONFIG, _, _ = CASES[ENV]  # io.github.example/issue-tracker: a token, a secret, a URL
PACKAGE = str(VECTORS / ENV)
FIELD = "tracker_webhook_secret"  # secret as published; `--public` reclassifies it
OLD = "tkv-canary-live-registry-old"
NEW = "tkv-canary-live-registry-new"
WITHIN = 1.0  # seconds a change made elsewhere may take to show


def cli(env: dict[str, str], *args: str) -> str:
    done = run_cli(args, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def soon(check: Callable[[], bool], within: float = WITHIN) -> float:
    """Poll `check` until it holds; how long that took (it must within `within` s)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within, f"not seen within {within} s"
        time.sleep(0.02)
    return time.monotonic() - start


def credentials(token: str, webhook: str = "webhook-value") -> dict[str, Any]:
    return {**CONFIG, "tracker_api_token": token, FIELD: webhook}


# -- a registry whose imported toolkits record what they are initialized with ----------------


@dataclass(repr=False)  # a failed assertion shows no config
class Recorder:
    """Every config the recorded toolkits were initialized with, and the instances."""

    configs: list[str] = field(default_factory=list)
    instances: list[weakref.ref[Recorded]] = field(default_factory=list)

    def live(self) -> int:
        """How many initialized instances anything still holds (the vault, once it drops
        one, holds nothing of it: neither the instance nor the config it was given)."""
        gc.collect()
        return sum(ref() is not None for ref in self.instances)


class Recorded:
    """An imported toolkit as the vault makes it, recording each config it receives."""

    def __init__(self, factory: ToolkitFactory, recorder: Recorder) -> None:
        self.inner, self.recorder = factory(), recorder
        self.definition = self.inner.definition

    def initialize(self, config: dict[str, Any]) -> Iterable[str] | None:
        self.recorder.configs.append(json.dumps(config, sort_keys=True))
        self.recorder.instances.append(weakref.ref(self))
        return self.inner.initialize(config)


class RecordingRegistry(ToolkitRegistry):
    recorder: Recorder

    def load_imported(self, stored: Iterable[tuple[ToolkitFactory, ToolkitSource]]) -> None:
        wrapped = [(partial(Recorded, f, self.recorder), s) for f, s in stored]
        super().load_imported(wrapped)  # type: ignore[arg-type]


def recording_vault(home: VaultSettings, recorder: Recorder) -> Vault:
    registry = RecordingRegistry.default()
    assert isinstance(registry, RecordingRegistry)
    registry.recorder = recorder
    return open_vault(home, registry)


@pytest.fixture
def opened(home: VaultSettings) -> Iterator[list[Vault]]:
    """Vaults a test opens (each a process, as far as caches go), disposed of after it."""
    vaults: list[Vault] = []
    yield vaults
    for vault in vaults:
        vault.store.engine.dispose()


@pytest.fixture
def elsewhere(opened: list[Vault], home: VaultSettings) -> Vault:
    """Another vault on the same home and database: where the operator's commands run."""
    opened.append(open_vault(home))
    return opened[-1]


def import_there(vault: Vault, *public: str, package: str = ENV, as_name: bool = False) -> None:
    """`toolkits import` (`--public FIELD`, `--rename` to NAME with `--replace`: another
    server under the toolkit's name) through `vault`."""
    rename = {CASES[package][0]: NAME} if as_name else {}
    data = (VECTORS / package).read_bytes()
    choice = Selection(rename=rename, public=public)
    import_package(vault.store, vault.registry, data, "local", choice, replace_source=as_name)


def remove_there(vault: Vault) -> None:
    remove_toolkit(vault.store, vault.registry, NAME, "local")


def versions(vault: Vault) -> int:
    with vault.store.engine.connect() as db:
        count = select(func.count()).where(ConfigVersion.toolkit_name == NAME)
        return int(db.execute(count).scalar_one())


# -- in this process: what reaches a toolkit ---------------------------------------------------


def test_the_next_configure_follows_what_another_process_imported(
    vault: Vault, elsewhere: Vault
) -> None:
    """No list first: the configure itself follows the chain (an import, a field made
    public, a removal), and a removed toolkit is refused with nothing stored."""
    conn, session = handshake(vault)
    import_there(elsewhere)
    assert configure(conn, NAME, credentials("first"))[0]["status"] == "ok"
    import_there(elsewhere, FIELD)
    assert configure(conn, NAME, credentials("second", "now-public"))[0]["status"] == "ok"
    stored = history(vault.store, session=session, toolkit=NAME)
    public = [v["public_config"].get(FIELD) for v in stored]
    assert public == [None, "now-public"]  # sealed before the re-import, in clear after it

    remove_there(elsewhere)
    refused = configure(conn, NAME, credentials("third"))[0]
    assert (refused["type"], refused["code"], refused["message"]) == (
        "error",
        "RUNTIME_ERROR",
        "toolkit not found",
    )
    assert versions(vault) == 2
    assert NAME not in listed(conn)


def test_a_list_answered_from_memory_follows_an_import_elsewhere(
    vault: Vault, elsewhere: Vault
) -> None:
    """A list a transport answers on its event loop (`answer_without_blocking`, SQLite) is never
    answered from a registry older than the chain: it is handed to a worker instead."""
    conn, _ = handshake(vault)
    assert NAME not in listed(conn)  # this session's list has read the store
    message = read_request(json.dumps({"type": "toolkit/list/req"}))
    for change, shown in ((import_there, True), (remove_there, False)):
        change(elsewhere)
        fast = conn.answer_without_blocking(message)
        assert fast is None or (NAME in fast) is shown
        assert (NAME in listed(conn)) is shown
        fast = conn.answer_without_blocking(message)  # the registry is in line now
        assert fast is None or (NAME in fast) is shown


def test_a_removed_toolkits_old_credential_never_reaches_a_toolkit_again(
    home: VaultSettings, elsewhere: Vault, opened: list[Vault]
) -> None:
    recorder = Recorder()
    received = recorder.configs
    first = recording_vault(home, recorder)
    opened.append(first)
    import_there(elsewhere)
    conn, session = handshake(first)
    assert configure(conn, NAME, credentials(OLD))[0]["status"] == "ok"
    for_principal = {
        "type": "toolkit/configure/req",
        "toolkit_name": NAME,
        "config": credentials(OLD + "-principal"),
        "scope": "principal",
    }
    assert request(conn, for_principal)[0]["status"] == "ok"
    other, _ = handshake(first)  # a session of the principal with no config of its own
    assert listed(other)[NAME] is True
    assert sum(OLD in config for config in received) == 3  # the recorder sees each one
    received.clear()

    remove_there(elsewhere)
    assert NAME not in listed(conn) and NAME not in listed(other)
    import_there(elsewhere)
    assert listed(conn)[NAME] is False and listed(other)[NAME] is False
    assert listed(handshake(first, session)[0])[NAME] is False
    assert listed(handshake(first)[0])[NAME] is False  # a new session of the principal

    restarted = recording_vault(home, recorder)  # a server started after all that
    opened.append(restarted)
    resumed, _ = handshake(restarted, session)
    assert listed(resumed)[NAME] is False
    assert configure(resumed, NAME, credentials(NEW))[0]["status"] == "ok"
    opened.append(recording_vault(home, recorder))
    assert listed(handshake(opened[-1], session)[0])[NAME] is True
    assert not [config for config in received if OLD in config]
    assert sum(NEW in config for config in received) == 2  # configured, then resumed


@pytest.mark.parametrize("meanwhile", ["removed", "replaced"])
def test_a_change_between_a_configures_check_and_its_write_stores_nothing(
    vault: Vault, home: VaultSettings, elsewhere: Vault, opened: list[Vault], meanwhile: str
) -> None:
    """The race the registry's follow cannot close: the toolkit checked, then removed (or
    replaced by another package under its name) by another process before the configure
    writes. The write's guard refuses it, so no version of it is current afterwards."""
    import_there(elsewhere)
    conn, session = handshake(vault)
    toolkit = vault.toolkit(NAME)  # what a configure checks first
    public, secrets = toolkit.schema.split(credentials(OLD))
    if meanwhile == "removed":
        remove_there(elsewhere)
        refused: type[VaultError] = ToolkitNotFound
    else:  # another server imported under the toolkit's name
        import_there(elsewhere, package="server-remote-secret-header.json", as_name=True)
        refused = VaultError
    with pytest.raises(refused):
        vault.store_version(AGENT.principal_id, session, toolkit, public, secrets)
    assert versions(vault) == 0
    with vault.store.engine.connect() as db:
        assert not list(db.execute(select(CurrentConfig).where(CurrentConfig.toolkit_name == NAME)))
    if meanwhile == "removed":
        import_there(elsewhere)
    assert listed(conn)[NAME] is False
    opened.append(open_vault(home))  # and after a restart
    assert listed(handshake(opened[-1], session)[0])[NAME] is False
    assert vault.verify_audit().ok


@pytest.mark.parametrize("then", ["removed", "removed and imported again"])
def test_a_removal_drops_the_instances_here_and_tells_their_connections(
    home: VaultSettings, elsewhere: Vault, opened: list[Vault], then: str
) -> None:
    """What a server's watch does between requests (`Vault.follow_registry`): the instance
    made from the removed toolkit is dropped at once and its connections hear it, even when
    the toolkit was imported again before this process looked."""
    recorder = Recorder()
    vault = recording_vault(home, recorder)
    opened.append(vault)
    import_there(elsewhere)
    pushed: list[Message] = []
    conn = connect(vault, AGENT, pushed.append)
    session = request(conn, HELLO)[0]["session_id"]
    assert configure(conn, NAME, credentials(OLD))[0]["status"] == "ok"
    assert recorder.live() == 1  # the session's instance, holding the credential
    bystander = connect(vault, AGENT, pushed.append)  # another session, never configured
    request(bystander, HELLO)
    remove_there(elsewhere)
    if then != "removed":
        import_there(elsewhere)
    vault.follow_registry()
    assert recorder.live() == 0  # released at once, not when the session is next used
    events = [e for e in pushed if isinstance(e, ToolkitStatusEvent)]
    assert [(e.session_id, e.toolkit_name, e.configured, e.message) for e in events] == [
        (session, NAME, False, "toolkit removed")
    ]
    vault.follow_registry()  # nothing new: nothing more is said
    assert len([e for e in pushed if isinstance(e, ToolkitStatusEvent)]) == 1
    assert listed(conn).get(NAME, False) is False


# -- a real `serve`, and two replicas ---------------------------------------------------------


def answer(ws: ClientConnection, message: dict[str, Any], heard: list[dict[str, Any]]) -> Any:
    """Send; the answer, the events that came before it kept in `heard`."""
    ws.send(json.dumps(message))
    while True:
        got = json.loads(ws.recv(timeout=30))
        if got["type"] != "toolkit/status/event":
            return got
        heard.append(got)


def listing(ws: ClientConnection, heard: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in answer(ws, {"type": "toolkit/list/req"}, heard)["toolkits"]}


def write_only(listed: dict[str, dict[str, Any]]) -> bool | None:
    return listed[NAME]["schema"]["properties"][FIELD].get("writeOnly")


def removal_heard(ws: ClientConnection, heard: list[dict[str, Any]]) -> Callable[[], bool]:
    def check() -> bool:
        if not any(e["toolkit_name"] == NAME and not e["configured"] for e in heard):
            try:
                heard.append(json.loads(ws.recv(timeout=0.05)))
            except TimeoutError:
                return False
        return any(e["toolkit_name"] == NAME and not e["configured"] for e in heard)

    return check


def configure_message(config: dict[str, Any]) -> dict[str, Any]:
    return {"type": "toolkit/configure/req", "toolkit_name": NAME, "config": config}


def test_a_running_server_sees_an_import_a_reimport_and_a_removal_made_elsewhere(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    heard: list[dict[str, Any]] = []
    with running_server(cli_env, tmp_path / "serve.log") as base:
        server = Server(base, vault)
        with server.socket(server.token("agent", "live")) as ws:
            session = answer(ws, HELLO, heard)["session_id"]
            assert NAME not in listing(ws, heard)
            cli(cli_env, "toolkits", "import", PACKAGE)
            soon(lambda: NAME in listing(ws, heard))
            assert write_only(listing(ws, heard)) is True
            done = answer(ws, configure_message(credentials(OLD, "sealed")), heard)
            assert done["status"] == "ok", done

            cli(cli_env, "toolkits", "import", PACKAGE, "--public", FIELD)
            soon(lambda: write_only(listing(ws, heard)) is None)
            done = answer(ws, configure_message(credentials(OLD, "in-clear")), heard)
            assert done["status"] == "ok", done
            stored = history(vault.store, session=session, toolkit=NAME)
            assert [v["public_config"].get(FIELD) for v in stored] == [None, "in-clear"]

            heard.clear()
            cli(cli_env, "toolkits", "remove", NAME)
            soon(removal_heard(ws, heard))  # pushed: this socket sent nothing meanwhile
            assert NAME not in listing(ws, heard)
            refused = answer(ws, configure_message(credentials(NEW)), heard)
            assert (refused["code"], refused["message"]) == ("RUNTIME_ERROR", "toolkit not found")
            assert not [v for v in history(vault.store, session=session) if v["current"]]

            cli(cli_env, "toolkits", "import", PACKAGE)
            soon(lambda: NAME in listing(ws, heard))
            assert listing(ws, heard)[NAME]["configured"] is False


@pytest.mark.postgres
def test_a_second_replica_sees_imports_and_removals_made_elsewhere(
    replicas: tuple[Server, Server, dict[str, str]],
) -> None:
    a, b, env = replicas
    token = a.token("agent", "replicated")
    heard: list[dict[str, Any]] = []

    def listed_on_a(session: str) -> dict[str, dict[str, Any]]:
        answered = a.post(token, {"type": "toolkit/list/req"}, session).json()
        return {t["name"]: t for t in answered["toolkits"]}

    with b.socket(token) as ws:
        session = answer(ws, HELLO, heard)["session_id"]
        cli(env, "toolkits", "import", PACKAGE)
        soon(lambda: NAME in listed_on_a(session) and NAME in listing(ws, heard))
        configured = a.post(token, configure_message(credentials(OLD)), session).json()
        assert configured["status"] == "ok", configured

        cli(env, "toolkits", "import", PACKAGE, "--public", FIELD)
        soon(lambda: write_only(listed_on_a(session)) is None)
        soon(lambda: write_only(listing(ws, heard)) is None)

        heard.clear()
        cli(env, "toolkits", "remove", NAME)
        soon(removal_heard(ws, heard))  # B's own watch: the configure was made through A
        assert NAME not in listed_on_a(session) and NAME not in listing(ws, heard)
        refused = a.post(token, configure_message(credentials(NEW)), session).json()
        assert (refused["type"], refused["message"]) == ("error", "toolkit not found")
        refused = answer(ws, configure_message(credentials(NEW)), heard)
        assert (refused["type"], refused["message"]) == ("error", "toolkit not found")
