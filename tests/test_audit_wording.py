"""Every audit action is said in words, naming what it is about; a row edited into
nonsense falls back to the action's name instead of raising."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit_vault.audit.event import TrailEvent
from toolkit_vault.audit.wording import SENTENCES, describe
from toolkit_vault.store.actions import AuditAction

SESSION = "s-5c1f"
# Details as the vault writes them, per action (one example each).
WRITTEN: dict[AuditAction, dict[str, Any]] = {
    AuditAction.CONFIGURE: {"status": "ok", "changed": ["/api_key"]},
    AuditAction.CONFIGURE_REFUSED: {"errors": [{"pointer": "/endpoint", "keyword": "type"}]},
    AuditAction.SESSION_CREATED: {},
    AuditAction.PURGE: {"versions": 2, "toolkits": ["weather"], "unconfigured": ["weather"]},
    AuditAction.INTAKE_REQUESTED: {"missing": ["/api_key"], "expires_at": 1.8e9},
    AuditAction.INTAKE_REFUSED: {"errors": []},
    AuditAction.INTAKE_COMPLETED: {"status": "ok"},
    AuditAction.OAUTH_CONNECTED: {"issuer": "https://as.test", "scope": "read"},
    AuditAction.OAUTH_CALLBACK_REFUSED: {"issuer": "https://as.test", "reason": "mix-up"},
    AuditAction.OAUTH_REFRESHED: {"refresh_token_rotated": True},
    AuditAction.OAUTH_REFRESH_FAILED: {"issuer": "https://as.test", "error": "invalid_grant"},
    AuditAction.OAUTH_DISCONNECTED: {"issuer": "https://as.test"},
    AuditAction.CREDENTIAL_EXPIRING: {"expires_at": 1.8e9},
    AuditAction.TOKEN_CREATED: {"principal_id": "p-1", "name": "alice", "role": "agent"},
    AuditAction.TOKEN_REVOKED: {"principal_id": "p-1"},
    AuditAction.CONSOLE_ROLE_MAPPED: {"claim": "groups", "value": "ops", "role": "operator"},
    AuditAction.CONSOLE_ROLE_UNMAPPED: {"claim": "groups", "value": "ops", "role": "operator"},
    AuditAction.PERSON_SIGNED_IN: {
        "principal_id": "oidc-" + "0" * 32,
        "name": "Ada Lovelace",
        "issuer": "https://id.test",
        "subject": "248289761001",
        "role": "operator",
        "mapped_by": ["groups=ops"],
    },
    AuditAction.PERSON_SIGNED_OUT: {"principal_id": "oidc-" + "0" * 32, "name": "Ada Lovelace"},
    AuditAction.TOOLKIT_IMPORTED: {"secret_fields": ["PORT"]},
    AuditAction.TOOLKIT_REMOVED: {"unconfigured": []},
    AuditAction.TEMPLATE_SET: {"name": "prod", "values": {"endpoint": "https://prod.test"}},
    AuditAction.TEMPLATE_REMOVED: {"name": "prod"},
    AuditAction.CALLS_ANCHORED: {
        "chain": "calls-0123456789abcdef",
        "seq": 120,
        "mac": "00" * 32,
        "why": "time",
    },
    AuditAction.TOOL_CALLED: {
        "tool": "read_file",
        "outcome": "ok",
        "duration_ms": 12.5,
        "arguments_hmac": "3f2a9c1e07b4" + "0" * 52,
    },
    AuditAction.SERVER_UNCONFINED: {"sandbox": "off"},
    AuditAction.ALLOWANCE_SET: {
        "principal_id": "p-1",
        "allowed_toolkits": ["weather"],
        "allowed_tools": [["filesystem", "read_file"]],
    },
    AuditAction.ALLOWANCE_REMOVED: {"principal_id": "p-1"},
    AuditAction.TOOLS_PINNED: {
        "package": "sha256:ab",
        "pins": {"forecast": "0" * 64},
        "digest": "3f2a9c1e07b4" + "0" * 52,
    },
    AuditAction.TOOLS_CHANGED: {
        "package": "sha256:ab",
        "seen": {"forecast": "1" * 64},
        "changed": ["forecast"],
        "added": [],
        "removed": ["alerts"],
    },
    AuditAction.TOOLS_ACCEPTED: {"package": "sha256:ab", "accepted": {"forecast": "1" * 64}},
    AuditAction.MCP_SESSION_ENDED: {
        "mcp_session": "5f0c4e1d",
        "principal_id": "p-1",
        "client": "claude-code 2.1",
    },
    AuditAction.VAULT_INITIALIZED: {"key_id": "vk-1", "master_key": "kek-1"},
    AuditAction.VAULT_KEY_ADDED: {"key_id": "vk-2", "master_key": "kek-1"},
    AuditAction.VAULT_KEY_ROTATED: {"active": "vk-2", "rewrapped": 1},
    AuditAction.VAULT_KEY_RETIRED: {"key_id": "vk-1"},
    AuditAction.INTERNAL_KEY_ADDED: {"name": "fingerprint"},
    AuditAction.MASTER_KEY_ROTATED: {"master_key": "kek-2", "vault_keys": 1},
    AuditAction.MASTER_KEY_RETIRED: {"master_key": "kek-1"},
    AuditAction.MASTER_KEY_MOVED: {
        "from_provider": "file",
        "from_master_keys": ["kek-1"],
        "to_provider": "aws-kms",
        "to_master_key": "arn:aws:kms:eu-west-1:123456789012:key/1",
        "vault_keys": ["vk-1"],
    },
    AuditAction.KEK_ADDED: {"kek_id": "kek-1"},
    AuditAction.KEK_RETIRED: {"kek_id": "kek-1"},
    AuditAction.STATE_AUTHENTICATED: {"signed": {"principals": 3}, "left_unsigned": 0},
    AuditAction.KEY_HIERARCHY_UPGRADED: {"rewrapped": 4, "vault_key": "vk-1"},
    AuditAction.RESTORE_ACCEPTED: {"witness_seq": 9, "database_seq": 7},
    AuditAction.BACKUP_RESTORED: {
        "backup_seq": 7,
        "backup_created_at": 1.8e9,
        "source": "home",
        "witness_seq": 9,
        "over_newer_witness": True,
        "fork": False,
    },
    AuditAction.RECOVERY_INITIALIZED: {
        "set_id": "ab12",
        "shares": 3,
        "threshold": 2,
        "vault_keys": ["vk-1"],
    },
    AuditAction.RECOVERY_UNSEALED: {
        "set_id": "ab12",
        "provider": "file",
        "master_key": "kek-2",
        "vault_keys": ["vk-1"],
    },
}


def event(action: AuditAction, details: dict[str, Any], **fields: Any) -> TrailEvent:
    given: dict[str, Any] = {
        "seq": 1,
        "ts": 1.8e9,
        "action": action.value,
        "actor": "operator",
        "actor_name": "operator",
        "session_id": SESSION,
        "principal_id": "p-1",
        "principal_name": "alice",
        "toolkit_name": "weather",
        "version": 1,
        "details": details,
        "mac": b"\x00" * 32,
        "summary": "",
    }
    return TrailEvent(**{**given, **fields})


def test_every_action_has_its_sentence() -> None:
    assert set(SENTENCES) == set(AuditAction)
    assert set(WRITTEN) == set(AuditAction)  # a new action needs an example here too


@pytest.mark.parametrize("action", list(AuditAction))
def test_each_sentence_is_more_than_the_action_name(action: AuditAction) -> None:
    said = describe(event(action, WRITTEN[action]))
    assert said and said != action.value.replace("_", " ")
    assert "None" not in said, said


def test_template_events_name_their_toolkit_and_template() -> None:
    details = WRITTEN[AuditAction.TEMPLATE_SET]
    assert describe(event(AuditAction.TEMPLATE_SET, details)) == (
        "template prod of toolkit weather set, setting endpoint"
    )
    assert describe(event(AuditAction.TEMPLATE_REMOVED, {"name": "prod"})) == (
        "template prod of toolkit weather removed"
    )


def test_allowance_events_name_the_principal_and_what_it_may_call() -> None:
    details = WRITTEN[AuditAction.ALLOWANCE_SET]
    assert describe(event(AuditAction.ALLOWANCE_SET, details)) == (
        "principal alice narrowed to weather (every tool), filesystem/read_file"
    )
    nothing = {"principal_id": "p-1", "allowed_toolkits": [], "allowed_tools": []}
    assert describe(event(AuditAction.ALLOWANCE_SET, nothing)) == (
        "principal alice narrowed to no tool at all"
    )
    assert describe(event(AuditAction.ALLOWANCE_REMOVED, {"principal_id": "p-1"})) == (
        "principal alice no longer narrowed: it may call every tool configured for it"
    )

    details = WRITTEN[AuditAction.MCP_SESSION_ENDED]
    assert describe(event(AuditAction.MCP_SESSION_ENDED, details)) == (
        "MCP session 5f0c4e1d of alice (claude-code 2.1) ended by an operator: "
        "its next message is refused on every replica"
    )


def test_tool_pin_events_name_the_toolkit_and_its_tools() -> None:
    said = describe(event(AuditAction.TOOLS_CHANGED, WRITTEN[AuditAction.TOOLS_CHANGED]))
    assert said == (
        "tools of weather differ from their pin, withheld until accepted "
        "(changed: forecast; removed: alerts)"
    )
    accepted = describe(event(AuditAction.TOOLS_ACCEPTED, WRITTEN[AuditAction.TOOLS_ACCEPTED]))
    assert accepted == "tools of weather accepted as they are now: forecast"


def test_counts_of_one_are_singular() -> None:
    rotated = event(AuditAction.MASTER_KEY_ROTATED, WRITTEN[AuditAction.MASTER_KEY_ROTATED])
    assert describe(rotated) == "master key rotated to kek-2; 1 vault key rewrapped"
    recovered = event(AuditAction.RECOVERY_UNSEALED, WRITTEN[AuditAction.RECOVERY_UNSEALED])
    assert "1 vault key wrapped under master key kek-2 (file provider)" in describe(recovered)


@pytest.mark.parametrize("action", list(AuditAction))
def test_an_edited_row_falls_back_to_the_action_name(action: AuditAction) -> None:
    nonsense = {key: {"x": object()} for key in WRITTEN[action]} | {"errors": 5, "versions": "x"}
    said = describe(event(action, nonsense, toolkit_name=None, session_id=None, version=None))
    assert isinstance(said, str) and said


def test_a_call_says_its_tool_outcome_and_hash_prefix_only() -> None:
    ok = event(AuditAction.TOOL_CALLED, WRITTEN[AuditAction.TOOL_CALLED], version=3)
    assert describe(ok, session=lambda s: s[:4]) == (
        "called weather/read_file v3 in session s-5c: ok in 12 ms (arguments 3f2a9c1e07b4)"
    )
    refused = {"tool": None, "outcome": "refused", "reason": "not_allowed", "duration_ms": 0.2}
    said = describe(event(AuditAction.TOOL_CALLED, refused, version=None, toolkit_name=None))
    assert said == f"called an unknown toolkit in session {SESSION}: refused (not_allowed) in 0 ms"
    timed_out = {**WRITTEN[AuditAction.TOOL_CALLED], "outcome": "tool_error"}
    assert ": tool error in 12 ms" in describe(event(AuditAction.TOOL_CALLED, timed_out))
    unconfined = event(AuditAction.SERVER_UNCONFINED, {"sandbox": "off"}, version=2)
    assert describe(unconfined) == (
        f"imported server weather v2 in session {SESSION} launched unconfined: the sandbox is off"
    )
