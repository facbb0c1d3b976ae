"""Call records on a chain per process (`store.call_chains`), on SQLite and PostgreSQL: each
process writes its own chain, never under the main chain's lock, anchored in the main chain;
`audit verify` tells a record edited, deleted, reordered or inserted, a tail cut off behind
its head row or behind an anchor, and reports honestly the records after the last anchor
that only the head row proves. Chains from two processes verify side by side; a call
record moves no commit mark (PostgreSQL) and reaches the audit devices, in order per chain."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import text

from cli_support import run_cli
from test_audit_trail import cli
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.export import event_line
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.audit.verify import AuditReport, verify_audit_chain
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.tools.call_audit import tool_called_draft

SESSION = "s-chains"


def record(vault: Vault, i: int, actor: str = "p-agent") -> None:
    vault.store.record_call(
        tool_called_draft(
            actor=actor,
            session_id=SESSION,
            toolkit_name="filesystem",
            version=1,
            tool="read_file",
            outcome="ok",
            duration_ms=1.5,
            arguments_hmac=vault.upkeep.hash_arguments({"i": i}),
        )
    )


def verify(vault: Vault) -> AuditReport:
    key = vault._audit_key
    assert key is not None
    return verify_audit_chain(vault.store, key)


def sql(vault: Vault, statement: str, **params: Any) -> list[Any]:
    with vault.store.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return list(result.all()) if result.returns_rows else []


@pytest.fixture
def calls(vault: Vault) -> Vault:
    """A vault with a session whose calls are recorded: 5 records, anchored, then 3 more."""
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])
    for i in range(5):
        record(vault, i)
    assert vault.store.call_chain.anchor("time") == 5
    for i in range(5, 8):
        record(vault, i)
    return vault


def test_records_verify_and_the_tail_after_the_anchor_is_reported(
    calls: Vault,
) -> None:
    report = verify(calls)
    assert report.ok, report.message
    assert report.calls is not None
    chain = calls.store.call_chain.chain
    assert (report.calls.records, report.calls.verified, report.calls.unanchored) == (8, 8, 3)
    assert report.calls.chains == [{"chain": chain, "records": 8, "anchored": 5, "unanchored": 3}]
    assert "3 after their chain's last anchor" in report.message
    anchors = list_events(calls.store, EventFilter(actions=("calls_anchored",))).events
    assert [(e.actor, e.details["chain"], e.details["seq"]) for e in anchors] == [
        ("vault:calls", chain, 5)
    ]
    assert f"call chain {chain} anchored at record 5" in anchors[0].summary
    # the main chain holds no call record; the listing reads them from their chain
    assert sql(calls, "SELECT count(*) FROM audit_events WHERE action = 'tool_called'") == [(0,)]
    listed = list_events(calls.store, EventFilter(actions=("tool_called",))).events
    assert [(e.chain, e.chain_seq) for e in listed] == [(chain, n) for n in range(1, 9)]
    assert listed[0].as_json()["chain"] == chain
    calls.store.close()  # a clean shutdown anchors the rest
    report = verify(calls)
    assert report.ok and report.calls is not None and report.calls.unanchored == 0


@pytest.mark.parametrize(
    "edit",
    [
        "actor = 'p-someone'",
        "details = replace(details, substr(details, instr(details, 'arguments_hmac') + 18, 8), "
        "'00000000')",
        "ts = ts + 1",
    ],
    ids=["actor", "arguments_hmac", "ts"],
)
def test_an_edited_record_is_found(calls: Vault, edit: str) -> None:
    if calls.store.on_postgres:
        edit = edit.replace("instr(details, 'arguments_hmac')", "strpos(details, 'arguments_hmac')")
    (before,) = sql(calls, "SELECT details FROM call_records WHERE seq = 2")
    sql(calls, f"UPDATE call_records SET {edit} WHERE seq = 2")  # noqa: S608 (the test's own)
    (after,) = sql(calls, "SELECT details FROM call_records WHERE seq = 2")
    assert "arguments_hmac" not in edit or before != after
    report = verify(calls)
    assert not report.ok and report.problem == "edited", report.message
    assert "record 2 was edited" in report.message
    assert report.as_json()["call_records"]["problem"]["seq"] == 2


def test_a_record_moved_to_another_chain_is_found(calls: Vault) -> None:
    """Its MAC names its chain: the first record of another chain, renamed into this one
    (its own first link is 1 there too), does not hold here."""
    chain = calls.store.call_chain.chain
    other = "calls-0123456789abcdef"
    sql(
        calls,
        "UPDATE call_records SET chain = :other WHERE chain = :chain",
        other=other,
        chain=chain,
    )
    sql(
        calls,
        "UPDATE call_chains SET chain = :other WHERE chain = :chain",
        other=other,
        chain=chain,
    )
    report = verify(calls)
    assert not report.ok and report.problem == "edited", report.message
    assert f"call chain {other}: record 1 was edited" in report.message


def test_a_deleted_record_is_found(calls: Vault) -> None:
    sql(calls, "DELETE FROM call_records WHERE seq = 3")
    report = verify(calls)
    assert not report.ok and report.problem == "deleted", report.message
    assert "record 3 was deleted (the chain jumps to 4)" in report.message


def test_reordered_records_are_found(calls: Vault) -> None:
    sql(calls, "UPDATE call_records SET seq = 100 WHERE seq = 2")
    sql(calls, "UPDATE call_records SET seq = 2 WHERE seq = 3")
    sql(calls, "UPDATE call_records SET seq = 3 WHERE seq = 100")
    report = verify(calls)
    assert not report.ok and report.problem == "edited", report.message
    assert "record 2 was edited, moved or reordered" in report.message


def test_an_inserted_record_is_found(calls: Vault) -> None:
    chain = calls.store.call_chain.chain
    sql(
        calls,
        "INSERT INTO call_records (chain, seq, ts, actor, action, details, mac) "
        "VALUES (:chain, 9, 1.0, 'p-forger', 'tool_called', '{}', :mac)",
        chain=chain,
        mac=bytes(32),
    )
    report = verify(calls)
    assert not report.ok and report.problem == "edited", report.message
    assert "record 9 was edited" in report.message


def test_a_tail_cut_off_is_found_by_the_head_row(calls: Vault) -> None:
    sql(calls, "DELETE FROM call_records WHERE seq > 6")
    report = verify(calls)
    assert not report.ok and report.problem == "truncated", report.message
    assert "records 7..8 were deleted (the head row records 8)" in report.message


def test_a_tail_cut_with_an_old_head_row_is_found_by_the_anchor(calls: Vault) -> None:
    """A database writer who kept an earlier head row can put it back with the tail cut:
    the head row then agrees, but the main chain's anchor does not."""
    chain = calls.store.call_chain.chain
    (early,) = sql(calls, "SELECT seq, mac, head_mac FROM call_chains")
    for i in range(8, 12):
        record(calls, i)
    assert calls.store.call_chain.anchor("count") == 12
    sql(calls, "DELETE FROM call_records WHERE seq > 8")
    sql(
        calls,
        "UPDATE call_chains SET seq = :seq, mac = :mac, head_mac = :head WHERE chain = :chain",
        seq=early[0],
        mac=early[1],
        head=early[2],
        chain=chain,
    )
    report = verify(calls)
    assert not report.ok and report.problem == "truncated", report.message
    assert "records 9..12 were deleted (the main chain anchored 12)" in report.message


