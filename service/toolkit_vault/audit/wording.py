"""The audit trail in words: one sentence per event, from its own fields alone.

Every audit action (`store.actions.AuditAction`) has its sentence here, naming what the
event is about (a toolkit, a template, a session, a principal, a key); a test holds that
none is left out. `describe` never raises, whatever an edited row holds: a sentence that
cannot be said falls back to the action's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toolkit_vault.audit.event import TrailEvent
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.scopes import principal_of

__all__ = ["SENTENCES", "describe"]


def describe(
    event: TrailEvent,
    name: Callable[[str], str | None] = lambda _: None,
    session: Callable[[str], str] = lambda s: s,
) -> str:
    """What the event is about, in one sentence of its own fields (`session` may shorten
    session ids for a table); never raises, whatever an edited row holds."""
    try:
        said = SENTENCES.get(event.action)
        return said(_Words(event, name, session)) if said else event.action.replace("_", " ")
    except (TypeError, ValueError, KeyError, AttributeError):
        return event.action.replace("_", " ")


@dataclass(frozen=True)
class _Words:
    event: TrailEvent
    name: Callable[[str], str | None]
    session: Callable[[str], str]

    def d(self, key: str, default: Any = None) -> Any:
        return self.event.details.get(key, default)

    def who(self, principal_id: Any) -> str:
        text = str(principal_id)
        return self.name(text) or text

    @property
    def toolkit(self) -> str:
        return str(self.event.toolkit_name)

    @property
    def where(self) -> str:
        """`in session S` or `for principal P` (its own configs)."""
        scope = self.event.session_id
        if scope is None:
            return ""
        owner = principal_of(scope)
        if owner is not None:
            return f"for principal {self.who(owner)}"
        return f"in session {self.session(scope)}"

    def fields(self, key: str) -> str:
        items = self.d(key) or []
        return ", ".join(str(i) for i in items)

    def errors(self) -> str:
        found = []
        for item in self.d("errors") or []:
            if isinstance(item, Mapping):
                found.append(f"{item.get('pointer', '')} {item.get('keyword', '')}".strip())
        return ", ".join(found)


def _plural(count: Any, noun: str) -> str:
    """`1 vault key`, `2 vault keys`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _when(epoch: Any) -> str:
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _configure(w: _Words) -> str:
    status, v = w.d("status"), w.event.version
    secrets = w.fields("changed")
    tail = f"; secret fields {secrets}" if secrets else ""
    if status == "error":
        return f"{w.toolkit} v{v} {w.where} failed to initialize (status error; not current)"
    if status == "intake":
        return f"{w.toolkit} v{v} {w.where} waits for a person's intake"
    return f"configured {w.toolkit} v{v} {w.where} (status {status}){tail}"


def _refused(w: _Words) -> str:
    if w.event.toolkit_name is None:
        return f"refused a configure of an unknown toolkit {w.where}".rstrip()
    errors = w.errors()
    why = f": {errors}" if errors else f" ({w.d('reason')})"
    return f"refused an invalid config of {w.toolkit} {w.where}{why}"


def _session(w: _Words) -> str:
    scope = str(w.event.session_id)
    owner = principal_of(scope)
    if owner is not None:
        return f"principal scope of {w.who(owner)} created"
    by = w.event.principal_name
    return f"session {w.session(scope)} opened" + (f" by {by}" if by else "")


def _purge(w: _Words) -> str:
    scope = str(w.event.session_id)
    owner = principal_of(scope)
    what = (
        f"principal {w.who(owner)}'s own configs"
        if owner is not None
        else f"session {w.session(scope)}"
    )
    if w.event.toolkit_name is not None:
        what += f", toolkit {w.toolkit}"
    count = int(w.d("versions", 0))
    text = f"purged {what}: {count} version{'' if count == 1 else 's'} shredded"
    unconfigured = w.fields("unconfigured")
    return text + (f"; {unconfigured} no longer configured" if unconfigured else "")


def _intake_requested(w: _Words) -> str:
    missing = w.fields("missing")
    text = f"intake link for {w.toolkit} {w.where} issued"
    if missing:
        text += f", asking for {missing}"
    if w.d("expires_at") is not None:
        text += f"; expires {_when(w.d('expires_at'))}"
    return text


def _intake_refused(w: _Words) -> str:
    errors = w.errors()
    return f"intake form for {w.toolkit} {w.where} refused" + (f": {errors}" if errors else "")


def _intake_completed(w: _Words) -> str:
    return f"intake for {w.toolkit} {w.where} completed (status {w.d('status')})"


