"""Every call is audited (`tool_called`): its arguments only as an HMAC under an audit
subkey, which `audit hash` (CLI and `POST /v1/audit/hash`) reproduces for a value an auditor
holds and nobody can read back; the records of concurrent calls share writes (they do not
queue on the chain's lock one by one) and every one of them is on the chain, in order, and
verified by `audit verify`, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cli_support import run_cli
from test_audit_trail import app_client, cli, csrf_of, sign_in
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.audit.verify import verify_audit_chain
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes, derive_key
from toolkit_vault.errors import StoreError
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.call_records import MAX_BATCH
from toolkit_vault.store.writer import deferring
from toolkit_vault.tools.call_audit import (
    CALL_HMAC_LABEL,
    BadArguments,
    arguments_hmac,
    parse_arguments,
    tool_called_draft,
)

CANARY = "tkv-canary-call-args-9d41"
KEY = SecretBytes(bytes(range(32)))
ARGUMENTS = {"path": f"notes/{CANARY}.txt", "lines": [1, 2.5], "options": {"b": True, "a": None}}
# The same JSON value written otherwise: other key order, spaces, 2.50 for 2.5
SAME_TEXT = (
    f'{{ "options": {{"a": null, "b": true}}, "lines": [1.0, 2.50], "path": "notes/{CANARY}.txt" }}'
)


def expected(key: SecretBytes, canonical: bytes) -> str:
    return hmac.new(key.reveal(), canonical, hashlib.sha256).hexdigest()


def draft(vault: Vault, session: str, arguments: Mapping[str, Any], **given: Any) -> Any:
    fields: dict[str, Any] = {
        "actor": "p-agent",
        "session_id": session,
        "toolkit_name": "filesystem",
        "version": 1,
        "tool": "read_file",
        "outcome": "ok",
        "duration_ms": 3.25,
        "arguments_hmac": vault.upkeep.hash_arguments(arguments),
    }
    return tool_called_draft(**(fields | given))


# -- the HMAC ------------------------------------------------------------------------------


def test_the_hmac_is_of_the_canonical_arguments_under_the_key() -> None:
    canonical = (
        b'{"lines":[1,2.5],"options":{"a":null,"b":true},'
        + f'"path":"notes/{CANARY}.txt"'.encode()
        + b"}"
    )
    assert arguments_hmac(KEY, ARGUMENTS) == expected(KEY, canonical)
    assert arguments_hmac(KEY, parse_arguments(SAME_TEXT)) == arguments_hmac(KEY, ARGUMENTS)


def test_another_value_or_another_key_gives_another_hmac() -> None:
    mine = arguments_hmac(KEY, ARGUMENTS)
    for other in (
        {**ARGUMENTS, "path": "notes/other.txt"},
        {**ARGUMENTS, "lines": [1, 2.5, 3]},
        {k: v for k, v in ARGUMENTS.items() if k != "options"},
        {},
    ):
        assert arguments_hmac(KEY, other) != mine
    assert arguments_hmac(SecretBytes(bytes(32)), ARGUMENTS) != mine
    assert CANARY not in mine and len(mine) == 64


def test_values_canonical_json_cannot_carry_still_hash() -> None:
    big = parse_arguments('{"n": 123456789012345678901234567890}')
    assert arguments_hmac(KEY, big) == expected(KEY, b'{"n":123456789012345678901234567890}')
    assert arguments_hmac(KEY, big) != arguments_hmac(KEY, {"n": 123456789012345678901234567891})
    lone = parse_arguments('{"s": "\\ud800"}')  # the wire refuses it; the hash still answers
    assert len(arguments_hmac(KEY, lone)) == 64


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": "' + CANARY + '", "a": 1}', "duplicate object key"),
        ('{"a": NaN, "b": "' + CANARY + '"}', "not valid JSON"),
        ('{"a": 1e400, "b": "' + CANARY + '"}', "not valid JSON"),
        ('["' + CANARY + '"]', "must be a JSON object"),
        ('{"a": "' + CANARY, "not valid JSON"),
        (b'{"a": "\xff' + CANARY.encode() + b'"}', "not text"),
    ],
)
def test_unreadable_arguments_are_refused_without_echo(text: str | bytes, said: str) -> None:
    with pytest.raises(BadArguments) as caught:
        parse_arguments(text)
    assert said in caught.value.message and CANARY not in caught.value.message


def test_the_draft_holds_the_hmac_and_never_a_value() -> None:
    made = tool_called_draft(
        actor="p-1",
        session_id="s-1",
        toolkit_name="filesystem",
        version=2,
        tool="read_file",
        outcome="refused",
        duration_ms=0.1234,
        arguments_hmac=arguments_hmac(KEY, ARGUMENTS),
        reason="not_allowed",
    )
    assert made.action == AuditAction.TOOL_CALLED
    assert (made.actor, made.session_id, made.toolkit_name, made.version) == (
        "p-1",
        "s-1",
        "filesystem",
        2,
    )
    assert made.details == {
        "tool": "read_file",
        "outcome": "refused",
        "reason": "not_allowed",
        "duration_ms": 0.123,
        "arguments_hmac": arguments_hmac(KEY, ARGUMENTS),
    }
    with pytest.raises(ValueError, match="outcome"):
        tool_called_draft(**{**_draft_fields(), "outcome": "maybe"})
    with pytest.raises(ValueError, match="reason"):
        tool_called_draft(**{**_draft_fields(), "reason": "bored"})
    for name, longest in (("actor", 64), ("session_id", 64), ("toolkit_name", 200), ("tool", 200)):
        tool_called_draft(**{**_draft_fields(), name: "x" * longest})
        with pytest.raises(ValueError, match=name):  # it would fail its whole batch
            tool_called_draft(**{**_draft_fields(), name: "x" * (longest + 1)})
    with pytest.raises(ValueError, match="arguments_hmac"):
        tool_called_draft(**{**_draft_fields(), "arguments_hmac": "00" * 31})


def _draft_fields() -> dict[str, Any]:
    return {
        "actor": "p-1",
        "session_id": None,
        "toolkit_name": None,
        "version": None,
        "tool": None,
        "outcome": "ok",
        "duration_ms": 1,
        "arguments_hmac": "00" * 32,
    }


# -- the vault's key -------------------------------------------------------------------------


def test_the_vault_hashes_under_the_audit_keys_subkey(vault: Vault) -> None:
    audit_key = vault._audit_key
    assert audit_key is not None
    subkey = derive_key(audit_key, CALL_HMAC_LABEL)
    assert vault.upkeep.hash_arguments(ARGUMENTS) == arguments_hmac(subkey, ARGUMENTS)
    assert vault.upkeep.hash_arguments(ARGUMENTS) != arguments_hmac(audit_key, ARGUMENTS)


# -- recorded in batches ---------------------------------------------------------------------


class CountingSink:
    """An audit device that counts the transactions it is sent (one call per commit, with
    that commit's events) and takes a little time, as a device across a network does: the
    records of calls that end meanwhile must gather, not wait their turn one by one."""

    def __init__(self) -> None:
        self.commits: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        if not any("chain" in e for e in events):
            return  # a main chain write (a `calls_anchored` event): not a batch of calls
        time.sleep(0.01)
        with self.lock:
            self.commits.append([e["seq"] for e in events])


def test_concurrent_calls_share_commits_and_every_record_verifies(vault: Vault) -> None:
    session = "s-calls"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    sink = CountingSink()
    vault.store.audit_sink = sink
    threads, per_thread = 16, 15
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def calls(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            try:
                made = draft(vault, session, {"thread": n, "i": i}, actor=f"p-{n}")
                vault.store.record_call(made)
            except BaseException as exc:  # pragma: no cover - told below
                failures.append(exc)

    workers = [threading.Thread(target=calls, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not failures, failures
    total = threads * per_thread
    recorded = sum(len(seqs) for seqs in sink.commits)
    assert recorded == total
    print(f"{total} records in {len(sink.commits)} commits")
    assert len(sink.commits) <= total // 4, len(sink.commits)  # batched, not one write a call

    page = list_events(vault.store, EventFilter(actions=("tool_called",)), limit=1000)
    assert len(page.events) == total
    for n in range(threads):  # each caller's records in the order it made them
        mine = [e for e in page.events if e.actor == f"p-{n}"]
        hashes = [vault.upkeep.hash_arguments({"thread": n, "i": i}) for i in range(per_thread)]
        assert [e.details["arguments_hmac"] for e in mine] == hashes
    audit_key = vault._audit_key
    assert audit_key is not None
    report = verify_audit_chain(vault.store, audit_key)
    assert report.ok and report.verified == report.events, report.message


def test_a_failed_batch_fails_every_record_in_it_and_writes_none(vault: Vault) -> None:
    """A record is committed before its call is answered: when the write fails (an audit
    device refusing, fail-closed), every record of the batch hears it, none is stored."""
    session = "s-refused"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    gate, told = threading.Event(), []

    def refusing(events: Sequence[Mapping[str, Any]]) -> None:
        gate.wait(5)
        raise OSError("audit device gone")

    vault.store.audit_sink = refusing
    workers = [
        threading.Thread(target=_record_or_tell, args=(vault, session, i, told)) for i in range(6)
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.2)
    gate.set()
    for worker in workers:
        worker.join(30)
    assert told == ["the call's audit record was not written (OSError)"] * 6
    vault.store.audit_sink = None
    page = list_events(vault.store, EventFilter(actions=("tool_called",)))
    assert page.events == []


def _record_or_tell(vault: Vault, session: str, i: int, told: list[str]) -> None:
    try:
        vault.store.record_call(draft(vault, session, {"i": i}))
    except Exception as exc:
        told.append(str(exc) or type(exc).__name__)


def test_a_batch_is_bounded() -> None:
    assert 100 <= MAX_BATCH <= 5000


# -- audit hash, audit list, /v1 and the console -----------------------------------------------


def test_audit_hash_finds_the_events_hmac_and_no_value_is_anywhere(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    session = "s-hash"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    vault.store.record_call(draft(vault, session, ARGUMENTS))
    other = {"path": "elsewhere.txt"}
    vault.store.record_call(draft(vault, session, other, outcome="tool_error", version=None))
    listed = json.loads(
        cli(
            cli_env, "audit", "list", "--action", "tool_called", "--toolkit", "filesystem", "--json"
        ).stdout
    )
    hashes = [e["details"]["arguments_hmac"] for e in listed["events"]]
    assert len(hashes) == 2
    human = cli(cli_env, "audit", "list", "--action", "tool_called").stdout
    assert "called filesystem/read_file v1" in human and ": ok in 3 ms" in human

    on_stdin = run_cli(("audit", "hash"), cli_env, timeout=60, input=SAME_TEXT)
    assert on_stdin.returncode == 0, on_stdin.stderr
    assert on_stdin.stdout.strip() == hashes[0]
    as_argument = cli(cli_env, "audit", "hash", json.dumps(other), "--json")
    assert json.loads(as_argument.stdout) == {"arguments_hmac": hashes[1]}
    different = cli(cli_env, "audit", "hash", json.dumps({**ARGUMENTS, "lines": [1]}))
    assert different.stdout.strip() not in hashes

    bad = run_cli(("audit", "hash"), cli_env, timeout=60, input='{"p": "' + CANARY)
    assert bad.returncode == 1 and "stdin: arguments are not valid JSON" in bad.stderr
    assert CANARY not in bad.stderr + bad.stdout

    agent = create_token(vault.store, "agent", "nosy")[1]
    auditor = {"Authorization": f"Bearer {create_token(vault.store, 'auditor', 'audrey')[1]}"}
    with app_client(vault, home) as client:
        body = '{"arguments": ' + SAME_TEXT + "}"
        answer = client.post("/v1/audit/hash", content=body, headers=auditor)
        assert answer.status_code == 200 and answer.json() == {"arguments_hmac": hashes[0]}
        nosy = client.post(
            "/v1/audit/hash", content=body, headers={"Authorization": f"Bearer {agent}"}
        )
        assert nosy.status_code == 403
        assert client.post("/v1/audit/hash", content=body).status_code == 401
        refusals = [
            client.post("/v1/audit/hash", content=text, headers=auditor)
            for text in (
                '{"arguments": {"p": "' + CANARY + '", "p": 1}}',
                '{"arguments": ["' + CANARY + '"]}',
                '{"arguments": {}, "extra": "' + CANARY + '"}',
                '{"arguments": {"p": "' + CANARY,
            )
        ]
        for refused in refusals:
            assert refused.status_code == 422, refused.text
            assert CANARY not in refused.text
        events = client.get(
            "/v1/audit/events", params={"action": "tool_called"}, headers=auditor
        ).json()["events"]
        sign_in(client, create_token(vault.store, "auditor", "audrey2")[1])
        page = client.get("/console/audit", params={"action": "tool_called"})
        assert page.status_code == 200
        assert f"called filesystem/read_file v1 in session {session}: ok in 3 ms" in page.text
        assert "tool error in 3 ms" in page.text
    assert [e["details"]["arguments_hmac"] for e in events] == hashes
    for text in (json.dumps(listed), human, json.dumps(events), page.text):
        assert CANARY not in text and "elsewhere.txt" not in text


def test_a_record_from_the_writer_thread_fails_at_once_instead_of_hanging(vault: Vault) -> None:
    """A write's `then` runs on the store's writer thread; a record made there would wait
    for a batch whose write is queued behind that very thread."""
    session = "s-writer"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    heard: list[str] = []

    def then(_: Any) -> None:
        try:
            vault.store.record_call(draft(vault, session, {"i": 0}))
        except StoreError as exc:
            heard.append(exc.message)

    with deferring() as left:
        vault.store.transact(lambda conn: None, then)
    done = threading.Thread(target=lambda: [write.wait() for write in left], daemon=True)
    done.start()
    done.join(10)
    assert not done.is_alive()
    assert heard == ["a call's record cannot be written from the store's writer thread"]


def test_the_calls_with_given_arguments_are_found_everywhere(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """`--arguments-hmac` (CLI), `arguments_hmac=` (/v1) and the console's form find the
    calls that had the arguments, and only those; the console never echoes them."""
    alice = create_token(vault.store, "agent", "alice")[0]
    for session in ("s-one", "s-two"):
        vault.store.create_session(session, alice)
        vault.store.record_call(draft(vault, session, ARGUMENTS))
        vault.store.record_call(draft(vault, session, {"path": "elsewhere.txt"}))
    hashed = vault.upkeep.hash_arguments(ARGUMENTS)

    found = json.loads(
        cli(cli_env, "audit", "list", "--arguments-hmac", hashed.upper(), "--json").stdout
    )["events"]
    assert [(e["session_id"], e["details"]["arguments_hmac"]) for e in found] == [
        ("s-one", hashed),
        ("s-two", hashed),
    ]
    bad = run_cli(("audit", "list", "--arguments-hmac", CANARY), cli_env, timeout=60)
    assert bad.returncode == 1 and "--arguments-hmac: takes the 64 hex digits" in bad.stderr
    assert CANARY not in bad.stderr

    auditor = {"Authorization": f"Bearer {create_token(vault.store, 'auditor', 'audrey')[1]}"}
    with app_client(vault, home) as client:
        page = client.get(
            "/v1/audit/events", params={"arguments_hmac": hashed, "limit": 1}, headers=auditor
        ).json()
        assert [e["seq"] for e in page["events"]] == [found[0]["seq"]] and page["next"]
        refused = client.get("/v1/audit/events", params={"arguments_hmac": "0" * 63 + "g"})
        assert refused.status_code == 401
        refused = client.get(
            "/v1/audit/events", params={"arguments_hmac": "0" * 63 + "g"}, headers=auditor
        )
        assert refused.status_code == 422 and "arguments_hmac" in refused.json()["detail"]

        sign_in(client, create_token(vault.store, "auditor", "audrey2")[1])
        audit_page = client.get("/console/audit")
        form = {"csrf": csrf_of(audit_page.text), "arguments": SAME_TEXT}
        asked = client.post("/console/audit/hash", data=form, follow_redirects=False)
        assert asked.status_code == 303
        assert asked.headers["location"] == (
            f"/console/audit?action=tool_called&arguments_hmac={hashed}"
        )
        listed = client.get(asked.headers["location"])
        rows = re.findall(r"<tr>\s*<td[^>]*>(\d+)</td>", listed.text)
        assert [int(seq) for seq in rows] == [e["seq"] for e in reversed(found)]
        assert "calls with the same arguments" in listed.text
        unreadable = {"csrf": csrf_of(audit_page.text), "arguments": '{"p": "' + CANARY}
        said = client.post("/console/audit/hash", data=unreadable, follow_redirects=False)
        assert said.status_code == 422 and "arguments are not valid JSON" in said.text
        forged = client.post("/console/audit/hash", data={"arguments": SAME_TEXT})
        assert forged.status_code == 403
    for text in (listed.text, said.text, json.dumps(page)):
        assert CANARY not in text and "elsewhere.txt" not in text


def test_records_left_to_the_writer_are_all_committed_in_few_writes(vault: Vault) -> None:
    """`wait=False`: the caller goes on at once; every record still reaches the chain, in
    each caller's order, in batches that take whatever arrived meanwhile."""
    session = "s-left"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    sink, gate = CountingSink(), threading.Event()

    def held(events: Sequence[Mapping[str, Any]]) -> None:
        gate.wait(10)  # the first write holds the chain until every caller has gone on
        sink(events)

    vault.store.audit_sink = held
    threads, per_thread = 8, 40
    start = threading.Barrier(threads)

    def calls(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            made = draft(vault, session, {"thread": n, "i": i}, actor=f"p-{n}")
            vault.store.record_call(made, wait=False)

    workers = [threading.Thread(target=calls, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers)  # none waited for a commit
    gate.set()
    total = threads * per_thread
    deadline = time.monotonic() + 30
    while sum(len(seqs) for seqs in sink.commits) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(len(seqs) for seqs in sink.commits) == total
    assert len(sink.commits) <= 3, sink.commits  # the first, then what queued meanwhile
    called = EventFilter(actions=("tool_called",))
    while len(list_events(vault.store, called, limit=1000).events) < total:
        assert time.monotonic() < deadline  # the sink hears a batch just before its commit
        time.sleep(0.05)
    page = list_events(vault.store, called, limit=1000)
    for n in range(threads):
        mine = [e.details["arguments_hmac"] for e in page.events if e.actor == f"p-{n}"]
        assert mine == [vault.upkeep.hash_arguments({"thread": n, "i": i}) for i in range(40)]
    audit_key = vault._audit_key
    assert audit_key is not None
    assert verify_audit_chain(vault.store, audit_key).ok


def test_a_left_batch_that_fails_is_logged_and_its_waiters_hear_it(
    vault: Vault, caplog: pytest.LogCaptureFixture
) -> None:
    session = "s-left-refused"
    vault.store.create_session(session, create_token(vault.store, "agent", "alice")[0])
    gate, writing = threading.Event(), threading.Event()

    def refusing(events: Sequence[Mapping[str, Any]]) -> None:
        writing.set()
        gate.wait(5)
        raise OSError("audit device gone")

    vault.store.audit_sink = refusing
    vault.store.record_call(draft(vault, session, {"i": 0}), wait=False)  # a batch, written
    assert writing.wait(10)  # ... and held in its commit: the next records queue behind it
    vault.store.record_call(draft(vault, session, ARGUMENTS), wait=False)  # the next batch
    told: list[str] = []  # the waiter joins that batch, left to the writer
    waiter = threading.Thread(target=_record_or_tell, args=(vault, session, 2, told))
    waiter.start()
    time.sleep(0.2)
    gate.set()
    waiter.join(30)
    assert told == ["the call's audit record was not written (OSError)"]
    deadline = time.monotonic() + 10
    while "audit records were not written" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "calls' audit records were not written" in caplog.text
    assert CANARY not in caplog.text
    vault.store.audit_sink = None
    assert list_events(vault.store, EventFilter(actions=("tool_called",))).events == []
