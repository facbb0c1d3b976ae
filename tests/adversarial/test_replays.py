"""A database writer without the master key replays rows: each is refused because it is not
current, however authentic (issue 35's numbered attacks).

Row MACs make every *edit* fail; these tests put rows back exactly as the vault once wrote
them, MACs and all, from a copy taken earlier (a backup, or on PostgreSQL the dead tuples a
purge leaves, read through a snapshot opened before it). The places that must notice: the
running process, a fresh one (a restarted server), `check` and `audit verify`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Connection as SqlConnection
from sqlalchemy import delete, insert, select, update
from test_authenticated_state import (
    POSTGRES_ONLY,
    SERVER,
    SQLITE_ONLY,
    cli,
    new_session,
    reopen,
    resume,
    row_of,
    sql,
    state_problems,
)

from test_vault import (
    AGENT,
    CANARY,
    configure,
    handshake,
    listed,
    quiet,
    request,
    secret_config,
)
from toolkit_vault.access.principals import authenticate, create_token, revoke
from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import ToolkitListRequest
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import (
    AuditEvent,
    AuditHead,
    ConfigVersion,
    CurrentConfig,
    ImportedToolkitRow,
    PrincipalRow,
)
from toolkit_vault.store.witness import WITNESS_NAME, Witness
from toolkit_vault.toolkits.imports import import_package

from tkv_test_plugins import SecretiveToolkit

pytestmark = pytest.mark.key_providers("file")
OLD_KEY = "tkv-old-compromised-key-41f0"


def settle(vault: Vault) -> None:
    """What a process's exit does: its pending witness head written (`Witness.flush`), as
    another process would then read it."""
    if vault.store.witness is not None:
        vault.store.witness.flush()


def rows(db: SqlConnection, table: Any, *where: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in db.execute(select(table).where(*where))]


def copy_of(vault: Vault, session: str) -> dict[str, list[dict[str, Any]]]:
    """A backup of one scope's versions and pointers, as stored."""
    with vault.store.engine.connect() as db:
        return {
            "versions": rows(db, ConfigVersion, ConfigVersion.session_id == session),
            "pointers": rows(db, CurrentConfig, CurrentConfig.session_id == session),
        }


def put_back(vault: Vault, session: str, copy: dict[str, list[dict[str, Any]]]) -> None:
    with vault.store.engine.begin() as db:
        db.execute(delete(CurrentConfig).where(CurrentConfig.session_id == session))
        db.execute(delete(ConfigVersion).where(ConfigVersion.session_id == session))
        db.execute(insert(ConfigVersion), copy["versions"])
        db.execute(insert(CurrentConfig), copy["pointers"])


def assert_never_initialized(vault: Vault, fresh: list[Vault], session: str) -> None:
    """Neither the running process nor a fresh one gives the config to the plugin."""
    for process in (vault, reopen(fresh)):
        SecretiveToolkit.received.clear()
        _, configured = resume(process, session)
        assert SecretiveToolkit.received == [], "a replayed config reached the plugin"
        assert configured["secretive"] is False


def assert_named(*expected: tuple[str, str]) -> None:
    for command in (("check",), ("audit", "verify")):
        code, report, err = cli(*command)
        assert code == 1, (command, report, err)
        found = state_problems(report)
        assert set(expected) <= found, (command, found)
        assert CANARY not in json.dumps(report) + err


# -- 1. a purge undone --------------------------------------------------------------------------


def test_an_undone_purge_never_reaches_a_plugin(vault: Vault, fresh: list[Vault]) -> None:
    conn, session = handshake(vault)
    assert configure(conn, "secretive", secret_config())[0]["status"] == "ok"
    backup = copy_of(vault, session)
    vault.purge("operator", session)
    put_back(vault, session, backup)
    assert_never_initialized(vault, fresh, session)
    assert_named(("config_versions", "replayed"), ("current_configs", "replayed"))
    _, checked, _ = cli("check")
    assert "was purged" in json.dumps(checked["failed_versions"])


