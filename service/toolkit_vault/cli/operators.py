"""Commands for operators and auditors: `keys`, `check`, `history`, `audit`, `purge`, `tokens`.

They open the vault without toolkits (or only its store), so a broken plugin can never
stand between an operator and the keys, the audit log or a purge.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from ..bootstrap import open_store
from ..errors import VaultError
from ..history import history, iso_time, parse_time
from ..keys import provider_for
from ..principals import ROLES, create_token, list_principals, revoke
from ..rotation import key_status, retire_key, rotate_keys
from ..settings import load_settings
from .shell import emit, folding_table, guarded, iso_seconds, open_for_operators, progress

__all__ = ["audit", "check", "history_command", "keys", "purge_command", "tokens"]

OPERATOR = "operator"  # the actor recorded for operator actions taken on the command line


# -- keys and check (operators) ------------------------------------------------------------


@click.group()
def keys() -> None:
    """Master keys: status, rotation, retirement."""


@keys.command("status")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_status(as_json: bool) -> None:
    """Every master key: primary, retired, wrapped keys it protects, held by the provider."""
    settings = load_settings()
    vault = open_for_operators(settings)
    status = key_status(
        vault.store, provider_for(settings.key_provider, settings.home, settings.vault_id)
    )
    if as_json:
        emit({"keys": status})
        return
    table = Table("kek id", "primary", "retired", "wrapped keys", "in provider")
    for k in status:
        table.add_row(
            k["kek_id"],
            "yes" if k["primary"] else "",
            iso_seconds(k["retired_at"]),
            str(k["wrapped_keys"]),
            "yes" if k["in_provider"] else "NO",
        )
    Console().print(table)


@keys.command("rotate")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@guarded
def keys_rotate(batch_size: int, as_json: bool) -> None:
    """Make a new master key primary and rewrap every wrapped key under it.

    Idempotent and resumable: a killed run is finished by running it again.
    """
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    with progress("rewrapping", not as_json) as start:
        report = rotate_keys(vault.store, provider, batch_size=batch_size, start=start)
    if as_json:
        emit(report.as_json())
    else:
        verb = "resumed rotation to" if report.resumed else "rotated to"
        click.echo(
            f"{verb} {report.primary}: {report.rewrapped} versions and "
            f"{report.internal_rewrapped} internal keys rewrapped, {len(report.failed)} failed"
        )
    if report.failed:
        raise VaultError(
            f"{len(report.failed)} versions failed to decrypt and were left as they are"
        )


@keys.command("retire")
@click.argument("kek_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_retire(kek_id: str, as_json: bool) -> None:
    """Retire a master key that no wrapped key uses any more, and remove it from the provider."""
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    result = retire_key(vault.store, provider, kek_id)
    if as_json:
        emit(result)
    elif result["removed_from_provider"]:
        click.echo(f"retired {kek_id} and removed it from {provider.where}")
    else:
        click.echo(f"retired {kek_id}; remove it from {provider.where} yourself")


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
@click.option("--session", "session_id", default=None, help="Only this session (or scope id).")
@click.option(
    "--principal",
    default=None,
    help="Only this principal's (id or name): its own configs and its sessions'.",
)
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
    session_id: str | None,
    principal: str | None,
    toolkit: str | None,
    since: str | None,
    as_json: bool,
) -> None:
    """Every config version: scope, actor, time, status, public config, secret fingerprints.

    Needs no master key. A fingerprint is equal between two versions exactly when that
    secret is unchanged; it reveals nothing else. In the table, * marks a fingerprint
    that differs from the previous listed version of the same scope and toolkit. A scope is
    a session (its id) or a principal's own configs (`principal <principal id>`).
    """
    entries = history(
        open_store(load_settings()),
        session_id,
        toolkit,
        None if since is None else parse_time(since),
        principal,
    )
    if as_json:
        emit({"versions": entries})
        return
    table = folding_table("scope", "toolkit", "v", "status", "actor", "time (UTC)", "secrets")
    previous: dict[tuple[str, str], dict[str, str | None]] = {}
    for e in entries:
        key = (e["session_id"], e["toolkit_name"])
        before = previous.get(key, {})
        previous[key] = e["secret_fingerprints"]
        secrets = [
            _fingerprint_cell(pointer, fp, before)
            for pointer, fp in sorted(e["secret_fingerprints"].items())
        ]
        scope = e["session_id"][:8]
        if e["scope"] == "principal":
            scope = f"principal {e['principal_id']}"
        table.add_row(
            scope,
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
@click.option("--session", "session_id", default=None, help="The session to purge.")
@click.option(
    "--principal",
    default=None,
    help="The principal (id or name) whose own configs to purge; its sessions' stay.",
)
@click.option("--toolkit", default=None, help="Only this toolkit of the session or principal.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def purge_command(
    session_id: str | None, principal: str | None, toolkit: str | None, yes: bool, as_json: bool
) -> None:
    """Crypto-shred stored configs: destroy wrapped keys, ciphertext and fingerprints.

    Give one scope: `--session S` (that session's own configs; its principal's stay and
    apply to it again) or `--principal P` (the principal's own configs; its sessions' own
    stay). Irreversible. History keeps the skeleton (status `purged`); the purge is audited.
    """
    if (session_id is None) == (principal is None):
        raise VaultError("name one scope to purge: --session S or --principal P")
    scope = f"session {session_id}" if principal is None else f"principal {principal}"
    what = scope + (f", toolkit {toolkit}" if toolkit else "")
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("purge is irreversible: confirm with --yes (stdin is not a tty)")
        if not click.confirm(f"Destroy every stored secret of {what}?", err=True):
            raise VaultError("purge cancelled; nothing was changed")
    vault = open_for_operators(load_settings())
    if principal is not None:
        report = vault.purge_principal(OPERATOR, principal, toolkit)
    else:
        report = vault.purge(OPERATOR, str(session_id), toolkit)
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