def _oauth_connected(w: _Words) -> str:
    return f"{w.toolkit} {w.where} connected at {w.d('issuer')} (scope {w.d('scope')})"


def _oauth_callback_refused(w: _Words) -> str:
    return (
        f"refused an authorization response for {w.toolkit} {w.where} ({w.d('reason')}): "
        f"not from {w.d('issuer')}, the server the connection was started with; no code "
        "exchanged"
    )


def _oauth_refreshed(w: _Words) -> str:
    rotated = " and rotated its refresh token" if w.d("refresh_token_rotated") else ""
    return f"refreshed the OAuth token of {w.toolkit} v{w.event.version} {w.where}{rotated}"


def _oauth_refresh_failed(w: _Words) -> str:
    return (
        f"{w.d('issuer')} refused to refresh {w.toolkit} {w.where} ({w.d('error')}): "
        "a person must connect again"
    )


def _oauth_disconnected(w: _Words) -> str:
    return f"revoked the OAuth tokens of {w.toolkit} {w.where} at {w.d('issuer')}"


def _token_created(w: _Words) -> str:
    text = f"token created for {w.d('name') or w.who(w.d('principal_id'))} ({w.d('role')})"
    if w.d("expires_at") is not None:
        text += f", expires {_when(w.d('expires_at'))}"
    return text


def _token_revoked(w: _Words) -> str:
    return f"token revoked for {w.event.principal_name or w.who(w.d('principal_id'))}"


def _role_mapped(w: _Words) -> str:
    return (
        f"console role {w.d('role')} given to people whose {w.d('claim')} claim holds "
        f"{w.d('value')}"
    )


def _role_unmapped(w: _Words) -> str:
    return (
        f"console role {w.d('role')} no longer given to people whose {w.d('claim')} claim "
        f"holds {w.d('value')}"
    )


def _person_signed_in(w: _Words) -> str:
    return (
        f"{w.d('name')} signed in to the console as {w.d('role')} through {w.d('issuer')} "
        f"(subject {w.d('subject')}; role from {w.fields('mapped_by')})"
    )


def _overrides(w: _Words) -> str:
    said = []
    for item in w.d("overrides") or []:
        if isinstance(item, Mapping):
            flag = "--secret" if item.get("secret") else "--public"
            said.append(f"{flag} {item.get('field')}")
    return ", ".join(said)


def _imported(w: _Words) -> str:
    text = f"imported toolkit {w.toolkit}"
    if w.d("renamed_from"):
        text += f" (renamed from {w.d('renamed_from')})"
    if w.d("previous_digest"):
        text += ", replacing the earlier import"
    overrides = _overrides(w)
    if overrides:
        text += f" with overrides {overrides}"
    secrets = w.fields("secret_fields")
    text += f"; secret fields {secrets or 'none'}"
    if w.d("secret_argv_allowed"):  # the operator's --allow-secret-argv
        text += f"; allowed on its command line: {w.fields('secret_argv_allowed')}"
    return text


def _removed(w: _Words) -> str:
    count = len(w.d("unconfigured") or [])
    text = f"removed imported toolkit {w.toolkit}"
    return text + (f"; unconfigured in {count} scope{'' if count == 1 else 's'}" if count else "")


def _tool_called(w: _Words) -> str:
    """`called filesystem/read_file v3 in session 5c1f: ok in 12 ms (arguments 3f2a9c1e07b4)`;
    a refusal names its reason. Only the arguments' HMAC shows, never a value."""
    toolkit = w.toolkit if w.event.toolkit_name is not None else "an unknown toolkit"
    tool = f"/{w.d('tool')}" if w.d("tool") is not None else ""
    version = f" v{w.event.version}" if w.event.version is not None else ""
    outcome, took = str(w.d("outcome")), float(w.d("duration_ms", 0))
    said = outcome.replace("_", " ")
    if outcome == "refused":
        said = f"refused ({w.d('reason')})" if w.d("reason") else "refused"
    hashed = str(w.d("arguments_hmac") or "")[:12]
    text = f"called {toolkit}{tool}{version} {w.where}".rstrip()
    text += f": {said} in {took:.0f} ms"
    return text + (f" (arguments {hashed})" if hashed else "")


def _key_added(w: _Words) -> str:
    key = w.d("key_id") or w.d("kek_id")
    under = f" under master key {w.d('master_key')}" if w.d("master_key") else ""
    provider = f" ({w.d('provider')} provider)" if w.d("provider") else ""
    return f"vault key {key} added{under}{provider}"