def test_an_undone_principal_purge_reaches_no_new_session(vault: Vault, fresh: list[Vault]) -> None:
    conn, _ = handshake(vault)
    given = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "scope": "principal"}
    assert request(conn, {**given, "config": secret_config()})[0]["status"] == "ok"
    scope = row_of(vault, CurrentConfig, CurrentConfig.toolkit_name == "secretive").session_id
    backup = copy_of(vault, scope)
    vault.purge_principal("operator", "local")
    put_back(vault, scope, backup)
    for process in (vault, reopen(fresh)):
        SecretiveToolkit.received.clear()
        _, configured = new_session(process)
        assert SecretiveToolkit.received == [] and configured["secretive"] is False
    assert_named(("current_configs", "replayed"))


@POSTGRES_ONLY
def test_a_purge_undone_from_dead_tuples_is_refused(vault: Vault, fresh: list[Vault]) -> None:
    """PostgreSQL keeps a purged row's old version as a dead tuple; a snapshot opened before
    the purge reads it after the purge has committed, as an attacker with SQL access can."""
    conn, session = handshake(vault)
    assert configure(conn, "secretive", secret_config())[0]["status"] == "ok"
    with vault.store.engine.connect() as snapshot:
        snapshot = snapshot.execution_options(isolation_level="REPEATABLE READ")
        with snapshot.begin():
            snapshot.execute(select(ConfigVersion.id)).all()  # the snapshot starts here
            vault.purge("operator", session)
            dead = {
                "versions": rows(snapshot, ConfigVersion, ConfigVersion.session_id == session),
                "pointers": rows(snapshot, CurrentConfig, CurrentConfig.session_id == session),
            }
    assert dead["versions"][0]["wrapped_dek"] is not None  # the shredded key, read back
    put_back(vault, session, dead)
    assert_never_initialized(vault, fresh, session)
    assert_named(("config_versions", "replayed"), ("current_configs", "replayed"))


# -- 2. a credential rolled back ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "status edited"])
def test_a_rolled_back_credential_is_refused(vault: Vault, fresh: list[Vault], how: str) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config(OLD_KEY))
    backup = copy_of(vault, session)
    configure(conn, "secretive", secret_config())
    latest = (ConfigVersion.session_id == session, ConfigVersion.version == 2)
    if how == "deleted":
        sql(vault, delete(ConfigVersion).where(*latest))
    else:
        sql(vault, update(ConfigVersion).where(*latest).values(status="error"))
    sql(vault, delete(CurrentConfig).where(CurrentConfig.session_id == session))
    sql(vault, insert(CurrentConfig).values(backup["pointers"]))
    for process in (vault, reopen(fresh)):
        SecretiveToolkit.received.clear()
        _, configured = resume(process, session)
        assert OLD_KEY not in json.dumps(SecretiveToolkit.received)
        assert configured["secretive"] is False
    assert_named(("current_configs", "replayed"))


@POSTGRES_ONLY
def test_a_rolled_back_credential_is_refused_on_postgres(vault: Vault, fresh: list[Vault]) -> None:
    test_a_rolled_back_credential_is_refused(vault, fresh, "deleted")


