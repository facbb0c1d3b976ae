"""Audit devices: every committed event, in order and with no gap, to a JSON-lines file and to
real syslog receivers on loopback (RFC 5424 over UDP and over TCP with RFC 6587 octet
counting, parsed here as a receiver would), on SQLite and PostgreSQL; a receiver that was
down catches up with `audit export --after SEQ`; SIGHUP reopens a rotated file; fail-closed
refuses a write no device accepted and leaves the store as it was; fail-open carries on.
A receiver that accepts and never reads stalls no other write and gets no false `ok`; an
agent's config makes a bounded event; a symlinked file device is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from cli_support import run_cli, spawn_cli
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.actors import shell_actor
from toolkit_vault.audit.devices import AuditDevices, Batch, Device, reopen_on_sighup
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.models import AuditEvent, AuditHead, ConfigVersion, PrincipalRow
from toolkit_vault.store.records import DETAILS_MAX_BYTES, AuditDraft, bounded_details

AGENT = Principal("local", "agent")
# Devices do not touch the master key: the file provider, so each command starts quickly.
pytestmark = pytest.mark.key_providers("file")
CANARY = "tkv-canary-audit-devices-5e1f"
RFC5424 = re.compile(
    rb"<(?P<pri>\d{1,3})>1 (?P<time>\S+) (?P<host>[!-~]{1,255}) (?P<app>[!-~]{1,48}) "
    rb"(?P<procid>[!-~]{1,128}) (?P<msgid>[!-~]{1,32}) (?P<sd>-|(?:\[[^]]*\])+) (?P<msg>.*)",
    re.S,
)


# -- a syslog receiver, as a SIEM's collector would be ---------------------------------------


class Receiver:
    """A syslog server on 127.0.0.1 (`transport` "tcp" or "udp"), in threads of its own.
    Every message is parsed as RFC 5424 (TCP frames by octet counting) and its JSON body
    kept, with the connection it came on, in arrival order; anything else fails the test."""

    def __init__(self, transport: str, port: int = 0) -> None:
        self.transport = transport
        self.records: list[dict[str, Any]] = []
        self.by_connection: dict[int, list[int]] = {}
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        kind = socket.SOCK_STREAM if transport == "tcp" else socket.SOCK_DGRAM
        self._sock = socket.socket(socket.AF_INET, kind)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if transport == "udp":
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        if transport == "tcp":
            self._sock.listen(16)
            self._start(self._accept)
        else:
            self._start(self._datagrams)

    @property
    def spec(self) -> str:
        return f"syslog+{self.transport}://127.0.0.1:{self.port}"

    def seqs(self) -> list[int]:
        return [r["seq"] for r in self.records]

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            self._start(self._stream, conn, len(self._conns))

    def _stream(self, conn: socket.socket, number: int) -> None:
        buffer = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
            while b" " in buffer:
                length, rest = buffer.split(b" ", 1)
                if not length.isdigit():
                    self.errors.append(f"not octet-counted: {buffer[:40]!r}")
                    return
                if len(rest) < int(length):
                    break
                self._message(rest[: int(length)], number)
                buffer = rest[int(length) :]

    def _datagrams(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                return
            if not data:  # shut down (the device never sends an empty datagram)
                return
            self._message(data, 0)

    def _message(self, data: bytes, connection: int) -> None:
        found = RFC5424.fullmatch(data)
        if found is None:
            self.errors.append(f"not RFC 5424: {data[:60]!r}")
            return
        record = json.loads(found["msg"])
        datetime.fromisoformat(found["time"].decode().replace("Z", "+00:00"))
        if (int(found["pri"]), found["app"], found["msgid"].decode()) != (
            4 * 8 + 6,  # auth.info
            b"toolkit-vault",
            record["action"],
        ):
            self.errors.append(f"unexpected header: {data[:80]!r}")
        self.records.append(record)
        self.by_connection.setdefault(connection, []).append(record["seq"])

    def stop(self) -> None:
        """Close the listener and every connection (a receiver that goes away)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def wait_for(self, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.01)


