"""The suite's log canary scan (issue 48): no secret in any `serve` or `stdio` log.

`conftest` sets `TOOLKIT_VAULT_LOG_COPY` for the whole session: every `serve` and `stdio`
the tests start writes every log record it makes, of every level and every logger (the HTTP
clients' included), after redaction, to a file of its own in that directory
(`toolkit_vault.logs.copy_log`). At the end of the session the controller scans them all
(`scan`) for the test canaries (`tkv-canary`) and for the secrets tests noted there
(`note_secrets`: the test OAuth server's tokens), and fails the run on any. A finding
names the file and line, never the secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["CANARY", "note_secrets", "scan"]

CANARY = "tkv-canary"
LOGS = "*.log"
NOTED = "secrets-*.txt"  # one secret a line, from the tests that know them (not a log)
MIN_NOTED = 8  # shorter noted values would match ordinary text


def note_secrets(directory: str | Path | None, owner: str, values: Iterable[str]) -> None:
    """Add `values` to the secrets the scan looks for (no-op without a directory)."""
    found = [v for v in values if isinstance(v, str) and len(v) >= MIN_NOTED and "\n" not in v]
    if directory is None or not found:
        return
    with (Path(directory) / f"secrets-{owner}.txt").open("a", encoding="utf-8") as noted:
        noted.writelines(value + "\n" for value in found)


def scan(directory: str | Path) -> list[str]:
    """Every log line in `directory` holding a canary or a noted secret, as `file:line:
    what` (what: "tkv-canary", or "a noted secret (from secrets-X.txt)")."""
    root = Path(directory)
    noted: dict[str, str] = {}
    for path in sorted(root.glob(NOTED)):
        for value in path.read_text(encoding="utf-8").splitlines():
            if len(value) >= MIN_NOTED:
                noted.setdefault(value, path.name)
    findings = []
    for path in sorted(root.glob(LOGS)):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if CANARY in line:
                findings.append(f"{path}:{number}: {CANARY}")
            findings += [
                f"{path}:{number}: a noted secret (from {source})"
                for value, source in noted.items()
                if value in line
            ]
    return findings