def _initialized(w: _Words) -> str:
    return "vault initialized: " + _key_added(w)


def _rotated(w: _Words) -> str:
    failed = int(w.d("failed", 0))
    rewrapped = _plural(w.d("rewrapped"), "data key")
    text = f"vault key rotated: {w.d('active')} active, {rewrapped} rewrapped"
    return text + (f", {failed} failed" if failed else "")


def _master_rotated(w: _Words) -> str:
    rewrapped = _plural(w.d("vault_keys"), "vault key")
    return f"master key rotated to {w.d('master_key')}; {rewrapped} rewrapped"


def _master_moved(w: _Words) -> str:
    moved = _plural(len(w.d("vault_keys") or []), "vault key")
    earlier = w.d("from_master_keys") or []
    was = ", ".join(str(k) for k in earlier) if isinstance(earlier, list) else earlier
    return (
        f"master key moved from {w.d('from_provider')} ({was}) to {w.d('to_provider')} "
        f"({w.d('to_master_key')}); {moved} rewrapped"
    )


def _upgraded(w: _Words) -> str:
    return (
        f"key hierarchy upgrade: {_plural(w.d('rewrapped'), 'data key')} moved under vault key "
        f"{w.d('vault_key')}"
    )


def _authenticated(w: _Words) -> str:
    signed = w.d("signed") or {}
    count = sum(int(n) for n in signed.values()) if isinstance(signed, Mapping) else 0
    return f"stored rows signed under the state key: {count}; {w.d('left_unsigned')} left unsigned"


def _restore(w: _Words) -> str:
    return (
        f"restore accepted: the witness moved from event {w.d('witness_seq')} "
        f"to {w.d('database_seq')}"
    )


def _template_set(w: _Words) -> str:
    fields = ", ".join(str(f) for f in w.d("values") or {})
    text = f"template {w.d('name')} of toolkit {w.toolkit} set"
    return text + (f", setting {fields}" if fields else "")


def _allowance_set(w: _Words) -> str:
    whole = [f"{t} (every tool)" for t in w.d("allowed_toolkits") or []]
    single = ["/".join(str(name) for name in pair) for pair in w.d("allowed_tools") or []]
    who = w.event.principal_name or w.who(w.d("principal_id"))
    return f"principal {who} narrowed to {', '.join(whole + single) or 'no tool at all'}"


def _allowance_removed(w: _Words) -> str:
    who = w.event.principal_name or w.who(w.d("principal_id"))
    return f"principal {who} no longer narrowed: it may call every tool configured for it"


def _tool_names(value: Any) -> str:
    return ", ".join(str(name) for name in value) if isinstance(value, Mapping | list) else ""


def _tools_pinned(w: _Words) -> str:
    return (
        f"tools of {w.toolkit} pinned at first sight: {_tool_names(w.d('pins')) or 'none'} "
        f"(pin {str(w.d('digest'))[:12]})"
    )


def _tools_changed(w: _Words) -> str:
    said = [
        f"{word}: {_tool_names(w.d(word))}"
        for word in ("changed", "added", "removed")
        if _tool_names(w.d(word))
    ]
    said_all = "; ".join(said)
    return f"tools of {w.toolkit} differ from their pin, withheld until accepted ({said_all})"


def _tools_accepted(w: _Words) -> str:
    return f"tools of {w.toolkit} accepted as they are now: {_tool_names(w.d('accepted'))}"


def _mcp_session_ended(w: _Words) -> str:
    who = w.event.principal_name or (w.d("principal_id") and w.who(w.d("principal_id")))
    of = f" of {who}" if who else ""  # unknown where the End landed: another replica held it
    client = f" ({w.d('client')})" if w.d("client") else ""
    return (
        f"MCP session {w.d('mcp_session')}{of}{client} ended by an operator: "
        "its next message is refused on every replica"
    )


def _backup_restored(w: _Words) -> str:
    seq = w.d("backup_seq")
    ends = f"its chain ends at event {seq}" if seq is not None else "its chain is empty"
    text = f"backup made {_when(w.d('backup_created_at'))} restored ({ends})"
    if w.d("fork"):
        text += "; a fork of the chain the vault home witnessed"
    elif w.d("over_newer_witness"):
        text += f"; the witness had reached event {w.d('witness_seq')}"
    return text


def _recovery_initialized(w: _Words) -> str:
    covered = _plural(len(w.d("vault_keys") or []), "vault key")
    return (
        f"recovery shares made (set {w.d('set_id')}): any {w.d('threshold')} of "
        f"{w.d('shares')} open {covered}"
    )