# -- 3. an import declassified ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_declassified_import_with_its_event_deleted_is_refused(
    vault: Vault, fresh: list[Vault], where: str
) -> None:
    """An older definition put back and the later import event deleted: deleting the last
    event needs the head put back too (the witness outside the database remembers it);
    deleting one in the middle breaks the chain. Either way no process believes the store."""
    (entry,) = import_package(vault.store, vault.registry, SERVER.read_bytes(), "local").toolkits
    name = entry.name
    old = row_of(vault, ImportedToolkitRow, ImportedToolkitRow.name == name)
    head = row_of(vault, AuditHead, AuditHead.id == 1)
    changed = SERVER.read_bytes().replace(b"ACME API key", b"ACME API key (rotated)")
    import_package(vault.store, vault.registry, changed, "local")
    if where == "middle":
        handshake(vault)  # a later event
    settle(vault)
    values = {c: getattr(old, c) for c in ("definition", "package_digest", "imported_at", "mac")}
    sql(vault, update(ImportedToolkitRow).where(ImportedToolkitRow.name == name).values(**values))
    with vault.store.engine.begin() as db:
        (later,) = db.execute(
            select(AuditEvent.seq).where(
                AuditEvent.action == "toolkit_imported", AuditEvent.seq > head.seq
            )
        ).scalars()
        db.execute(delete(AuditEvent).where(AuditEvent.seq == later))
        if where == "last":
            db.execute(update(AuditHead).values(seq=head.seq, mac=head.mac, head_mac=head.head_mac))
    with pytest.raises(VaultError, match=r"behind its witness|does not verify"):
        reopen(fresh)
    code, verified, _ = cli("audit", "verify")
    assert code == 1 and verified["problem"] in ("behind", "deleted")


# -- 4. an intake steered: see tests/web/test_intake.py -----------------------------------------
# -- 5. a token un-revoked with three rows ------------------------------------------------------


def test_a_token_unrevoked_with_three_rows_stays_refused(vault: Vault, fresh: list[Vault]) -> None:
    _, token = create_token(vault.store, "agent", "mallory")
    assert authenticate(vault.store, token) is not None
    principal = row_of(vault, PrincipalRow, PrincipalRow.name == "mallory")
    head = row_of(vault, AuditHead, AuditHead.id == 1)
    revoke(vault.store, "mallory")
    settle(vault)
    with vault.store.engine.begin() as db:  # the three rows
        db.execute(delete(AuditEvent).where(AuditEvent.action == "token_revoked"))
        db.execute(update(AuditHead).values(seq=head.seq, mac=head.mac, head_mac=head.head_mac))
        db.execute(
            update(PrincipalRow)
            .where(PrincipalRow.name == "mallory")
            .values(revoked_at=None, mac=principal.mac)
        )
    assert authenticate(vault.store, token) is None  # the running process
    with pytest.raises(VaultError, match="behind its witness"):
        reopen(fresh)  # a restarted server refuses to start, saying why
    code, verified, _ = cli("audit", "verify")
    assert code == 1 and verified["problem"] == "behind"
    code, _, err = cli("tokens", "create", "--role", "agent", "--name", "another")
    assert code != 0 and "behind its witness" in err  # no write extends the older copy


# -- the witness ---------------------------------------------------------------------------------


@SQLITE_ONLY  # a copy of the file; on PostgreSQL the same holds for a restored dump
def test_a_whole_database_put_back_needs_the_operator(
    vault: Vault, fresh: list[Vault], home: VaultSettings, tmp_path: Path
) -> None:
    """A copy of the whole SQLite file, restored after a purge, is what an attacker's replay
    and an operator's restore both look like: refused until `audit accept-restore` (audited),
    and then the restored database is believed again."""
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    database = load_settings().database_url.removeprefix("sqlite:///")
    backup = str(tmp_path / "backup.db")
    with closing(sqlite3.connect(database)) as live, closing(sqlite3.connect(backup)) as out:
        live.backup(out)  # an online backup, as `sqlite3 .backup` takes it
    vault.purge("operator", session)
    settle(vault)
    with closing(sqlite3.connect(backup)) as source, closing(sqlite3.connect(database)) as live:
        source.backup(live)  # the whole database put back
    with pytest.raises(VaultError, match="behind its witness"):
        reopen(fresh)
    code, verified, _ = cli("audit", "verify")
    assert code == 1 and verified["problem"] == "behind"
    witnessed = newest(home)
    code, accepted, err = cli("audit", "accept-restore", "--yes")
    assert code == 0, err
    assert accepted["witness_seq"] == witnessed[0] > accepted["database_seq"]
    restored = open_vault(load_settings())
    fresh.append(restored)
    SecretiveToolkit.received.clear()
    _, configured = resume(restored, session)
    assert configured["secretive"] is True  # the operator chose this copy
    code, verified, _ = cli("audit", "verify")
    assert code == 0, verified
    with restored.store.engine.connect() as db:
        (event,) = db.execute(
            select(AuditEvent).where(AuditEvent.action == "restore_accepted")
        ).all()
    assert event.actor == shell_actor()  # the person at the shell that ran it


