"""`toolkit-vault backup create|verify` and `toolkit-vault restore`: thin shells over
`toolkit_vault.backup` (docs/backup-and-recovery.md is the procedure)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.cli.keyflags import key_options, provider_flags
from toolkit_vault.cli.recovery import prompt_shares
from toolkit_vault.cli.shell import emit, epilog, guarded
from toolkit_vault.errors import VaultError

__all__ = ["backup", "restore"]


@click.group(short_help="Authenticated snapshots of the vault: create, verify.")
def backup() -> None:
    """Backups: a consistent snapshot of the running vault (rows as stored, ciphertext
    stays ciphertext, the audit chain and its head), authenticated under a key only a
    holder of the vault's keys can use."""


@backup.command(
    "create",
    short_help="Write a consistent, authenticated snapshot (0600, atomically).",
    epilog=epilog("toolkit-vault backup create /backups/vault-$(date +%F).tkvb"),
)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def backup_create(file: Path, as_json: bool) -> None:
    """Snapshot the vault into FILE while it runs and writes. FILE appears whole or not
    at all (a temporary file beside it is renamed into place), mode 0600."""
    from toolkit_vault.backup import create_backup
    from toolkit_vault.settings import load_settings

    report = create_backup(load_settings(), file)
    if as_json:
        emit(report.as_json())
        return
    rows = sum(report.rows.values())
    click.echo(
        f"backed up {rows} rows ({report.rows.get('config_versions', 0)} config versions, "
        f"audit head {report.head_seq}) to {report.path} in {report.seconds:.1f} s"
    )


@backup.command(
    "verify",
    short_help="Check a backup's MAC, chain and every version; touch nothing live.",
    epilog=epilog(
        "toolkit-vault backup verify vault.tkvb", "toolkit-vault backup verify vault.tkvb --json"
    ),
)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--with-shares",
    is_flag=True,
    help="The master key is lost: open the backup with K recovery shares (prompted).",
)
@provider_flags
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def backup_verify(file: Path, with_shares: bool, as_json: bool, **flags: Any) -> None:
    """Verify FILE: its MAC, its audit chain and head, every row MAC, and every config
    version decrypted in memory (nothing is shown). Needs the master key the backup's vault
    keys are wrapped under; names it when the provider lacks it. Exit 1 unless all hold."""
    from toolkit_vault.backup import verify_backup
    from toolkit_vault.backup.archive import Reader
    from toolkit_vault.backup.check import open_backup, resolve_settings

    provider = flags.pop("key_provider")
    options = key_options(flags)
    with open_backup(file) as handle:
        header = Reader(handle).header
    shares = prompt_shares() if with_shares else None
    settings = resolve_settings(header, provider, options or None, trust_header=with_shares)
    report = verify_backup(file, settings, shares)
    if as_json:
        emit(report.as_json())
    else:
        v = report.versions
        click.echo(
            f"backup of {report.header.source}, audit head {report.as_json()['head_seq']}: "
            f"MAC ok; {report.audit['verified']}/{report.audit['events']} events verified; "
            f"{v['intact']} versions open, {v['failed']} failed, {v['no_ciphertext']} without "
            "ciphertext"
        )
    if not report.ok:
        raise VaultError(f"the backup does not verify: {report.audit.get('message')}")


@click.command(
    short_help="Restore a verified backup into an empty database (audited).",
    epilog=epilog(
        "toolkit-vault restore vault.tkvb --dry-run",
        "toolkit-vault restore vault.tkvb --yes",
        "toolkit-vault restore old.tkvb --yes --over-newer-witness",
    ),
)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Verify and say what would come back and be lost.")
@click.option(
    "--over-newer-witness",
    is_flag=True,
    help="Restore although the home witnessed a newer audit head, or one the backup's chain "
    "does not pass through (a fork): loses what came since (audited).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option(
    "--with-shares",
    is_flag=True,
    help="The master key is lost: open the backup with K recovery shares (prompted).",
)
@provider_flags
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def restore(
    file: Path,
    dry_run: bool,
    over_newer_witness: bool,
    yes: bool,
    with_shares: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Restore FILE into the (empty) database and home of TOOLKIT_VAULT_HOME and
    TOOLKIT_VAULT_DATABASE_URL, after verifying all of it. A home that records another
    vault refuses it (move a vault to a new home); a backup whose chain does not pass
    through the head the home witnessed (a fork) or ends before it needs
    --over-newer-witness. The home's witness is reset to the backup's head on purpose and
    the restore is the chain's next event. Stop every server first."""
    from toolkit_vault.backup import restore_backup
    from toolkit_vault.backup.archive import Reader
    from toolkit_vault.backup.check import open_backup, resolve_settings

    provider = flags.pop("key_provider")
    options = key_options(flags)
    with open_backup(file) as handle:
        header = Reader(handle).header
    if with_shares and provider is None:
        raise click.UsageError("with --with-shares, name the new master key's --key-provider")
    settings = resolve_settings(header, provider, options or None)
    shares = prompt_shares() if with_shares else None
    if not dry_run and not yes:
        if not sys.stdin.isatty():
            raise VaultError("confirm the restore with --yes (stdin is not a tty)")
        if not click.confirm(f"Restore {file} into {settings.database_url}?", err=True):
            raise VaultError("cancelled; nothing was changed")
    report = restore_backup(
        file,
        settings,
        dry_run=dry_run,
        over_newer_witness=over_newer_witness,
        shares=shares,
        actor=shell_actor(),
    )
    payload = report.as_json()
    if as_json:
        emit(payload)
        return
    rows = sum(report.backup.rows.values())
    if dry_run:
        click.echo(
            f"dry run: nothing changed. The backup verifies; {rows} rows would come back, "
            f"up to audit event {payload['backup_seq']}."
        )
        if payload["lost_event_count"]:
            lost = ", ".join(f"{n} {a}" for a, n in sorted(report.lost_events.items()))
            click.echo(
                f"would be lost: {payload['lost_event_count']} audit events since the backup"
                + (f" ({lost})" if lost else "")
            )
        if not report.database_empty:
            click.echo("the target database is not empty: a restore needs an empty one")
        if report.other_vault:
            click.echo("the home belongs to another vault: restore into a new home")
        if report.fork:
            click.echo(
                f"the backup is a fork: its chain does not pass through audit event "
                f"{payload['witness_seq']} this home witnessed; what happened here since the "
                "fork would be undone"
            )
        if report.needs_over_newer_witness:
            click.echo("the home witnessed a newer head: the restore needs --over-newer-witness")
        return
    witnessed = (
        "the home had no witness"
        if payload["witness_seq"] is None
        else f"the home's witness was at {payload['witness_seq']}"
    )
    fork = ", over a fork" if report.fork else ""
    click.echo(
        f"restored {rows} rows up to audit event {payload['backup_seq']} "
        f"({witnessed}{fork}); audited"
    )
