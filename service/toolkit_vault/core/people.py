"""People who sign in to the console through the identity provider: each is a principal of
its own, named after their identity, and audited as that person, never as a shared token.

A person's principal id is a function of their identity alone (`person_id`: the issuer and
the `sub` claim, which the provider never reuses for someone else), so the same person is the
same actor at every sign-in, on every replica. Their name is what the claims call them
(`name`, else `preferred_username`, `email`, `sub`). Their role is decided at sign-in from
the operator's mappings (`console_roles`) and the claims of that sign-in's `id_token`, and
checked again at every request against the mappings as they are then: an operator who
removes a mapping ends the role at the person's next request; a person removed from a
group at the provider keeps their console session until it ends (its lifetime is short),
and the next sign-in decides again.

Persons are known from their `person_signed_in` events (who, which identity, which role,
which mappings granted it); they hold no token and have no row among the principals.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.console_roles import list_mappings, role_for
from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "PERSON_PREFIX",
    "NoConsoleRole",
    "Person",
    "display_name",
    "person_id",
    "sign_in",
    "sign_out",
    "still_allowed",
]

PERSON_PREFIX = "oidc-"
MAX_NAME = 100
NAME_CLAIMS = ("name", "preferred_username", "email", "sub")
MAX_KEPT = 64  # claim values kept per claim for the role check of later requests
log = logging.getLogger(__name__)


class NoConsoleRole(VaultError):
    """A genuine identity that no mapping gives a console role to."""

    def __init__(self) -> None:
        super().__init__(
            "you are signed in at the identity provider, but no group or claim of yours is "
            "mapped to a console role; ask an operator (toolkit-vault console-roles set)"
        )


def person_id(issuer: str, subject: str) -> str:
    """The principal id of the person `subject` at `issuer`: the same at every sign-in."""
    digest = hashlib.sha256(issuer.encode() + b"\x00" + subject.encode()).hexdigest()
    return PERSON_PREFIX + digest[:32]


def display_name(claims: Mapping[str, Any]) -> str:
    """What the claims call the person: printable, at most `MAX_NAME` characters."""
    for claim in NAME_CLAIMS:
        value = claims.get(claim)
        if isinstance(value, str):
            shown = "".join(c for c in value if c.isprintable()).strip()[:MAX_NAME]
            if shown:
                return shown
    return "unnamed person"


def _kept(claims: Mapping[str, Any]) -> dict[str, Any]:
    """The claims a mapping can name (top-level strings and lists of strings), bounded."""
    kept: dict[str, Any] = {}
    for name, value in claims.items():
        if isinstance(value, str):
            kept[name] = value
        elif isinstance(value, list):
            kept[name] = [v for v in value if isinstance(v, str)][:MAX_KEPT]
    return kept


@dataclass(frozen=True)
class Person:
    """A signed-in person: their principal, name, identity, and the claims their role was
    decided from (checked again, against the mappings of the moment, at every request)."""

    principal_id: str
    name: str
    issuer: str
    subject: str
    role: str
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def principal(self) -> Principal:
        return Principal(self.principal_id, self.role)


def sign_in(store: Store, issuer: str, claims: Mapping[str, Any]) -> Person:
    """The person a checked `id_token`'s claims name, with the role the mappings give;
    audited `person_signed_in` as that person. Raises NoConsoleRole when none is mapped."""
    subject = str(claims["sub"])
    principal_id = person_id(issuer, subject)
    role, granting = role_for(claims, list_mappings(store))
    if role is None:
        log.warning("person %s: no mapping gives a console role; refused", principal_id)
        raise NoConsoleRole()
    person = Person(principal_id, display_name(claims), issuer, subject, role, _kept(claims))
    details = {
        "principal_id": principal_id,
        "name": person.name,
        "issuer": issuer,
        "subject": subject,
        "role": role,
        "mapped_by": [str(m) for m in granting],
    }
    store.record_attempt(AuditDraft(principal_id, AuditAction.PERSON_SIGNED_IN, details=details))
    return person


def still_allowed(store: Store, person: Person) -> bool:
    """Whether the mappings of the moment still give this person the role they signed in
    with (a removed or changed mapping ends it at their next request)."""
    role, _ = role_for(person.claims, list_mappings(store))
    return role == person.role


def sign_out(store: Store, person: Person) -> None:
    """Audit the end of the person's console session (`person_signed_out`)."""
    details = {"principal_id": person.principal_id, "name": person.name}
    draft = AuditDraft(person.principal_id, AuditAction.PERSON_SIGNED_OUT, details=details)
    store.record_attempt(draft)
