"""Eight `toolkit-vault stdio` processes configuring at once, on SQLite and PostgreSQL.

Four processes share one (session, toolkit), two share another session across two
toolkits, two work alone. Every configure is released at the same moment. Afterwards every
answered configure is stored exactly once (found by a public marker), versions of each
(session, toolkit) run 1..n without a gap, the current pointer is the last live version,
every refusal is audited, the audit chain verifies, every version decrypts, and no caller
ever saw "database is locked" (or any other error it did not ask for).
tests/test_storage.py covers threads on one Store; tests/test_rotation.py one writer during a
rotation.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adversarial_support import ConnectionChannel, audit_actions, line
from click.testing import CliRunner
from sqlalchemy import select

from cli_support import spawn_cli
from toolkit_vault.cli import main
from toolkit_vault.core.vault import Vault
from toolkit_vault.keys.version_check import check_store
from toolkit_vault.store.models import ConfigVersion, CurrentConfig

PER_PROCESS = 12
CANARY = "tkv-canary-concurrency-4a7b"


def _requests(proc: int, toolkits: list[str], root: Path) -> list[tuple[str, dict[str, Any]]]:
    """(marker, request): markers are public values that identify each stored version
    (for filesystem, a directory under `root`, made here: its root_dir must exist)."""
    out = []
    for n in range(PER_PROCESS):
        toolkit = toolkits[n % len(toolkits)]
        marker = f"p{proc}-n{n}"
        if toolkit == "filesystem":
            (root / marker).mkdir(parents=True)
            config: dict[str, Any] = {"root_dir": str(root / marker)}
        else:
            config = {"endpoint": f"https://{marker}.test", "api_key": f"{CANARY}-{marker}"}
            config["mode"] = "fail" if n % 5 == 4 else "partial" if n % 7 == 6 else "ok"
        if n == 3:  # refused: nothing stored, only its configure_refused event
            config = {"root_dir": 7} if toolkit == "filesystem" else {"endpoint": marker}
            marker = ""
        request = {"type": "toolkit/configure/req", "id": marker or f"refused-{proc}"}
        out.append((marker, {**request, "toolkit_name": toolkit, "config": config}))
    return out


def _marker(row: Any) -> str:
    public = json.loads(row.public_config)
    where = public.get("endpoint") or public["root_dir"]
    return str(where).removeprefix("https://").removesuffix(".test").rsplit("/", 1)[-1]


def test_eight_processes_configure_without_losing_a_write(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    shared_a = ConnectionChannel(vault).session_id
    shared_b = ConnectionChannel(vault).session_id
    plan: list[tuple[str | None, list[str]]] = [
        *[(shared_a, ["secretive"])] * 4,
        *[(shared_b, ["filesystem", "secretive"])] * 2,
        *[(None, ["secretive", "filesystem"])] * 2,
    ]
    procs = []
    for session, _ in plan:  # start all, and wait until each has its session open
        proc = spawn_cli(  # forked (cli_support): concurrent writers, not start-ups
            ["stdio"],
            cli_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({**hello, **({"session_id": session} if session else {})}))
        proc.stdin.write("\n")
        proc.stdin.flush()
        procs.append(proc)
    sessions = []
    for proc in procs:
        assert proc.stdout is not None
        response = json.loads(proc.stdout.readline())
        assert response["type"] == "handshake/resp", response
        sessions.append(response["session_id"])
    assert sessions[:6] == [shared_a] * 4 + [shared_b] * 2

    requests = [_requests(i, toolkits, tmp_path / "roots") for i, (_, toolkits) in enumerate(plan)]
    with ThreadPoolExecutor(len(procs)) as pool:  # released together
        outputs = list(
            pool.map(
                lambda job: job[0].communicate(
                    "".join(line(r).decode() + "\n" for _, r in job[1]), timeout=300
                ),
                zip(procs, requests, strict=True),
            )
        )

    accepted: dict[str, tuple[str, str, str]] = {}  # marker -> (session, toolkit, status)
    refused = 0
    for proc, session, sent, (stdout, stderr) in zip(
        procs, sessions, requests, outputs, strict=True
    ):
        assert proc.returncode == 0, stderr
        for text in (stdout, stderr):
            assert "database is locked" not in text and "concurrent writers" not in text
            assert "Traceback" not in text and CANARY not in text
        answers = [json.loads(out) for out in stdout.splitlines()]
        replies = [a for a in answers if a["type"] != "toolkit/status/event"]
        assert len(replies) == len(sent)
        for (marker, request), reply in zip(sent, replies, strict=True):
            if not marker:
                assert (reply["type"], reply["code"]) == ("error", "RUNTIME_ERROR"), reply
                refused += 1
                continue
            assert reply["type"] == "toolkit/configure/resp", reply
            assert reply["req_id"] == marker
            accepted[marker] = (session, request["toolkit_name"], reply["status"])

    with vault.store.engine.connect() as db:
        rows = db.execute(select(ConfigVersion).order_by(ConfigVersion.id)).all()
        pointers = {
            (p.session_id, p.toolkit_name): p.version for p in db.execute(select(CurrentConfig))
        }
    stored = Counter(_marker(row) for row in rows)
    assert stored == Counter(list(accepted))  # every answered configure stored, exactly once
    by_pair: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rows:
        assert accepted[_marker(row)] == (row.session_id, row.toolkit_name, row.status)
        by_pair[(row.session_id, row.toolkit_name)].append(row)
    assert len(by_pair) == 1 + 2 + 2 * 2  # shared a: 1 pair; shared b: 2; alone: 2 each
    for pair, versions in by_pair.items():
        numbers = sorted(row.version for row in versions)
        assert numbers == list(range(1, len(numbers) + 1)), pair  # contiguous
        live = [row.version for row in versions if row.status in ("ok", "partial")]
        assert pointers.get(pair) == (max(live) if live else None), pair

    actions = Counter(audit_actions(vault))
    assert actions["configure"] == len(rows)
    assert actions["configure_refused"] == refused == len(procs)
    verified = CliRunner().invoke(main, ["audit", "verify", "--json"])
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["ok"] is True
    checked = check_store(vault.store, vault.ring_for)
    assert checked["failed"] == 0
    assert checked["intact"] == sum(1 for row in rows if row.wrapped_dek is not None)
