"""Two `toolkit-vault serve` processes on one PostgreSQL act as one vault under load (issue 42).

A short run of the replicas soak (`benchmarks/replicas.py`, which `scripts/bench --only
replicas` runs for a minute): real server processes, agents spread over both on HTTP and
WebSockets, mixed configure, list and resume from several principals. Meanwhile a token
revoked through process A must be refused by process B from one second after A answered
(every probe sent later is refused, its open WebSocket too), a first configure and a purge
through A show in B's next list, and an import by the CLI in both processes' next lists.
At the end: no error, no lost write (the history holds every acknowledged configure, and
each session's current version decrypts to the secret its last acknowledged configure
sent), `audit verify` and `check` pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECONDS = 3  # of load; the side checks run inside it and may stretch it on a busy machine
CLIENTS = 6  # three principals, two clients each


def _soak(database_url: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    command = [sys.executable, "-m", "benchmarks.replicas", "--database-url", database_url]
    command += ["--seconds", str(SECONDS), "--clients", str(CLIENTS)]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the soak did not finish: {done.stderr[-3000:]}"
    found: dict[str, object] = json.loads(lines[-1])
    print(json.dumps(found, indent=1))
    return found


@pytest.mark.postgres
def test_two_processes_on_one_postgresql_act_as_one_vault_under_load(
    fresh_postgres_url: str,
) -> None:
    """One soak, all the assertions (it takes tens of seconds with its set-up)."""
    summary = _soak(fresh_postgres_url)
    # the load, spread over both processes, without an error
    assert summary["errors"] == {}
    per_process = summary["per_process"]
    assert isinstance(per_process, list) and all(rate > 0 for rate in per_process)
    assert isinstance(summary["sessions"], int) and summary["sessions"] >= CLIENTS
    # no write lost: all in the history, and each session's current one is its last
    assert summary["acknowledged"] == summary["stored"]
    assert (summary["lost"], summary["unacknowledged_stored"]) == (0, 0)
    assert summary["stale_sessions"] == 0
    # a token made on A works on B; revoked on A, B refuses it from a second after A answered
    assert summary["token_created_on_a_works_on_b"] is True
    assert isinstance(summary["probes_after_bound"], int) and summary["probes_after_bound"] >= 1
    assert summary["accepted_after_bound"] == 0, summary["revoked_refused_after_s"]
    assert summary["revoked_refused_after_s"] is not None
    assert summary["websocket_refused"] is True
    # a purge on A, an import by the CLI and a configure on A are seen by B
    assert summary["configure_seen_by_next_list"] is True
    assert summary["purge_seen_by_next_list"] is True
    assert summary["import_seen_by_next_lists"] is True
    assert summary["push_relayed_after_s"] is not None
    # the chain verifies and check passes
    assert summary["audit_verifies"] is True
    assert summary["check_passes"] is True, summary["check_problems"]
