"""A call through the whole path leaves its `tool_called` event in the store: the engine's
record reaches the batched call records (not a test's list), its `arguments_hmac` is what
`audit hash` gives for the same arguments, and no argument value or name the vault does
not know is in the trail. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from spec_support import configure, hello, send
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.core.vault import Vault

CANARY = "tkv-canary-call-content-5b1d"
BOTH = ("toolkits", "tools")


def test_a_call_is_recorded_in_the_store_with_the_hmac_audit_hash_gives(
    vault: Vault, tmp_path: Path
) -> None:
    conn, session = hello(vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": str(tmp_path)})
    written = {"path": "notes.txt", "content": CANARY}
    (answer,) = send(
        conn,
        {"type": "tool/call/req", "toolkit_name": "filesystem", "tool_name": "write_file",
         "arguments": written},
    )  # fmt: skip
    assert answer["type"] == "tool/call/resp" and answer["is_error"] is False, answer
    made_up = "x" * 300  # wider than the column: the agent's own text, not recorded
    (refused,) = send(
        conn,
        {"type": "tool/call/req", "toolkit_name": made_up, "tool_name": made_up, "arguments": {}},
    )
    assert refused["details"][0]["reason"] == "unknown_toolkit"

    page = list_events(vault.store, EventFilter(actions=("tool_called",)))
    ok, unknown = sorted(page.events, key=lambda e: e.seq)
    assert (ok.toolkit_name, ok.session_id, ok.details["outcome"]) == (
        "filesystem",
        session,
        "ok",
    )
    assert ok.details["tool"] == "write_file"
    assert ok.details["arguments_hmac"] == vault.upkeep.hash_arguments(written)
    assert unknown.toolkit_name is None and unknown.details.get("tool") is None
    assert unknown.details["outcome"] == "refused"
    trail = json.dumps([e.as_json() for e in page.events])
    assert CANARY not in trail and made_up not in trail
