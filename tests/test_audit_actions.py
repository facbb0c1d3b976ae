"""Audit actions are one enumeration: its values are the strings stored in (and signed into)
the chain, and no module spells one as a literal of its own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from toolkit_vault.store.actions import AuditAction

SOURCE = Path(__file__).resolve().parents[1] / "service" / "toolkit_vault"
DEFINED_IN = SOURCE / "store" / "actions.py"
# The command line names its commands with words that are also actions (`purge`); it never
# reads or writes audit events itself, only through core.
NAMES_ONLY = SOURCE / "cli"

# Stored in every audit event and covered by its link's MAC: a changed value breaks every
# chain already written, so this list only ever grows.
STORED = {
    "configure",
    "configure_refused",
    "session_created",
    "purge",
    "intake_requested",
    "intake_refused",
    "intake_completed",
    "oauth_connected",
    "oauth_callback_refused",
    "oauth_refreshed",
    "oauth_refresh_failed",
    "oauth_disconnected",
    "credential_expiring",
    "token_created",
    "token_revoked",
    "console_role_mapped",
    "console_role_unmapped",
    "person_signed_in",
    "person_signed_out",
    "toolkit_imported",
    "toolkit_removed",
    "template_set",
    "template_removed",
    "tool_called",
    "server_unconfined",
    "calls_anchored",
    "allowance_set",
    "allowance_removed",
    "tools_pinned",
    "tools_changed",
    "tools_accepted",
    "mcp_session_ended",
    "vault_initialized",
    "vault_key_added",
    "vault_key_rotated",
    "vault_key_retired",
    "internal_key_added",
    "master_key_rotated",
    "master_key_retired",
    "master_key_moved",
    "kek_added",
    "kek_retired",
    "state_authenticated",
    "key_hierarchy_upgraded",
    "restore_accepted",
    "backup_restored",
    "recovery_initialized",
    "recovery_unsealed",
}


def test_values_are_the_stored_strings_each_once() -> None:
    values = [member.value for member in AuditAction]
    assert len(values) == len(set(values))
    assert set(values) == STORED
    assert all(type(str(member)) is str and str(member) == member.value for member in AuditAction)


def _string_literals(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every string constant but the entries of `__all__`, which name functions that share
    an action's text (`purge`, `state_authenticated`)."""
    names: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            names.update(id(inner) for inner in ast.walk(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in names:
            yield node


def test_no_action_is_spelled_as_a_literal_outside_the_enum() -> None:
    values = {member.value for member in AuditAction}
    found = [
        f"{path.relative_to(SOURCE)}:{node.lineno}: {node.value!r}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path != DEFINED_IN and NAMES_ONLY not in path.parents
        for node in _string_literals(ast.parse(path.read_text(encoding="utf-8")))
        if node.value in values
    ]
    assert not found, "use AuditAction instead of these literals:\n" + "\n".join(found)


def test_the_scan_finds_a_literal() -> None:
    tree = ast.parse('__all__ = ["purge"]\nstore.audit(conn, AuditDraft(actor, "purge"))\n')
    assert [node.value for node in _string_literals(tree)] == ["purge"]