def _recovery_unsealed(w: _Words) -> str:
    moved = _plural(len(w.d("vault_keys") or []), "vault key")
    return (
        f"vault unsealed from recovery shares (set {w.d('set_id')}): {moved} wrapped under "
        f"master key {w.d('master_key')} ({w.d('provider')} provider)"
    )


SENTENCES: dict[str, Callable[[_Words], str]] = {
    AuditAction.CONFIGURE: _configure,
    AuditAction.CONFIGURE_REFUSED: _refused,
    AuditAction.SESSION_CREATED: _session,
    AuditAction.PURGE: _purge,
    AuditAction.INTAKE_REQUESTED: _intake_requested,
    AuditAction.INTAKE_REFUSED: _intake_refused,
    AuditAction.INTAKE_COMPLETED: _intake_completed,
    AuditAction.OAUTH_CONNECTED: _oauth_connected,
    AuditAction.OAUTH_CALLBACK_REFUSED: _oauth_callback_refused,
    AuditAction.OAUTH_REFRESHED: _oauth_refreshed,
    AuditAction.OAUTH_REFRESH_FAILED: _oauth_refresh_failed,
    AuditAction.OAUTH_DISCONNECTED: _oauth_disconnected,
    AuditAction.CREDENTIAL_EXPIRING: lambda w: (
        f"the credential of {w.toolkit} v{w.event.version} {w.where} ends at "
        f"{_when(w.d('expires_at'))}"
    ),
    AuditAction.TOKEN_CREATED: _token_created,
    AuditAction.TOKEN_REVOKED: _token_revoked,
    AuditAction.CONSOLE_ROLE_MAPPED: _role_mapped,
    AuditAction.CONSOLE_ROLE_UNMAPPED: _role_unmapped,
    AuditAction.PERSON_SIGNED_IN: _person_signed_in,
    AuditAction.PERSON_SIGNED_OUT: lambda w: f"{w.d('name')} signed out of the console",
    AuditAction.TOOLKIT_IMPORTED: _imported,
    AuditAction.TOOLKIT_REMOVED: _removed,
    AuditAction.TEMPLATE_SET: _template_set,
    AuditAction.TEMPLATE_REMOVED: lambda w: (
        f"template {w.d('name')} of toolkit {w.toolkit} removed"
    ),
    AuditAction.TOOL_CALLED: _tool_called,
    AuditAction.SERVER_UNCONFINED: lambda w: (
        f"imported server {w.toolkit} v{w.event.version} {w.where} launched unconfined: "
        "the sandbox is off"
    ).replace("  ", " "),
    AuditAction.CALLS_ANCHORED: lambda w: (
        f"call chain {w.d('chain')} anchored at record {w.d('seq')} ({w.d('why')})"
    ),
    AuditAction.ALLOWANCE_SET: _allowance_set,
    AuditAction.ALLOWANCE_REMOVED: _allowance_removed,
    AuditAction.TOOLS_PINNED: _tools_pinned,
    AuditAction.TOOLS_CHANGED: _tools_changed,
    AuditAction.TOOLS_ACCEPTED: _tools_accepted,
    AuditAction.MCP_SESSION_ENDED: _mcp_session_ended,
    AuditAction.VAULT_INITIALIZED: _initialized,
    AuditAction.VAULT_KEY_ADDED: _key_added,
    AuditAction.VAULT_KEY_ROTATED: _rotated,
    AuditAction.VAULT_KEY_RETIRED: lambda w: f"vault key {w.d('key_id')} retired",
    AuditAction.INTERNAL_KEY_ADDED: lambda w: f"internal {w.d('name')} key added",
    AuditAction.MASTER_KEY_ROTATED: _master_rotated,
    AuditAction.MASTER_KEY_RETIRED: lambda w: f"master key {w.d('master_key')} retired",
    AuditAction.MASTER_KEY_MOVED: _master_moved,
    AuditAction.KEK_ADDED: lambda w: f"master key {w.d('kek_id')} added",
    AuditAction.KEK_RETIRED: lambda w: f"master key {w.d('kek_id')} retired",
    AuditAction.STATE_AUTHENTICATED: _authenticated,
    AuditAction.KEY_HIERARCHY_UPGRADED: _upgraded,
    AuditAction.RESTORE_ACCEPTED: _restore,
    AuditAction.BACKUP_RESTORED: _backup_restored,
    AuditAction.RECOVERY_INITIALIZED: _recovery_initialized,
    AuditAction.RECOVERY_UNSEALED: _recovery_unsealed,
}
