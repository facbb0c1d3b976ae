"""``toolkit-package-inspect``: public MCP metadata in on stdin, one bounded JSON report out.

Reads at most 1 MiB (one byte more is read only to detect excess), writes one report of at
most 256 KiB. Exit 0: parsed, possibly with diagnostics. Exit 2: refused (the input, or a
report that would exceed its bound: refused rather than cut), with one line on stderr and
nothing on stdout. Exit 1: the report could not be written.

The report holds the exact SHA-256 of the input, server counts, diagnostics, and per server its
name, strategy, transport kind, roles, tool names and configuration *field names*. It never
holds an executable, argument or configuration value: no command, args, env or header values,
defaults or fixed values, and no URL at all (a URL is a configuration value and may carry
credentials in its user info, path or query). Names and diagnostic scopes remain untrusted
public source text. The command opens no file, runs no command and touches no network.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, BinaryIO, TextIO

from toolkit_package.imported import ImportRefused, ImportResult
from toolkit_package.importers import import_metadata
from toolkit_package.jsonbound import MAX_INPUT_BYTES

__all__ = ["MAX_INPUT_BYTES", "MAX_REPORT_BYTES", "build_report", "inspect_bytes", "main", "run"]

MAX_REPORT_BYTES = 256 << 10
_PROG = "toolkit-package-inspect"
USAGE = f"""usage: {_PROG} < input.json > report.json

Reads public MCP metadata on stdin (at most {MAX_INPUT_BYTES >> 20} MiB): a registry server.json,
a registry listing or a JSON list of server.json, an MCPB/DXT bundle manifest.json, a Claude
Desktop or VS Code config (JSONC) or a VS Code settings.json. Writes one JSON report (at most
{MAX_REPORT_BYTES >> 10} KiB): the input's SHA-256, its format, and per server the name, strategy,
transport, roles, tools and configuration fields, each marked secret or public with the
reason. Never a value, a command, an argument or a URL. Opens no file, runs nothing, touches
no network.

exit 0: a report was written (it may list skipped servers and diagnostics)
exit 1: the report could not be written
exit 2: refused (not JSON, unknown format, a bound exceeded), one line on stderr

options: -h, --help  show this text and exit
"""


def build_report(result: ImportResult) -> dict[str, Any]:
    return {
        "input_sha256": result.input_sha256,
        "format": result.format,
        "accepted_servers": len(result.servers),
        "skipped_servers": result.skipped,
        "skipped": [
            {"name": s.name, "code": s.code, "scope": s.scope, "message": s.message}
            for s in result.skipped_servers
        ],
        "diagnostics": [
            {"code": d.code, "scope": d.scope, "message": d.message} for d in result.diagnostics
        ],
        "servers": [
            {
                "name": server.name,
                "strategy": server.strategy.value,
                "transport": server.transport,
                "roles": list(server.roles),
                "tools": list(server.tools),
                "configuration_fields": [
                    {
                        "name": item.name,
                        "secret": item.secret,
                        "required": item.required,
                        "kind": item.kind,
                        "in_argv": item.in_argv,
                        "reason": item.reason,
                    }
                    for item in server.configurable
                ],
            }
            for server in result.servers
        ],
    }


def inspect_bytes(data: bytes) -> bytes:
    """The whole command minus I/O: the encoded report, or ``ImportRefused`` (nothing else)."""
    if len(data) > MAX_INPUT_BYTES:
        raise ImportRefused("input_too_large", f"input exceeds {MAX_INPUT_BYTES} bytes")
    report = build_report(import_metadata(data))
    encoded = (json.dumps(report, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
    if len(encoded) > MAX_REPORT_BYTES:
        raise ImportRefused("report_too_large", f"report would exceed {MAX_REPORT_BYTES} bytes")
    return encoded


def _say(stderr: TextIO | None, line: str) -> None:
    try:
        if stderr is not None:
            stderr.write(f"{_PROG}: {line}\n")
            stderr.flush()
    except (OSError, ValueError):
        return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def run(stdin: BinaryIO | None, stdout_fd: int | None, stderr: TextIO | None) -> int:
    """Read, inspect, write. Output goes straight to the descriptor so nothing stays buffered
    for the interpreter to flush (and fail on) after the exit code is decided."""
    try:
        if stdin is None:
            raise ImportRefused("no_input", "stdin is closed")
        report = inspect_bytes(stdin.read(MAX_INPUT_BYTES + 1))
    except ImportRefused as exc:
        _say(stderr, f"refused: {exc.code}: {exc.message}")
        return 2
    except Exception as exc:
        _say(stderr, f"refused: internal error ({type(exc).__name__})")
        return 2
    try:
        if stdout_fd is None:
            raise OSError("stdout is closed")
        _write_all(stdout_fd, report)
    except OSError as exc:
        _say(stderr, f"output failure: {exc.strerror or 'stdout is closed'}")
        return 1
    return 0


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno() if sys.stdout is not None else None
    except (OSError, ValueError, AttributeError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        if args in (["-h"], ["--help"]):
            sys.stdout.write(USAGE)
            return 0
        _say(sys.stderr, f"unknown argument {args[0][:40]!r}; it reads stdin only (see --help)")
        return 2
    try:
        stdin = sys.stdin.buffer if sys.stdin is not None else None
        return run(stdin, _stdout_fd(), sys.stderr)
    except Exception as exc:
        _say(sys.stderr, f"refused: internal error ({type(exc).__name__})")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
