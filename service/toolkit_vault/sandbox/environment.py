"""The environment a confined process starts with: the variables its caller passes (a
server's config, secrets among them) plus a minimal PATH, HOME, TMPDIR and locale, and
nothing inherited from the vault. HOME and TMPDIR always name the private directories, so
a config cannot point the process at the vault's own.

Values travel only in the environment handed to the process, never in its argv: a
command line is readable by every user of the machine (`/proc/<pid>/cmdline`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .errors import ConfinementRefused

__all__ = ["BASE_PATH", "clean_environment", "unset_inherited"]

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_DEFAULTS = {"PATH": BASE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def clean_environment(env: Mapping[str, str], *, home: str, tmp: str) -> dict[str, str]:
    """The whole environment: defaults, then the caller's variables (which may set PATH
    or the locale), then HOME and TMPDIR, which nothing overrides."""
    for name, value in env.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfinementRefused(
                "an environment variable name must match [A-Za-z_][A-Za-z0-9_]*"
            )
        if not isinstance(value, str) or "\0" in value:
            raise ConfinementRefused(
                f"environment variable {name}: the value must be text without NUL"
            )
    return {**_DEFAULTS, **env, "HOME": home, "TMPDIR": tmp}


def unset_inherited(kept: Mapping[str, str], env_program: str) -> list[str]:
    """A command prefix (`env -u NAME ...`) that drops every variable of the vault's that
    is not among `kept`, before anything else runs: a launcher may merge the vault's
    environment into the one it is given (the MCP SDK's stdio client adds HOME, PATH,
    USER, SHELL, TERM and LOGNAME). It runs first, outside the sandbox, because a
    process's starting environment stays readable in its `/proc/<pid>/environ` whatever it
    unsets later, and bwrap's own process is PID 1 inside the sandbox. Names only: no value
    goes on a command line."""
    names = sorted(name for name in os.environ if name not in kept and _NAME.fullmatch(name))
    if not names:
        return []
    return [env_program, *(arg for name in names for arg in ("-u", name))]