# -- helpers -----------------------------------------------------------------------------------


def with_devices(home: VaultSettings, *specs: str, fail_closed: bool = False) -> VaultSettings:
    return dataclasses.replace(home, audit_devices=specs, audit_fail_closed=fail_closed)


@pytest.fixture
def opened() -> Iterator[list[Vault]]:
    """Vaults a test opens, disposed of at its end."""
    vaults: list[Vault] = []
    yield vaults
    for vault in vaults:
        if isinstance(vault.store.audit_sink, AuditDevices):
            vault.store.audit_sink.close()
        vault.store.engine.dispose()


def open_with(opened: list[Vault], settings: VaultSettings) -> Vault:
    vault = open_vault(settings)
    opened.append(vault)
    return vault


def request(conn: A2EConnection, message: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(conn.handle_raw(json.dumps(message))[0])
    return reply


def session(vault: Vault) -> A2EConnection:
    conn = connect(vault, AGENT)
    reply = request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    assert reply["type"] == "handshake/resp", reply
    return conn


def configure(conn: A2EConnection, n: int) -> dict[str, Any]:
    config = {"endpoint": f"https://api{n}.example.test", "api_key": f"{CANARY}-{n}"}
    message = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
    return request(conn, message)


def configuring(vault: Vault, count: int) -> None:
    conn = session(vault)
    for n in range(count):
        assert configure(conn, n)["status"] == "ok"


def stored(vault: Vault) -> list[tuple[int, str]]:
    """Every (seq, mac) the chain holds, in order."""
    with vault.store.engine.connect() as db:
        rows = db.execute(select(AuditEvent.seq, AuditEvent.mac).order_by(AuditEvent.seq))
        return [(seq, bytes(mac).hex()) for seq, mac in rows]


def file_records(*paths: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()
    ]


def assert_linked(records: list[dict[str, Any]], vault: Vault, start: int) -> None:
    """Every event of the chain from `start` to its end, once, in order, each linked to the
    one before: what a receiver checks with no key, held to the database's own chain."""
    chain = stored(vault)
    assert records, "nothing was received"
    assert [(r["seq"], r["mac"]) for r in records] == chain[start - 1 :]
    assert records[0]["previous"] == (chain[start - 2][1] if start > 1 else "00" * 32)
    for before, after in pairwise(records):
        assert after["previous"] == before["mac"]


def opened_at(opened: list[Vault], settings: VaultSettings) -> tuple[Vault, int]:
    """A vault with devices, and the seq of the first event they will see (init wrote
    the events before it, with none)."""
    vault = open_with(opened, settings)
    return vault, len(stored(vault)) + 1


def two_events_in_one_write(vault: Vault) -> None:
    """A write that appends two events in one transaction (both refused attempts)."""
    store = vault.store

    def work(conn: Any) -> None:
        for name in ("first", "second"):
            draft = AuditDraft("local", AuditAction.CONFIGURE_REFUSED, None, name, None, {})
            store.audit(conn, draft)

    store.transact(work)


def cli_devices(cli_env: dict[str, str], *specs: str, fail_closed: bool = False) -> dict[str, str]:
    env = {**cli_env, "TOOLKIT_VAULT_AUDIT_DEVICES": ",".join(specs)}
    if fail_closed:
        env["TOOLKIT_VAULT_AUDIT_FAIL_CLOSED"] = "true"
    return env


# -- a soak: every event, in order, no gap -------------------------------------------------------


def test_a_soak_reaches_a_file_and_syslog_receivers_in_order_with_no_gap(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, opened: list[Vault]
) -> None:
    tcp, udp = Receiver("tcp"), Receiver("udp")
    trail = tmp_path / "audit.jsonl"
    try:
        vault, start = opened_at(opened, with_devices(home, f"file:{trail}", tcp.spec, udp.spec))
        env = cli_devices(cli_env, f"file:{trail}", tcp.spec)
        made: list[subprocess.CompletedProcess[str]] = []

        def tokens() -> None:  # other processes, writing to the same file and receiver
            for n in range(3):
                made.append(
                    run_cli(["tokens", "create", "--role", "agent", "--name", f"a{n}"], env)
                )

        threads = [threading.Thread(target=configuring, args=(vault, 60)) for _ in range(2)]
        threads.append(threading.Thread(target=tokens))
        for thread in threads:
            thread.start()
        two_events_in_one_write(vault)
        for thread in threads:
            thread.join()
        assert all(p.returncode == 0 for p in made), [p.stderr for p in made]
        events = len(stored(vault)) - start + 1
        assert events >= 127
        tcp.wait_for(events)
        udp.wait_for(events - 3)  # (the commands send none over UDP)
    finally:
        tcp.stop()
        udp.stop()
    records = file_records(trail)
    by_seq = sorted(records, key=lambda r: int(r["seq"]))  # several processes interleave
    assert_linked(by_seq, vault, start)  # every event once, each linked to the one before
    mine = [r["seq"] for r in records if r["actor"] != shell_actor()]
    assert mine == sorted(mine)  # each process's own lines in seq order
    assert tcp.errors == udp.errors == []
    assert sorted(tcp.seqs()) == [seq for seq, _ in stored(vault)][start - 1 :]  # each once
    for seqs in tcp.by_connection.values():  # each sender's own stream in order
        assert seqs == sorted(seqs)
    assert len(tcp.by_connection) >= 4  # this process and each command's
    assert udp.seqs() == [r["seq"] for r in records if r["actor"] != shell_actor()]
    assert [r for r in tcp.records if r["seq"] == 5] == [r for r in records if r["seq"] == 5]
    everything = trail.read_text() + json.dumps(tcp.records) + json.dumps(udp.records)
    assert CANARY not in everything
    assert {"configure", "session_created", "token_created"} <= {r["action"] for r in records}
    assert records[-1].keys() == {
        *("seq", "at", "ts", "action", "actor", "session_id", "toolkit_name", "version"),
        *("details", "mac", "previous"),
    }
    assert oct(trail.stat().st_mode & 0o777) == "0o600"


# -- a receiver that was down catches up from its cursor -----------------------------------------


def test_a_restarted_receiver_catches_up_with_audit_export(
    home: VaultSettings, cli_env: dict[str, str], opened: list[Vault]
) -> None:
    first = Receiver("tcp")
    port = first.port
    vault, start = opened_at(opened, with_devices(home, first.spec))
    conn = session(vault)
    for n in range(20):
        configure(conn, n)
    first.wait_for(len(stored(vault)) - start + 1)
    first.stop()
    cursor = first.seqs()[-1]  # what the receiver keeps on disk
    assert first.seqs() == list(range(start, cursor + 1)) and cursor == start + 20
    for n in range(20, 40):  # the receiver is down: these reach no one
        configure(conn, n)
    second = Receiver("tcp", port)
    try:
        deadline = time.monotonic() + 15
        n = 40
        while len(second.records) < 10 and time.monotonic() < deadline:
            configure(conn, n)  # the device connects again (after its back-off)
            n += 1
            time.sleep(0.02)
        assert len(second.records) >= 10, "the device never reconnected"
        live = list(second.records)
    finally:
        second.stop()
    assert live[0]["seq"] > cursor + 20  # a gap the receiver sees in `seq` and `previous`
    replay = run_cli(["audit", "export", "--after", str(cursor), "--json-lines"], cli_env)
    assert replay.returncode == 0, replay.stderr
    caught_up = [json.loads(line) for line in replay.stdout.splitlines()]
    assert caught_up[0]["previous"] == first.records[-1]["mac"]
    merged = {r["seq"]: r for r in [*first.records, *caught_up]}
    for record in live:
        assert merged[record["seq"]] == record  # the replay and the device agree line by line
    assert_linked([merged[seq] for seq in sorted(merged)], vault, start)


def test_a_receiver_restarted_between_two_writes_gets_the_next_one(
    home: VaultSettings, opened: list[Vault]
) -> None:
    first = Receiver("tcp")
    vault, start = opened_at(opened, with_devices(home, first.spec))
    conn = session(vault)
    configure(conn, 1)
    first.wait_for(len(stored(vault)) - start + 1)
    first.stop()
    second = Receiver("tcp", first.port)
    try:
        configure(conn, 2)  # the closed connection is noticed before the send, not after
        second.wait_for(1, timeout=5)
    finally:
        second.stop()
    assert second.seqs() == [stored(vault)[-1][0]]


def test_export_shapes_and_refuses_an_edited_event(vault: Vault, cli_env: dict[str, str]) -> None:
    configuring(vault, 3)
    chain = stored(vault)
    whole = run_cli(["audit", "export", "--after", "0"], cli_env)
    assert whole.returncode == 0, whole.stderr
    document = json.loads(whole.stdout)
    assert (document["after"], document["last_seq"]) == (0, chain[-1][0])
    assert [(e["seq"], e["mac"]) for e in document["events"]] == chain
    assert [e["seq"] for e in vault.export_audit(2, limit=2)] == [3, 4]
    assert list(vault.export_audit(chain[-1][0])) == []
    with pytest.raises(VaultError, match="before the cursor"):
        list(vault.export_audit(chain[-1][0] + 5))
    with vault.store.engine.begin() as db:
        db.execute(update(AuditEvent).where(AuditEvent.seq == 4).values(actor="mallory"))
    broken = run_cli(["audit", "export", "--after", "1", "--json-lines"], cli_env)
    assert broken.returncode == 1
    assert broken.stderr.strip().splitlines() == [
        "toolkit-vault: error: audit event 4 does not verify (edited, inserted or deleted): "
        "run `toolkit-vault audit verify`"
    ]
    assert [json.loads(line)["seq"] for line in broken.stdout.splitlines()] == [2, 3]


# -- log rotation ----------------------------------------------------------------------------------


def test_sighup_reopens_the_file_after_a_rename_and_loses_nothing(
    home: VaultSettings, tmp_path: Path, opened: list[Vault]
) -> None:
    trail, rotated = tmp_path / "audit.jsonl", tmp_path / "audit.jsonl.1"
    vault, start = opened_at(opened, with_devices(home, f"file:{trail}"))
    previous = signal.getsignal(signal.SIGHUP)
    reopen_on_sighup(vault.store)
    try:
        writers = [threading.Thread(target=configuring, args=(vault, 40)) for _ in range(2)]
        for thread in writers:
            thread.start()
        while len(stored(vault)) < 30:
            time.sleep(0.005)
        os.rename(trail, rotated)  # logrotate: rename, then signal; writers never stop
        os.kill(os.getpid(), signal.SIGHUP)
        for thread in writers:
            thread.join()
    finally:
        signal.signal(signal.SIGHUP, previous)
    settled(devices_of(vault))  # a fail-open device writes on its own thread, after the commit
    before, after = file_records(rotated), file_records(trail)
    assert before and after, "the file was not opened again"
    assert_linked(before + after, vault, start)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # one serve shows it
def test_serve_reopens_its_audit_file_on_sighup_and_writes_stdout(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    trail, rotated = tmp_path / "audit.jsonl", tmp_path / "audit.jsonl.1"
    env = cli_devices(cli_env, f"file:{trail}", "stdout")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = create_token(vault.store, "agent", "rotated")[1]
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = spawn_cli(["serve", "--port", str(port)], env, stdout=stdout, stderr=stderr)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
            headers = {"Authorization": f"Bearer {token}"}
            hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
            answer = httpx.post(base + "/a2e", json=hello, headers=headers, timeout=30).json()
            headers["A2E-Session"] = answer["session_id"]
            config = {"endpoint": "https://x.example.test", "api_key": CANARY}
            message = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}

            def post(n: int) -> None:
                body = {**message, "config": {**config, "endpoint": f"https://{n}.example"}}
                reply = httpx.post(base + "/a2e", json=body, headers=headers, timeout=30)
                assert reply.json()["status"] == "ok", reply.text

            for n in range(3):
                post(n)
            os.rename(trail, rotated)
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.3)  # the handler runs on the server's main thread
            for n in range(3, 6):
                post(n)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert proc.returncode in (0, -signal.SIGTERM)
    before, after = file_records(rotated), file_records(trail)
    assert [r["action"] for r in after] == ["configure"] * 3
    assert [r["action"] for r in before] == ["session_created"] + ["configure"] * 3
    assert_linked(before + after, vault, before[0]["seq"])
    printed = [json.loads(line) for line in out.read_text().splitlines()]
    assert printed == before + after  # the stdout device: the same lines, on serve's stdout
    assert CANARY not in out.read_text() + trail.read_text() + err.read_text()


