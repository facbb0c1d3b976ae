"""What a confined process may see and use, said once by its caller and checked here, so
that a mistake (a relative path, a bind over the vault home) fails before anything runs.

Every field is explicit: nothing of the vault's machine is visible unless it is in the
system view (`bubblewrap.py`) or bound here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfinementRefused

__all__ = ["Bind", "Confinement"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class Bind:
    """A host path (`source`) shown inside the sandbox at `target` (the same path unless
    given), for instance a package cache the runtime reads."""

    source: Path
    target: Path | None = None

    @property
    def inside(self) -> Path:
        return self.target if self.target is not None else self.source


@dataclass(frozen=True)
class Confinement:
    """One process's allowance.

    `private_dir` is the caller's directory for this process: the launch creates `home/`
    and `tmp/` in it, the only places the process may write (besides `read_write` binds an
    operator granted). `hidden` are the paths the caller never wants shown (the vault home,
    the database's directory): a bind that contains one, or lies inside one, is refused.
    Limits hold per process tree: `memory_bytes` caps each process's writable private
    memory (RLIMIT_DATA; RLIMIT_AS would count the address space Node reserves for
    WebAssembly, and Node's fetch parses HTTP in WebAssembly: it crashes), `processes`
    the tasks the tree may run at once, `open_files` each process's descriptors,
    `cpu_seconds` (off by default: a server lives for hours) each process's CPU time.
    """

    private_dir: Path
    read_only: tuple[Bind, ...] = ()
    read_write: tuple[Bind, ...] = ()
    hidden: tuple[Path, ...] = ()
    network: bool = True
    memory_bytes: int = 2048 * _MIB
    processes: int = 256
    open_files: int = 1024
    cpu_seconds: int | None = None

    def __post_init__(self) -> None:
        for path in (
            self.private_dir,
            *self.hidden,
            *(bind.source for bind in self.binds),
            *(bind.inside for bind in self.binds),
        ):
            if not Path(path).is_absolute():
                raise ConfinementRefused(f"{path}: a confinement names absolute paths only")
        for bind in self.binds:
            if bind.inside == Path("/"):
                raise ConfinementRefused(f"{bind.source}: cannot be bound over /")
        for name in ("memory_bytes", "processes", "open_files"):
            if getattr(self, name) < 1:
                raise ConfinementRefused(f"{name} must be positive")
        if self.cpu_seconds is not None and self.cpu_seconds < 1:
            raise ConfinementRefused("cpu_seconds must be positive (or None for no limit)")

    @property
    def binds(self) -> tuple[Bind, ...]:
        return (*self.read_only, *self.read_write)

    def check_hidden(self) -> None:
        """Refuse any bind (and the private directory) that would show a hidden path:
        compared after resolving symlinks, so a link to the vault home is caught too."""
        hidden = [_resolved(path) for path in self.hidden]
        for source in (self.private_dir, *(bind.source for bind in self.binds)):
            shown = _resolved(source)
            for secret in hidden:
                if _overlaps(shown, secret):
                    raise ConfinementRefused(
                        f"{source}: would show {secret}, which this launch keeps hidden"
                    )


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents
