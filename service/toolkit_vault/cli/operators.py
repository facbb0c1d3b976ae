"""Commands for operators and auditors: `keys`, `check`, `history`, `audit`, `purge`, `tokens`.

They open the vault without toolkits (or only its store), so a broken plugin can never
stand between an operator and the keys, the audit log or a purge.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console

from ..bootstrap import open_provider, open_store
from ..errors import VaultError
from ..history import history, iso_time, parse_time
from ..keyadmin import key_status, plan_rotation, retire_key
from ..principals import ROLES, create_token, list_principals, revoke
from ..rotation import rotate_master_key, rotate_vault_key
from ..settings import load_settings
from .shell import emit, folding_table, guarded, iso_seconds, open_for_operators, progress

__all__ = ["audit", "check", "history_command", "keys", "purge_command", "tokens"]

OPERATOR = "operator"  # the actor recorded for operator actions taken on the command line


# -- keys and check (operators) ------------------------------------------------------------


@click.group()
def keys() -> None:
    """The key hierarchy: master keys (in the key provider) wrap vault keys (in the store),
    which wrap every data key. Status, rotation of either layer, retirement."""


@keys.command("status")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_status(as_json: bool) -> None:
    """Both layers: each master key and the vault keys it wraps; each vault key, active or
    retired, and how many wrapped keys it protects."""
    settings = load_settings()
    vault = open_for_operators(settings)
    status = key_status(vault.store, open_provider(settings))
    if as_json:
        emit(status)
        return
    provider = status["provider"]
    click.echo(f"key provider {provider['name']}: {provider['where']}")
    if not provider["reachable"]:
        click.echo(f"  unreachable: {provider['error']}")
    masters = folding_table("master key", "current", "vault keys", "in provider")
    for m in status["master_keys"]:
        held = {True: "yes", False: "no (missing)", None: "unknown"}[m["in_provider"]]
        masters.add_row(
            m["key_id"], "yes" if m["current"] else "", ", ".join(m["vault_keys"]), held
        )
    vault_keys = folding_table(
        "vault key", "active", "created (UTC)", "retired (UTC)", "wrapped keys", "master key"
    )
    for v in status["vault_keys"]:
        vault_keys.add_row(
            v["key_id"],
            "yes" if v["active"] else "",
            iso_seconds(v["created_at"]),
            iso_seconds(v["retired_at"]),
            str(v["wrapped_keys"]),
            v["master_key"] or "",
        )
    Console().print(masters)
    Console().print(vault_keys)


@keys.command("rotate")
@click.option(
    "--vault-key",
    is_flag=True,
    help="Rotate the vault key instead: a new one becomes active and every data key is "
    "rewrapped under it, in resumable batches (no value is decrypted).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what would be rewrapped and how long it "
    "would take (one batch measured, then rolled back); change nothing.",
)
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@guarded
def keys_rotate(vault_key: bool, dry_run: bool, batch_size: int, as_json: bool) -> None:
    """Rotate the master key: the provider makes a new one and every vault key is rewrapped
    under it (a few rows: as quick at a million versions as at ten).

    Idempotent and resumable: a killed run is finished by running it again.
    """
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = open_provider(settings)
    if dry_run:
        plan = plan_rotation(
            vault.store, provider, vault.ring, vault_key=vault_key, batch_size=batch_size
        )
        if as_json:
            emit(plan)
        else:
            _print_plan(plan)
        return
    if not vault_key:
        done = rotate_master_key(vault.store, provider)
        if as_json:
            emit(done.as_json())
        else:
            how = "rotated" if done.rotated_in_provider else "finished the rotation to"
            click.echo(
                f"{how} master key {done.master_key}: vault keys "
                f"{', '.join(done.vault_keys)} rewrapped"
            )
        return
    with progress("rewrapping", not as_json) as start:
        report = rotate_vault_key(
            vault.store, provider, vault.ring, batch_size=batch_size, start=start
        )
    if as_json:
        emit(report.as_json())
    else:
        verb = "resumed rotation to" if report.resumed else "rotated to"
        click.echo(
            f"{verb} vault key {report.primary}: {report.rewrapped} data keys and "
            f"{report.internal_rewrapped} internal keys rewrapped, {len(report.failed)} failed"
        )
    if report.failed:
        raise VaultError(
            f"{len(report.failed)} data keys failed to unwrap and were left as they are"
        )


def _print_plan(plan: dict[str, Any]) -> None:
    click.echo(
        f"dry run: nothing changed. Key provider {plan['provider']}, current master "
        f"key {plan['master_key']}."
    )
    for key_id, count in plan["wrapped_keys"].items():
        master = plan["vault_keys"][key_id]
        click.echo(f"  vault key {key_id}: {count} wrapped keys, under master key {master}")
    if plan["kind"] == "master":
        what = "rotate the master key, then rewrap" if plan["rotates_in_provider"] else "rewrap"
        click.echo(f"would {what} {plan['would_rewrap']} vault keys; data keys stay as they are")
    else:
        what = "make a new vault key, then rewrap" if plan["new_vault_key"] else "rewrap"
        click.echo(f"would {what} {plan['would_rewrap']} wrapped keys")
    measured = plan["measured"]
    click.echo(
        f"estimate: {plan['estimate_seconds']:.1f} s (measured {measured['rows']} in "
        f"{measured['seconds'] * 1000:.1f} ms)"
    )


@keys.command("retire")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_retire(key_id: str, as_json: bool) -> None:
    """Retire a vault key (vk-N) or a master key that nothing is wrapped under any more.
    A master key is removed from the provider; a vault key's wrapped key is destroyed."""
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = open_provider(settings)
    result = retire_key(vault.store, provider, key_id)
    if as_json:
        emit(result)
    elif result["kind"] == "master":
        click.echo(f"retired master key {key_id} and removed it from {provider.where}")
    else:
        click.echo(f"retired vault key {key_id}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@guarded
def check(as_json: bool) -> None:
    """Decrypt-verify every stored version in memory, check every row's MAC, the audit chain
    and the state it vouches for; print counts and names, never a value."""
    vault = open_for_operators(load_settings())
    with progress("checking", not as_json) as start:
        result = vault.check(start)
    if as_json:
        emit(result)
    else:
        click.echo(
            f"{result['versions']} versions: {result['intact']} intact, {result['failed']} failed, "
            f"{result['no_ciphertext']} without ciphertext (failed or purged attempts)"
        )
        for v in result["failed_versions"]:
            click.echo(f"  {v['session_id']}/{v['toolkit_name']} v{v['version']}: {v['reason']}")
        click.echo(f"audit chain: {result['audit']['message']}")
        for p in result["state_problems"]:
            click.echo(f"  {p['table']} {p['row']}: {p['problem']} ({p['detail']})")
    if result["failed"]:
        raise VaultError(f"{result['failed']} stored versions failed their check")
    if not result["ok"]:
        raise VaultError(result["audit"]["message"])


# -- history, audit verify, purge, tokens (auditors and operators) --------------------------


@click.command("history")
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.option("--toolkit", default=None, help="Only this toolkit.")
@click.option(
    "--since",
    default=None,
    metavar="TIME",
    help="Only versions stored at or after TIME: epoch seconds or ISO 8601 (naive = UTC).",
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def history_command(
    session_id: str | None, toolkit: str | None, since: str | None, as_json: bool
) -> None:
    """Every config version: actor, time, status, public config, secret fingerprints.

    Needs no master key. A fingerprint is equal between two versions exactly when that
    secret is unchanged; it reveals nothing else. In the table, * marks a fingerprint
    that differs from the previous listed version of the same session and toolkit.
    """
    entries = history(
        open_store(load_settings()),
        session_id,
        toolkit,
        None if since is None else parse_time(since),
    )
    if as_json:
        emit({"versions": entries})
        return
    table = folding_table("session", "toolkit", "v", "status", "actor", "time (UTC)", "secrets")
    previous: dict[tuple[str, str], dict[str, str | None]] = {}
    for e in entries:
        key = (e["session_id"], e["toolkit_name"])
        before = previous.get(key, {})
        previous[key] = e["secret_fingerprints"]
        secrets = [
            _fingerprint_cell(pointer, fp, before)
            for pointer, fp in sorted(e["secret_fingerprints"].items())
        ]
        table.add_row(
            e["session_id"][:8],
            e["toolkit_name"],
            f"{e['version']}{' (current)' if e['current'] else ''}",
            e["status"],
            e["actor"],
            e["time"],
            "\n".join(secrets),
        )
    Console().print(table)
    click.echo(f"{len(entries)} versions", err=True)


def _fingerprint_cell(pointer: str, fp: str | None, before: dict[str, str | None]) -> str:
    changed = "*" if before and before.get(pointer) != fp else ""
    return f"{pointer} {(fp or 'purged')[:12]}{changed}"


@click.group()
def audit() -> None:
    """The tamper-evident audit log (an HMAC hash chain)."""


@audit.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def audit_verify(as_json: bool) -> None:
    """Verify the audit chain and its head; exit 1 naming the first bad event.

    Also checks that every config version has its `configure` event (and every purged
    one a `purge` event). Needs the master key (the audit key is stored wrapped by it).
    """
    report = open_for_operators(load_settings()).verify_audit()
    if as_json:
        emit(report.as_json())
    else:
        click.echo(f"{report.verified}/{report.events} events verified; {report.message}")
        for p in report.state_problems:
            click.echo(f"  {p.table} {p.row}: {p.problem} ({p.detail})")
    if report.problem in ("edited", "deleted", "inserted", "truncated"):
        raise VaultError(f"audit chain broken at event {report.first_bad_seq}: {report.message}")
    if not report.ok:
        raise VaultError(report.message)


@click.command("purge")
@click.option("--session", "session_id", required=True, help="The session to purge.")
@click.option("--toolkit", default=None, help="Only this toolkit of the session.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def purge_command(session_id: str, toolkit: str | None, yes: bool, as_json: bool) -> None:
    """Crypto-shred stored configs: destroy wrapped keys, ciphertext and fingerprints.

    Irreversible. History keeps the metadata (status `purged`); the purge is audited.
    """
    what = f"session {session_id}" + (f", toolkit {toolkit}" if toolkit else "")
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("purge is irreversible: confirm with --yes (stdin is not a tty)")
        if not click.confirm(f"Destroy every stored secret of {what}?", err=True):
            raise VaultError("purge cancelled; nothing was changed")
    report = open_for_operators(load_settings()).purge(OPERATOR, session_id, toolkit)
    if as_json:
        emit(report.as_json())
    else:
        names = ", ".join(report.toolkits) or "none left to purge"
        click.echo(f"purged {report.versions} versions of {what} ({names})")
    if report.files_scrubbed is False:
        click.echo(
            "toolkit-vault: warning: another process kept the SQLite WAL busy; old pages stay "
            "in it until its next checkpoint",
            err=True,
        )


@click.group()
def tokens() -> None:
    """Principals and their bearer tokens (roles: agent, operator, auditor)."""


@tokens.command("create")
@click.option("--role", required=True, type=click.Choice(ROLES), help="The principal's role.")
@click.option("--name", required=True, help="A unique name for the principal.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (includes the token).")
@guarded
def tokens_create(role: str, name: str, as_json: bool) -> None:
    """Create a principal and print its token: shown this once, stored only hashed."""
    vault = open_for_operators(load_settings())
    principal_id, token = create_token(vault.store, role, name, actor=OPERATOR)
    if as_json:
        emit({"principal_id": principal_id, "name": name, "role": role, "token": token})
        return
    click.echo(f"created {role} {name} ({principal_id}); store the token now:", err=True)
    click.echo(token)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_list(as_json: bool) -> None:
    """List principals (never a token or its hash)."""
    principals = list_principals(open_store(load_settings()))
    if as_json:
        emit({"principals": [p.as_json() for p in principals]})
        return
    table = folding_table("name", "role", "principal id", "token", "created (UTC)", "revoked (UTC)")
    for p in principals:
        table.add_row(
            p.name,
            p.role,
            p.principal_id,
            "yes" if p.has_token else "",
            iso_time(p.created_at),
            "" if p.revoked_at is None else iso_time(p.revoked_at),
        )
    Console().print(table)


@tokens.command("revoke")
@click.argument("name_or_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_revoke(name_or_id: str, as_json: bool) -> None:
    """Revoke a principal's token (by name or principal id); revoking twice is harmless."""
    vault = open_for_operators(load_settings())
    principal, changed = revoke(vault.store, name_or_id, actor=OPERATOR)
    if as_json:
        emit({**principal.as_json(), "revoked_now": changed})
    elif changed:
        click.echo(f"revoked {principal.name} ({principal.principal_id})")
    else:
        click.echo(f"{principal.name} ({principal.principal_id}) was already revoked")
