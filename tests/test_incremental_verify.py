"""Verification proportional to change (issue 53): `audit verify` and `check` remember what
they last verified (a mark in the home, MACed under the audit key) and by default verify
only what came after it; a forged, stale, cut, swapped or disagreeing mark is not believed
(the run is full, and says so). On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, text, update

from test_cli import run
from test_vault import configure, handshake, secret_config
from toolkit_vault import crypto
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.verify import AuditReport
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.models import AuditEvent, AuditHead, ConfigVersion
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.verified import AUDIT, Mark, read_mark, write_mark
from toolkit_vault.tools.call_audit import tool_called_draft

pytestmark = pytest.mark.key_providers("file")
SESSION = "s-incremental"


def events(vault: Vault, count: int) -> None:
    """`count` events that change no stored state (tool calls on the main chain)."""
    drafts = [
        AuditDraft("local", AuditAction.TOOL_CALLED, SESSION, "filesystem", None, {"n": n})
        for n in range(count)
    ]
    with vault.store.write() as conn:
        vault.store.audit_many(conn, drafts)


def head(vault: Vault) -> int:
    with vault.store.engine.connect() as db:
        return int(db.execute(select(func.max(AuditEvent.seq))).scalar_one())


def mark_file(home: VaultSettings, kind: str = AUDIT) -> Path:
    return home.home / f"verified-{kind}"


def sign_of(vault: Vault) -> partial[bytes]:
    assert vault._audit_key is not None
    return partial(crypto.chain_hash, vault._audit_key)


def marked(vault: Vault) -> int:
    """A full run that leaves a mark; returns the seq it covers."""
    report = vault.verify_audit(full=True)
    assert report.ok and report.full, report.message
    return report.verified


def edit(vault: Vault, seq: int) -> None:
    with vault.store.engine.begin() as db:
        db.execute(update(AuditEvent).where(AuditEvent.seq == seq).values(actor="mallory"))


def test_a_second_run_walks_only_the_events_after_the_first(vault: Vault) -> None:
    events(vault, 20)
    first = vault.verify_audit()
    assert first.ok and first.full and first.since == 0 and first.mark_refused is None
    events(vault, 7)
    second = vault.verify_audit()
    assert second.ok, second.message
    assert (second.full, second.since, second.verified) == (False, first.verified, head(vault))
    assert f"incremental: events after {first.verified}" in second.message
    assert "`--full`" in second.message
    again = vault.verify_audit(full=True)
    assert again.ok and again.full and again.since == 0 and "incremental" not in again.message


def test_an_event_edited_after_the_mark_is_found_by_the_incremental_run(vault: Vault) -> None:
    events(vault, 10)
    covered = marked(vault)
    events(vault, 10)
    edit(vault, covered + 4)
    report = vault.verify_audit()
    assert not report.full and report.since == covered
    assert (report.problem, report.first_bad_seq) == ("edited", covered + 4)
    assert report.verified == covered + 3


def test_an_event_deleted_after_the_mark_is_found(vault: Vault) -> None:
    events(vault, 10)
    covered = marked(vault)
    events(vault, 10)
    with vault.store.engine.begin() as db:
        db.execute(delete(AuditEvent).where(AuditEvent.seq == covered + 2))
    report = vault.verify_audit()
    assert not report.full
    assert (report.problem, report.first_bad_seq) == ("deleted", covered + 2)


def test_an_edit_before_the_mark_is_found_by_full_only(vault: Vault) -> None:
    """What SECURITY.md states: the incremental run does not read events before its mark
    again (a state-free event edited there goes unseen); `--full` proves everything."""
    events(vault, 10)
    covered = marked(vault)
    edit(vault, covered - 2)
    events(vault, 3)
    assert vault.verify_audit().ok
    full = vault.verify_audit(full=True)
    assert (full.problem, full.first_bad_seq) == ("edited", covered - 2)


def refused(report: AuditReport, why: str) -> None:
    assert report.full and report.since == 0, report.message
    assert report.mark_refused is not None and why in report.mark_refused
    assert "the whole chain was walked" in report.message


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("forged", "fails its MAC"),
        ("truncated", "cut short"),
        ("swapped", "fails its MAC"),
        ("another vault", "fails its MAC"),
        ("state swapped", "not the one its header names"),
    ],
)
def test_a_damaged_mark_is_not_believed(
    vault: Vault, home: VaultSettings, damage: str, why: str
) -> None:
    events(vault, 10)
    marked(vault)
    path = mark_file(home)
    data = path.read_bytes()
    if damage == "forged":  # a later seq claimed, to skip events
        header, rest = data.split(b"\n", 1)
        document = json.loads(header)
        document["seq"] += 5
        path.write_bytes(json.dumps(document).encode() + b"\n" + rest)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "swapped":  # the check's mark in the audit mark's place
        conn, _ = handshake(vault)
        configure(conn, "secretive", secret_config())
        vault.check(full=True)
        path.write_bytes(mark_file(home, "check").read_bytes())
    elif damage == "another vault":
        other = partial(crypto.chain_hash, SecretBytes(b"k" * 32))
        genuine = read_mark(path, AUDIT, sign_of(vault))
        assert genuine is not None
        write_mark(path, genuine, other)
    else:  # another state, under the genuine header and MAC
        header, _, mac, end = data.split(b"\n")
        path.write_bytes(header + b"\n" + b'{"pointers":{}}' + b"\n" + mac + b"\n" + end)
    events(vault, 3)
    report = vault.verify_audit()
    assert report.ok, report.message
    refused(report, why)


def test_a_mark_the_chain_disagrees_with_is_not_believed(vault: Vault) -> None:
    """The link at the mark's seq rewritten: refused, and the full walk says what broke."""
    events(vault, 10)
    covered = marked(vault)
    with vault.store.engine.begin() as db:
        db.execute(update(AuditEvent).where(AuditEvent.seq == covered).values(mac=bytes(32)))
    report = vault.verify_audit()
    refused(report, "another event at its seq")
    assert report.problem == "edited" and report.first_bad_seq == covered


