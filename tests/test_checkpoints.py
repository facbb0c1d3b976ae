"""Checkpoints of the audit chain's state (issue 53): a process starts from the one its home
names and follows only later events; one that does not verify, or disagrees with the chain,
is not believed: the process says so and walks the whole chain. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update
from starlette.testclient import TestClient

from toolkit_vault.access.principals import authenticate, create_token, revoke
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.checkpoints import (
    _FIELDS,
    CHECKPOINT_RECORD,
    KEPT,
    Checkpoints,
    checkpoint_link,
    count_to,
    decode_state,
    encode_state,
)
from toolkit_vault.store.ledger import ChainState, PrincipalState
from toolkit_vault.store.models import AuditCheckpoint, AuditEvent
from toolkit_vault.transports.http_api import create_app

pytestmark = pytest.mark.key_providers("file")
REFUSED = "not believed"


@pytest.fixture
def fresh(home: VaultSettings) -> Iterator[list[Vault]]:
    """Vaults opened later, as another process would open them (closed at teardown)."""
    opened: list[Vault] = []
    yield opened
    for vault in opened:
        vault.store.engine.dispose()


def reopen(fresh: list[Vault]) -> Vault:
    vault = open_vault(load_settings())
    fresh.append(vault)
    return vault


def walked_state(vault: Vault) -> bytes | None:
    return encode_state(vault.store.chain_state(force=True))


def checkpointed(vault: Vault) -> tuple[int, bytes]:
    """A checkpoint written now by `vault`, and the witness written as at its exit."""
    seq = vault.store.write_checkpoint()
    assert seq is not None
    if vault.store.witness is not None:
        vault.store.witness.flush()
    return seq, hashlib.sha256(row(vault, seq).state).digest()


def row(vault: Vault, seq: int) -> Any:
    with vault.store.engine.connect() as db:
        return db.execute(select(AuditCheckpoint).where(AuditCheckpoint.seq == seq)).one()


def record(home: VaultSettings) -> Path:
    return home.home / CHECKPOINT_RECORD


def name(home: VaultSettings, seq: int, digest: bytes) -> None:
    """Rewrite the home's record (someone who can write the home, but holds no key)."""
    record(home).write_text(f"{seq:016x} {digest.hex()}\n")


def sql(vault: Vault, statement: object) -> None:
    with vault.store.engine.begin() as db:
        db.execute(statement)  # type: ignore[call-overload]


def some_history(vault: Vault) -> str:
    """Events that make state: two principals, one revoked; returns the live one's token."""
    _, token = create_token(vault.store, "agent", "alice")
    create_token(vault.store, "agent", "mallory")
    revoke(vault.store, "mallory")
    return token


def test_a_process_starts_from_the_checkpoint_and_follows_what_came_after(
    vault: Vault, fresh: list[Vault], home: VaultSettings
) -> None:
    token = some_history(vault)
    seq, _ = checkpointed(vault)
    assert record(home).stat().st_mode & 0o777 == 0o600
    _, later = create_token(vault.store, "agent", "bob")  # after the checkpoint
    revoke(vault.store, "alice")
    vault.store.witness.flush()  # type: ignore[union-attr]
    started = reopen(fresh)
    assert started.store.checkpoints.started_from == seq
    assert started.store.checkpoints.refused is None
    assert walked_state(started) == walked_state(vault)
    assert authenticate(started.store, later) is not None
    assert authenticate(started.store, token) is None  # revoked after the checkpoint
    with vault.store.engine.connect() as db:  # kept (others may be, when written often)
        assert seq in db.execute(select(AuditCheckpoint.seq)).scalars().all()


def test_the_state_round_trips_every_field() -> None:
    state = ChainState()
    assert set(vars(state)) == _FIELDS  # a field added to ChainState must be checkpointed
    state.pointers = {"s": {"tk": 2}}
    state.latest = {"s": {"tk": 3}}
    state.purged = {"s": {"tk": 1}}
    state.principals = {
        "p": PrincipalState("n", "agent", True, 12.5),
        "q": PrincipalState(None, None, False),
    }
    state.imported = {"a": ("d", "s"), "b": None}
    state.registry_changes = 4
    state.removed = {"b": {"s": 1}}
    state.removals = {"b": 2}
    state.templates = {"tk": {"t": {"x": [1, {"y": None}]}}}
    state.console_roles = {("groups", "ops"): "operator"}
    state.allowances = {"p": (frozenset({"tk"}), frozenset({("tk", "read")}))}
    state.tool_pins = {("tk", "sha256:ab"): {"read": "0" * 64}}
    state.tool_changes = {("tk", "sha256:ab"): {"read": "1" * 64}}
    state.ended_mcp = {"5f0c4e1d", "a1"}
    blob = encode_state(state)
    assert blob is not None
    again = decode_state(blob)
    assert vars(again) == vars(state)
    assert encode_state(again) == blob


