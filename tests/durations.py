"""Refresh tests/durations.json from a log of `scripts/test --durations=0`: each test's
setup, call and teardown added, those of a second or more kept (tests/conftest.py hands the
longest out first, so the workers end together)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

LINE = re.compile(r"([\d.]+)s (?:setup|call|teardown)\s+(\S+)")


def main(log: str) -> None:
    took: Counter[str] = Counter()
    for line in Path(log).read_text(encoding="utf-8").splitlines():
        if found := LINE.match(line):
            took[found.group(2)] += float(found.group(1))
    kept = {test: round(seconds, 1) for test, seconds in sorted(took.items()) if seconds >= 1}
    target = Path(__file__).parent / "durations.json"
    target.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{target}: {len(kept)} tests, {sum(kept.values()):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
