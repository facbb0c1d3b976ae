"""Plain-text tables for people at 80 columns, in which nothing is ever cut.

A table that folds or ellipsizes cells to fit the terminal hides exactly what an operator
must type next: an imported toolkit's `#package-0` suffix, a session id, a token's name. So
here a cell is only ever moved, never shortened: columns shrink (the widest first) until a
row fits the terminal, a cell longer than its column runs on and the row continues on the
next line at the columns' own positions, and the last column wraps between words. When not
even the headers fit, every row becomes a list of `header: value` lines.

The width is the terminal's (`COLUMNS` when set, 80 when not a terminal); `--wide` passes
`width=None`: one line per row, everything in full, for grep and awk.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import click

__all__ = ["Column", "Row", "echo_table", "render", "terminal_width"]

GAP = 2
WRAP_FLOOR = 16  # the last column wraps down to this before other columns shrink


@dataclass(frozen=True)
class Column:
    header: str
    fixed: bool = False  # never narrower than its widest cell (times, counts)


@dataclass(frozen=True)
class Row:
    cells: Sequence[str]
    details: Sequence[str] = field(default_factory=tuple)  # lines under the row, indented


def terminal_width() -> int:
    return shutil.get_terminal_size((80, 24)).columns


def _widths(columns: Sequence[Column], rows: Sequence[Row], width: int | None) -> list[int] | None:
    natural = [
        max([len(c.header), *(len(r.cells[i]) for r in rows)]) for i, c in enumerate(columns)
    ]
    if width is None:
        return natural
    floors = [n if c.fixed else len(c.header) for c, n in zip(columns, natural, strict=True)]
    widths = list(natural)
    budget = width - GAP * (len(columns) - 1)
    if not columns[-1].fixed:  # the last column wraps between words: it gives way first
        words = [len(word) for r in rows for word in r.cells[-1].split()]
        floors[-1] = max([floors[-1], *words])
        floor = min(natural[-1], max(floors[-1], WRAP_FLOOR))
        widths[-1] = max(floor, widths[-1] - max(0, sum(widths) - budget))
    while sum(widths) > budget:
        slack = [w - f for w, f in zip(widths, floors, strict=True)]
        widest = max(range(len(widths)), key=lambda i: (slack[i] > 0, widths[i]))
        if slack[widest] <= 0:
            return None  # not even the headers fit: one `header: value` line per cell
        widths[widest] -= 1
    return widths


def _line_of(cells: Sequence[str], widths: Sequence[int], width: int | None) -> list[str]:
    lines: list[str] = []
    line = ""
    position = 0
    for i, cell in enumerate(cells):
        if line and len(line) + GAP > position and any(cells[i:]):  # ran on: continue below
            lines.append(line.rstrip())
            line = ""
        line = line.ljust(position)
        last = i == len(cells) - 1
        room = None if width is None else width - position
        if last and room is not None and len(cell) > room > 0:
            wrapped = textwrap.wrap(cell, room, break_long_words=False, break_on_hyphens=False)
            lines.append(line + wrapped[0])
            lines.extend(" " * position + more for more in wrapped[1:])
            return lines
        line += cell
        position += widths[i] + GAP
    lines.append(line.rstrip())
    return lines


def render(columns: Sequence[Column], rows: Sequence[Row], width: int | None = 80) -> list[str]:
    """The table's lines: aligned when the terminal allows, never a cell cut short."""
    widths = _widths(columns, rows, width)
    if widths is None:
        lines: list[str] = []
        for row in rows:
            pairs = zip(columns, row.cells, strict=True)
            lines.extend(f"{c.header.lower()}: {v}" for c, v in pairs)
            lines.extend(f"    {d}" for d in row.details)
            lines.append("")
        return lines[:-1]
    lines = _line_of([c.header for c in columns], widths, width)
    for row in rows:
        lines.extend(_line_of(row.cells, widths, width))
        lines.extend(f"    {d}" for d in row.details)
    return lines


def echo_table(columns: Sequence[Column], rows: Sequence[Row], *, wide: bool = False) -> None:
    """Print a table on stdout at the terminal's width (or in full with `--wide`)."""
    for line in render(columns, rows, None if wide else terminal_width()):
        click.echo(line)
