"""`toolkit-vault keys`: the key hierarchy for operators (status, rotation, retirement).

Master keys live in the key provider and wrap the vault keys stored in the database, which
wrap every data key; `keys rotate` rotates the first layer, `keys rotate --vault-key` the
second (see SECURITY.md, "Key hierarchy").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import home_providers, open_provider
from toolkit_vault.cli.keyflags import key_options, provider_flags
from toolkit_vault.cli.recovery import named, recovery
from toolkit_vault.cli.shell import (
    emit,
    epilog,
    guarded,
    iso_seconds,
    open_for_operators,
    plural,
    progress,
)
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.admin import key_status, plan_rotation, retire_key
from toolkit_vault.keys.move import MoveReport, move_master_key
from toolkit_vault.keys.rotation import rotate_master_key, rotate_vault_key
from toolkit_vault.settings import VaultSettings, load_settings, target_settings, write_record

__all__ = ["keys"]


@click.group(short_help="Master and vault keys: status, rotation, retirement.")
def keys() -> None:
    """The key hierarchy: master keys (in the key provider) wrap vault keys (in the store),
    which wrap every data key. Status, rotation of either layer, retirement."""


@keys.command(
    "status",
    short_help="Both key layers and what each key wraps.",
    epilog=epilog("toolkit-vault keys status", "toolkit-vault keys status --json"),
)
@click.option("--wide", is_flag=True, help="One line per key, nothing wrapped.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_status(wide: bool, as_json: bool) -> None:
    """Both layers: each master key and the vault keys it wraps; each vault key, active or
    retired, and how many wrapped keys it protects."""
    settings = load_settings()
    vault = open_for_operators(settings)
    status = key_status(vault.store, open_provider(settings))
    if settings.key_move is not None:  # `keys move` interrupted: the home names its target
        status["move_under_way"] = {"provider": settings.key_move[0]}
    if as_json:
        emit(status)
        return
    provider = status["provider"]
    click.echo(f"key provider {provider['name']}: {provider['where']}")
    if settings.key_move is not None:
        click.echo(
            f"  a move to the {settings.key_move[0]} key provider is under way: run "
            "`toolkit-vault keys move` to finish it"
        )
    if not provider["reachable"]:
        click.echo(f"  unreachable: {provider['error']}")
    held = {True: "yes", False: "no (missing)", None: "unknown"}
    masters = [
        Row(
            [
                m["key_id"],
                "yes" if m["current"] else "",
                held[m["in_provider"]],
                ", ".join(m["vault_keys"]) or "-",
            ]
        )
        for m in status["master_keys"]
    ]
    echo_table(
        [Column("MASTER KEY"), Column("CURRENT"), Column("IN PROVIDER"), Column("VAULT KEYS")],
        masters,
        wide=wide,
    )
    click.echo()
    vault_keys = [
        Row(
            [
                v["key_id"],
                "yes" if v["active"] else "",
                str(v["wrapped_keys"]),
                v["master_key"] or "-",
                iso_seconds(v["created_at"]),
                iso_seconds(v["retired_at"]) or "-",
            ]
        )
        for v in status["vault_keys"]
    ]
    # The same columns in the same places whether or not a key was retired: the times come
    # last, so a retirement's time widens only the last column, and the rest fit 80
    # columns with it (a retired key's row, times and all, stays one line).
    columns = [Column("VAULT KEY"), Column("ACTIVE"), Column("WRAPS"), Column("MASTER KEY")]
    columns += [Column("CREATED (UTC)", fixed=True), Column("RETIRED (UTC)", fixed=True)]
    echo_table(columns, vault_keys, wide=wide)


@keys.command(
    "rotate",
    short_help="Rotate the master key (or, --vault-key, the vault key).",
    epilog=epilog(
        "toolkit-vault keys rotate --dry-run",
        "toolkit-vault keys rotate",
        "toolkit-vault keys rotate --vault-key --json",
    ),
)
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
        done = rotate_master_key(vault.store, provider, actor=shell_actor())
        if as_json:
            emit(done.as_json())
        else:
            how = "rotated" if done.rotated_in_provider else "finished the rotation to"
            click.echo(
                f"{how} master key {done.master_key}: "
                f"{named('vault key', done.vault_keys)} rewrapped"
            )
        return
    with progress("rewrapping", not as_json) as start:
        report = rotate_vault_key(
            vault.store,
            provider,
            vault.ring,
            batch_size=batch_size,
            start=start,
            actor=shell_actor(),
        )
    if as_json:
        emit(report.as_json())
    else:
        verb = "resumed rotation to" if report.resumed else "rotated to"
        click.echo(
            f"{verb} vault key {report.primary}: {plural(report.rewrapped, 'data key')} and "
            f"{plural(report.internal_rewrapped, 'internal key')} rewrapped, "
            f"{len(report.failed)} failed"
        )
    if report.failed:
        left = "was left as it is" if len(report.failed) == 1 else "were left as they are"
        raise VaultError(f"{plural(len(report.failed), 'data key')} failed to unwrap and {left}")


def _print_plan(plan: dict[str, Any]) -> None:
    click.echo(
        f"dry run: nothing changed. Key provider {plan['provider']}, current master "
        f"key {plan['master_key']}."
    )
    for key_id, count in plan["wrapped_keys"].items():
        master = plan["vault_keys"][key_id]
        click.echo(
            f"  vault key {key_id}: {plural(count, 'wrapped key')}, under master key {master}"
        )
    if plan["kind"] == "master":
        what = "rotate the master key, then rewrap" if plan["rotates_in_provider"] else "rewrap"
        would = plural(plan["would_rewrap"], "vault key")
        click.echo(f"would {what} {would}; data keys stay as they are")
    else:
        what = "make a new vault key, then rewrap" if plan["new_vault_key"] else "rewrap"
        click.echo(f"would {what} {plural(plan['would_rewrap'], 'wrapped key')}")
    measured = plan["measured"]
    click.echo(
        f"estimate: {plan['estimate_seconds']:.1f} s (measured {measured['rows']} in "
        f"{measured['seconds'] * 1000:.1f} ms)"
    )


@keys.command(
    "retire",
    short_help="Retire a key that nothing is wrapped under any more.",
    epilog=epilog("toolkit-vault keys retire vk-1", "toolkit-vault keys retire kek-1 --json"),
)
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_retire(key_id: str, as_json: bool) -> None:
    """Retire a vault key (vk-N) or a master key that nothing is wrapped under any more.
    A master key is removed from the provider; a vault key's wrapped key is destroyed."""
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = open_provider(settings)
    result = retire_key(vault.store, provider, key_id, actor=shell_actor())
    if as_json:
        emit(result)
    elif result["kind"] == "master":
        click.echo(f"retired master key {key_id} and removed it from {provider.where}")
    else:
        click.echo(f"retired vault key {key_id}")


