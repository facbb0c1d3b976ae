"""What is installed: the entry points of every distribution, read once per process.

`importlib.metadata.entry_points(group=...)` reads every distribution's metadata on each
call, and a command asked for its groups several times (the key providers twice, the
toolkit plugins once): about 10 ms each on a venv of 170 distributions, in every CLI
command (issue 53). One scan now serves every group. It is keyed on `sys.path`, so a path
added later (a test's plugin directory) is scanned afresh; a distribution installed into
an already scanned directory while the process runs is seen by the next process.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import EntryPoints, entry_points

__all__ = ["installed_entry_points"]


def installed_entry_points(group: str) -> EntryPoints:
    """The entry points of `group`, as `importlib.metadata.entry_points(group=group)`."""
    return _scan(tuple(sys.path)).get(group, EntryPoints(()))


@functools.lru_cache(maxsize=4)
def _scan(path: tuple[str, ...]) -> dict[str, EntryPoints]:
    """Every group's entry points on this `sys.path` (the argument is the cache's key)."""
    scanned = entry_points()
    return {group: scanned.select(group=group) for group in scanned.groups}
