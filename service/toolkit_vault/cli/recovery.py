"""`toolkit-vault keys recovery init|unseal|status`: recovery shares for a lost master key,
a thin shell over `toolkit_vault.backup.recovery` (docs/backup-and-recovery.md has the
share ceremony). Shares are typed at a hidden prompt (or, for scripts, read one per line
from stdin): never an argument, never logged."""

from __future__ import annotations

import sys
from typing import Any

import click

from toolkit_vault.cli.keyflags import key_options, provider_flags
from toolkit_vault.cli.shell import emit, epilog, guarded, plural
from toolkit_vault.errors import VaultError

__all__ = ["named", "prompt_shares", "recovery"]


def named(noun: str, ids: list[str]) -> str:
    """`vault key vk-1`, `vault keys vk-1, vk-2`: the noun agrees with the list."""
    return f"{noun if len(ids) == 1 else noun + 's'} {', '.join(ids)}"


@click.group(short_help="Recovery shares for a lost master key: init, unseal, status.")
def recovery() -> None:
    """Recovery shares: a recovery key wraps the vault keys beside the master key and is
    split into N SLIP-39 shares, any K of which re-establish the vault under a new master
    key when the old one is lost."""


@recovery.command(
    "init",
    short_help="Make a recovery key and split it into N shares, shown once (audited).",
    epilog=epilog("toolkit-vault keys recovery init --shares 5 --threshold 3"),
)
@click.option("--shares", type=click.IntRange(2, 16), required=True, help="N: shares to make.")
@click.option("--threshold", type=click.IntRange(2, 16), required=True, help="K: shares needed.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (holds the shares).")
@guarded
def recovery_init(shares: int, threshold: int, as_json: bool) -> None:
    """Make a new recovery key covering every live vault key, replacing any earlier share
    set, and print its N shares once: give each to a different person. Any K of them
    re-establish the vault; fewer reveal nothing."""
    from toolkit_vault.backup.recovery import init_shares
    from toolkit_vault.settings import load_settings

    made = init_shares(load_settings(), shares=shares, threshold=threshold)
    if as_json:
        emit(
            {
                "set_id": made.set_id,
                "threshold": made.threshold,
                "shares": made.shares,
                "vault_keys": made.vault_keys,
            }
        )
        return
    click.echo(
        f"recovery share set {made.set_id}: any {made.threshold} of these {len(made.shares)} "
        f"shares re-establish the vault ({named('vault key', made.vault_keys)}). They are "
        "shown once and stored nowhere: give each to a different person."
    )
    for place, share in enumerate(made.shares, 1):
        click.echo(f"\nshare {place}:\n{share}")


@recovery.command(
    "status",
    short_help="Whether a share set exists and which vault keys it covers.",
    epilog=epilog("toolkit-vault keys recovery status --json"),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def recovery_status_command(as_json: bool) -> None:
    """Which live vault keys the recovery shares cover (a vault key made since `keys
    recovery init` is not covered until it runs again)."""
    from toolkit_vault.backup.recovery import share_status
    from toolkit_vault.settings import load_settings

    status = share_status(load_settings())
    if as_json:
        emit(status)
    elif not status["initialized"]:
        click.echo("no recovery shares: run `toolkit-vault keys recovery init`")
    else:
        uncovered = ", ".join(status["uncovered"]) or "none"
        click.echo(
            f"share set {status['set_id']} covers {', '.join(status['covered']) or 'nothing'}; "
            f"not covered: {uncovered}"
        )
    for warning in status["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if status["problems"]:
        first = status["problems"][0]
        raise VaultError(
            f"{plural(len(status['problems']), 'recovery wrap')} "
            f"{'is' if len(status['problems']) == 1 else 'are'} not believed ({first['row']}: "
            f"{first['detail']}); `toolkit-vault check` names them"
        )


@recovery.command(
    "unseal",
    short_help="Re-establish the vault under a new master key from K shares.",
    epilog=epilog(
        "toolkit-vault keys recovery unseal --key-provider file",
        "toolkit-vault keys recovery unseal --key-provider aws-kms --key-id alias/v2",
    ),
)
@provider_flags
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def recovery_unseal(as_json: bool, **flags: Any) -> None:
    """When the master key is lost: type K shares (hidden; one per line on stdin when it is
    not a terminal), and the vault keys are wrapped under a master key of the provider
    named here (made if it holds none), which the home then records. Options of the same
    provider are kept unless a flag changes them: `--key-id` names a new KMS key in place of
    a lost one. Audited."""
    from toolkit_vault.backup.recovery import unseal_vault
    from toolkit_vault.settings import load_settings, target_settings

    provider = flags.pop("key_provider")
    if provider is None:
        raise click.UsageError("name the new master key's provider with --key-provider")
    options = key_options(flags)
    settings = load_settings()
    new = target_settings(settings, provider, options)  # another KMS key id too
    result = unseal_vault(settings, prompt_shares(), new)
    if as_json:
        emit(result)
    else:
        click.echo(
            f"unsealed: {named('vault key', result['vault_keys'])} now wrapped by master key "
            f"{result['master_key']} ({result['provider']}); audited"
        )


def prompt_shares() -> list[str]:
    """K shares: the first says how many its set needs (a hidden prompt on a terminal, one
    per line on stdin otherwise); never from argv."""
    from toolkit_vault.keys.recovery import share_threshold

    shares = [_share(1, None)]
    needed = share_threshold(shares[0])
    return shares + [_share(place, needed) for place in range(2, needed + 1)]


def _share(place: int, needed: int | None) -> str:
    of = f" of {needed}" if needed else ""
    if sys.stdin.isatty():
        return str(click.prompt(f"share {place}{of}", hide_input=True, err=True))
    line = sys.stdin.readline()
    if not line.strip():
        raise VaultError(f"share {place}{of} was not given: nothing was recovered")
    return line.strip()
