"""The sandbox: launching an untrusted process (an imported MCP server, a toolkit's
command) with only the filesystem binds, resource limits and clean environment it is
given, and nothing else of the vault's. A leaf: it knows nothing of keys, the store,
sessions or toolkits; whatever a process may see (a credential in its environment, a
directory) is passed in by its caller, and the process gets nothing by inheritance.

A caller says what a process may see (`Confinement`), gets a `Launch` (argv, environment,
working directory) from `launch`/`confine`, and starts it with any launcher. Without a
sandbox on the machine, `confine` raises `SandboxUnavailable`; only the operator's
setting (`launch(..., sandbox=False)`) starts an unconfined process.

May import: nothing of `toolkit_vault` (the standard library, and the packages that
confine a process); everything above may import it.
"""

from .bubblewrap import HOME_INSIDE
from .errors import ConfinementRefused, SandboxError, SandboxUnavailable
from .launch import (
    Launch,
    confine,
    launch,
    sandbox_available,
    unconfined,
    unreachable,
    why_no_sandbox,
)
from .policy import Bind, Confinement

__all__ = [
    "HOME_INSIDE",
    "Bind",
    "Confinement",
    "ConfinementRefused",
    "Launch",
    "SandboxError",
    "SandboxUnavailable",
    "confine",
    "launch",
    "sandbox_available",
    "unconfined",
    "unreachable",
    "why_no_sandbox",
]
