"""Commands for operators and auditors: `keys`, `check`, `history`, `audit`, `purge`.

They open the vault without toolkits (or only its store), so a broken plugin can never
stand between an operator and the keys, the audit log or a purge.
"""

from __future__ import annotations

import sys

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_store
from toolkit_vault.cli.lazy import CommandEntry, LazyCommands
from toolkit_vault.cli.shell import (
    STORE_ENV,
    emit,
    epilog,
    guarded,
    iso_seconds,
    open_for_audit,
    open_for_operators,
    plural,
    progress,
    said_if_behind,
)
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings
from toolkit_vault.terminal import printable

__all__ = ["AUDIT_COMMANDS", "audit", "check", "history_command", "purge_command"]


# -- check (operators) ------------------------------------------------------------


@click.command(
    short_help="Decrypt-verify every stored version; check every row and the chain.",
    epilog=epilog("toolkit-vault check", "toolkit-vault check --full --json"),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@click.option("--full", is_flag=True, help="Every version and event, not only those since.")
@guarded
def check(as_json: bool, full: bool) -> None:
    """Decrypt-verify the stored versions in memory, check every row's MAC, the audit chain
    and the state it vouches for; print counts and names, never a value.

    By default only the versions and events written since the last check (its mark in the
    vault home, MACed under the audit key); --full opens and walks them all.
    """
    auditing = open_for_audit(load_settings())
    with progress("checking", not as_json) as start:
        result = auditing.check(start, full=full)
    if as_json:
        emit(result)
    else:
        since = f" (written since row {result['since_id']})" if result["since_id"] else ""
        if result["mark_refused"]:
            since = f" (all: the last check's mark is not believed: {result['mark_refused']})"
        click.echo(
            f"{result['versions']} versions{since}: {result['intact']} intact, "
            f"{result['failed']} failed, "
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


# -- history, audit verify, purge (auditors and operators) ----------------------------------


@click.command(
    "history",
    short_help="Every config version, with secret fingerprints.",
    epilog=epilog(
        "toolkit-vault history",
        "toolkit-vault history --session 3f2a9c1e --toolkit filesystem",
        "toolkit-vault history --principal my-agent --since 2026-01-31 --json",
        env=STORE_ENV,
    ),
)
@click.option(
    "--session", "session_id", default=None, help="Only this session (id or unique prefix)."
)
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
@click.option("--wide", is_flag=True, help="Full session ids and fingerprints.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def history_command(
    session_id: str | None,
    principal: str | None,
    toolkit: str | None,
    since: str | None,
    wide: bool,
    as_json: bool,
) -> None:
    """Every config version: time, scope, toolkit, version, status, actor, and under it
    each secret's fingerprint.

    Needs no master key. A fingerprint is equal between two versions exactly when that
    secret is unchanged; it reveals nothing else. * marks a fingerprint that differs from
    the previous listed version of the same scope and toolkit. A scope is a session (its
    id) or a principal's own configs (`principal NAME`). The actor is the principal's name
    (the id with --json).
    """
    from toolkit_vault.access.principals import list_principals
    from toolkit_vault.audit.history import history, parse_time
    from toolkit_vault.cli.ids import resolve_session, session_ids, unique_prefixes
    from toolkit_vault.cli.tables import Column, Row, echo_table

    store = open_store(load_settings())
    if session_id is not None:
        session_id = resolve_session(store, session_id)
    since_ts = None if since is None else parse_time(since)
    warning = said_if_behind(store)
    entries = history(store, session_id, toolkit, since_ts, principal)
    if as_json:
        emit({"versions": entries, "witness_warning": warning})
        return
    names = {p.principal_id: p.name for p in list_principals(store)}
    shown = {} if wide else unique_prefixes(session_ids(store))
    columns = [Column("TIME (UTC)", fixed=True), Column("SCOPE"), Column("TOOLKIT")]
    columns += [Column("V"), Column("STATUS"), Column("ACTOR")]
    rows = []
    previous: dict[tuple[str, str], dict[str, str | None]] = {}
    for e in entries:
        key = (e["session_id"], e["toolkit_name"])
        before = previous.get(key, {})
        previous[key] = e["secret_fingerprints"]
        scope = shown.get(e["session_id"], e["session_id"])
        if e["scope"] == "principal":
            owner = e["principal_id"]
            scope = f"principal {names.get(owner, owner)}"
        cells = [
            iso_seconds(e["ts"]),
            printable(scope),
            printable(e["toolkit_name"]),
            f"{e['version']}{' (current)' if e['current'] else ''}",
            e["status"],
            printable(names.get(e["actor"], e["actor"])),
        ]
        secrets = [
            _fingerprint_cell(pointer, fp, before, wide)
            for pointer, fp in sorted(e["secret_fingerprints"].items())
        ]
        rows.append(Row(cells, secrets))
    echo_table(columns, rows, wide=wide)
    click.echo(plural(len(entries), "version"), err=True)


def _fingerprint_cell(
    pointer: str, fp: str | None, before: dict[str, str | None], wide: bool
) -> str:
    changed = "*" if before and before.get(pointer) != fp else ""
    shown = (fp or "purged") if wide else (fp or "purged")[:12]
    return f"{printable(pointer)} {shown}{changed}"


@click.group(short_help="The tamper-evident audit log.")
def audit() -> None:
    """The tamper-evident audit log (an HMAC hash chain)."""


# `audit`'s commands that live elsewhere, imported when looked up (`lazy`), as `main`'s are:
# `audit verify` waits for none of the trail's listing or the hash (issue 53).
# tests/test_cli_startup.py holds each summary equal to the command's own.
AUDIT_COMMANDS = {
    "list": CommandEntry(
        "toolkit_vault.cli.trail", "audit_list", "Audit events, oldest first: filters and a cursor."
    ),
    "tail": CommandEntry(
        "toolkit_vault.cli.trail",
        "audit_tail",
        "The newest audit events; --follow prints each as it commits.",
    ),
    "hash": CommandEntry(
        "toolkit_vault.cli.audit_hash",
        "audit_hash",
        "The arguments_hmac of a call's arguments (JSON on stdin).",
    ),
}
audit.commands = LazyCommands(AUDIT_COMMANDS)


@audit.command(
    "verify",
    short_help="Verify the audit chain and its head.",
    epilog=epilog("toolkit-vault audit verify", "toolkit-vault audit verify --full --json"),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@click.option("--full", is_flag=True, help="Walk every event, not only those since the last run.")
@guarded
def audit_verify(as_json: bool, full: bool) -> None:
    """Verify the audit chain and its head; exit 1 naming the first bad event.

    Also checks that every config version has its `configure` event (and every purged
    one a `purge` event). Needs the master key (the audit key is stored wrapped by it).
    By default it walks the events after the last run's mark (in the vault home, MACed
    under the audit key) and says so; a mark that is not believed makes a full walk,
    said too. --full walks every event: only it proves the events before the mark again.
    """
    report = open_for_audit(load_settings()).verify_audit(full=full)
    if report.witness_warning is not None:
        click.echo(f"warning: {report.witness_warning}", err=True)
    if as_json:
        emit(report.as_json())
    else:
        click.echo(f"{report.verified}/{report.events} events verified; {report.message}")
        for p in report.state_problems:
            click.echo(f"  {p.table} {p.row}: {p.problem} ({p.detail})")
    if report.problem in ("edited", "deleted", "inserted", "truncated") and report.first_bad_seq:
        raise VaultError(f"audit chain broken at event {report.first_bad_seq}: {report.message}")
    if not report.ok:
        raise VaultError(report.message)


@audit.command(
    "accept-restore",
    short_help="Accept a database restored on purpose (audited).",
    epilog=epilog("toolkit-vault audit accept-restore --yes"),
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def audit_accept_restore(yes: bool, as_json: bool) -> None:
    """Accept the database as it is now after restoring an older copy on purpose.

    The vault home keeps a witness of the newest audit head it saw; a database behind it
    (or another one) is refused, since that is also what a replay looks like. This makes
    the database's own head the witness again, once its chain verifies, and records the
    step (both heads) as an audit event. Stop every server first; restart them after.
    """
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("confirm the restore with --yes (stdin is not a tty)")
        if not click.confirm("Accept the database's older audit head as current?", err=True):
            raise VaultError("cancelled; nothing was changed")
    result = open_for_operators(load_settings()).accept_restore(shell_actor())
    if as_json:
        emit(result)
    else:
        click.echo(
            f"accepted: the witness moved from event {result['witness_seq']} to "
            f"{result['database_seq']} (audited)"
        )


@audit.command(
    "export",
    short_help="Replay audit events after a sequence number, verified.",
    epilog=epilog(
        "toolkit-vault audit export --after 0 --json-lines > trail.jsonl",
        "toolkit-vault audit export --after 1200 --limit 500 --json-lines",
    ),
)
@click.option(
    "--after",
    type=click.IntRange(0),
    required=True,
    metavar="SEQ",
    help="The last event the receiver holds (0: from the first).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many events.")
@click.option(
    "--json-lines", is_flag=True, help="One event a line, as the audit devices send them."
)
@guarded
def audit_export(after: int, limit: int | None, json_lines: bool) -> None:
    """Replay the audit events after SEQ, for an audit device's receiver that fell behind.

    Each event is checked against the chain (its link from the one before, the last one
    against the authenticated head) before it is printed; one that does not verify stops
    the export there, exit status 1. Needs the master key, as `audit verify` does.
    """
    from toolkit_vault.audit.export import json_line

    events = open_for_operators(load_settings()).export_audit(after, limit)
    if json_lines:
        out = sys.stdout.buffer
        for record in events:
            out.write(json_line(record))
        out.flush()
        return
    records = list(events)
    last = records[-1]["seq"] if records else after
    emit({"after": after, "last_seq": last, "events": records})


@click.command(
    "purge",
    short_help="Crypto-shred a session's or a principal's stored configs.",
    epilog=epilog(
        "toolkit-vault purge --session 3f2a9c1e",
        "toolkit-vault purge --session 3f2a9c1e --toolkit filesystem --yes",
        "toolkit-vault purge --principal my-agent --yes",
    ),
)
@click.option(
    "--session", "session_id", default=None, help="The session to purge (id or unique prefix)."
)
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
    from toolkit_vault.cli.ids import resolve_session

    vault = open_for_operators(load_settings())
    if session_id is not None:
        session_id = resolve_session(vault.store, session_id)
    scope = f"session {session_id}" if principal is None else f"principal {principal}"
    what = scope + (f", toolkit {toolkit}" if toolkit else "")
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("purge is irreversible: confirm with --yes (stdin is not a tty)")
        if not click.confirm(f"Destroy every stored secret of {what}?", err=True):
            raise VaultError("purge cancelled; nothing was changed")
    if principal is not None:
        report = vault.purge_principal(shell_actor(), principal, toolkit)
    else:
        report = vault.purge(shell_actor(), str(session_id), toolkit)
    if as_json:
        emit(report.as_json())
    else:
        names = ", ".join(report.toolkits) or "none left to purge"
        click.echo(f"purged {plural(report.versions, 'version')} of {what} ({names})")
    if report.files_scrubbed is False:
        click.echo(
            "toolkit-vault: warning: another process kept the SQLite WAL busy; old pages stay "
            "in it until its next checkpoint",
            err=True,
        )