def test_a_tail_cut_after_the_last_anchor_with_its_head_rolled_back_is_reported_honestly(
    calls: Vault,
) -> None:
    """What nothing but the head row proves: the report says how many records rest on it."""
    (early,) = sql(calls, "SELECT seq, mac, head_mac FROM call_chains")
    assert early[0] == 8
    for i in range(8, 10):
        record(calls, i)
    sql(calls, "DELETE FROM call_records WHERE seq > 8")
    sql(
        calls,
        "UPDATE call_chains SET seq = :seq, mac = :mac, head_mac = :head",
        **dict(zip(("seq", "mac", "head"), early, strict=True)),
    )
    report = verify(calls)
    assert report.ok and report.calls is not None
    assert report.calls.unanchored == 3  # 6..8: after the anchor at 5, the head row's alone


def test_a_chain_deleted_whole_is_found_by_its_anchor(calls: Vault) -> None:
    sql(calls, "DELETE FROM call_records")
    sql(calls, "DELETE FROM call_chains")
    report = verify(calls)
    assert not report.ok and report.problem == "truncated", report.message
    assert "records 1..5 were deleted (the main chain anchored 5)" in report.message


class Sink:
    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.events.extend(events)


def test_each_record_reaches_the_audit_devices_in_order_with_its_chain(vault: Vault) -> None:
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])
    sink = Sink()
    vault.store.audit_sink = sink
    for i in range(4):
        record(vault, i)
    chain = vault.store.call_chain.chain
    calls = [e for e in sink.events if e.get("chain") == chain]
    assert [e["seq"] for e in calls] == [1, 2, 3, 4]
    line = json.loads(event_line(calls[1]))
    assert line["chain"] == chain and line["seq"] == 2
    assert line["previous"] == bytes(calls[0]["mac"]).hex()


