"""The audit chain against someone with write access to the database but not the keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Connection, delete, func, insert, select, update

from test_cli import run
from test_history import error_line
from test_vault import configure, handshake, secret_config
from toolkit_vault.audit.verify import verify_audit_chain
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import StoreError
from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.models import AuditEvent, AuditHead, ConfigVersion
from toolkit_vault.store.records import AuditDraft


def _populate(vault: Vault) -> list[int]:
    """A few sessions and configures: about ten events; returns their seqs."""
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    conn2, _ = handshake(vault)
    configure(conn2, "filesystem", {"root_dir": "/srv"})
    configure(conn2, "nope", {})
    with vault.store.engine.connect() as db:
        seqs = list(db.execute(select(AuditEvent.seq).order_by(AuditEvent.seq)).scalars())
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 8
    return seqs


def _edit_details(db: Connection, seqs: list[int]) -> int:
    target = seqs[4]
    db.execute(
        update(AuditEvent).where(AuditEvent.seq == target).values(details='{"status": "ok"}')
    )
    return target


def _append_to_details(db: Connection, seqs: list[int]) -> int:
    """Text after the signed JSON: the fast form (`links_check`) must not read only its
    start (where the C scanner stops) and believe the event."""
    target = seqs[4]
    edited = AuditEvent.details + " x"
    db.execute(update(AuditEvent).where(AuditEvent.seq == target).values(details=edited))
    return target


def _edit_actor(db: Connection, seqs: list[int]) -> int:
    target = seqs[2]
    db.execute(update(AuditEvent).where(AuditEvent.seq == target).values(actor="someone-else"))
    return target


def _edit_first(db: Connection, seqs: list[int]) -> int:
    db.execute(update(AuditEvent).where(AuditEvent.seq == seqs[0]).values(actor="someone-else"))
    return seqs[0]


def _edit_last(db: Connection, seqs: list[int]) -> int:
    """The head still names the last event's stored MAC: only that event's own check sees it."""
    db.execute(update(AuditEvent).where(AuditEvent.seq == seqs[-1]).values(ts=1.0))
    return seqs[-1]


def _delete_middle(db: Connection, seqs: list[int]) -> int:
    target = seqs[3]
    db.execute(delete(AuditEvent).where(AuditEvent.seq == target))
    return target


def _delete_last(db: Connection, seqs: list[int]) -> int:
    db.execute(delete(AuditEvent).where(AuditEvent.seq == seqs[-1]))
    return seqs[-1]


def _delete_last_and_move_head(db: Connection, seqs: list[int]) -> int:
    db.execute(delete(AuditEvent).where(AuditEvent.seq == seqs[-1]))
    mac = db.execute(select(AuditEvent.mac).where(AuditEvent.seq == seqs[-2])).scalar_one()
    db.execute(update(AuditHead).values(seq=seqs[-2], mac=mac))  # head_mac cannot follow
    return seqs[-1]


def _forged(seq: int, mac: bytes = b"\x00" * 32) -> dict[str, Any]:
    return {
        "seq": seq,
        "ts": 1.0,
        "actor": "local",
        "action": "configure",
        "session_id": "forged",
        "toolkit_name": "secretive",
        "version": 1,
        "details": "{}",
        "mac": mac,
    }


def _insert_at_end(db: Connection, seqs: list[int]) -> int:
    previous = db.execute(select(AuditEvent.mac).where(AuditEvent.seq == seqs[-1])).scalar_one()
    db.execute(insert(AuditEvent).values(**_forged(seqs[-1] + 1, previous)))
    return seqs[-1] + 1


def _insert_in_the_middle(db: Connection, seqs: list[int]) -> int:
    target = seqs[3]
    for seq in reversed(seqs[3:]):  # make room, one row at a time (unique seq)
        db.execute(update(AuditEvent).where(AuditEvent.seq == seq).values(seq=seq + 1))
    db.execute(insert(AuditEvent).values(**_forged(target)))
    return target


TAMPERING: dict[str, tuple[Callable[[Connection, list[int]], int], str]] = {
    "edit details": (_edit_details, "edited"),
    "append to details": (_append_to_details, "edited"),
    "edit actor": (_edit_actor, "edited"),
    "edit the first event": (_edit_first, "edited"),
    "edit the last event": (_edit_last, "edited"),
    "delete a middle event": (_delete_middle, "deleted"),
    "delete the last event": (_delete_last, "truncated"),
    "delete the last event and move the head": (_delete_last_and_move_head, "truncated"),
    "insert at the end": (_insert_at_end, "inserted"),
    "insert in the middle": (_insert_in_the_middle, "inserted"),
}


def test_an_untouched_store_verifies(vault: Vault, cli_env: dict[str, str]) -> None:
    seqs = _populate(vault)
    done = run(cli_env, "audit", "verify", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {
        "ok": True,
        "events": len(seqs),
        "verified": len(seqs),
        "head_seq": seqs[-1],
        "first_bad_seq": None,
        "problem": None,
        "message": f"all {len(seqs)} audit events verify up to the chain head",
        "unaudited_versions": [],
        "unaudited_count": 0,
        "state_problems": [],
        "state_problem_count": 0,
        "witness_warning": None,
        "call_records": {
            "records": 0,
            "verified": 0,
            "unanchored": 0,
            "chain_count": 0,
            "chains": [],
            "problem": None,
        },
        "since": 0,
        "full": True,
        "mark_refused": None,
    }
    human = run(cli_env, "audit", "verify", "--full")
    assert human.returncode == 0 and f"{len(seqs)}/{len(seqs)} events verified" in human.stdout


@pytest.mark.parametrize("how", list(TAMPERING))
def test_tampering_is_found_and_named(vault: Vault, cli_env: dict[str, str], how: str) -> None:
    seqs = _populate(vault)
    tamper, problem = TAMPERING[how]
    with vault.store.engine.begin() as db:
        bad = tamper(db, seqs)
    done = run(cli_env, "audit", "verify", "--json")
    report = json.loads(done.stdout)
    assert (report["ok"], report["problem"], report["first_bad_seq"]) == (False, problem, bad)
    assert f"audit chain broken at event {bad}" in error_line(done)
    human = run(cli_env, "audit", "verify")
    assert f"event {bad}" in error_line(human)


def test_small_batches_stream_the_same_answer(vault: Vault) -> None:
    seqs = _populate(vault)
    key = vault._audit_key
    assert key is not None
    assert verify_audit_chain(vault.store, key, batch_size=2).ok
    with vault.store.engine.begin() as db:
        bad = _edit_details(db, seqs)
    report = verify_audit_chain(vault.store, key, batch_size=2, full=True)
    assert (report.problem, report.first_bad_seq, report.verified) == ("edited", bad, bad - 1)


def test_a_broken_head_stops_every_write(vault: Vault) -> None:
    """Extending a chain whose tail was cut would hide the cut: writes fail closed."""
    seqs = _populate(vault)
    conn, _ = handshake(vault)
    stored = _version_count(vault)
    with vault.store.engine.begin() as db:
        _delete_last(db, [*seqs, seqs[-1] + 1])  # the handshake's session_created event
    with pytest.raises(StoreError, match="audit chain head does not match"):
        vault.store.record_attempt(AuditDraft("local", "configure_refused"))
    (error,) = configure(conn, "filesystem", {"root_dir": "/tmp"})
    assert error["code"] == "RUNTIME_ERROR" and "audit chain head" in error["message"]
    with vault.store.engine.connect() as db:
        last = db.execute(select(AuditEvent.seq).order_by(AuditEvent.seq.desc())).first()
        assert last is not None and last.seq == seqs[-1]
    assert _version_count(vault) == stored


def _version_count(vault: Vault) -> int:
    with vault.store.engine.connect() as db:
        return int(db.execute(select(func.count()).select_from(ConfigVersion)).scalar_one())


def test_versions_without_their_event_are_reported(vault: Vault, cli_env: dict[str, str]) -> None:
    """Rows written without their event: by hand (no valid MAC), or signed by a vault-side
    writer that skipped the audit (as a bug would); both are named, neither believed."""
    _populate(vault)
    with vault.store.engine.begin() as db:
        row = db.execute(select(ConfigVersion).order_by(ConfigVersion.id)).first()
        assert row is not None
        forged = {k: v for k, v in row._mapping.items() if k != "id"}
        db.execute(insert(ConfigVersion).values(**{**forged, "version": 99}))
        db.execute(update(ConfigVersion).where(ConfigVersion.id == row.id).values(actor="framed"))
    done = run(cli_env, "audit", "verify", "--json")
    report = json.loads(done.stdout)
    assert (report["ok"], report["problem"], report["first_bad_seq"]) == (False, "state", None)
    assert report["unaudited_count"] == 0
    assert {(p["table"], p["row"], p["problem"]) for p in report["state_problems"]} == {
        ("config_versions", f"{row.session_id}/{row.toolkit_name} v{v}", "unauthenticated")
        for v in (row.version, 99)
    }
    assert "2 stored rows disagree with their MAC or the audit chain" in error_line(done)
    with vault.store.engine.begin() as db:
        db.execute(delete(ConfigVersion).where(ConfigVersion.version == 99))
        db.execute(update(ConfigVersion).where(ConfigVersion.id == row.id).values(actor=row.actor))
        signed = {**forged, "version": 98}
        signed.pop("mac")
        db.execute(insert(ConfigVersion).values(**signed, mac=vault.store.mac(VERSIONS, signed)))
    report = json.loads(run(cli_env, "audit", "verify", "--json").stdout)
    assert (report["ok"], report["problem"], report["unaudited_count"]) == (False, "unaudited", 1)
    assert [(v["version"], v["reason"]) for v in report["unaudited_versions"]] == [
        (98, "no configure event")
    ]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_verify_finds_each_versions_event_by_index_not_by_scan(vault: Vault) -> None:
    """`audit verify` joins every config version to its configure event on (session,
    toolkit, version): an index on those three makes it one lookup a version. Without the
    version in it, every version scanned its session's events (quadratic: 8,000 configures
    in 50 sessions took 13.7 s to verify, against 0.7 s)."""
    joined = (
        "SELECT e.seq FROM config_versions v LEFT JOIN audit_events e ON e.action = "
        "'configure' AND e.session_id = v.session_id AND e.toolkit_name = v.toolkit_name "
        "AND e.version = v.version"
    )
    with vault.store.engine.connect() as db:
        plan = " ".join(row[-1] for row in db.exec_driver_sql(f"EXPLAIN QUERY PLAN {joined}"))
    assert "version=?" in plan and "ix_audit_events_session" in plan, plan
