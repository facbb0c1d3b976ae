"""The two ways a launch is refused, told apart because a caller answers them differently:
an unavailable sandbox is the machine's state (an operator installs bubblewrap or turns the
sandbox off), a refused confinement is the caller's mistake (a bind that would show the
vault's own files). Messages name paths and settings, never an environment value."""

from __future__ import annotations

__all__ = ["ConfinementRefused", "SandboxError", "SandboxUnavailable"]


class SandboxError(Exception):
    """A process was not launched; nothing was started."""


class SandboxUnavailable(SandboxError):
    """This machine cannot confine a process (no bubblewrap, or user namespaces refused),
    and the operator has not turned the sandbox off: local servers are refused rather than
    run with the vault's view of the machine."""


class ConfinementRefused(SandboxError):
    """The confinement asked for is unsafe or malformed: a bind that would show a path the
    caller keeps hidden, a relative path, a private directory that is a symlink, an
    environment variable name that cannot be one."""
