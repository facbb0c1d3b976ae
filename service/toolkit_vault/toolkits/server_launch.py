"""Launching one imported local server (`served`): its process through the sandbox, in a
private directory of its own, its MCP session opened and its tools listed; stopping it;
and what identifies a launch (`digest`: a configure's checked server is found again by
it, `checked_servers`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from toolkit_vault.sandbox import Bind, Confinement, launch
from toolkit_vault.toolkits.checked_servers import launch_digest
from toolkit_vault.toolkits.launches import Built

if TYPE_CHECKING:
    from toolkit_vault.mcp_client import UpstreamHost
    from toolkit_vault.toolkits.server_processes import ServerProcess, Started

__all__ = ["REDACTED", "digest", "partial_redact", "start", "stop_started"]

REDACTED = "[REDACTED]"
log = logging.getLogger(__name__)


class Settings(Protocol):
    """What a launch reads of the process's settings (`served.ServerSettings`)."""

    @property
    def sandbox(self) -> bool: ...
    @property
    def private_root(self) -> Path: ...
    @property
    def read_only(self) -> tuple[Path, ...]: ...
    @property
    def hidden(self) -> tuple[Path, ...]: ...


def start(
    label: str,
    built: Built,
    settings: Settings,
    host: UpstreamHost,
    process: ServerProcess | None,
    timeout: float,
) -> tuple[Started, bool]:
    """Launch the server through the sandbox as `built` says (`launches.build`: a config's
    variables in its environment, secrets there only), open the MCP session and list its
    tools within `timeout` seconds: the session and what removes its private directory,
    and whether it runs confined. Raises, nothing left running. A launch for `process`
    is told to it (one with the sandbox off is audited); one for a check is logged."""
    private = settings.private_root / uuid.uuid4().hex
    settings.private_root.mkdir(mode=0o711, parents=True, exist_ok=True)
    policy = Confinement(
        private_dir=private,
        read_only=tuple(Bind(path) for path in (*settings.read_only, *built.read_only)),
        hidden=settings.hidden,
    )

    def cleanup() -> None:
        shutil.rmtree(private, ignore_errors=True)

    try:
        started = launch(built.argv, built.env, policy, sandbox=settings.sandbox)
        if process is not None:
            process.launched(confined=started.confined)
        elif not started.confined:
            log.warning("imported server %s runs unconfined (the sandbox is off)", label)
        from toolkit_vault.mcp_client import StdioServer  # the SDK loads at a first launch

        server = StdioServer(label, started, partial_redact(set(built.secrets)))
        handle = host.open(server, timeout=timeout)
    except BaseException:
        cleanup()
        raise
    return (handle, cleanup), started.confined


def digest(built: Built, settings: Settings) -> str:
    """The launch digest of `built` under `settings` (`checked_servers.launch_digest`)."""
    binds = (*settings.read_only, *built.read_only)
    return launch_digest(
        built.argv, built.env, binds, (settings.sandbox, settings.private_root, settings.hidden)
    )


def stop_started(started: Started) -> None:
    """End a session and its process group, then remove its private directory: off the
    caller's thread (a stop takes up to a second)."""
    handle, cleanup = started

    def close() -> None:
        try:
            handle.close()
        finally:
            cleanup()

    threading.Thread(target=close, name="mcp-server-stop", daemon=True).start()


def partial_redact(secrets: set[str]) -> Callable[[str], str]:
    """The stderr redaction: each secret value of the server's environment replaced."""
    values = sorted((s for s in secrets if s), key=len, reverse=True)

    def redact(text: str) -> str:
        for value in values:
            text = text.replace(value, REDACTED)
        return text

    return redact
