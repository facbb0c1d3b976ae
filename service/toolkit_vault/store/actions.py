"""The audit chain's event kinds, as one enumeration.

An action is stored in every audit event and signed into its chain link, so each member's
value is that stored string and never changes: renaming a value would break every chain
already written. A `StrEnum` compares equal to the stored text, and `Store` writes its
plain value. Migrations keep the literals they were written with.
"""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["AuditAction"]


@unique
class AuditAction(StrEnum):
    # Configs: a version stored (or refused), a session opened, versions crypto-shredded.
    CONFIGURE = "configure"
    CONFIGURE_REFUSED = "configure_refused"
    SESSION_CREATED = "session_created"
    PURGE = "purge"

    # Intake: a one-time link issued, refused, or its secrets stored.
    INTAKE_REQUESTED = "intake_requested"
    INTAKE_REFUSED = "intake_refused"
    INTAKE_COMPLETED = "intake_completed"

    # OAuth connections: a token set stored by the connect flow, an authorization response
    # refused as another server's (a mix-up), refreshed, refused on refresh (the
    # connection needs a person), revoked on disconnect.
    OAUTH_CONNECTED = "oauth_connected"
    OAUTH_CALLBACK_REFUSED = "oauth_callback_refused"
    OAUTH_REFRESHED = "oauth_refreshed"
    OAUTH_REFRESH_FAILED = "oauth_refresh_failed"
    OAUTH_DISCONNECTED = "oauth_disconnected"

    # A credential whose end a check or the credential told (`core.expiry`) ends soon.
    CREDENTIAL_EXPIRING = "credential_expiring"

    # Principals: bearer tokens.
    TOKEN_CREATED = "token_created"  # noqa: S105 (an event name, not a secret)
    TOKEN_REVOKED = "token_revoked"  # noqa: S105 (an event name, not a secret)

    # Console sign-in through an identity provider (OpenID Connect): an operator's mapping
    # of a claim's value to a console role, kept as these events alone (the verified chain's
    # `ChainState.console_roles` is their one store), and a person's sign-in and sign-out,
    # each with that person as its actor.
    CONSOLE_ROLE_MAPPED = "console_role_mapped"
    CONSOLE_ROLE_UNMAPPED = "console_role_unmapped"
    PERSON_SIGNED_IN = "person_signed_in"
    PERSON_SIGNED_OUT = "person_signed_out"

    # Imported toolkit definitions.
    TOOLKIT_IMPORTED = "toolkit_imported"
    TOOLKIT_REMOVED = "toolkit_removed"

    # Environment templates: an operator's named public values for a toolkit, kept as
    # these events alone (the verified chain's `ChainState.templates` is their one store).
    TEMPLATE_SET = "template_set"
    TEMPLATE_REMOVED = "template_removed"

    # A call of a toolkit's tool, refused ones too (`tools.call_audit`): never a value of
    # its arguments or result, only their HMAC under an audit subkey.
    TOOL_CALLED = "tool_called"
    # An imported local server launched with the sandbox turned off (`core.server_audit`).
    SERVER_UNCONFINED = "server_unconfined"
    # A process's call chain (`store.call_chains`) anchored in the main chain: its id, its
    # last seq and link, so a record deleted or cut off behind it shows in `audit verify`.
    CALLS_ANCHORED = "calls_anchored"
    # Allowances: an operator narrowed a principal to some toolkits and tools (or widened it
    # again), kept as these events alone (the verified chain's `ChainState.allowances`).
    ALLOWANCE_SET = "allowance_set"
    ALLOWANCE_REMOVED = "allowance_removed"
    # An imported server's tools: the first list pinned (per toolkit and definition), a
    # later list's changed or added tools seen (withheld), and an operator's acceptance of
    # them, kept as these events alone (the verified chain's `ChainState.tool_pins`).
    TOOLS_PINNED = "tools_pinned"
    TOOLS_CHANGED = "tools_changed"
    TOOLS_ACCEPTED = "tools_accepted"
    # An operator ended a client's MCP session (`transports.mcp`): kept in the chain
    # (`ChainState.ended_mcp`), so every replica refuses that session's next message.
    MCP_SESSION_ENDED = "mcp_session_ended"

    # Keys: the vault's first vault key, later vault keys, internal keys, master keys.
    VAULT_INITIALIZED = "vault_initialized"
    VAULT_KEY_ADDED = "vault_key_added"
    VAULT_KEY_ROTATED = "vault_key_rotated"
    VAULT_KEY_RETIRED = "vault_key_retired"
    INTERNAL_KEY_ADDED = "internal_key_added"
    MASTER_KEY_ROTATED = "master_key_rotated"
    MASTER_KEY_RETIRED = "master_key_retired"
    # The vault keys moved to another provider's master key, or another key of one
    # (`keys move`): both sides named, never key material.
    MASTER_KEY_MOVED = "master_key_moved"

    # Written by releases before the key hierarchy; still read to reconcile their records.
    KEK_ADDED = "kek_added"
    KEK_RETIRED = "kek_retired"

    # One-time upgrades of a store written by an older release.
    STATE_AUTHENTICATED = "state_authenticated"
    KEY_HIERARCHY_UPGRADED = "key_hierarchy_upgraded"

    # An operator accepted a database behind its witness (`audit accept-restore`).
    RESTORE_ACCEPTED = "restore_accepted"

    # Backups and recovery (`backup`, `restore`, `keys recovery`).
    BACKUP_RESTORED = "backup_restored"
    RECOVERY_INITIALIZED = "recovery_initialized"
    RECOVERY_UNSEALED = "recovery_unsealed"
