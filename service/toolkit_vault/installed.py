"""What is installed: the entry points of a group, read once for each state of the import path.

`importlib.metadata.entry_points()` opens every installed distribution's entry_points.txt
(about 10 ms here, more on a longer path), and one command asked for it four times: the
settings check the provider's name, the provider is loaded, `--key-provider`'s choices, the
toolkit registry loads its plugins. A server's later `load_settings` (a rotation or a master
key move followed) asked again. So the answer is kept while `sys.path` names the same
directories with the same modification times: installing or removing a distribution makes
or deletes a dist-info directory, which changes its directory's time (importlib.metadata's
own directory cache relies on the same), and a directory added to the path changes the
list. A dist-info edited in place is not seen until the process starts again. Standard
library only.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from importlib.metadata import EntryPoint, EntryPoints, entry_points

__all__ = ["group"]

_State = tuple[tuple[str, int], ...]

_lock = threading.Lock()
_state: _State = ()
_select: Callable[..., EntryPoints] | None = None  # of every group's, read in one pass
_groups: dict[str, tuple[EntryPoint, ...]] = {}


def _path_state() -> _State:
    """Each directory of the import path (absolute: "" is the working directory) and its
    modification time, -1 where there is none."""
    state = []
    for entry in sys.path:
        where = os.path.abspath(entry) if isinstance(entry, str) else str(entry)
        try:
            state.append((where, os.stat(where).st_mtime_ns))
        except (OSError, ValueError):
            state.append((where, -1))
    return tuple(state)


def group(name: str) -> tuple[EntryPoint, ...]:
    """`importlib.metadata.entry_points(group=name)`, as found when the path last changed."""
    global _state, _select
    now = _path_state()
    with _lock:
        if now != _state or _select is None:
            _state, _select = now, entry_points().select
            _groups.clear()
        found = _groups.get(name)
        if found is None:
            found = _groups[name] = tuple(_select(group=name))
        return found
