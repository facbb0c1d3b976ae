"""Which console role a person signing in through the identity provider gets: an operator's
mappings from a claim's value (`groups` = `vault-operators`) to a role, `operator` or
`auditor` (agents are programs, never console users).

A mapping is kept as audit events alone (`console_role_mapped`, `console_role_unmapped`),
like templates: the verified chain is its store, so every process reads the same mappings
from its authenticated `ChainState`, an edited or deleted event breaks the chain instead of
granting a role, and every change has its actor and time.

A claim matches when it is that string, or a list holding it (a `groups` claim). A person
whose claims match several mappings gets the strongest role (`operator` can do all an
auditor can); one that matches none cannot sign in. Only top-level claims are read: a
provider that nests its groups (`realm_access.roles`) needs a mapper that puts them at the
top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "CONSOLE_ROLES",
    "MappingNotFound",
    "RoleMapping",
    "list_mappings",
    "remove_mapping",
    "role_for",
    "set_mapping",
]

CONSOLE_ROLES = ("operator", "auditor")  # strongest first
_CLAIM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}")
MAX_VALUE = 200


class MappingNotFound(VaultError):
    """No mapping of that claim and value."""


@dataclass(frozen=True)
class RoleMapping:
    claim: str
    value: str
    role: str

    def as_json(self) -> dict[str, str]:
        return {"claim": self.claim, "value": self.value, "role": self.role}

    def __str__(self) -> str:
        return f"{self.claim}={self.value}"


def _checked(claim: str, value: str) -> tuple[str, str]:
    if not _CLAIM.fullmatch(claim):
        raise VaultError(
            "a claim name is 1 to 100 letters, digits, '_', '.', ':', '/' or '-' "
            "(a top-level claim of the id_token, such as groups)"
        )
    if not value or len(value) > MAX_VALUE or not value.isprintable():
        raise VaultError(f"a claim value is 1 to {MAX_VALUE} printable characters")
    return claim, value


def set_mapping(store: Store, actor: str, claim: str, value: str, role: str) -> RoleMapping:
    """Map (claim, value) to `role`, replacing any mapping of it; audited
    `console_role_mapped` with `actor`. Takes effect at each person's next request."""
    claim, value = _checked(claim, value)
    if role not in CONSOLE_ROLES:
        raise VaultError(f"a console role is one of {', '.join(CONSOLE_ROLES)}, not {role[:20]!r}")
    details = {"claim": claim, "value": value, "role": role}
    store.record_attempt(AuditDraft(actor, AuditAction.CONSOLE_ROLE_MAPPED, details=details))
    return RoleMapping(claim, value, role)


def remove_mapping(store: Store, actor: str, claim: str, value: str) -> RoleMapping:
    """Remove the mapping of (claim, value); audited `console_role_unmapped`. A person it
    let in loses that role at their next request."""
    claim, value = _checked(claim, value)
    role = store.chain_state().console_roles.get((claim, value))
    if role is None:
        raise MappingNotFound(f"no mapping of claim {claim} to a role for that value")
    details = {"claim": claim, "value": value, "role": role}
    store.record_attempt(AuditDraft(actor, AuditAction.CONSOLE_ROLE_UNMAPPED, details=details))
    return RoleMapping(claim, value, role)


def list_mappings(store: Store) -> list[RoleMapping]:
    """Every mapping, as the verified chain has them, by claim and value."""
    every = store.chain_state().console_roles
    return [RoleMapping(c, v, every[(c, v)]) for c, v in sorted(every)]


def _values(claim: Any) -> set[str]:
    if isinstance(claim, str):
        return {claim}
    if isinstance(claim, list):
        return {item for item in claim if isinstance(item, str)}
    return set()


def role_for(
    claims: Mapping[str, Any], mappings: Iterable[RoleMapping]
) -> tuple[str | None, list[RoleMapping]]:
    """The strongest role the claims are mapped to (None: none), and the mappings that
    granted it."""
    matched = [m for m in mappings if m.value in _values(claims.get(m.claim))]
    for role in CONSOLE_ROLES:
        granting = [m for m in matched if m.role == role]
        if granting:
            return role, granting
    return None, []