# -- fail-closed and fail-open ---------------------------------------------------------------------


def dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: connections are refused


def snapshot(vault: Vault) -> tuple[Any, ...]:
    with vault.store.engine.connect() as db:
        return (
            stored(vault),
            db.execute(select(AuditHead.seq, AuditHead.mac)).all(),
            db.execute(select(func.count()).select_from(ConfigVersion)).scalar(),
            db.execute(select(func.count()).select_from(PrincipalRow)).scalar(),
        )


def test_fail_closed_with_a_dead_device_leaves_the_store_as_it_was(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, opened: list[Vault]
) -> None:
    dead = f"syslog+tcp://127.0.0.1:{dead_port()}"
    nowhere = f"file:{tmp_path / 'missing' / 'audit.jsonl'}"
    vault = open_with(opened, with_devices(home, dead, nowhere, fail_closed=True))
    plain = open_with(opened, home)  # the same store, fail-open and with no device
    conn = session(plain)
    before = snapshot(vault)
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    reply = request(connect(vault, AGENT), hello)  # a new session: refused
    assert reply["type"] == "error"
    assert "no audit device accepted" in reply["message"]
    assert "syslog" not in json.dumps(reply) and "missing" not in json.dumps(reply)  # no device
    assert snapshot(vault) == before
    closed = connect(vault, AGENT)
    resumed = request(closed, {**hello, "session_id": conn.session_id})
    assert resumed["type"] == "handshake/resp", resumed
    refused = configure(closed, 1)  # a configure of a resumed session: refused
    assert refused["type"] == "error" and "no audit device accepted" in refused["message"]
    assert CANARY not in json.dumps([reply, refused])
    assert snapshot(vault) == before
    command = run_cli(
        ["tokens", "create", "--role", "agent", "--name", "nobody"],
        cli_devices(cli_env, dead, fail_closed=True),
    )
    assert command.returncode == 1
    logged, error = command.stderr.splitlines()  # the operator's log line says why
    assert error.startswith("toolkit-vault: error: no audit device accepted audit event")
    assert logged.startswith("ERROR audit event") and f"{dead}: ConnectionRefusedError" in logged
    assert snapshot(vault) == before
    assert configure(conn, 1)["status"] == "ok"  # the same store, opened fail-open: written
    assert snapshot(vault) != before
    sink = vault.store.audit_sink
    assert isinstance(sink, AuditDevices) and sink.refused >= 1


