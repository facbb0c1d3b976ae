"""The sandbox itself: a bubblewrap (`bwrap`) command line that starts a process in new
user, PID, IPC, UTS, cgroup and (with the network off) network namespaces, on an empty root
with only the system view below, its private home and /tmp, and its caller's binds.

Why bubblewrap: it is the unprivileged sandbox Flatpak runs untrusted applications in, a
small setuid-free C program in Debian, and it builds the whole view from its arguments, so
what a process sees is one list read in one place. A container runtime would need a daemon
and root; seccomp-only tools do not hide files.

Each choice below keeps something of the vault's out of reach:
- an empty root: the vault home, the database files and the caller's working directory
  exist only if bound (and `Confinement.hidden` refuses binds that would show them); the
  root and /dev are read-only, so only the private directories take writes;
- a new PID namespace and a fresh /proc: the vault's processes, and other sandboxes', are
  not in /proc at all, so their `environ` (credentials) cannot be opened;
- `--die-with-parent`: if the process that launched bwrap dies, the sandbox's PID 1 is
  killed and the kernel kills everything in its namespace, double-forked children too;
- `--new-session`: the process cannot push keystrokes into a terminal of the vault's;
- `--disable-userns`: it cannot make user namespaces of its own (kernel attack surface);
- when the vault runs as root, the sandbox runs as `nobody` (setpriv): root is exempt from
  the process limit, and any way out of the namespaces would otherwise land as root.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .policy import Confinement

__all__ = [
    "HOME_INSIDE",
    "SANDBOX_UID",
    "TMP_INSIDE",
    "bwrap_argv",
    "find_tool",
    "system_view",
]

HOME_INSIDE = "/home/sandbox"
TMP_INSIDE = "/tmp"  # noqa: S108 (inside the sandbox: the private tmp/ bound there)
SANDBOX_UID = 65534  # nobody: used only when the vault itself runs as root
_SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
_TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Read-only, and only what name resolution, TLS and the C library need.
_ETC_VIEW = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/mime.types",
)


def find_tool(name: str) -> str | None:
    """A system program by name, looked up in the system directories only (never the
    vault's PATH, which a user may have pointed anywhere)."""
    return shutil.which(name, path=_SYSTEM_PATH)


def system_view() -> list[str]:
    """bwrap arguments for the machine's programs and libraries: /usr read-only, the
    top-level directories as the links or read-only directories they are here, the /etc
    files above, a fresh /proc and a minimal /dev."""
    view = ["--ro-bind", "/usr", "/usr"]
    for top in _TOP_LEVEL:
        if os.path.islink(top):
            view += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            view += ["--ro-bind", top, top]
    for path in _ETC_VIEW:
        view += ["--ro-bind-try", path, path]
    return [*view, "--proc", "/proc", "--dev", "/dev"]


def bwrap_argv(policy: Confinement, home: Path, tmp: Path) -> list[str]:
    """The command line up to (and including) its `--`: confinement for `policy`, with the
    private `home` and `tmp` directories bound read-write at HOME_INSIDE and /tmp."""
    bwrap = find_tool("bwrap")
    assert bwrap is not None  # launch.confine checked sandbox_available()
    argv: list[str] = []
    if os.geteuid() == 0:
        setpriv = find_tool("setpriv")
        assert setpriv is not None
        uid = str(SANDBOX_UID)
        argv += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    argv += [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--disable-userns"]
    if not policy.network:
        argv += ["--unshare-net"]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    argv += system_view()
    argv += ["--bind", str(home), HOME_INSIDE, "--bind", str(tmp), TMP_INSIDE]
    for bind in policy.read_only:
        argv += ["--ro-bind", str(bind.source), str(bind.inside)]
    for bind in policy.read_write:
        argv += ["--bind", str(bind.source), str(bind.inside)]
    # The root and /dev are tmpfs made by bwrap: read-only, so a process cannot write
    # anywhere but its private directories, nor fill memory through a tmpfs.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", HOME_INSIDE]
    return [*argv, "--"]
