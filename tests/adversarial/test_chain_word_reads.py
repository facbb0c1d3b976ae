"""Issue 53: the writes that depend on what is still pending or current take the chain's
word for it, not the rows' (on SQLite and PostgreSQL).

An intake submission is stored only while the version its link was made for is still the
last and not purged; a refreshed token set only while the version it refreshed is still
the last and the current one. A database writer without the master key can put back, in
the seconds a credential check or a token request takes, an authentic copy of the rows a
purge changed (the pending intake row as the vault wrote it, the pointer row the purge
deleted). The purge has the last word anyway: nothing is stored, in the running process
or another one. The refresh leases carry no MAC: a row that claims more than the vault
ever writes (a lease or a backoff longer than its own) is not believed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update
from test_authenticated_state import reopen
from test_replays import assert_named, copy_of, rows

from test_oauth import Agent, Rig, connected, rig, until_asked  # noqa: F401 (the fixture)
from test_vault import CANARY, handshake, listed, request
from toolkit_vault.audit.history import history
from toolkit_vault.core.intake import Intake, IntakeRefused
from toolkit_vault.core.oauth_refresh import LEASE_TTL, MAX_FAILURES, RETRY_SPACING
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain_word import chain_word
from toolkit_vault.store.leases import RefreshLeases
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.models import (
    AuditEvent,
    AuditHead,
    ConfigVersion,
    CurrentConfig,
    RefreshLease,
)

pytestmark = pytest.mark.key_providers("file")
PUBLIC = {"endpoint": "https://api.example.test"}
SECRETS = {
    "api_key": CANARY,
    "auth": {"user": "alice", "password": CANARY + "-pw"},
    "tokens": ["public-looking", CANARY + "-tok"],
    "headers": {"X-Api": CANARY + "-hdr"},
}
KEY = SecretBytes(b"i" * 32)


def _intake(vault: Vault) -> tuple[str, str]:
    """A session whose `secretive` waits for a person: (session, link)."""
    vault.intake = Intake(vault, KEY, lambda link: f"https://vault.test/{link}")
    conn, session = handshake(vault)
    ask = {
        "type": "toolkit/configure/req",
        "toolkit_name": "secretive",
        "config": PUBLIC,
        "intake": True,
    }
    answer = request(conn, ask)[0]
    assert answer["status"] == "partial", answer
    return session, answer["intake_url"].removeprefix("https://vault.test/")


def put_back(vault: Vault, scope: str, copy: dict[str, list[dict[str, Any]]]) -> None:
    """A database writer puts a scope's rows back as they were copied (MACs and all)."""
    with vault.store.engine.begin() as db:
        db.execute(delete(CurrentConfig).where(CurrentConfig.session_id == scope))
        db.execute(delete(ConfigVersion).where(ConfigVersion.session_id == scope))
        for table, found in ((ConfigVersion, copy["versions"]), (CurrentConfig, copy["pointers"])):
            if found:
                db.execute(insert(table), found)


def _events_after_the_purge(vault: Vault) -> list[str]:
    actions = [e["action"] for e in vault.export_audit(0)]
    return actions[len(actions) - actions[::-1].index("purge") :]


def _nothing_stored(vault: Vault, session: str) -> None:
    with vault.store.engine.connect() as db:
        stored = rows(db, ConfigVersion, ConfigVersion.session_id == session)
    assert [r["version"] for r in stored] == [1], "a version was stored after the purge"
    assert "configure" not in _events_after_the_purge(vault)
    conn, _ = handshake(vault, session)
    assert listed(conn)["secretive"] is False


def _behind(monkeypatch: pytest.MonkeyPatch, process: Vault) -> None:
    """`process` follows the chain no more outside its writes: what a purge committed
    between its last read and its write is seen by the write's own read alone."""
    monkeypatch.setattr(
        process.store, "chain_state", lambda *_, **__: process.store.followed_state()
    )


