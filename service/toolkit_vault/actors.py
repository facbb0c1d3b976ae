"""Who acted, as the audit chain records it when no token says so: a person at the shell.

A command run on the vault's machine authenticates nobody: whoever can read the home and
the master key is the operator. The chain still names them as far as the machine can: the
OS user of the process (from its real uid, not from `$USER`, which the caller sets), and
where given, the name the person asserts (`--actor`, `TOOLKIT_VAULT_ACTOR`), kept apart
and shown as asserted, never as proven. Stored as `shell:<os user>` or
`shell:<os user>:<asserted name>`.
"""

from __future__ import annotations

import os
import pwd

__all__ = ["ACTOR_ENV", "SHELL", "shell_actor", "shell_actor_name"]

ACTOR_ENV = "TOOLKIT_VAULT_ACTOR"
SHELL = "shell:"
_MAX_ASSERTED = 64


def _os_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container): the number
        return f"uid {os.getuid()}"


def shell_actor(asserted: str | None = None) -> str:
    """The actor of a command run at this shell (`asserted` defaults to ACTOR_ENV)."""
    if asserted is None:
        asserted = os.environ.get(ACTOR_ENV)
    name = "".join(c for c in (asserted or "") if c.isprintable()).strip()[:_MAX_ASSERTED]
    return f"{SHELL}{_os_user()}" + (f":{name}" if name else "")


def shell_actor_name(actor: str) -> str | None:
    """How a shell actor reads in the trail ("alice at the shell", or "bob (asserted; at the
    shell as alice)"); None for any other actor."""
    if not actor.startswith(SHELL):
        return None
    user, _, asserted = actor.removeprefix(SHELL).partition(":")
    if asserted:
        return f"{asserted} (asserted; at the shell as {user})"
    return f"{user} at the shell"
