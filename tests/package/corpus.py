"""The corpus of real, published MCP metadata in tests/fixtures/mcp (sources: SOURCES.md),
and the classification table over it.

Run `python tests/package/corpus.py` for the table: how many configurable fields of the
corpus are secret and public, by reason.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

from toolkit_package.importers import ImportResult, import_metadata

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "mcp"
REGISTRY = sorted((CORPUS / "registry").glob("*.json"))
BUNDLES = sorted((CORPUS / "bundles").rglob("*.json"))
CLIENTS = sorted((CORPUS / "clients").rglob("*.json"))
MAX_BYTES = 16 << 20


def load(path: Path) -> ImportResult:
    return import_metadata(path.read_bytes(), max_bytes=MAX_BYTES)


def corpus() -> Iterator[tuple[Path, ImportResult]]:
    for path in [*REGISTRY, *BUNDLES, *CLIENTS]:
        yield path, load(path)


def rule(reason: str) -> str:
    """The rule of a reason, without its detail: "credential name: token" -> "credential name"."""
    return reason.split(" (", 1)[0].split(":", 1)[0]


def table() -> tuple[collections.Counter[tuple[bool, str]], int]:
    counts: collections.Counter[tuple[bool, str]] = collections.Counter()
    total = 0
    for _, result in corpus():
        for server in result.servers:
            for item in server.configurable:
                counts[(item.secret, rule(item.reason))] += 1
                total += 1
    return counts, total


def render() -> str:
    counts, total = table()
    secret = sum(n for (s, _), n in counts.items() if s)
    lines = [
        f"{total} configurable fields in the corpus: {secret} secret, {total - secret} public",
        "",
        "| mark | reason | fields |",
        "|---|---|---:|",
    ]
    for (is_secret, reason), n in sorted(counts.items(), key=lambda kv: (not kv[0][0], -kv[1])):
        lines.append(f"| {'secret' if is_secret else 'public'} | {reason} | {n} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