@pytest.mark.parametrize("process", ["this one", "another one", "another one, behind"])
def test_a_pending_intake_row_put_back_during_the_check_stores_nothing(
    vault: Vault, fresh: list[Vault], monkeypatch: pytest.MonkeyPatch, process: str
) -> None:
    """The person submits; while the credential is checked an operator purges the session,
    and a database writer puts the pending intake row back as the vault wrote it (status
    `intake`, its MAC valid). The chain says the version was purged: nothing is stored,
    also by a process that had not followed the chain since (the write reads it)."""
    session, link = _intake(vault)
    backup = copy_of(vault, session)
    assert backup["versions"][0]["status"] == "intake"
    submitter = vault if process == "this one" else reopen(fresh)
    submitter.intake = Intake(submitter, KEY, lambda link: f"https://vault.test/{link}")
    checked = Intake._checked

    def purged_and_put_back(self: Intake, *args: Any, **kwargs: Any) -> Any:
        if process.endswith("behind"):
            _behind(monkeypatch, submitter)
        vault.purge("operator", session)
        put_back(vault, session, backup)  # the pending row again, exactly as written
        return checked(self, *args, **kwargs)

    monkeypatch.setattr(Intake, "_checked", purged_and_put_back)
    with pytest.raises(IntakeRefused) as refused:
        submitter.intake.complete(link, {**PUBLIC, **SECRETS})
    assert refused.value.reason == "changed"
    _nothing_stored(vault, session)
    if process == "this one":  # `check` and `audit verify` name the row put back
        assert_named(("config_versions", "replayed"))