@pytest.mark.parametrize(
    "damage", ["forged", "stale", "truncated", "swapped", "unnamed row", "event deleted below"]
)
def test_a_checkpoint_that_does_not_verify_is_not_believed(
    vault: Vault,
    fresh: list[Vault],
    home: VaultSettings,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = some_history(vault)
    older, _ = checkpointed(vault)
    create_token(vault.store, "agent", "bob")
    seq, digest = checkpointed(vault)
    assert seq > older
    named = row(vault, seq)
    if damage == "forged":  # mallory un-revoked in the state; the home's record follows it
        forged = named.state.replace(b'"mallory","agent",true', b'"mallory","agent",false')
        assert forged != named.state
        sql(vault, update(AuditCheckpoint).where(AuditCheckpoint.seq == seq).values(state=forged))
        name(home, seq, hashlib.sha256(forged).digest())
    elif damage == "stale":  # the older checkpoint put back in the named one's place
        old = row(vault, older)
        sql(vault, delete(AuditCheckpoint).where(AuditCheckpoint.seq == seq))
        sql(
            vault,
            update(AuditCheckpoint)
            .where(AuditCheckpoint.seq == older)
            .values(seq=seq, mac=old.mac, state=old.state, checkpoint_mac=old.checkpoint_mac),
        )
    elif damage == "truncated":
        cut = named.state[: len(named.state) // 2]
        sql(vault, update(AuditCheckpoint).where(AuditCheckpoint.seq == seq).values(state=cut))
    elif damage == "swapped":  # the older one moved to the named seq, and named so
        old = row(vault, older)
        sql(vault, delete(AuditCheckpoint).where(AuditCheckpoint.seq == seq))
        sql(vault, update(AuditCheckpoint).where(AuditCheckpoint.seq == older).values(seq=seq))
        name(home, seq, hashlib.sha256(old.state).digest())
    elif damage == "unnamed row":  # the home names one the database does not hold
        sql(vault, delete(AuditCheckpoint).where(AuditCheckpoint.seq == seq))
    else:  # an event below it deleted: the whole walk finds the chain broken, as ever
        sql(vault, delete(AuditEvent).where(AuditEvent.seq == older))
        with caplog.at_level(logging.WARNING), pytest.raises(VaultError, match="does not verify"):
            reopen(fresh)
        assert any(REFUSED in r.getMessage() for r in caplog.records)
        return
    with caplog.at_level(logging.WARNING, logger="toolkit_vault.store.checkpoints"):
        started = reopen(fresh)
    assert started.store.checkpoints.started_from == 0  # the whole walk
    assert started.store.checkpoints.refused is not None
    assert any(REFUSED in r.getMessage() for r in caplog.records)
    assert walked_state(started) == walked_state(vault)
    assert authenticate(started.store, token) is not None
    assert started.store.state_failure() is None
    assert digest != b""
    with TestClient(create_app(started, open_provider(home))) as client:
        health = client.get("/healthz").json()
    assert health["status"] == "degraded" and health["warnings"] == ["checkpoint_refused"]


def test_the_count_below_a_seq_is_the_events_from_1_to_it(vault: Vault) -> None:
    """`count_to` counts every event less those after the seq and those before 1 (cheaper
    than a range on a large chain): the same answer as the range, whatever is deleted or
    put around it."""
    some_history(vault)
    with vault.store.engine.connect() as db:
        last = int(db.execute(select(func.max(AuditEvent.seq))).scalar_one())
    assert last > 4

    def both(seq: int) -> tuple[int, int]:
        with vault.store.engine.connect() as db:
            ranged = select(func.count()).where(AuditEvent.seq.between(1, seq))
            return count_to(db, seq), int(db.execute(ranged).scalar_one())

    assert both(last) == (last, last) and both(last - 2) == (last - 2, last - 2)
    assert both(last + 5) == (last, last)
    moved = row_of(vault, 2)
    sql(vault, delete(AuditEvent).where(AuditEvent.seq == 2))
    assert both(last - 2) == (last - 3, last - 3)
    for seq in (0, -7):  # the deleted event made up for below 1: still missing
        sql(vault, AuditEvent.__table__.insert().values({**moved, "seq": seq}))
        assert both(last - 2) == (last - 3, last - 3)
    sql(vault, AuditEvent.__table__.insert().values({**moved, "seq": last + 9}))  # or after
    assert both(last - 2) == (last - 3, last - 3) and both(last) == (last - 1, last - 1)


def row_of(vault: Vault, seq: int) -> dict[str, Any]:
    with vault.store.engine.connect() as db:
        return dict(db.execute(select(AuditEvent).where(AuditEvent.seq == seq)).one()._mapping)


def test_a_checkpoint_that_disagrees_with_the_chain_is_not_believed(
    vault: Vault, fresh: list[Vault], home: VaultSettings
) -> None:
    """Even one whose MAC holds (the key's holder, or a chain since restored over): its link
    at its seq is not the chain's, so the walk is whole. Without that check the process
    would start from a state of another history."""
    some_history(vault)
    seq, _ = checkpointed(vault)
    named = row(vault, seq)
    other = ChainState()  # another history: nobody at all
    blob = encode_state(other)
    assert blob is not None
    digest = hashlib.sha256(blob).digest()
    link = os.urandom(32)
    sign = vault.store._sign
    assert sign is not None
    sql(
        vault,
        update(AuditCheckpoint)
        .where(AuditCheckpoint.seq == seq)
        .values(mac=link, state=blob, checkpoint_mac=checkpoint_link(sign, seq, link, digest)),
    )
    name(home, seq, digest)
    started = reopen(fresh)
    assert started.store.checkpoints.refused == "the audit chain holds another event at its seq"
    assert walked_state(started) == walked_state(vault)
    assert named.seq == seq


def test_an_accepted_restore_names_no_checkpoint(vault: Vault, home: VaultSettings) -> None:
    some_history(vault)
    checkpointed(vault)
    assert record(home).exists()
    with vault.store.accepting_restore():
        pass
    assert not record(home).exists()


def test_a_process_that_ends_before_naming_its_checkpoint_leaves_the_named_one(
    vault: Vault, fresh: list[Vault], home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that exits while its checkpoint is written can leave the row unnamed
    (killed between the two). Three such rows, newer than the named one, must not make the
    vault drop the named one: every later start would walk the whole chain."""
    some_history(vault)
    named, _ = checkpointed(vault)

    def killed(*_args: object) -> None:
        raise SystemExit("killed before the name was written")

    with monkeypatch.context() as patched:
        patched.setattr(Checkpoints, "_name", killed)
        for n in range(KEPT):
            create_token(vault.store, "agent", f"later-{n}")
            with pytest.raises(SystemExit):
                vault.store.write_checkpoint()
    with vault.store.engine.connect() as db:
        held = db.execute(select(AuditCheckpoint.seq)).scalars().all()
    assert named in held and len(held) == KEPT + 1
    vault.store.checkpoints._prune(vault.store.write)  # as the next named write prunes
    with vault.store.engine.connect() as db:
        assert named in db.execute(select(AuditCheckpoint.seq)).scalars().all()
    started = reopen(fresh)
    assert started.store.checkpoints.refused is None
    assert started.store.checkpoints.started_from == named


def test_a_process_that_exits_as_its_checkpoint_is_written_names_it(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """A process that followed enough events writes a checkpoint on a thread of its own;
    one that ends at once (a CLI command) waits for it at exit, so the next start finds it
    named instead of walking what it walked again."""
    some_history(vault)
    vault.store.witness.flush()  # type: ignore[union-attr]
    assert not record(home).exists()
    # the checkpoint's thread made slow, so the process ends while it writes (without the
    # wait at exit, it is a daemon thread cut short, and nothing is named)
    opens = """if True:
        import time
        from toolkit_vault.bootstrap import open_vault
        from toolkit_vault.settings import load_settings
        from toolkit_vault.store.checkpoints import Checkpoints
        write = Checkpoints._write_quietly
        def slow(self, *given):
            time.sleep(0.5)
            write(self, *given)
        Checkpoints._write_quietly = slow
        open_vault(load_settings())
    """
    env = {**cli_env, "TOOLKIT_VAULT_CHECKPOINT_EVENTS": "2"}
    subprocess.run([sys.executable, "-c", opens], env=env, check=True, timeout=120)
    with vault.store.engine.connect() as db:
        head = db.execute(select(func.max(AuditEvent.seq))).scalar_one()
    assert record(home).read_text().split()[0] == f"{head:016x}"
