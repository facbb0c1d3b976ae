"""`audit list` and `audit tail`: the audit trail for auditors, over `audit.trail`.

Both need no master key (the store alone, like `history`). `list` prints a page of events
oldest first from a cursor; `tail` the newest few, then with `--follow` each event as it is
committed, until Ctrl-C or SIGTERM ends it (exit status 0).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import click

from toolkit_vault.access.principals import list_principals
from toolkit_vault.audit.trail import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    BadFilter,
    EventFilter,
    TrailEvent,
    actions,
    describe,
    follow_events,
    last_position,
    list_events,
    newest_events,
)
from toolkit_vault.bootstrap import open_store
from toolkit_vault.cli.ids import resolve_principal, resolve_session, session_ids, unique_prefixes
from toolkit_vault.cli.shell import STORE_ENV, emit, epilog, guarded, iso_seconds, plural
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings
from toolkit_vault.store.storage import Store
from toolkit_vault.terminal import printable

__all__ = ["audit_list", "audit_tail"]

F = Callable[..., Any]


def _filters(fn: F) -> F:
    """The filters `list` and `tail` share, as options."""
    options = [
        click.option(
            "--action",
            "action",
            multiple=True,
            type=click.Choice(list(actions())),
            metavar="ACTION",
            help="Only this action (repeat for several): token_created, purge, configure...",
        ),
        click.option("--actor", default=None, help="Only events by this actor: name or id."),
        click.option(
            "--session", "session_id", default=None, help="Only this session (id or prefix)."
        ),
        click.option(
            "--principal",
            default=None,
            help="Only events about this principal (name or id): sessions, configs, token.",
        ),
        click.option("--toolkit", default=None, help="Only this toolkit."),
        click.option(
            "--since", default=None, metavar="TIME", help="At or after TIME (epoch or ISO 8601)."
        ),
        click.option("--until", default=None, metavar="TIME", help="Before TIME."),
        click.option(
            "--arguments-hmac",
            default=None,
            metavar="HEX",
            help="Only the tool calls with these arguments (the HMAC `audit hash` prints).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _filter(store: Store, **given: Any) -> EventFilter:
    session, principal = given["session_id"], given["principal"]
    if session is not None:
        session = resolve_session(store, session)
    if principal is not None:
        with suppress(VaultError):  # else a principal only the chain names: the trail looks
            principal = resolve_principal(list_principals(store), principal).principal_id
    return EventFilter(
        actions=tuple(given["action"]),
        actor=given["actor"],
        session=session,
        principal=principal,
        toolkit=given["toolkit"],
        since=given["since"],
        until=given["until"],
        arguments_hmac=given["arguments_hmac"],
    )


@contextmanager
def _as_options() -> Iterator[None]:
    """A filter's error named as the option it came from."""
    try:
        yield
    except BadFilter as exc:
        raise VaultError(f"--{exc.name.replace('_', '-')}: {exc.reason}") from None


@click.command(
    "list",
    short_help="Audit events, oldest first: filters and a cursor.",
    epilog=epilog(
        "toolkit-vault audit list",
        "toolkit-vault audit list --action token_created --action token_revoked",
        "toolkit-vault audit list --principal alice --since 2026-01-31",
        "toolkit-vault audit list --after 1200 --limit 500 --json",
        env=STORE_ENV,
    ),
)
@_filters
@click.option(
    "--after", default=0, type=click.IntRange(min=0), metavar="SEQ", help="Events after SEQ."
)
@click.option(
    "--limit",
    default=DEFAULT_LIMIT,
    show_default=True,
    type=click.IntRange(1, MAX_LIMIT),
    metavar="N",
    help=f"At most this many events (up to {MAX_LIMIT}).",
)
@click.option("--wide", is_flag=True, help="Full session ids, one line per event.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def audit_list(after: int, limit: int, wide: bool, as_json: bool, **given: Any) -> None:
    """Audit events in chain order after a cursor: sequence number, time, action, the
    actor by name, and what the event is about, in words; never a secret.

    Needs no master key. The last line on stderr names the --after that continues when
    more events follow. Listing proves nothing: `audit verify` proves the chain.
    """
    store = open_store(load_settings())
    with _as_options():
        page = list_events(store, _filter(store, **given), after=after, limit=limit)
    if as_json:
        emit(page.as_json())
        return
    shown = {} if wide else unique_prefixes(session_ids(store))
    columns = [Column("SEQ", fixed=True), Column("TIME (UTC)", fixed=True), Column("ACTION")]
    columns += [Column("ACTOR"), Column("EVENT")]
    rows = []
    for e in page.events:
        said = describe(e, page.names.get, lambda s: shown.get(s, s))
        cells = [str(e.seq), iso_seconds(e.ts), e.action, e.actor_name, said]
        rows.append(Row([printable(c) for c in cells]))
    echo_table(columns, rows, wide=wide)
    more = f"; more follow: --after {page.next}" if page.next is not None else ""
    click.echo(plural(len(page.events), "event") + more, err=True)


@click.command(
    "tail",
    short_help="The newest audit events; --follow prints each as it commits.",
    epilog=epilog(
        "toolkit-vault audit tail",
        "toolkit-vault audit tail -n 50 --action purge",
        "toolkit-vault audit tail -n 0 --follow --json >> trail.jsonl",
        env=STORE_ENV,
    ),
)
@_filters
@click.option(
    "-n",
    "--lines",
    default=10,
    show_default=True,
    type=click.IntRange(0, MAX_LIMIT),
    metavar="N",
    help="How many of the newest events to print first.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing events as they commit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@guarded
def audit_tail(lines: int, follow: bool, as_json: bool, **given: Any) -> None:
    """The newest audit events, oldest of them first, one line each: sequence number,
    time, action, actor and what it is about. With --follow, then every matching event as
    it is committed, by any process, until Ctrl-C or SIGTERM (exit status 0).

    Needs no master key. --json prints each event as one line of `audit list --json`'s
    event objects.
    """
    with _stopped_by_signals(follow) as stop, _as_options():
        store = open_store(load_settings())
        filters = _filter(store, **given)
        head = last_position(store, filters)
        if lines:
            page = newest_events(store, filters, before=head + 1, limit=lines)
            _print(page.events[::-1], as_json)
        if follow:
            for batch in follow_events(store, filters, after=head, stop=stop):
                _print(batch, as_json)


def _print(events: list[TrailEvent], as_json: bool) -> None:
    for e in events:
        if as_json:
            click.echo(json.dumps(e.as_json(), separators=(",", ":")))
        else:
            fields = (str(e.seq), iso_seconds(e.ts), e.action, e.actor_name, e.summary)
            click.echo("  ".join(printable(f) for f in fields))


@contextmanager
def _stopped_by_signals(enabled: bool) -> Iterator[threading.Event]:
    """An event that Ctrl-C (SIGINT) or SIGTERM sets (when `enabled`), so following ends
    between two polls, quietly."""
    stop = threading.Event()
    signals = (signal.SIGINT, signal.SIGTERM) if enabled else ()
    previous = {s: signal.getsignal(s) for s in signals}
    for sig in signals:
        signal.signal(sig, lambda _signum, _frame: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