def test_a_call_record_moves_no_commit_mark_on_postgresql(vault: Vault) -> None:
    if not vault.store.on_postgres:
        pytest.skip("SQLite's data_version moves with every commit to the file (docs/auditors.md)")
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])
    notices = vault.store.listen().start()
    assert notices.listening.wait(10)
    record(vault, 0)
    before = vault.store.commit_mark()
    assert before is not None
    for i in range(1, 4):
        record(vault, i)
    assert vault.store.commit_mark() == before
    create_token(vault.store, "agent", "bob")
    assert vault.store.commit_mark() != before
    notices.stop()


_REPLICA = """
import os, sys
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.settings import load_settings
from toolkit_vault.tools.call_audit import tool_called_draft
vault = open_vault(load_settings())
for i in range(int(sys.argv[1])):
    vault.store.record_call(tool_called_draft(
        actor="p-agent", session_id="s-chains", toolkit_name="filesystem", version=1,
        tool="read_file", outcome="ok", duration_ms=1.0,
        arguments_hmac=vault.upkeep.hash_arguments({"i": i})))
print(vault.store.call_chain.chain)
if sys.argv[2] == "kill":
    sys.stdout.flush()
    os._exit(0)
"""


def test_chains_of_two_processes_verify_side_by_side_and_a_killed_ones_tail_is_reported(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])

    def replica(count: int, end: str) -> subprocess.Popen[str]:
        script = textwrap.dedent(_REPLICA)
        return subprocess.Popen(
            [sys.executable, "-c", script, str(count), end],
            env=cli_env,
            stdout=subprocess.PIPE,
            text=True,
        )

    first, second = replica(30, "clean"), replica(20, "clean")
    chains = [p.communicate(timeout=120)[0].strip() for p in (first, second)]
    assert first.returncode == second.returncode == 0
    killed = replica(7, "kill")
    chains.append(killed.communicate(timeout=120)[0].strip())
    report = verify(vault)
    assert report.ok, report.message
    assert report.calls is not None and report.calls.records == 57
    by_chain = {c["chain"]: c for c in report.calls.chains}
    assert by_chain[chains[0]] == {
        "chain": chains[0],
        "records": 30,
        "anchored": 30,
        "unanchored": 0,
    }
    assert by_chain[chains[1]]["anchored"] == 20
    assert by_chain[chains[2]] == {"chain": chains[2], "records": 7, "anchored": 0, "unanchored": 7}
    listed = list_events(vault.store, EventFilter(actions=("tool_called",)), limit=1000).events
    assert len(listed) == 57
    assert {e.chain for e in listed} == set(chains)
    anchors = list_events(vault.store, EventFilter(actions=(AuditAction.CALLS_ANCHORED.value,)))
    assert {e.details["why"] for e in anchors.events} == {"shutdown"}


def test_tail_of_calls_reads_the_call_chains(calls: Vault, cli_env: dict[str, str]) -> None:
    done = cli(cli_env, "audit", "tail", "-n", "2", "--action", "tool_called", "--json")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["chain_seq"] for line in lines] == [7, 8]
    assert {line["chain"] for line in lines} == {calls.store.call_chain.chain}
    mixed = run_cli(("audit", "list", "--action", "tool_called", "--action", "purge"), cli_env)
    assert mixed.returncode == 1 and "tool_called is listed alone" in mixed.stderr