def test_fail_closed_needs_one_device_and_one_accepting_is_enough(
    home: VaultSettings, tmp_path: Path, opened: list[Vault]
) -> None:
    with pytest.raises(VaultError, match="fail-closed auditing needs an audit device"):
        open_vault(with_devices(home, fail_closed=True))
    dead = f"syslog+tcp://127.0.0.1:{dead_port()}"
    trail = tmp_path / "audit.jsonl"
    settings = with_devices(home, dead, f"file:{trail}", fail_closed=True)
    vault, start = opened_at(opened, settings)
    configuring(vault, 2)  # the file takes them: written
    assert_linked(file_records(trail), vault, start)


def test_fail_open_carries_on_and_logs_the_cursor_without_a_secret(
    home: VaultSettings, opened: list[Vault], caplog: pytest.LogCaptureFixture
) -> None:
    port = dead_port()
    vault, start = opened_at(opened, with_devices(home, f"syslog+tcp://127.0.0.1:{port}"))
    caplog.set_level(logging.WARNING, "toolkit_vault.audit.devices")
    conn = session(vault)
    for n in range(3):
        assert configure(conn, n)["status"] == "ok"
    assert settled(devices_of(vault))["failed"] == 4  # its thread sends, after the writes
    said = [r.getMessage() for r in caplog.records if r.name == "toolkit_vault.audit.devices"]
    assert len(said) == 1  # once, not once an event
    assert f"syslog+tcp://127.0.0.1:{port} failed (ConnectionRefusedError" in said[0]
    assert (
        f"at event {start}; replay from `toolkit-vault audit export --after {start - 1}`"
        in (said[0])
    )
    receiver = Receiver("tcp", port)
    try:
        deadline = time.monotonic() + 15
        while not receiver.records and time.monotonic() < deadline:
            configure(conn, 9)
            time.sleep(0.05)
        assert receiver.records
    finally:
        receiver.stop()
    status = settled(devices_of(vault))
    assert status["failed"] >= 4 and status["delivered"] >= 1 and status["failing_since"] is None
    back = [r.getMessage() for r in caplog.records if r.name == "toolkit_vault.audit.devices"]
    first = receiver.records[0]["seq"]
    assert len(back) == 2
    assert f"delivers again from event {first}; events {start}..{first - 1}" in back[1]
    assert f"audit export --after {start - 1}` replays them" in back[1]
    assert CANARY not in caplog.text


