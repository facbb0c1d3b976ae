"""A launch: the command line and environment that start an untrusted process confined
(or, when the operator turned the sandbox off, only with a clean environment and limits),
for any launcher to run: `subprocess.Popen(launch.argv, **launch.popen_kwargs())`, or the
MCP SDK's stdio client given `launch.argv` and `launch.env`.

Limits are set by `prlimit` (util-linux) inside the sandbox, as the last step before the
process itself: the namespaces exist by then, so the process limit counts the tasks of
this sandbox only, not every process of the vault's user. No `preexec_fn` is needed, so a
launcher that does its own fork (the SDK's) confines just as well.

The launcher should start the process in a new session (`start_new_session=True`, which
`popen_kwargs` sets): then killing the process group ends bwrap, whose PID 1 takes the
whole sandbox with it. `--die-with-parent` follows the launching *thread*: launch from a
thread that lives as long as the process (the event loop's), never a short-lived worker.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bubblewrap import HOME_INSIDE, SANDBOX_UID, TMP_INSIDE, bwrap_argv, find_tool
from .environment import clean_environment, unset_inherited
from .errors import ConfinementRefused, SandboxUnavailable
from .policy import Confinement

__all__ = [
    "Launch",
    "confine",
    "launch",
    "sandbox_available",
    "unconfined",
    "unreachable",
    "why_no_sandbox",
]


@dataclass(frozen=True)
class Launch:
    """What to start: `argv` (no secret is ever in it), `env` (the whole environment,
    credentials included: kept out of the repr), `cwd`, and whether it is `confined` (a
    caller audits every launch that is not)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)
    cwd: str
    confined: bool

    def popen_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `subprocess.Popen` besides argv: the clean environment,
        the private home as working directory, and a session (so a process group) of its
        own."""
        return {
            "env": dict(self.env),
            "cwd": self.cwd,
            "start_new_session": True,
            "close_fds": True,
        }


def launch(
    argv: Sequence[str], env: Mapping[str, str], policy: Confinement, *, sandbox: bool = True
) -> Launch:
    """Confined when `sandbox` (the operator's setting, on unless turned off): raises
    SandboxUnavailable rather than fall back to an unconfined process."""
    return confine(argv, env, policy) if sandbox else unconfined(argv, env, policy)


def confine(argv: Sequence[str], env: Mapping[str, str], policy: Confinement) -> Launch:
    """`argv` run in the sandbox with `env` (plus the minimal variables) and nothing else
    of the vault's. Raises SandboxUnavailable when this machine cannot confine, and
    ConfinementRefused when `policy` would show a hidden path or a directory is unsafe."""
    if (reason := why_no_sandbox()) is not None:
        raise SandboxUnavailable(
            f"no sandbox on this machine ({reason}): local servers are refused; "
            "install bubblewrap, or turn the sandbox off"
        )
    _check_command(argv)
    clean = clean_environment(env, home=HOME_INSIDE, tmp=TMP_INSIDE)
    policy.check_hidden()
    root = os.geteuid() == 0
    home, tmp = _private_dirs(policy, owner=SANDBOX_UID if root else None)
    if root:
        for path in (home, *(bind.source for bind in policy.binds)):
            _require_reachable(path)
    prefix = [*_unset(clean), *bwrap_argv(policy, home, tmp)]
    return Launch((*prefix, *_limits(policy), *argv), clean, str(home), confined=True)


def unconfined(argv: Sequence[str], env: Mapping[str, str], policy: Confinement) -> Launch:
    """The operator turned the sandbox off: the process sees what the vault's user sees
    (binds and `hidden` mean nothing), but still starts with the clean environment, in its
    private home, under the limits (counted against the vault's user, not a sandbox)."""
    _check_command(argv)
    home, tmp = policy.private_dir / "home", policy.private_dir / "tmp"
    clean = clean_environment(env, home=str(home), tmp=str(tmp))
    _private_dirs(policy, owner=None)
    return Launch((*_unset(clean), *_limits(policy), *argv), clean, str(home), confined=False)


def sandbox_available() -> bool:
    """True once a trial sandbox, built as a real launch is, ran `true` here: bwrap,
    prlimit (and setpriv for root) are installed and the kernel lets this user make the
    namespaces. Cached: the answer does not change while the vault runs."""
    return why_no_sandbox() is None


@functools.cache
def why_no_sandbox() -> str | None:
    """None when a trial sandbox ran; otherwise what stopped it, for the operator (a
    missing program, or bwrap's own complaint, such as user namespaces being refused)."""
    tools = ["bwrap", "prlimit", "env", "true"] + (["setpriv"] if os.geteuid() == 0 else [])
    missing = [tool for tool in tools if find_tool(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found in the system directories"
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        os.chmod(scratch, 0o711)  # noqa: S103 (others may pass through, not list or read)
        policy = Confinement(private_dir=Path(scratch) / "probe", network=False)
        owner = SANDBOX_UID if os.geteuid() == 0 else None
        home, tmp = _private_dirs(policy, owner=owner)
        argv = [*bwrap_argv(policy, home, tmp), *_limits(policy), "true"]
        try:
            done = subprocess.run(
                argv,
                env=clean_environment({}, home=HOME_INSIDE, tmp=TMP_INSIDE),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"a trial sandbox did not run ({type(error).__name__})"
    if done.returncode != 0:
        complaint = done.stderr.decode(errors="replace").strip().splitlines()
        return f"a trial sandbox failed: {complaint[-1][:200] if complaint else done.returncode}"
    return None


def _check_command(argv: Sequence[str]) -> None:
    if not argv or any(not isinstance(arg, str) or "\0" in arg for arg in argv):
        raise ConfinementRefused("the command must be a non-empty list of text arguments")


def _unset(kept: Mapping[str, str]) -> list[str]:
    env_program = find_tool("env")
    if env_program is None:
        raise SandboxUnavailable("env (coreutils) is missing: the environment cannot be cleaned")
    return unset_inherited(kept, env_program)


def _limits(policy: Confinement) -> list[str]:
    """prlimit's arguments; a core dump is never written (it would hold the process's
    credentials)."""
    prlimit = find_tool("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is missing: limits cannot be set")
    limits = [
        f"--data={policy.memory_bytes}",
        f"--nproc={policy.processes}",
        f"--nofile={policy.open_files}",
        "--core=0",
    ]
    if policy.cpu_seconds is not None:
        limits.append(f"--cpu={policy.cpu_seconds}")
    return [prlimit, *limits, "--"]


def _private_dirs(policy: Confinement, *, owner: int | None) -> tuple[Path, Path]:
    """`home/` and `tmp/` in the private directory, made if missing, refused if any is a
    symlink or not a directory (a link left there must not turn a bind into the vault's
    home); given to `owner` (the sandbox user, when the vault is root)."""
    root = policy.private_dir
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    _require_directory(root)
    if owner is not None:
        os.chmod(root, 0o711)  # noqa: S103 (the sandbox user passes through to its dirs)
    made = []
    for name in ("home", "tmp"):
        path = root / name
        path.mkdir(mode=0o700, exist_ok=True)
        _require_directory(path)
        if owner is not None:
            os.chown(path, owner, owner, follow_symlinks=False)
        made.append(path)
    return made[0], made[1]


def _require_directory(path: Path) -> None:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfinementRefused(f"{path}: a private directory must be a directory, not a link")


def unreachable(paths: Iterable[Path]) -> str | None:
    """Why a root vault's sandbox user could not reach one of `paths` (a directory above it
    closed to others), or None: `serve` says so at start-up, before the first launch that
    binds it is refused. A vault that is not root runs its sandbox as itself: None."""
    if os.geteuid() != 0:
        return None
    for path in paths:
        try:
            _require_reachable(path)
        except ConfinementRefused as refused:
            return str(refused)
        except OSError:
            continue  # not there yet: a launch that binds it says so
    return None


def _require_reachable(path: Path) -> None:
    """As root, bwrap runs as the sandbox user, who must be able to pass through every
    directory above a bound path: say so plainly rather than let bwrap fail."""
    for parent in Path(os.path.realpath(path)).parents:
        info = os.stat(parent)
        if not info.st_mode & stat.S_IXOTH and info.st_uid != SANDBOX_UID:
            raise ConfinementRefused(
                f"{path}: {parent} is closed to the sandbox user (uid {SANDBOX_UID}); "
                "keep private directories and binds under directories others may pass through"
            )
