"""The shell every command shares: one error line, stable JSON, tables and progress bars.

Kept apart from the commands so each command module stays a plain list of commands, and
so the promise "one clear line on stderr, never a traceback" lives in exactly one place.
`--help` and `version` import this module too, so it imports nothing heavy at the top: the
vault only when a command opens it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from toolkit_vault.errors import VaultError

if TYPE_CHECKING:
    from toolkit_vault.core.auditing import Auditing
    from toolkit_vault.core.vault import Vault
    from toolkit_vault.settings import VaultSettings
    from toolkit_vault.store.storage import Store

__all__ = [
    "EXIT_STATUS",
    "emit",
    "epilog",
    "guarded",
    "iso_seconds",
    "open_for_audit",
    "open_for_operators",
    "plural",
    "progress",
    "said_if_behind",
]

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str) -> None:
    click.echo(f"toolkit-vault: error: {message}", err=True)
    sys.exit(1)


def guarded(fn: F) -> F:
    """Turn the vault's errors into one line on stderr and exit status 1 (click's own usage
    errors and aborts pass through: the main group reports those, exit status 2 and 1)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.Abort, BrokenPipeError):
            raise  # click reports these (a closed pipe quietly, as `| head` expects)
        except VaultError as exc:
            _fail(exc.message)
        except Exception as exc:  # never a traceback: it could carry more than it should
            logging.getLogger(__package__).debug("unexpected error", exc_info=True)
            _fail(f"unexpected {type(exc).__name__}; nothing further was changed")

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper  # type: ignore[return-value]


def open_for_operators(settings: VaultSettings) -> Vault:
    """The vault without toolkits: key, audit, purge and token commands never load plugins
    or compile schemas, so a broken plugin cannot stop an operator; nor do they launch a
    server, so the MCP SDK is not imported."""
    from toolkit_vault.bootstrap import open_vault
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    return open_vault(settings, registry=ToolkitRegistry(), current=False, launches=False)


def open_for_audit(settings: VaultSettings) -> Auditing:
    """What `audit verify` and `check` need, opened as `open_for_operators` opens the vault
    (its keys, a store that cannot be believed too), without the toolkits or the vault
    that serves them: their import was a third of an incremental run (issue 53)."""
    from toolkit_vault.bootstrap import open_auditing

    return open_auditing(settings)


def said_if_behind(store: Store) -> str | None:
    """`Store.behind_witness`, said on stderr: a key-less command cannot verify what it
    shows, but it does not show a rolled-back database without a word. The same text is
    its `--json` output's `witness_warning`."""
    warning = store.behind_witness()
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    return warning


def emit(payload: dict[str, Any]) -> None:
    """Write `--json` output; one writer, so every command's JSON is laid out alike."""
    click.echo(json.dumps(payload, indent=2))


@contextlib.contextmanager
def progress(label: str, enabled: bool) -> Iterator[Callable[[int], Callable[[int], None]] | None]:
    """A rich progress bar on stderr; `start(total)` returns the advance function. Only on
    a terminal: piped or captured, a bar would leave a stray blank line and escape codes."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console  # only here: every other command starts faster
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:

        def start(total: int) -> Callable[[int], None]:
            task = bar.add_task(label, total=total)
            return lambda n: bar.advance(task, n)

        yield start


def iso_seconds(epoch: float | None) -> str:
    """The one time format of every table: ISO 8601 in UTC to the second, with `Z` (the
    `--json` times carry milliseconds); blank for "never"."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 version`, `2 versions`, `0 versions`."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


