"""The suite's log canary scan (issue 48) catches what it is for: a process that logs a
canary, at any level, is named by file and line (the secret itself never shown); and the
log copy it reads changes nothing on the process's own stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from log_scan import note_secrets, scan

LEAKING = """
import logging, sys
from toolkit_vault.logs import configure_logging, copy_log, hold_library_loggers
if sys.argv[1] == "serve":
    configure_logging("INFO")
else:
    hold_library_loggers()
copy_log(sys.argv[1])
logging.getLogger("toolkit_vault.probe").debug("debug line with %s", "tkv-canary-probe-d3b1")
logging.getLogger("httpx").debug("GET /v1/me?key=%s", sys.argv[2])  # if it were not held
logging.getLogger("toolkit_vault.probe").debug("debug line with %s", sys.argv[2])
logging.getLogger("toolkit_vault.probe").info("an info line")
logging.getLogger("toolkit_vault.probe").warning("a warning")
"""


def leak(command: str, directory: Path, noted: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLKIT_VAULT_LOG_COPY": str(directory)}
    return subprocess.run(
        [sys.executable, "-c", LEAKING, command, noted],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


def test_a_process_that_logs_a_canary_is_caught(tmp_path: Path) -> None:
    noted = "oauth-token-5f0c2a9e71"
    note_secrets(tmp_path, "oauth-test", [noted])
    for command in ("serve", "stdio"):
        done = leak(command, tmp_path, noted)
        assert "tkv-canary" not in done.stderr and noted not in done.stderr  # stderr as without
        assert "a warning" in done.stderr  # the copy: `serve` INFO and up, `stdio` WARNING
        assert ("an info line" in done.stderr) == (command == "serve")
    findings = scan(tmp_path)
    assert len(findings) == 4, findings
    assert {f.rsplit(": ", 1)[1] for f in findings} == {
        "tkv-canary", "a noted secret (from secrets-oauth-test.txt)"
    }  # fmt: skip
    for finding in findings:
        path, line = finding.split(":")[:2]
        assert Path(path).name.startswith(("serve-", "stdio-")) and int(line) >= 1
        assert "probe-d3b1" not in finding and noted not in finding  # never the secret


def test_a_clean_directory_has_no_finding(tmp_path: Path) -> None:
    (tmp_path / "serve-1.log").write_text('{"message": "request"}\n')
    note_secrets(tmp_path, "none", ["short", "a-long-noted-secret"])
    assert scan(tmp_path) == []


def test_a_log_copy_that_cannot_be_written_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env |= {"TOOLKIT_VAULT_LOG_COPY": str(tmp_path / "absent"), "TOOLKIT_VAULT_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "toolkit-vault"), "stdio"],
        env=env, input="", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "toolkit-vault: error: TOOLKIT_VAULT_LOG_COPY: cannot write the log copy: "
        "No such file or directory"
    ]