def newest(home: VaultSettings, vault: Vault | None = None) -> tuple[int, bytes, bytes]:
    """The newest head the witness file holds (after `vault` wrote what it has pending)."""
    if vault is not None and vault.store.witness is not None:
        vault.store.witness.flush()
    heads = Witness(home.home / WITNESS_NAME).read()
    assert heads
    return heads[0]


def test_the_witness_is_private_and_moves_with_every_write(
    vault: Vault, home: VaultSettings
) -> None:
    handshake(vault)
    first = newest(home, vault)
    handshake(vault)
    second = newest(home, vault)
    head = row_of(vault, AuditHead, AuditHead.id == 1)
    assert second[0] == head.seq > first[0] and second[1:] == (head.mac, head.head_mac)
    assert (home.home / WITNESS_NAME).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("damage", ["forged", "torn"])
def test_a_forged_witness_is_refused_and_a_torn_slot_falls_back(
    vault: Vault, fresh: list[Vault], home: VaultSettings, damage: str
) -> None:
    """Each slot is a whole head: a witness whose heads fail their MAC (a later seq without
    the audit key) stops everything; a slot torn by a crash mid-write leaves the other
    slot, one written head behind."""
    handshake(vault)
    settle(vault)
    before = newest(home)[0]  # written apart: a flush writes the newest of the heads it got
    handshake(vault)
    settle(vault)
    path = home.home / WITNESS_NAME
    data = bytearray(path.read_bytes())
    slot = 0 if int(data[:16], 16) > int(data[160:176], 16) else 160  # the newer slot
    if damage == "forged":  # both slots: one alone is taken for torn (the other stands)
        for start in (0, 160):
            data[start : start + 16] = b"%016x" % (newest(home)[0] + 5)
        path.write_bytes(bytes(data))
        with pytest.raises(VaultError, match=r"witness .* fails its MAC"):
            reopen(fresh)
    else:
        data[slot + 40 : slot + 160] = b"\0" * 120
        path.write_bytes(bytes(data))
        assert newest(home)[0] == before < row_of(vault, AuditHead, AuditHead.id == 1).seq
        reopen(fresh)  # believed: the chain is past the older head


def test_a_witness_being_made_is_never_read_short(tmp_path: Path) -> None:
    """A reader (another process opening the vault) that looks while the first commit makes
    the witness finds none or a whole one, never an empty file it must call unreadable; and a
    creation cut short leaves nothing behind. Made here over and over against a reader."""
    path = tmp_path / WITNESS_NAME
    stop, seen = threading.Event(), []

    def read_while_made() -> None:
        reader = Witness(path)
        while not stop.is_set():
            try:
                seen.append(reader.read())
            except VaultError as exc:
                seen.append(exc)
                return

    reader = threading.Thread(target=read_while_made)
    reader.start()
    try:
        for seq in range(1, 300):
            path.unlink(missing_ok=True)
            Witness(path).put((seq, b"m" * 32, b"h" * 32))
    finally:
        stop.set()
        reader.join()
    assert not [s for s in seen if isinstance(s, VaultError)]
    assert [p.name for p in tmp_path.iterdir()] == [WITNESS_NAME]