@keys.command(
    "move",
    short_help="Move the vault to another master key: another provider or KMS key.",
    epilog=epilog(
        "toolkit-vault keys move --key-provider aws-kms --key-id alias/vault-2",
        "toolkit-vault keys move --key-provider file --key-file /safe/keys.json",
        "toolkit-vault keys move",
    ),
)
@provider_flags
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_move(as_json: bool, **flags: Any) -> None:
    """Move the master key (a seal migration): every vault key is rewrapped under the
    master key of the provider named here (made if it holds none), online, then the home
    records it. Options of the same provider are kept unless a flag changes them (another
    KMS key id); another provider takes its flags alone. Audited.

    Resumable: interrupted, run `keys move` alone and it finishes the move the home records.
    """
    settings = load_settings()
    name = flags.pop("key_provider")
    options = key_options(flags)
    if name is None:
        if settings.key_move is None:
            raise click.UsageError("name the new master key's provider with --key-provider")
        name, options = settings.key_move[0], {**settings.key_move[1], **options}
    report = _move(settings, target_settings(settings, name, options))
    if as_json:
        emit(report.as_json())
    elif report.moved:
        click.echo(
            f"moved {named('vault key', report.moved)} from {report.source} master key "
            f"{', '.join(report.source_master_keys)} to {report.target} master key "
            f"{report.master_key}; the home now records it (audited)"
        )
    else:
        click.echo(
            f"every vault key is under {report.target} master key {report.master_key}; "
            "the home now records it"
        )


def _move(settings: VaultSettings, target: VaultSettings) -> MoveReport:
    """`keys.move` on this home: the vault opened through its pin (or a recorded move's
    target), the move recorded in the home before the store changes, the target pinned
    after (`write_record`: one atomic rename each)."""
    vault = open_for_operators(settings)
    if (failure := vault.store.state_failure()) is not None:
        vault.store.close()
        raise VaultError(f"the vault's state is not believed: {failure}")
    provider = open_provider(target)

    def intent() -> None:
        move = (target.key_provider, provider.recorded_options())
        write_record(dataclasses.replace(settings, key_move=move))

    def pin() -> None:
        write_record(dataclasses.replace(target, key_options=provider.recorded_options()))

    try:
        return move_master_key(
            vault.store,
            home_providers(settings),
            provider,
            intent=intent,
            pin=pin,
            actor=shell_actor(),
        )
    finally:
        vault.store.close()


keys.add_command(recovery, "recovery")
