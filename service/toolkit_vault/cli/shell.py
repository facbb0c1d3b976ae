"""The shell every command shares: one error line, stable JSON, tables and progress bars.

Kept apart from the commands so each command module stays a plain list of commands, and
so the promise "one clear line on stderr, never a traceback" lives in exactly one place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..bootstrap import open_vault
from ..errors import VaultError
from ..registry import ToolkitRegistry
from ..service import Vault
from ..settings import VaultSettings

__all__ = ["emit", "folding_table", "guarded", "iso_seconds", "open_for_operators", "progress"]

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str) -> None:
    click.echo(f"toolkit-vault: error: {message}", err=True)
    sys.exit(1)


def guarded(fn: F) -> F:
    """Turn the vault's errors into one line on stderr and exit status 1."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
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
    or compile schemas, so a broken plugin cannot stop an operator."""
    return open_vault(settings, registry=ToolkitRegistry())


def emit(payload: dict[str, Any]) -> None:
    """Write `--json` output; one writer, so every command's JSON is laid out alike."""
    click.echo(json.dumps(payload, indent=2))


def folding_table(*columns: str) -> Table:
    """A table that folds long cells (ids, times) instead of cutting them off."""
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


@contextlib.contextmanager
def progress(label: str, enabled: bool) -> Iterator[Callable[[int], Callable[[int], None]] | None]:
    """A rich progress bar on stderr; `start(total)` returns the advance function."""
    if not enabled:
        yield None
        return
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
    """A time for a table cell: blank for "never", else ISO 8601 in UTC to the second."""
    return "" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