def test_a_mark_over_events_deleted_below_it_is_not_believed(vault: Vault) -> None:
    events(vault, 10)
    covered = marked(vault)
    with vault.store.engine.begin() as db:
        db.execute(delete(AuditEvent).where(AuditEvent.seq == covered - 3))
    report = vault.verify_audit()
    refused(report, "deleted")
    assert (report.problem, report.first_bad_seq) == ("deleted", covered - 3)


def test_a_deleted_event_made_up_for_below_the_first_seq_is_still_missing(vault: Vault) -> None:
    """The count below the mark is every event less those after it and those before seq 1
    (`checkpoints.count_to`): an event deleted below the mark and a copy of it put at seq 0
    keep the table's size, and the mark is still refused."""
    events(vault, 10)
    covered = marked(vault)
    events(vault, 3)  # events after the mark, which the count leaves out
    with vault.store.engine.begin() as db:
        moved = db.execute(select(AuditEvent).where(AuditEvent.seq == covered - 3)).one()
        db.execute(delete(AuditEvent).where(AuditEvent.seq == covered - 3))
        db.execute(AuditEvent.__table__.insert().values({**moved._mapping, "seq": 0}))
    report = vault.verify_audit()
    refused(report, "deleted")
    assert not report.ok


def test_a_stale_mark_past_a_restored_chain_is_not_believed(vault: Vault) -> None:
    """An older copy of the database put back (its events and its genuine head): the mark
    names an event the chain no longer holds."""
    events(vault, 5)
    with vault.store.engine.connect() as db:
        old_head = db.execute(select(AuditHead)).one()._mapping
    kept = int(old_head["seq"])
    events(vault, 10)
    marked(vault)
    with vault.store.engine.begin() as db:
        db.execute(delete(AuditEvent).where(AuditEvent.seq > kept))
        db.execute(update(AuditHead).values(**dict(old_head)))
    report = vault.verify_audit()
    refused(report, "no longer holds")
    assert report.verified == kept  # the older copy's own chain verifies; the witness says behind


def test_an_older_genuine_mark_is_believed_and_walks_more(
    vault: Vault, home: VaultSettings
) -> None:
    events(vault, 5)
    first = marked(vault)
    older = mark_file(home).read_bytes()
    events(vault, 5)
    marked(vault)
    mark_file(home).write_bytes(older)
    report = vault.verify_audit()
    assert report.ok and not report.full and report.since == first


def test_call_records_after_the_mark_are_walked_and_a_deleted_one_before_is_found(
    vault: Vault,
) -> None:
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])

    def call(i: int) -> None:
        vault.store.record_call(
            tool_called_draft(
                actor="p-agent",
                session_id=SESSION,
                toolkit_name="filesystem",
                version=1,
                tool="read_file",
                outcome="ok",
                duration_ms=1.0,
                arguments_hmac=vault.upkeep.hash_arguments({"i": i}),
            )
        )

    for i in range(4):
        call(i)
    vault.store.call_chain.anchor("time")
    assert marked(vault)
    for i in range(4, 7):
        call(i)
    report = vault.verify_audit()
    assert report.ok and not report.full, report.message
    assert report.calls is not None and report.calls.verified == 7
    chain = vault.store.call_chain.chain
    with vault.store.engine.begin() as db:
        db.execute(text("DELETE FROM call_records WHERE chain = :c AND seq = 2"), {"c": chain})
    report = vault.verify_audit()
    assert report.calls is not None and report.calls.broken is not None
    assert report.calls.broken.problem == "deleted" and not report.ok