# -- settings --------------------------------------------------------------------------------------


def test_settings_come_from_the_environment_and_init_records_them(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKIT_VAULT_AUDIT_DEVICES", "file:audit.jsonl, stdout")
    monkeypatch.setenv("TOOLKIT_VAULT_AUDIT_FAIL_CLOSED", "true")
    settings = load_settings()
    assert settings.audit_devices == ("file:audit.jsonl", "stdout")
    assert settings.audit_fail_closed is True
    env = cli_devices(cli_env, "file:audit.jsonl", fail_closed=True)
    done = run_cli(["init"], env)
    assert done.returncode == 0, done.stderr
    assert "audit to:   file:audit.jsonl (fail-closed)" in done.stderr
    record = json.loads((home.home / "vault.json").read_text())
    assert (record["audit_devices"], record["audit_fail_closed"]) == (["file:audit.jsonl"], True)
    monkeypatch.delenv("TOOLKIT_VAULT_AUDIT_DEVICES")
    monkeypatch.delenv("TOOLKIT_VAULT_AUDIT_FAIL_CLOSED")
    assert load_settings().audit_devices == ("file:audit.jsonl",)  # the record, later
    written = run_cli(["tokens", "create", "--role", "agent", "--name", "recorded"], cli_env)
    assert written.returncode == 0, written.stderr
    trail = file_records(home.home / "audit.jsonl")  # relative to the home
    assert trail[-1]["action"] == "token_created"
    monkeypatch.setenv("TOOLKIT_VAULT_AUDIT_DEVICES", "none")
    assert load_settings().audit_devices == ()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("kafka://broker:9092", "unknown audit device 'kafka://broker:9092'"),
        ("syslog+tcp://admin:hunter2@host:601", "a syslog URL takes no user or password"),
        ("syslog+tcp://host:99999", "the port is not a number"),
        ("syslog+udp://host:514?facility=nope", "option 'facility' takes"),
        ("syslog+smtp://host", "unknown audit device 'syslog+smtp://host'"),
        ("syslog+tcp://host/path", "expected syslog+udp:// or syslog+tcp://"),
        ("file:", "needs a path"),
    ],
)
def test_a_bad_device_is_refused_at_start_with_one_line_and_no_password(
    spec: str, says: str, cli_env: dict[str, str], home: VaultSettings
) -> None:
    done = run_cli(["tokens", "list"], cli_devices(cli_env, spec))
    assert done.returncode == 1
    assert done.stderr.startswith("toolkit-vault: error: ") and says in done.stderr
    assert "hunter2" not in done.stderr and len(done.stderr.splitlines()) == 1