def test_an_edited_purge_event_read_by_the_write_stores_nothing(
    vault: Vault, fresh: list[Vault], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write verifies each event it reads after its ledger: a purge event edited to
    say nothing (and the pending row put back) does not verify, and nothing is stored."""
    session, link = _intake(vault)
    backup = copy_of(vault, session)
    submitter = reopen(fresh)
    submitter.intake = Intake(submitter, KEY, lambda link: f"https://vault.test/{link}")
    checked = Intake._checked

    def purged_and_hidden(self: Intake, *args: Any, **kwargs: Any) -> Any:
        _behind(monkeypatch, submitter)
        vault.purge("operator", session)
        put_back(vault, session, backup)
        with vault.store.engine.begin() as db:
            db.execute(
                update(AuditEvent).where(AuditEvent.action == "purge").values(action="tool_called")
            )
        return checked(self, *args, **kwargs)

    monkeypatch.setattr(Intake, "_checked", purged_and_hidden)
    with pytest.raises(StoreError, match="does not verify"):
        submitter.intake.complete(link, {**PUBLIC, **SECRETS})
    with vault.store.engine.connect() as db:
        stored = rows(db, ConfigVersion, ConfigVersion.session_id == session)
        actions = [a for (a,) in db.execute(select(AuditEvent.action).order_by(AuditEvent.seq))]
    assert [r["version"] for r in stored] == [1], "a version was stored after the purge"
    assert actions[-1] == "tool_called"  # the edited purge: nothing after it


def test_a_pending_intake_row_put_back_after_a_purge_does_not_reopen_the_link(
    vault: Vault, fresh: list[Vault]
) -> None:
    """The row put back before the person opens the link: the form is refused (the chain
    purged the version), in this process and another, and a submission stores nothing."""
    session, link = _intake(vault)
    backup = copy_of(vault, session)
    vault.purge("operator", session)
    put_back(vault, session, backup)
    other = reopen(fresh)
    other.intake = Intake(other, KEY, lambda link: f"https://vault.test/{link}")
    for process in (vault, other):
        assert process.intake is not None
        with pytest.raises(IntakeRefused) as refused:
            process.intake.open(link)
        assert refused.value.reason == "changed"
        with pytest.raises(IntakeRefused):
            process.intake.complete(link, {**PUBLIC, **SECRETS})
    _nothing_stored(vault, session)


def test_the_chain_word_reaches_the_end_the_write_extends(vault: Vault) -> None:
    """The events a write reads must end at the head it extends: a read that stops short of
    it, or ends at another link, is not the chain's word."""
    session, _ = _intake(vault)
    store = vault.store
    store.chain_state()
    assert store._ledger is not None and store._sign is not None
    with store.engine.connect() as conn:
        seq, mac = conn.execute(select(AuditHead.seq, AuditHead.mac)).one()
        args = (conn, store._ledger, store._sign, store._placeholder)
        word = chain_word(*args, (seq, bytes(mac)), session, "secretive")
        assert word.last_version(session, "secretive") == 1
        for end in ((seq + 1, bytes(mac)), (seq, bytes(32))):
            with pytest.raises(StateUnknown, match="does not verify"):
                chain_word(*args, end, session, "secretive")


@pytest.mark.parametrize("what", ["pointer row", "pointer and version rows"])
def test_a_pointer_row_put_back_during_a_refresh_stores_nothing(rig: Rig, what: str) -> None:  # noqa: F811
    """The token request is under way; an operator purges the connection and a database
    writer puts back the pointer row the purge deleted (and the version row it shredded),
    as the vault wrote them. The chain says nothing is current: the refreshed token set is
    not stored and the connection stays purged."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    scope = f"principal:{principal.principal_id}"
    backup = copy_of(side.vault, scope)
    assert backup["pointers"], backup
    rig.auth.knobs.token_gate = answer = threading.Event()  # the server answers when told
    rig.clock.offset = 7200  # the access token has expired: the next list refreshes it
    listed_: list[dict[str, bool]] = []
    refreshing = threading.Thread(
        target=lambda: listed_.append(Agent(side.vault, principal).listed())
    )
    refreshing.start()
    until_asked(lambda: rig.auth.refresh_calls)
    side.vault.purge_principal("operator", principal.principal_id, "calendar")
    if what == "pointer row":
        with side.vault.store.engine.begin() as db:
            db.execute(delete(CurrentConfig).where(CurrentConfig.session_id == scope))
            db.execute(insert(CurrentConfig), backup["pointers"])
    else:
        put_back(side.vault, scope, backup)
    answer.set()
    refreshing.join(timeout=30)
    assert rig.auth.refresh_calls == 1 and listed_ == [{**listed_[0], "calendar": False}]
    versions = history(side.vault.store, scope, "calendar")
    assert len(versions) == 2, versions  # the intake and the connection: no third
    actions = [e["action"] for e in side.vault.export_audit(0)]
    assert "configure" not in _events_after_the_purge(side.vault)
    assert "oauth_refreshed" not in actions
    assert Agent(side.vault, principal).listed()["calendar"] is False


def test_a_forged_lease_holds_a_refresh_no_longer_than_the_vault_would(rig: Rig) -> None:  # noqa: F811
    """A lease row claimed for an hour (a writer's, never the vault's: its leases last
    `LEASE_TTL`) is taken as expired, and a backoff longer than the longest the vault sets
    is not believed: the refresh is made at once."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    scope = f"principal:{principal.principal_id}"
    (record,) = [r for r in side.vault.store.current_versions(scope)]
    rig.clock.offset = 7200
    now = rig.clock()
    forged = {"session_id": scope, "toolkit_name": "calendar", "version": record.version}
    for held in (
        {"holder": "someone", "expires_at": now + 3600, "failures": 0, "retry_at": 0.0},
        {"holder": None, "expires_at": 0.0, "failures": 1, "retry_at": now + 86400},
    ):
        with side.vault.store.engine.begin() as db:
            db.execute(delete(RefreshLease).where(RefreshLease.session_id == scope))
            db.execute(insert(RefreshLease).values(forged | held))
        calls = rig.auth.refresh_calls
        assert Agent(side.vault, principal).listed()["calendar"] is True
        assert rig.auth.refresh_calls == calls + 1
        rig.clock.offset += 7200  # the new token expires too: the next list refreshes again
        now = rig.clock()
        (record,) = [r for r in side.vault.store.current_versions(scope)]
        forged["version"] = record.version
    leases = RefreshLeases(side.vault.store)
    assert leases.longest_lease == LEASE_TTL
    assert leases.longest_backoff == RETRY_SPACING * 2 ** (MAX_FAILURES - 1)
    with side.vault.store.engine.connect() as db:
        assert db.execute(select(RefreshLease).where(RefreshLease.session_id == scope)).all() == []
