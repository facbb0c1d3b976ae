"""A database writer without the master key: every edit of state is refused or reported.

Each test plays someone who can run SQL on the store (a leaked database credential, a DBA,
a restored backup) but holds no master key, and checks the three places that must notice:
the hot path (a fresh process that resumes, authenticates, lists or configures), `check`
and `audit verify`. Issue 11's numbered attacks, one test each, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import insert, select, text, update

from test_vault import AGENT, CANARY, configure, handshake, listed, request, secret_config
from toolkit_vault.access.principals import Principal as ServicePrincipal
from toolkit_vault.access.principals import TokenExpired, authenticate, create_token, revoke
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.connection import connect
from toolkit_vault.core.spec_plugin import VaultToolkitPlugin
from toolkit_vault.core.vault import INTEGRITY_FAILED, Outcome, Vault
from toolkit_vault.keys.rotation import rotate_vault_key
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.integrity import PRINCIPALS
from toolkit_vault.store.models import (
    ConfigVersion,
    CurrentConfig,
    ImportedToolkitRow,
    PrincipalRow,
    SessionRow,
    VaultKey,
)
from toolkit_vault.toolkits.imports import import_package, remove_toolkit
from toolkit_vault.transports.relay import CHANNEL, PgEventRelay

from tkv_test_plugins import SecretiveToolkit

EVIL = "tkv-attacker-chosen-key"
VECTORS = Path(__file__).parents[1] / "vectors" / "package"
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def reopen(fresh: list[Vault]) -> Vault:
    vault = open_vault(load_settings())
    fresh.append(vault)
    return vault


def cli(*args: str) -> tuple[int, dict[str, Any], str]:
    done = CliRunner().invoke(main, [*args, "--json"])
    return done.exit_code, json.loads(done.stdout or "{}"), done.stderr


def state_problems(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(p["table"], p["problem"]) for p in report["state_problems"]}


def sql(vault: Vault, statement: Any) -> None:
    with vault.store.engine.begin() as db:
        db.execute(statement)


def row_of(vault: Vault, table: Any, *where: Any) -> Any:
    with vault.store.engine.connect() as db:
        return db.execute(select(table).where(*where)).one()


def resume(vault: Vault, session: str) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    conn = connect(vault, AGENT)
    hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
    response, *events = request(conn, hello)
    assert response["type"] == "handshake/resp", response
    return events, listed(conn)


def assert_named_by_check_and_audit(table: str, problem: str) -> None:
    code, checked, err = cli("check")
    assert code == 1 and (table, problem) in state_problems(checked), (checked, err)
    code, verified, err = cli("audit", "verify")
    assert code == 1 and verified["problem"] == "state", verified
    assert (table, problem) in state_problems(verified)
    for text_ in (json.dumps(checked), json.dumps(verified), err):
        assert CANARY not in text_ and EVIL not in text_


# -- 1. cleartext downgrade ---------------------------------------------------------------


def test_a_cleartext_downgrade_is_refused(vault: Vault, fresh: list[Vault]) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    downgrade = {"sealed_secrets": None, "wrapped_dek": None, "dek_id": None, "kek_id": None}
    chosen = {**secret_config(EVIL), "auth": {}, "tokens": [], "headers": {}}
    where = (ConfigVersion.session_id == session,)
    sql(
        vault,
        update(ConfigVersion)
        .where(*where, ConfigVersion.toolkit_name == "secretive")
        .values(**downgrade, public_config=json.dumps(chosen), secret_fingerprints="{}"),
    )
    sql(
        vault,
        update(ConfigVersion)
        .where(*where, ConfigVersion.toolkit_name == "filesystem")
        .values(**downgrade, public_config=json.dumps({"root_dir": "/"})),
    )
    SecretiveToolkit.received.clear()
    events, configured = resume(reopen(fresh), session)
    assert SecretiveToolkit.received == []
    assert configured == {"filesystem": False, "secretive": False}
    assert sorted((e["toolkit_name"], e["configured"], e["message"]) for e in events) == [
        ("filesystem", False, INTEGRITY_FAILED),
        ("secretive", False, INTEGRITY_FAILED),
    ]
    code, checked, _ = cli("check")
    assert code == 1 and checked["failed"] == 2 and checked["no_ciphertext"] == 0
    assert {v["reason"] for v in checked["failed_versions"]} == {"fails its integrity check"}
    assert_named_by_check_and_audit("config_versions", "unauthenticated")


# -- 2. declassifying an imported toolkit ---------------------------------------------------


SERVER = VECTORS / "server-remote-secret-header.json"


def _imported(vault: Vault) -> tuple[str, Any]:
    (entry,) = import_package(vault.store, vault.registry, SERVER.read_bytes(), "local").toolkits
    return entry.name, row_of(vault, ImportedToolkitRow, ImportedToolkitRow.name == entry.name)


def test_a_declassified_import_is_left_out(vault: Vault, fresh: list[Vault]) -> None:
    name, row = _imported(vault)
    definition = json.loads(row.definition)
    for field in definition["schema"]["properties"].values():
        field.pop("writeOnly", None)
    sql(
        vault,
        update(ImportedToolkitRow)
        .where(ImportedToolkitRow.name == name)
        .values(definition=json.dumps(definition)),
    )
    later = reopen(fresh)
    assert name not in later.registry
    conn, _ = handshake(later)
    (error,) = configure(conn, name, {"x_api_key": CANARY})
    assert (error["type"], error["code"]) == ("error", "RUNTIME_ERROR")
    with vault.store.engine.connect() as db:
        stored = db.execute(select(ConfigVersion.public_config)).scalars().all()
    assert not any(CANARY in public for public in stored)
    assert_named_by_check_and_audit("imported_toolkits", "unauthenticated")


def test_an_edit_outside_the_schema_is_left_out_too(vault: Vault, fresh: list[Vault]) -> None:
    """The digests cover the package and the schema; the MAC covers the rest (tools, names)."""
    name, row = _imported(vault)
    definition = json.loads(row.definition)
    definition["tools"] = [*definition["tools"], "exfiltrate"]
    definition["description"] = "now with one more tool"
    sql(
        vault,
        update(ImportedToolkitRow)
        .where(ImportedToolkitRow.name == name)
        .values(definition=json.dumps(definition)),
    )
    assert name not in reopen(fresh).registry
    assert_named_by_check_and_audit("imported_toolkits", "unauthenticated")


def test_an_older_import_put_back_is_left_out(vault: Vault, fresh: list[Vault]) -> None:
    name, old = _imported(vault)
    changed = SERVER.read_bytes().replace(b"ACME API key", b"ACME API key (rotated)")
    import_package(vault.store, vault.registry, changed, "local")
    values = {c: getattr(old, c) for c in ("definition", "package_digest", "imported_at", "mac")}
    sql(vault, update(ImportedToolkitRow).where(ImportedToolkitRow.name == name).values(**values))
    assert name not in reopen(fresh).registry
    assert_named_by_check_and_audit("imported_toolkits", "replayed")


# -- 3. pointer rollback --------------------------------------------------------------------


def assert_rolled_back_pointer_refused(
    vault: Vault, fresh: list[Vault], session: str, key: Any, first_mac: bytes, how: str
) -> None:
    """Point `key`'s pointer back at version 1, keeping its current MAC ("edited") or
    putting back the MAC it had then ("replayed"): a resume opens nothing, and `check` and
    `audit verify` name the row."""
    back = {"version": 1} if how == "edited" else {"version": 1, "mac": first_mac}
    sql(vault, update(CurrentConfig).where(*key).values(**back))
    SecretiveToolkit.received.clear()
    events, configured = resume(reopen(fresh), session)
    assert SecretiveToolkit.received == [] and configured["secretive"] is False
    assert [(e["toolkit_name"], e["message"]) for e in events] == [("secretive", INTEGRITY_FAILED)]
    problem = "unauthenticated" if how == "edited" else "replayed"
    assert_named_by_check_and_audit("current_configs", problem)


@pytest.mark.parametrize("how", ["edited", "replayed"])
def test_a_rolled_back_pointer_is_refused(vault: Vault, fresh: list[Vault], how: str) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config("tkv-old-compromised-key"))
    key = (CurrentConfig.session_id == session, CurrentConfig.toolkit_name == "secretive")
    first = row_of(vault, CurrentConfig, *key)
    configure(conn, "secretive", secret_config())
    assert_rolled_back_pointer_refused(vault, fresh, session, key, first.mac, how)


def test_a_pointer_whose_mac_alone_was_edited_is_refused(vault: Vault, fresh: list[Vault]) -> None:
    """A pointer row that still names the chain's current version but whose MAC was edited
    is believed no more than any other row that fails its MAC: the chain agreeing on the
    version does not vouch for the row (the freshness check alone would let it pass)."""
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    key = (CurrentConfig.session_id == session, CurrentConfig.toolkit_name == "secretive")
    mac = row_of(vault, CurrentConfig, *key).mac
    sql(vault, update(CurrentConfig).where(*key).values(mac=mac[:-1] + bytes([mac[-1] ^ 1])))
    SecretiveToolkit.received.clear()
    events, configured = resume(reopen(fresh), session)
    assert SecretiveToolkit.received == [] and configured["secretive"] is False
    assert [(e["toolkit_name"], e["message"]) for e in events] == [("secretive", INTEGRITY_FAILED)]
    assert_named_by_check_and_audit("current_configs", "unauthenticated")


def test_a_pointer_forged_back_after_a_removal_is_refused(vault: Vault, fresh: list[Vault]) -> None:
    """`toolkits remove` ends every session's config of the toolkit (its pointers go, its
    live versions stay in history); a pointer written back by hand must not revive one,
    even once the toolkit is imported again and the old version is still its latest."""
    name, _ = _imported(vault)
    conn, session = handshake(vault)
    assert configure(conn, name, {"tenant": "acme", "x_api_key": CANARY})[0]["status"] == "ok"
    key = (CurrentConfig.session_id == session, CurrentConfig.toolkit_name == name)
    signed = row_of(vault, CurrentConfig, *key)
    remove_toolkit(vault.store, vault.registry, name, "operator")
    import_package(vault.store, vault.registry, SERVER.read_bytes(), "local")
    forged = {**signed._mapping, "mac": signed.mac[:-1] + bytes([signed.mac[-1] ^ 1])}
    sql(vault, insert(CurrentConfig).values(**forged))
    events, configured = resume(reopen(fresh), session)
    assert configured[name] is False
    assert [(e["toolkit_name"], e["message"]) for e in events] == [(name, INTEGRITY_FAILED)]


# -- 4. tokens, roles, ownership -------------------------------------------------------------


def test_an_unrevoked_token_stays_refused(vault: Vault) -> None:
    _, token = create_token(vault.store, "agent", "mallory")
    before = row_of(vault, PrincipalRow, PrincipalRow.name == "mallory")
    assert authenticate(vault.store, token) is not None
    revoke(vault.store, "mallory")
    sql(vault, update(PrincipalRow).where(PrincipalRow.name == "mallory").values(revoked_at=None))
    assert authenticate(vault.store, token) is None
    assert_named_by_check_and_audit("principals", "unauthenticated")
    restored = {"revoked_at": None, "mac": before.mac}  # the row exactly as before the revoke
    sql(vault, update(PrincipalRow).where(PrincipalRow.name == "mallory").values(**restored))
    assert authenticate(vault.store, token) is None
    assert_named_by_check_and_audit("principals", "replayed")


def test_minted_tokens_and_changed_roles_are_refused(vault: Vault) -> None:
    _, token = create_token(vault.store, "agent", "agent-1")
    sql(vault, update(PrincipalRow).where(PrincipalRow.name == "agent-1").values(role="operator"))
    assert authenticate(vault.store, token) is None
    _, other = create_token(vault.store, "auditor", "auditor-1")
    minted = "tkv_" + secrets.token_urlsafe(32)  # a token the attacker chose
    forged = {
        **row_of(vault, PrincipalRow, PrincipalRow.name == "auditor-1")._mapping
    }  # its MAC too
    forged.update(principal_id="forged-id", name="minted", role="operator")
    forged["token_hash"] = hashlib.sha256(minted.encode()).hexdigest()
    sql(vault, insert(PrincipalRow).values(**forged))
    assert authenticate(vault.store, minted) is None
    assert authenticate(vault.store, other) is not None
    code, checked, _ = cli("check")
    assert code == 1
    assert {p["row"].split(" ")[0] for p in checked["state_problems"]} >= {"agent-1", "minted"}


def test_a_token_swapped_into_an_existing_principal_is_refused(vault: Vault) -> None:
    """The attacker's own token hash written into a real operator's row: the chain still has
    that operator (name, role, not revoked), so only the row's MAC, which covers the token
    hash, refuses it."""
    _, token = create_token(vault.store, "operator", "ops-1")
    chosen = "tkv_" + secrets.token_urlsafe(32)
    swapped = {"token_hash": hashlib.sha256(chosen.encode()).hexdigest()}
    sql(vault, update(PrincipalRow).where(PrincipalRow.name == "ops-1").values(**swapped))
    assert authenticate(vault.store, chosen) is None and authenticate(vault.store, token) is None
    assert_named_by_check_and_audit("principals", "unauthenticated")


def test_an_extended_or_removed_expiry_is_refused(vault: Vault) -> None:
    """A token's expiry is in its row's MAC (issue 37): a row edited to give an expired
    token a longer life, or none at all, is refused like any tampered principal (not even
    told apart as expired), and named by `check` and `audit verify`."""
    _, token = create_token(vault.store, "operator", "lapsed", ttl=60, now=time.time() - 120)
    with pytest.raises(TokenExpired):
        authenticate(vault.store, token)
    lapsed = PrincipalRow.name == "lapsed"
    for extended in (time.time() + 365 * 86400, None):
        sql(vault, update(PrincipalRow).where(lapsed).values(expires_at=extended))
        assert authenticate(vault.store, token) is None
        assert_named_by_check_and_audit("principals", "unauthenticated")


def test_an_expiry_the_chain_does_not_vouch_for_is_refused(vault: Vault) -> None:
    """Belt and braces: a principal whose expiry differs from its `token_created` event is
    refused even with a MAC the vault made (as a row from before a renewal would carry, if
    tokens are ever renewed), and named by `check` and `audit verify`."""
    _, token = create_token(vault.store, "agent", "renewed", ttl=60, now=time.time() - 120)
    renewed = PrincipalRow.name == "renewed"
    row = {**row_of(vault, PrincipalRow, renewed)._mapping, "expires_at": None}
    signed = {"expires_at": None, "mac": vault.store.mac(PRINCIPALS, row)}
    sql(vault, update(PrincipalRow).where(renewed).values(**signed))
    assert authenticate(vault.store, token) is None
    assert_named_by_check_and_audit("principals", "unaudited")


def test_a_session_given_to_another_principal_owns_nothing(
    vault: Vault, fresh: list[Vault]
) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    thief, _ = create_token(vault.store, "agent", "thief")
    sql(
        vault, update(SessionRow).where(SessionRow.session_id == session).values(principal_id=thief)
    )
    later = reopen(fresh)
    assert not later.store.session_owned_by(session, thief)
    assert not later.store.session_owned_by(session, "local")
    assert_named_by_check_and_audit("sessions", "unauthenticated")


def test_an_edited_vault_key_record_stops_start_up(vault: Vault, fresh: list[Vault]) -> None:
    sql(vault, update(VaultKey).values(retired_at=1.0))
    with pytest.raises(Exception, match="vault key record vk-1 fails its integrity check"):
        reopen(fresh)


def test_a_retired_vault_key_put_back_is_named(vault: Vault) -> None:
    """A vault key record restored as it was before its retirement (its wrap too, from a
    backup) carries a valid MAC, but the audit chain retired it."""
    rotate_vault_key(vault.store, open_provider(load_settings()), vault.ring)
    before = row_of(vault, VaultKey, VaultKey.key_id == "vk-1")  # inactive, signed, wrapped
    assert CliRunner().invoke(main, ["keys", "retire", "vk-1"]).exit_code == 0
    assert row_of(vault, VaultKey, VaultKey.key_id == "vk-1").wrapped_key is None
    sql(vault, update(VaultKey).where(VaultKey.key_id == "vk-1").values(**before._mapping))
    assert_named_by_check_and_audit("vault_keys", "replayed")


# -- 5. forged and eavesdropped relay messages (PostgreSQL) ----------------------------------


@POSTGRES_ONLY
def test_relay_payloads_are_sealed_and_forgeries_dropped(vault: Vault, database_url: str) -> None:
    import psycopg

    received: list[Any] = []
    _, session = handshake(vault)
    plugin = VaultToolkitPlugin(vault, AGENT, session)
    plugin.set_push_callback(received.append)
    vault.attach(session, plugin)
    relay = PgEventRelay(vault).start()
    other = PgEventRelay(vault).start()  # another replica: its own origin, the same vault key
    forged = {
        "origin": "elsewhere",
        "event": {
            "type": "toolkit/status/event",
            "session_id": session,
            "toolkit_name": "secretive",
            "configured": False,
            "status": "error",
            "message": "re-enter your key at https://evil.example",
        },
    }
    try:
        assert relay.listening.wait(10)
        url = database_url.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(url, autocommit=True) as spy:  # any role may LISTEN and NOTIFY
            spy.execute(f"LISTEN {CHANNEL}")
            spy.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(forged)))
            other.send(vault._event(session, "secretive", True, Outcome("ok", "fine")))
            payloads = [n.payload for n in spy.notifies(timeout=5, stop_after=2)]
        sealed = payloads[1]
        assert session not in sealed and "secretive" not in sealed and "fine" not in sealed
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the forgery, sent first, had its chance
        assert [(e.toolkit_name, e.message) for e in received] == [("secretive", "fine")]
        relay._receive(sealed)  # the same payload again: a replay
        assert len(received) == 1
    finally:
        relay.stop()
        other.stop()


# -- 6. one bad row breaks no one -------------------------------------------------------------


@SQLITE_ONLY
def test_one_bad_row_breaks_no_one(vault: Vault, fresh: list[Vault]) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    where = (ConfigVersion.session_id == session, ConfigVersion.toolkit_name == "secretive")
    with vault.store.engine.begin() as db:  # SQLite keeps whatever type it is given
        db.execute(update(ConfigVersion).where(*where).values(wrapped_dek=text("'text'")))
        db.execute(
            update(ConfigVersion)
            .where(ConfigVersion.toolkit_name == "filesystem")
            .values(message=text("CAST(x'c3ff28' AS TEXT)"))
        )
    events, configured = resume(reopen(fresh), session)
    assert configured == {"filesystem": False, "secretive": False}
    assert len(events) == 2
    code, checked, err = cli("check")
    assert code == 1 and checked["failed"] == 2, err
    code, history, err = cli("history")
    assert code == 0 and len(history["versions"]) == 2, err
    done = CliRunner().invoke(main, ["keys", "rotate", "--vault-key", "--json"])
    assert done.exit_code == 1 and "unexpected" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["failed"] == [
        {"id": 1, "session_id": session, "toolkit_name": "secretive", "version": 1}
    ]


# -- principal scopes (issue 15): the same attacks on a principal's own configs ---------------

PRINCIPAL_SCOPE = "principal:local"


def _principal_configured(vault: Vault) -> str:
    """`secretive` configured for the local principal (not in any session of its own); the
    session the configure came through."""
    conn, session = handshake(vault)
    request(
        conn,
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "secretive",
            "config": secret_config(),
            "scope": "principal",
        },
    )
    return session


def new_session(vault: Vault) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    conn = connect(vault, AGENT)
    response, *events = request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    assert response["type"] == "handshake/resp", response
    return events, listed(conn)


def test_a_downgraded_principal_config_is_refused(vault: Vault, fresh: list[Vault]) -> None:
    _principal_configured(vault)
    chosen = {**secret_config(EVIL), "auth": {}, "tokens": [], "headers": {}}
    sql(
        vault,
        update(ConfigVersion)
        .where(ConfigVersion.session_id == PRINCIPAL_SCOPE)
        .values(
            sealed_secrets=None,
            wrapped_dek=None,
            dek_id=None,
            kek_id=None,
            public_config=json.dumps(chosen),
            secret_fingerprints="{}",
        ),
    )
    SecretiveToolkit.received.clear()
    events, configured = new_session(reopen(fresh))
    assert SecretiveToolkit.received == [] and configured["secretive"] is False
    assert [(e["toolkit_name"], e["message"]) for e in events] == [("secretive", INTEGRITY_FAILED)]
    assert_named_by_check_and_audit("config_versions", "unauthenticated")


@pytest.mark.parametrize("how", ["edited", "replayed"])
def test_a_rolled_back_principal_pointer_is_refused(
    vault: Vault, fresh: list[Vault], how: str
) -> None:
    session = _principal_configured(vault)
    key = (CurrentConfig.session_id == PRINCIPAL_SCOPE, CurrentConfig.toolkit_name == "secretive")
    first = row_of(vault, CurrentConfig, *key)
    _principal_configured(vault)
    assert_rolled_back_pointer_refused(vault, fresh, session, key, first.mac, how)


def test_a_principal_config_moved_to_another_principal_is_refused(
    vault: Vault, fresh: list[Vault]
) -> None:
    """The ciphertext is bound to its scope: renamed into bob's scope it opens for no one."""
    _principal_configured(vault)
    bob_id, _ = create_token(vault.store, "agent", "bob")
    bob = ServicePrincipal(bob_id, "agent")
    conn = connect(vault, bob)
    request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    fs = {"type": "toolkit/configure/req", "toolkit_name": "filesystem", "scope": "principal"}
    request(conn, {**fs, "config": {"root_dir": "/srv"}})  # bob's scope row now exists
    theirs = f"principal:{bob_id}"
    for table in (ConfigVersion, CurrentConfig):
        moved = (table.session_id == PRINCIPAL_SCOPE) & (table.toolkit_name == "secretive")
        sql(vault, update(table).where(moved).values(session_id=theirs))
    SecretiveToolkit.received.clear()
    later = reopen(fresh)
    conn = connect(later, bob)
    response, *events = request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    assert response["type"] == "handshake/resp"
    assert SecretiveToolkit.received == [] and listed(conn)["secretive"] is False
    assert [(e["toolkit_name"], e["message"]) for e in events] == [("secretive", INTEGRITY_FAILED)]
    assert new_session(later)[1]["secretive"] is False  # and the local principal lost it
    assert_named_by_check_and_audit("config_versions", "unauthenticated")
    assert_named_by_check_and_audit("current_configs", "unauthenticated")


