"""Sampling profiles of a running server process with py-spy (the `bench` extra).

`record` samples every thread of a process for a few seconds; `top` turns the samples into
the functions with the largest inclusive share: with `gil=True` only the thread holding the
GIL is sampled (where the Python CPU goes), without it every busy thread (where the time
goes, waits on the database and on fsync included).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

__all__ = ["record", "top"]

_WRAPPERS = (  # frames most samples pass through: they say nothing about the cost
    "contextlib.py",
    "runners.py",
    "base_events.py",
    "events.py",
    "threading.py",
    "thread.py",
    "core.py",
    "_compat.py",
    "main.py",
    "server.py",
    "serving.py",
    "shell.py",
    "http_server.py",
    "toolkit-vault",
)


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("scripts/bench: py-spy is missing (the `bench` extra)")
    return found


def record(pid: int, seconds: float, output: Path, *, gil: bool) -> Counter[tuple[str, ...]]:
    """Sample `pid` for `seconds`; returns stack (outermost first) -> samples."""
    command = [_py_spy(), "record", "--pid", str(pid), "--duration", f"{seconds:g}"]
    command += ["--rate", "250", "--format", "raw", "--output", str(output), "--nonblocking"]
    if gil:
        command.append("--gil")
    subprocess.run(command, check=True, capture_output=True, timeout=seconds + 60)
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in output.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(_frame(f) for f in stack.split(";"))] += int(count)
    return stacks


def _frame(raw: str) -> str:
    """`function (path/to/file.py:123)` -> `function (file.py)`."""
    name, _, where = raw.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def top(stacks: Counter[tuple[str, ...]], limit: int = 20) -> list[str]:
    total = sum(stacks.values())
    if not total:
        return ["(no samples)"]
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        for frame in set(stack):
            inclusive[frame] += count
    rows = [
        (count, frame)
        for frame, count in inclusive.items()
        if count < 0.95 * total and not frame.endswith(tuple(f"({w})" for w in _WRAPPERS))
    ]
    rows.sort(reverse=True)
    shown: list[str] = []
    last = -1
    for count, frame in rows:
        if count != last:  # a frame with its caller's very count adds nothing: one of a chain
            shown.append(f"{count / total:6.1%}  {frame}")
        last = count
    return shown[:limit]