def test_check_opens_only_the_versions_written_since(vault: Vault, home: VaultSettings) -> None:
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    first = vault.check()
    assert first["ok"] and first["full"] and first["versions"] == 1
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    second = vault.check()
    assert second["ok"] and not second["full"] and second["versions"] == 1
    assert second["since_id"] > 0 and second["mark_refused"] is None
    assert vault.check(full=True)["versions"] == 2
    # a version written since, swapped for garbage: found by the incremental check
    configure(conn, "secretive", secret_config("other-canary"))
    with vault.store.engine.begin() as db:
        newest = db.execute(select(func.max(ConfigVersion.id))).scalar_one()
        db.execute(
            update(ConfigVersion).where(ConfigVersion.id == newest).values(wrapped_dek=b"x" * 60)
        )
    third = vault.check()
    assert third["failed"] == 1 and not third["ok"]


def test_an_incremental_check_holds_new_versions_to_the_state_its_walk_verified(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The versions since the check's mark are held to the chain's state as the run's own
    walk verified it (a purged version put back is named), and with none since no chain is
    followed at all: the store's own follow is never asked (issue 53)."""
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    assert vault.check()["ok"]  # its mark: this version's row, which nothing below touches

    def followed(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the store's chain was followed")

    monkeypatch.setattr(vault.store, "chain_state", followed)
    events(vault, 5)
    quiet = vault.check()
    assert quiet["ok"] and not quiet["full"] and quiet["versions"] == 0, quiet
    monkeypatch.undo()
    other, session = handshake(vault)
    configure(other, "secretive", secret_config())
    with vault.store.engine.connect() as db:
        newest = db.execute(select(ConfigVersion).order_by(ConfigVersion.id.desc())).first()
    assert newest is not None
    vault.purge("operator", session)
    with vault.store.engine.begin() as db:  # the newest row put back as it was
        db.execute(delete(ConfigVersion).where(ConfigVersion.id == newest.id))
        db.execute(ConfigVersion.__table__.insert().values(dict(newest._mapping)))
    monkeypatch.setattr(vault.store, "chain_state", followed)
    checked = vault.check()
    assert not checked["full"] and checked["versions"] >= 1 and not checked["ok"]
    assert "was purged" in json.dumps(checked["failed_versions"])


def test_a_forged_check_mark_is_not_believed(vault: Vault, home: VaultSettings) -> None:
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    vault.check()
    path = mark_file(home, "check")
    header, rest = path.read_bytes().split(b"\n", 1)
    document = json.loads(header)
    document["body"]["last_id"] += 100  # skip versions to come
    path.write_bytes(json.dumps(document).encode() + b"\n" + rest)
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    result = vault.check()
    assert result["full"] and result["versions"] == 2
    assert "fails its MAC" in result["mark_refused"]


def test_a_check_mark_over_a_deleted_version_is_not_believed(vault: Vault) -> None:
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    vault.check()
    with vault.store.engine.begin() as db:
        oldest = db.execute(select(func.min(ConfigVersion.id))).scalar_one()
        db.execute(delete(ConfigVersion).where(ConfigVersion.id == oldest))
    result = vault.check()
    assert result["full"] and "deleted" in result["mark_refused"]


def test_the_cli_says_which_run_it_made(vault: Vault, cli_env: dict[str, str]) -> None:
    events(vault, 5)
    first = json.loads(run(cli_env, "audit", "verify", "--json").stdout)
    assert first["ok"] and first["full"] and first["since"] == 0
    events(vault, 2)
    second = run(cli_env, "audit", "verify")
    assert second.returncode == 0 and "incremental: events after" in second.stdout
    full = json.loads(run(cli_env, "audit", "verify", "--full", "--json").stdout)
    assert full["ok"] and full["full"] and full["since"] == 0
    checked = run(cli_env, "check", "--full", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["full"] is True


def test_a_mark_is_only_written_by_a_run_whose_chains_verify(
    vault: Vault, home: VaultSettings
) -> None:
    events(vault, 5)
    covered = marked(vault)
    events(vault, 5)
    edit(vault, covered + 2)
    assert not vault.verify_audit().ok
    mark = read_mark(mark_file(home), AUDIT, sign_of(vault))
    assert isinstance(mark, Mark) and mark.seq == covered


def test_a_row_whose_text_is_not_utf8_fails_its_own_check_only(vault: Vault) -> None:
    """SQLite keeps whatever bytes a writer gives it: a principal's name that is not UTF-8
    is read with the bad bytes replaced (`database._LENIENT_TEXT`), so that row fails its
    MAC and is named, and the run reads every other row (a strict decoding stopped it)."""
    if vault.store.engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL refuses text that is not UTF-8 when it is written")
    create_token(vault.store, "agent", "bob")
    with vault.store.engine.begin() as db:
        bad = "UPDATE principals SET name = CAST(X'626fff62' AS TEXT) WHERE name = 'bob'"
        db.execute(text(bad))
    for full in (True, False):
        report = vault.verify_audit(full=full)
        assert not report.ok and report.state_problem_count == 1, report.message
        (problem,) = report.state_problems
        assert (problem.table, problem.problem) == ("principals", "unauthenticated")
        assert problem.row.startswith("bo\ufffdb (")
