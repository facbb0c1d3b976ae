"""`/readyz` on a real `serve` (issue 54): ready, then not ready, naming what failed and
nothing more, then ready again, for each thing it watches: the database (PostgreSQL
stopped, here by stopping the proxy the vault reaches it through: the shared server is not
ours to stop), the database put behind its witness (an older copy restored: the process
that saw its chain go back believes nothing more until it is restarted or an operator
accepts the restore, as `ledger` decides for every request, so ready again means a new
process), and a fail-closed audit device that takes nothing. `/healthz` answers through
all of it."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from test_http import HELLO, Server, running_server
from toolkit_vault.core.vault import Vault

CONFIGURE = {"type": "toolkit/configure/req", "toolkit_name": "filesystem"}


class Proxy:
    """A TCP proxy on loopback to `target`; `stop` closes it and every connection through
    it (the database, as its clients see it, stopped); `start` opens it again, same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept()
            self._listener.close()
            self._listener = None
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._open.clear()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def readiness(base: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(base + "/readyz", timeout=30)
    return answer.status_code, answer.json()


def until(base: str, wanted: Callable[[int, dict[str, Any]], bool]) -> tuple[int, dict[str, Any]]:
    """`/readyz` polled until `wanted` holds (at most 20 s); its last answer."""
    deadline = time.monotonic() + 20
    while True:
        found = readiness(base)
        if wanted(*found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def not_ready(*failures: str) -> Callable[[int, dict[str, Any]], bool]:
    return lambda status, body: (
        (status, body)
        == (
            503,
            {"status": "not_ready", "failures": list(failures)},
        )
    )


def ready(status: int, body: dict[str, Any]) -> bool:
    return (status, body) == (200, {"status": "ready", "failures": []})


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_not_ready_while_postgresql_is_stopped_and_ready_once_it_is_back(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    url = make_url(database_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env = {**cli_env, "TOOLKIT_VAULT_DATABASE_URL": proxied}
    try:
        with running_server(env, tmp_path / "serve.log") as base:
            assert ready(*until(base, ready))
            proxy.stop()
            status, body = until(base, not_ready("database_unreachable"))
            assert not_ready("database_unreachable")(status, body), body
            assert httpx.get(base + "/healthz").status_code == 200  # the process answers
            proxy.start()
            assert ready(*until(base, ready))
        said = (tmp_path / "serve.log").read_text()
        assert "not ready: database_unreachable" in said and "ready again" in said
    finally:
        proxy.stop()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_not_ready_while_the_database_is_behind_its_witness(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    database = make_url(database_url).database
    assert database
    older, newer = tmp_path / "older.db", tmp_path / "newer.db"

    def copy(source: Path | str, target: Path | str) -> None:
        with (
            contextlib.closing(sqlite3.connect(source)) as src,
            contextlib.closing(sqlite3.connect(target)) as dst,
        ):
            src.backup(dst)

    with running_server(cli_env, tmp_path / "serve.log") as base:
        server = Server(base, vault)
        agent = server.token("agent", "agent-r")
        session = server.post(agent, HELLO).json()["session_id"]
        copy(database, older)
        answer = server.post(agent, {**CONFIGURE, "config": {"root_dir": "/tmp"}}, session)
        assert answer.json()["status"] == "ok"
        time.sleep(0.5)  # the witness is written within milliseconds of the commit
        copy(database, newer)
        assert ready(*readiness(base))
        copy(older, database)  # an older copy put back: behind what the home witnessed
        status, body = until(base, not_ready("state_not_believed"))
        assert not_ready("state_not_believed")(status, body), body
        # The newer copy back: whether this process stays in doubt depends on whether its
        # ledger followed the chain while it was behind (then every request it serves stays
        # refused, `ledger`) or only the witness check saw it; a fresh process is ready.
        copy(newer, database)
    said = (tmp_path / "serve.log").read_text()
    assert "not ready: state_not_believed: the database is behind its witness" in said
    with running_server(cli_env, tmp_path / "again.log") as base:  # a new process believes it
        assert ready(*until(base, ready))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_not_ready_while_no_fail_closed_audit_device_takes_events(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    gone = tmp_path / "gone"  # the device's directory: missing, then made
    env = {
        **cli_env,
        "TOOLKIT_VAULT_AUDIT_DEVICES": f"file:{gone / 'audit.jsonl'}",
        "TOOLKIT_VAULT_AUDIT_FAIL_CLOSED": "true",
    }
    with running_server(env, tmp_path / "serve.log") as base:
        server = Server(base, vault)
        agent = server.token("agent", "agent-d")
        refused = server.post(agent, HELLO).json()  # a new session is a write: refused
        assert refused["type"] == "error" and "no audit device accepted" in refused["message"]
        status, body = until(base, not_ready("audit_devices_refusing"))
        assert not_ready("audit_devices_refusing")(status, body), body
        assert str(gone) not in str(body)  # the device is named in the log only
        gone.mkdir()
        assert server.post(agent, HELLO).json()["type"] == "handshake/resp"
        assert ready(*until(base, ready))
    said = (tmp_path / "serve.log").read_text()
    assert "not ready: audit_devices_refusing: no audit device took the last events" in said