_KILLED_AS_THE_WITNESS_APPEARS = """
import os, sys
from pathlib import Path
from toolkit_vault.store.witness import Witness

link = os.link
def link_then_die(*args, **kwargs):  # the moment a SIGKILL may land: the witness just made
    link(*args, **kwargs)
    os._exit(9)
os.link = link_then_die
witness, head = Witness(Path(sys.argv[1])), (7, b"m" * 32, b"h" * 32)
if sys.argv[2] == "put":
    witness.put(head)
else:
    witness.advance(head)
    witness.flush()
"""


@pytest.mark.parametrize("how", ["advance", "put"])
def test_a_process_killed_as_its_witness_appears_leaves_its_head(tmp_path: Path, how: str) -> None:
    """`init` killed just after the vault key's commit (whose head the flusher writes at
    once) may die the moment the witness appears: it must hold that head already. Two empty
    slots hold no head whose MAC holds, so every process, `init` too, would refuse the vault
    until an operator accepted a restore."""
    path = tmp_path / WITNESS_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_AS_THE_WITNESS_APPEARS, str(path), how], env=env
    )
    assert done.returncode == 9
    heads = Witness(path).read()
    assert heads and set(heads) == {(7, b"m" * 32, b"h" * 32)}  # put writes both slots


def test_a_missing_witness_is_refused_until_init(
    vault: Vault, fresh: list[Vault], home: VaultSettings
) -> None:
    """Deleting the witness (with the database rolled back) must not pass for a vault that
    never had one: nothing is believed and no write lands until `init` witnesses it again."""
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    quiet(vault)  # its configure's last commit made: nothing of it witnesses a head later
    settle(vault)
    (home.home / WITNESS_NAME).unlink()
    with pytest.raises(VaultError, match=r"witness .* is missing"):
        reopen(fresh)
    code, _, err = cli("tokens", "create", "--role", "agent", "--name", "another")
    assert code != 0 and "is missing" in err
    done = CliRunner().invoke(main, ["init"])
    assert done.exit_code == 0, done.stderr
    _, configured = resume(reopen(fresh), session)
    assert configured["secretive"] is True


def test_init_writes_the_witness_before_it_answers(
    vault: Vault, home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init` remakes a missing witness on disk before it reports success, not later from
    the flusher thread or at the process's exit: what opens the vault right after (a server
    in the same process, or any process once `init` was killed after answering) finds it.
    The flusher is stopped here, so only `init` itself can have written it (the CI of
    9409286 caught the race in `test_a_missing_witness_is_refused_until_init`)."""
    quiet(vault)
    settle(vault)
    (home.home / WITNESS_NAME).unlink()
    monkeypatch.setattr(Witness, "_flush_soon", lambda self: None)  # a flusher that never runs
    done = CliRunner().invoke(main, ["init"])
    assert done.exit_code == 0, done.stderr
    assert Witness(home.home / WITNESS_NAME).read()


def test_a_purge_elsewhere_undone_before_a_running_process_looked(
    vault: Vault, fresh: list[Vault]
) -> None:
    """Purged by another process, its rows put back before this one listed again: the
    pointers read exactly as before, but the chain says the version is gone, so the running
    process drops the instance it made from it (the list from memory and the worker alike)."""
    conn, session = handshake(vault)
    assert configure(conn, "secretive", secret_config())[0]["status"] == "ok"
    backup = copy_of(vault, session)
    reopen(fresh).purge("operator", session)  # another process
    put_back(vault, session, backup)
    quick = vault.answer_without_blocking(AGENT, session, ToolkitListRequest())
    assert quick is None or not listed_in(quick)["secretive"]
    assert listed(conn)["secretive"] is False
    SecretiveToolkit.received.clear()
    _, configured = resume(vault, session)
    assert configured["secretive"] is False and SecretiveToolkit.received == []


def listed_in(answer: str) -> dict[str, bool]:
    return {t["name"]: t["configured"] for t in json.loads(answer)["toolkits"]}