# -- issue 48: a receiver that never reads, bounded events, a symlinked file ---------------------


class Stuck:
    """A TCP syslog receiver that accepts every connection and never reads from one, with a
    small receive buffer: the device's `buffer=4096` fills after a dozen events."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def spec(self, timeout: float) -> str:
        port = self._sock.getsockname()[1]
        return f"syslog+tcp://127.0.0.1:{port}?buffer=4096&timeout={timeout}"

    def _accept(self) -> None:
        while True:
            try:
                self.conns.append(self._sock.accept()[0])
            except OSError:
                return

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in self.conns:
            conn.close()
        self._thread.join(timeout=5)


def devices_of(vault: Vault) -> AuditDevices:
    sink = vault.store.audit_sink
    assert isinstance(sink, AuditDevices)
    return sink


def settled(sink: AuditDevices, timeout: float = 10) -> dict[str, Any]:
    """The first device's status once its queue is empty."""
    deadline = time.monotonic() + timeout
    while sink.status()[0]["queued"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return sink.status()[0]


def test_a_receiver_that_never_reads_stalls_no_bystander_and_its_losses_are_counted(
    home: VaultSettings, opened: list[Vault], caplog: pytest.LogCaptureFixture
) -> None:
    stuck = Stuck()
    try:
        vault, start = opened_at(opened, with_devices(home, stuck.spec(2)))
        caplog.set_level(logging.WARNING, "toolkit_vault.audit.devices")
        writer = threading.Thread(target=configuring, args=(vault, 60))
        writer.start()
        slowest, rounds = 0.0, 0
        while writer.is_alive() or rounds < 5:
            began = time.monotonic()
            bystander = session(vault)  # a handshake writes an event of its own
            listed = request(bystander, {"type": "toolkit/list/req"})
            assert listed["type"] == "toolkit/list/resp", listed
            slowest, rounds = max(slowest, time.monotonic() - began), rounds + 1
        writer.join()
        assert slowest < 0.5, f"a bystander waited {slowest:.2f} s on the device"
        events = len(stored(vault)) - start + 1
        status = settled(devices_of(vault))
    finally:
        stuck.stop()
    assert status["queued"] == 0
    assert status["delivered"] + status["failed"] + status["lost"] == events
    assert status["failed"] + status["lost"] > 0 and status["failing_since"] is not None
    devices_of(vault).close()
    said = [r.getMessage() for r in caplog.records if r.name == "toolkit_vault.audit.devices"]
    missed = status["failed"] + status["lost"]
    assert any(f"{missed} events were not delivered to it" in line for line in said), said
    assert CANARY not in caplog.text


def test_fail_closed_answers_ok_only_for_what_the_receiver_took(
    home: VaultSettings, opened: list[Vault]
) -> None:
    stuck = Stuck()
    try:
        vault = open_with(opened, with_devices(home, stuck.spec(1), fail_closed=True))
        conn = session(vault)
        for n in range(200):  # until the buffers are full (a dozen events)
            if configure(conn, n)["type"] == "error":
                break
        else:
            pytest.fail("the device took 200 events a receiver never read")
        before = snapshot(vault)
        began = time.monotonic()
        answers = [configure(conn, 1000 + n) for n in range(5)]
        took = time.monotonic() - began
        after = snapshot(vault)
    finally:
        stuck.stop()
    assert [a["type"] for a in answers] == ["error"] * 5  # 0 of 5 ok: no reconnect hides it
    assert all("no audit device accepted" in a["message"] for a in answers)
    assert after == before  # no version, no event
    assert took < 2.5  # at once, not a 1 s deadline each: the receiver took nothing since


def test_an_agents_config_makes_a_bounded_event(
    home: VaultSettings, tmp_path: Path, opened: list[Vault]
) -> None:
    trail = tmp_path / "audit.jsonl"
    vault = open_with(opened, with_devices(home, f"file:{trail}"))
    conn = session(vault)
    headers = {f"x-{n:03d}-" + "k" * 2000: "v" for n in range(200)}
    config = {"endpoint": "https://x.example.test", "api_key": CANARY, "headers": headers}
    message = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
    assert request(conn, message)["status"] == "ok"
    with vault.store.engine.connect() as db:
        details = db.execute(select(AuditEvent.details).order_by(AuditEvent.seq.desc())).first()
    assert details is not None and len(details[0]) <= DETAILS_MAX_BYTES  # the chain's, bounded
    line = trail.read_bytes().splitlines()[-1]
    assert len(line) <= DETAILS_MAX_BYTES + 1024
    record = json.loads(line)
    assert record["action"] == "configure"
    changed = record["details"]["changed"]
    assert record["details"]["changed_count"] == 201  # the api_key and 200 headers
    assert len(changed) < 201 and changed[-1].startswith("...")  # the marker says so
    assert all(len(name) <= 200 for name in changed)
    assert CANARY not in trail.read_text()


def test_details_are_cut_the_same_way_each_time_but_never_the_state_they_carry() -> None:
    refused = {"reason": "CredentialRejected", "check": "x" * 40_000, "status": "error"}
    cut = json.loads(bounded_details(refused))
    assert cut == {"reason": "CredentialRejected", "check": "x" * 197 + "...", "status": "error"}
    assert bounded_details(refused) == bounded_details(dict(refused))
    small = {"status": "ok", "changed": ["/api_key"]}
    assert bounded_details(small) == json.dumps(small)  # what fits is kept as it is
    template = {"name": "prod", "values": {"endpoint": "https://" + "e" * 20_000}}
    with pytest.raises(StoreError, match="more than the 16384 an event may: nothing was"):
        bounded_details(template)  # state is never cut: the write is refused


def test_a_symlinked_file_device_is_refused(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, opened: list[Vault]
) -> None:
    target, link = tmp_path / "elsewhere", tmp_path / "audit.jsonl"
    target.write_text("")
    link.symlink_to(target)
    with pytest.raises(VaultError, match="is a symbolic link"):
        open_vault(with_devices(home, f"file:{link}"))
    done = run_cli(["tokens", "list"], cli_devices(cli_env, f"file:{link}"))
    assert done.returncode == 1 and "is a symbolic link" in done.stderr
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text("")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(VaultError, match="is not owned by"):
        open_vault(with_devices(home, f"file:{theirs}"))
    later = tmp_path / "later.jsonl"  # a link made after the start: refused at the open
    vault = open_with(opened, with_devices(home, f"file:{later}", fail_closed=True))
    later.symlink_to(target)
    before = snapshot(vault)
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    assert request(connect(vault, AGENT), hello)["type"] == "error"  # fail-closed: refused
    assert snapshot(vault) == before and target.read_text() == ""


class Blocked:
    """A device's target whose sends wait until `release` is set."""

    name = "blocked"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sent: list[int] = []

    def send(self, events: Any, lines: Any) -> None:
        self.release.wait(10)
        self.sent.extend(event["seq"] for event in events)

    def close(self) -> None:
        pass


def test_a_full_queue_drops_a_writes_events_and_counts_and_logs_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "toolkit_vault.audit.devices")
    target = Blocked()
    device = Device(target, capacity=3)
    began = time.monotonic()
    for seq in range(1, 7):  # the first is being sent (held), two wait, three do not fit
        device.put(Batch([{"seq": seq}], [b"{}\n"]))
    assert time.monotonic() - began < 0.5  # a write never waits on its device
    assert device.status()["queued"] == 3 and device.status()["lost"] == 3
    target.release.set()
    while device.status()["queued"]:
        time.sleep(0.01)
    device.put(Batch([{"seq": 7}], [b"{}\n"]))
    device.close()
    assert target.sent == [1, 2, 3, 7]  # in order
    status = device.status()
    assert (status["delivered"], status["lost"], status["queued"]) == (4, 3, 0)
    said = [r.getMessage() for r in caplog.records]
    assert "audit device blocked failed (its queue is full (3 events)) at event 4" in said[0]
    assert (
        "delivers again from event 7; events 4..6 were not delivered to it (3 events)" in (said[1])
    )