def test_a_principal_scope_given_to_another_principal_gives_nothing(
    vault: Vault, fresh: list[Vault]
) -> None:
    _principal_configured(vault)
    thief, _ = create_token(vault.store, "agent", "thief")
    sql(
        vault,
        update(SessionRow)
        .where(SessionRow.session_id == PRINCIPAL_SCOPE)
        .values(principal_id=thief),
    )
    later = reopen(fresh)
    conn = connect(later, ServicePrincipal(thief, "agent"))
    request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
    assert listed(conn)["secretive"] is False  # the scope is named by the token's principal
    assert new_session(later)[1]["secretive"] is True  # a row's owner decides nothing
    assert_named_by_check_and_audit("sessions", "unauthenticated")


def test_a_deleted_session_pointer_does_not_fall_back_to_the_principal(
    vault: Vault, fresh: list[Vault]
) -> None:
    """The chain says the session has its own config: with its pointer deleted, the
    principal's does not stand in (issue 35); `check` and `audit verify` name it."""
    session = _principal_configured(vault)
    conn, _ = handshake(vault, session)
    configure(conn, "secretive", secret_config("tkv-canary-session-own-key"))
    mine = (CurrentConfig.session_id == session, CurrentConfig.toolkit_name == "secretive")
    with vault.store.engine.begin() as db:
        db.execute(CurrentConfig.__table__.delete().where(*mine))
    for process in (vault, reopen(fresh)):
        SecretiveToolkit.received.clear()
        events, configured = resume(process, session)
        assert configured["secretive"] is False and SecretiveToolkit.received == []
        assert [(e["toolkit_name"], e["message"]) for e in events] == [
            ("secretive", INTEGRITY_FAILED)
        ]
    assert_named_by_check_and_audit("current_configs", "deleted")


