"""The status file each vault process writes beside its servers' private directories
(`TOOLKIT_VAULT_SERVERS_DIR`), so `toolkits show`, run as a process of its own, can say
what `serve` (or `mcp`, or `stdio`) runs: each server's state, scope, version, restarts
and counts. Never a value; readable by the vault's user only; a dead process's file is
passed over.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["STATUS_PREFIX", "other_states", "server_line", "write_status"]

STATUS_PREFIX = "status-"
log = logging.getLogger(__name__)


def write_status(where: Path, shown: Sequence[Mapping[str, Any]]) -> None:
    """Replace this process's file with `shown` (removed when it holds nothing)."""
    path = where / f"{STATUS_PREFIX}{os.getpid()}.json"
    try:
        where.mkdir(mode=0o711, parents=True, exist_ok=True)
        if not shown:
            path.unlink(missing_ok=True)
            return
        partial = path.with_suffix(f".{threading.get_ident()}.tmp")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": os.getpid(), "servers": list(shown)}, out)
        os.replace(partial, path)
    except OSError as exc:
        log.debug("the servers' status file was not written (%s)", type(exc).__name__)


def other_states(where: Path) -> list[dict[str, Any]]:
    """The servers the other live vault processes of this user wrote, each with its
    `vault_pid`."""
    found: list[dict[str, Any]] = []
    if not where.is_dir():
        return found
    for path in sorted(where.glob(f"{STATUS_PREFIX}*.json")):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(path.read_text())
            pid = int(data["pid"])
            if pid != os.getpid() and _alive(pid):
                shown = [s for s in data["servers"] if isinstance(s, dict)]
                found += [{**s, "vault_pid": pid} for s in shown]
    return found


def server_line(state: Mapping[str, Any]) -> str:
    """One server's state in words: `running for session 5c1f2a9e v3 (2 instances)`."""
    scope = str(state.get("scope", ""))
    owner = scope.removeprefix("principal:") if scope.startswith("principal:") else None
    where = f"for principal {owner}" if owner is not None else f"for session {scope[:8]}"
    text = f"{state.get('state')} {where} v{state.get('version')}"
    if state.get("reason"):
        text += f": {state['reason']}"
    if state.get("restarts"):
        text += f" ({state['restarts']} restarts)"
    return text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
