"""Label values that cannot grow without bound.

Every series a label value opens stays in the process (and in Prometheus) for good, so a
label that took whatever it was given would let an agent grow the server's memory and the
operator's storage with names it makes up. Outcomes, transports and message types come
from fixed sets (`fixed`); toolkit and tool names are the only free ones, and they are
admitted up to a cap, then counted together under `OTHER`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

__all__ = ["NAME_SHAPE", "OTHER", "PREFIX", "TYPE_SHAPE", "BoundedNames", "fixed"]

PREFIX = "toolkit_vault"  # every metric's name starts so
OTHER = "other"
# A toolkit's or a tool's name as the registry and MCP's tool names allow it; anything else
# (a path, a sentence, a value pasted where a name goes) is counted as OTHER.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
# A message type (`toolkit/list/req`) or an MCP method (`tools/call`).
TYPE_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./\-]{0,63}")


def fixed(value: str, allowed: frozenset[str]) -> str:
    """`value` if it is one of `allowed`, else OTHER."""
    return value if value in allowed else OTHER


class BoundedNames:
    """Names admitted in the order first seen, at most `cap` of them; the rest are OTHER."""

    def __init__(
        self, cap: int, preset: Iterable[str] = (), shape: re.Pattern[str] | None = NAME_SHAPE
    ) -> None:
        if cap < 1:
            raise ValueError("a cap of at least one name")
        self.cap, self.shape = cap, shape
        self._admitted: set[str] = set()
        self._lock = threading.Lock()
        for name in preset:
            self.admit(name)

    def admit(self, name: str) -> str:
        """`name` as a label value: itself while it fits the shape and the cap, else OTHER."""
        if name in self._admitted:
            return name
        if self.shape is not None and not self.shape.fullmatch(name):
            return OTHER
        with self._lock:
            if len(self._admitted) >= self.cap:
                return OTHER
            self._admitted.add(name)
        return name

    def __len__(self) -> int:
        return len(self._admitted)