# -- the "also" items -------------------------------------------------------------------------


def test_fingerprints_are_scoped_to_one_history(vault: Vault) -> None:
    first, _ = handshake(vault)
    second, _ = handshake(vault)
    for conn in (first, first, second):
        configure(conn, "secretive", secret_config())
    code, history, _ = cli("history")
    prints = [v["secret_fingerprints"]["/api_key"] for v in history["versions"]]
    assert code == 0 and prints[0] == prints[1] != prints[2]


def test_purge_leaves_only_the_audit_skeleton(vault: Vault, home: VaultSettings) -> None:
    conn, session = handshake(vault)
    public_canary = "tkv-public-endpoint-canary.example.test"
    configure(conn, "secretive", {**secret_config(), "endpoint": f"https://{public_canary}/"})
    vault.purge("operator", session)
    code, history, _ = cli("history")
    assert code == 0
    (entry,) = history["versions"]
    assert entry["status"] == "purged" and entry["public_config"] == {}
    assert entry["secret_fingerprints"] == {} and entry["message"] is None
    if vault.store.engine.dialect.name == "sqlite":
        vault.store.engine.dispose()
        for path in home.home.iterdir():
            data = path.read_bytes() if path.is_file() else b""
            assert public_canary.encode() not in data, path
            assert CANARY.encode() not in data, path


def test_init_makes_an_existing_home_private(home: VaultSettings, cli_env: dict[str, str]) -> None:
    os.chmod(home.home, 0o755)  # noqa: S103 (the mode an older release could leave)
    refused = CliRunner().invoke(main, ["history"])
    assert refused.exit_code == 1 and "mode 0755" in refused.stderr
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    assert home.home.stat().st_mode & 0o777 == 0o700
    assert CliRunner().invoke(main, ["history"]).exit_code == 0


@pytest.mark.key_providers("file")
def test_the_env_key_document_is_not_inherited(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit_vault.keys.providers import ProviderSettings
    from toolkit_vault.keys.providers.env import ENV_KEYS, EnvProvider
    from toolkit_vault.keys.providers.file import FileProvider

    settings = ProviderSettings(home.home, home.vault_id)
    document = FileProvider(settings).load()
    assert document is not None
    monkeypatch.setenv(ENV_KEYS, document.dumps())
    assert EnvProvider(settings).load() is not None
    assert ENV_KEYS not in os.environ
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ.get('{ENV_KEYS}', 'absent'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "absent"
    assert EnvProvider(settings).load() is not None  # later loads in this process still work
