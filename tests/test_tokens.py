"""Principals and bearer tokens: shown once, stored hashed, revocable, audited."""

from __future__ import annotations

import hashlib
import json
import re

from sqlalchemy import select

from test_cli import run
from test_history import error_line
from toolkit_vault.access.principals import (
    Principal,
    authenticate,
    create_token,
    list_principals,
    revoke,
)
from toolkit_vault.actors import shell_actor
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.models import AuditEvent, PrincipalRow

TOKEN = re.compile(r"tkv_[A-Za-z0-9_-]{43}")


def _database_text(vault: Vault) -> str:
    """Every principal row and audit event, as text: where a token must never appear."""
    with vault.store.engine.connect() as db:
        principals = [dict(r._mapping) for r in db.execute(select(PrincipalRow))]
        events = [dict(r._mapping) for r in db.execute(select(AuditEvent))]
    return repr(principals) + repr(events)


def test_create_authenticate_revoke_through_the_cli(vault: Vault, cli_env: dict[str, str]) -> None:
    done = run(cli_env, "tokens", "create", "--role", "auditor", "--name", "alice", "--json")
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    token = created["token"]
    assert TOKEN.fullmatch(token)
    assert (created["name"], created["role"]) == ("alice", "auditor")
    with vault.store.engine.connect() as db:
        stored = db.execute(
            select(PrincipalRow.token_hash).where(PrincipalRow.name == "alice")
        ).scalar_one()
    assert stored == hashlib.sha256(token.encode()).hexdigest()
    assert token not in _database_text(vault)
    assert token[4:] not in _database_text(vault)
    assert authenticate(vault.store, token) == Principal(created["principal_id"], "auditor")

    human = run(cli_env, "tokens", "create", "--role", "agent", "--name", "bot-1")
    assert human.returncode == 0, human.stderr
    (line,) = human.stdout.splitlines()  # only the token on stdout, for scripts
    assert TOKEN.fullmatch(line) and "store the token now" in human.stderr

    listing = run(cli_env, "tokens", "list", "--json")
    table = run(cli_env, "tokens", "list")
    assert listing.returncode == 0 and table.returncode == 0
    principals = {p["name"]: p for p in json.loads(listing.stdout)["principals"]}
    assert set(principals) == {"local", "alice", "bot-1"}
    assert principals["alice"] == {
        "principal_id": created["principal_id"],
        "name": "alice",
        "role": "auditor",
        "has_token": True,
        "created_at": principals["alice"]["created_at"],
        "revoked_at": None,
        "expires_at": None,  # no --ttl: never
        "expired": False,
    }
    for out in (listing.stdout, table.stdout):
        assert "tkv_" not in out and stored not in out and line not in out

    revoked = run(cli_env, "tokens", "revoke", "alice", "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["revoked_now"] is True
    assert authenticate(vault.store, token) is None
    again = run(cli_env, "tokens", "revoke", created["principal_id"])
    assert again.returncode == 0 and "already revoked" in again.stdout
    assert authenticate(vault.store, line) is not None  # the other token still works

    with vault.store.engine.connect() as db:
        actions = list(
            db.execute(
                select(AuditEvent.action, AuditEvent.actor).where(AuditEvent.action.like("token_%"))
            )
        )
    assert sorted(actions) == [
        ("token_created", shell_actor()),  # the person at the shell that ran the command
        ("token_created", shell_actor()),
        ("token_revoked", shell_actor()),
    ]
    assert run(cli_env, "audit", "verify").returncode == 0


def test_refusals_are_one_clear_line(vault: Vault, cli_env: dict[str, str]) -> None:
    assert run(cli_env, "tokens", "create", "--role", "agent", "--name", "dup").returncode == 0
    dup = run(cli_env, "tokens", "create", "--role", "operator", "--name", "dup")
    assert "a principal named 'dup' already exists" in error_line(dup)
    bad_name = run(cli_env, "tokens", "create", "--role", "agent", "--name", "two words")
    assert "a name is" in error_line(bad_name)
    assert "no principal named" in error_line(run(cli_env, "tokens", "revoke", "nobody"))
    bad_role = run(cli_env, "tokens", "create", "--role", "root", "--name", "x")
    assert bad_role.returncode == 2 and "Invalid value for '--role'" in bad_role.stderr


def test_authenticate_refuses_what_it_should(vault: Vault) -> None:
    principal_id, token = create_token(vault.store, "agent", "agent-7")
    assert authenticate(vault.store, token) == Principal(principal_id, "agent")
    for wrong in ("", "tkv_", token[:-1], token + "A", "pypi-" + token[4:], token.upper()):
        assert authenticate(vault.store, wrong) is None
    other_id, other = create_token(vault.store, "operator", "ops")
    info, changed = revoke(vault.store, "agent-7")
    assert changed and info.revoked_at is not None
    assert authenticate(vault.store, token) is None
    assert authenticate(vault.store, other) == Principal(other_id, "operator")
    listed = {p.name: p for p in list_principals(vault.store)}
    assert listed["agent-7"].revoked_at is not None and listed["ops"].revoked_at is None
    assert listed["local"].has_token is False


def test_every_new_command_has_help(home: object, cli_env: dict[str, str]) -> None:
    for command in (
        ["history"],
        ["audit"],
        ["audit", "verify"],
        ["purge"],
        ["tokens"],
        ["tokens", "create"],
        ["tokens", "list"],
        ["tokens", "revoke"],
    ):
        done = run(cli_env, *command, "--help")
        assert done.returncode == 0 and "Usage:" in done.stdout, command