ENVIRONMENT = {
    "TOOLKIT_VAULT_HOME": "the vault home (default ./var)",
    "TOOLKIT_VAULT_DATABASE_URL": "the database (default SQLite in the home)",
    "TOOLKIT_VAULT_KEY_PROVIDER": "keyring, file or env (default: init's choice)",
    "TOOLKIT_VAULT_MASTER_KEYS": "the key document, for the env key provider",
    "TOOLKIT_VAULT_ACTOR": "your name in the audit events (asserted)",
}
# The further variables a running `serve` reads, listed in its help after the ones above
SERVED_ENVIRONMENT = {
    "TOOLKIT_VAULT_PKCS11_PIN": "the token's PIN, for the pkcs11 key provider",
    "TOOLKIT_VAULT_AUDIT_DEVICES": 'audit devices, comma-separated, or "none"',
    "TOOLKIT_VAULT_AUDIT_FAIL_CLOSED": "true: refuse a write no audit device took",
    "TOOLKIT_VAULT_FILESYSTEM_ROOTS": "the roots the filesystem toolkit may use",
    "TOOLKIT_VAULT_VERIFY_ALLOW": "CIDRs a credential check may reach too",
    "TOOLKIT_VAULT_EXPIRY_REMINDER_DAYS": "days ahead a credential's end is reminded",
    "TOOLKIT_VAULT_LOG_COPY": "DIR: every log record copied to a file there",
    "TOOLKIT_VAULT_OIDC_ISSUER": "the identity provider people sign in through",
    "TOOLKIT_VAULT_OIDC_CLIENT_ID": "the vault's client id at that provider",
    "TOOLKIT_VAULT_OIDC_CLIENT_SECRET": "its client secret (a confidential client)",
    "TOOLKIT_VAULT_OIDC_CLIENT_SECRET_FILE": "a 0600 file holding that secret instead",
    "TOOLKIT_VAULT_OIDC_SCOPES": "scopes asked for (default: openid profile email)",
    "TOOLKIT_VAULT_OIDC_SESSION_MINUTES": "a person's console session (default 15)",
    "TOOLKIT_VAULT_CALL_RATE": "tool calls a second per agent (50; off)",
    "TOOLKIT_VAULT_CALL_BURST": "an agent's burst of calls (twice the rate)",
    "TOOLKIT_VAULT_CALL_CONCURRENCY": "calls at once per toolkit instance (8; off)",
    "TOOLKIT_VAULT_TOOL_DEADLINE": "seconds a tool call may take (default 30)",
    "TOOLKIT_VAULT_TOOL_DEADLINES": "per toolkit: NAME=SECONDS,NAME=SECONDS",
    "TOOLKIT_VAULT_METRICS": "off: no /metrics (on by default)",
    "TOOLKIT_VAULT_METRICS_LISTEN": "loopback HOST:PORT: /metrics there, no token",
    "TOOLKIT_VAULT_OTEL_TRACES": "on: OpenTelemetry traces (the otel extra)",
    "TOOLKIT_VAULT_SANDBOX": "off: imported servers run unconfined (warned)",
    "TOOLKIT_VAULT_SERVERS_DIR": "imported servers' private directories",
    "TOOLKIT_VAULT_SERVER_BINDS": "DIR:DIR: what imported servers may read",
    "TOOLKIT_VAULT_RUN_SERVERS": "off: imported servers' configs only stored",
    "TOOLKIT_VAULT_SERVER_IDLE": "seconds an unused local server runs on (600)",
    "TOOLKIT_VAULT_MAX_SERVERS": "local servers running at once (32); more: busy",
    "TOOLKIT_VAULT_PACKAGES": "DIR:DIR: installed packages imported servers run",
    "TOOLKIT_VAULT_PACKAGE_RUNNERS": "on: npx/uvx may fetch a package not installed",
    "TOOLKIT_VAULT_CALL_ANCHOR_S": "seconds between call chain anchors (5)",
    "TOOLKIT_VAULT_CALL_ANCHOR_RECORDS": "call records between anchors (10000)",
    "TOOLKIT_VAULT_CHECKPOINT_EVENTS": "audit events between checkpoints (10000)",
}
STORE_ENV = ("TOOLKIT_VAULT_HOME", "TOOLKIT_VAULT_DATABASE_URL")
KEY_ENV = (*STORE_ENV, "TOOLKIT_VAULT_KEY_PROVIDER", "TOOLKIT_VAULT_MASTER_KEYS")
# Everything `serve` reads (tests/test_cli_conventions.py holds it to the code).
SERVE_ENV = (*KEY_ENV, *SERVED_ENVIRONMENT)
_NAME_COLUMN = len("TOOLKIT_VAULT_DATABASE_URL")  # a longer name gets a line of its own
EXIT_STATUS = "Exit status: 0 ok, 1 failure (one line on stderr), 2 usage error."


def epilog(*examples: str, env: tuple[str, ...] = KEY_ENV) -> str:
    """The end of a command's `--help`: examples, the variables it reads, exit statuses.
    (`\\b` keeps click from rewrapping a paragraph.)"""
    parts = ["\b\nExamples:\n" + "\n".join(f"  {example}" for example in examples)]
    if env:
        width = min(max(len(name) for name in env), _NAME_COLUMN)
        said = {**ENVIRONMENT, **SERVED_ENVIRONMENT}
        lines = "\n".join(
            f"  {name.ljust(width)}  {said[name]}"
            if len(name) <= width
            else f"  {name}\n  {' ' * width}  {said[name]}"
            for name in env
        )
        parts.append("\b\nEnvironment:\n" + lines)
    parts.append(EXIT_STATUS)
    return "\n\n".join(parts)
