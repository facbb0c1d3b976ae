"""Narrowing a principal: the operator's side of `access.allowances`, for the command line,
`/v1/allowances` and the console alike.

An allowance is kept as audit events alone (`allowance_set` with what it names,
`allowance_removed`), like environment templates: the verified chain is its one store, so
every process reads it from its authenticated `ChainState` (a list or a call sees a change
made anywhere as soon as it follows the chain), an edited or deleted event breaks the chain
instead of widening a principal, and every change has its actor and time.

Only an agent calls tools, so only an agent is narrowed. The names are checked when set: a
toolkit the registry does not know, or a tool its toolkit does not declare, is refused then
(a typo would otherwise narrow the agent to nothing, silently). A toolkit that declares no
tool list (its tools are known only once it runs) takes any tool name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from toolkit_vault.access.allowances import ToolAllowance, allowance_in
from toolkit_vault.access.principals import PrincipalInfo, list_principals
from toolkit_vault.errors import ToolkitNotFound, VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = [
    "Narrowed",
    "PrincipalNotFound",
    "get_allowance",
    "list_allowances",
    "remove_allowance",
    "set_allowance",
]


class PrincipalNotFound(VaultError):
    """No principal has that name or id."""


@dataclass(frozen=True)
class Narrowed:
    """A principal and its allowance (None: not narrowed)."""

    principal: PrincipalInfo
    allowance: ToolAllowance | None

    def as_json(self) -> dict[str, Any]:
        """The documented shape of `allowances show --json` and `/v1/allowances/{p}`."""
        p, allowance = self.principal, self.allowance
        said: dict[str, Any] = {"principal_id": p.principal_id, "name": p.name, "role": p.role}
        if allowance is None:
            return {**said, "narrowed": False, "toolkits": None, "tools": None}
        return {**said, "narrowed": True, **allowance.as_json()}


def _principal(store: Store, name_or_id: str) -> PrincipalInfo:
    """A principal by name or id (a name wins)."""
    known = list_principals(store)
    for found in (
        [p for p in known if p.name == name_or_id],
        [p for p in known if p.principal_id == name_or_id],
    ):
        if found:
            return found[0]
    raise PrincipalNotFound(f"no principal named or with id {name_or_id[:80]!r}")


def _checked(
    toolkit: Callable[[str], RegisteredToolkit],
    toolkits: Iterable[str],
    tools: Iterable[tuple[str, str]],
) -> ToolAllowance:
    """The allowance, each name checked against the registry (`toolkit` raises
    ToolkitNotFound for one it does not know)."""
    allowance = ToolAllowance.of(toolkits, tools)

    def known(name: str) -> RegisteredToolkit:
        try:
            return toolkit(name)
        except ToolkitNotFound:
            raise ToolkitNotFound(f"no toolkit is registered as {name[:80]!r}") from None

    for name in allowance.toolkits:
        known(name)
    for name, tool in sorted(allowance.tools):
        declared = known(name).definition.tools
        if declared and tool not in declared:
            raise VaultError(
                f"toolkit {name} has no tool {tool[:80]!r}; its tools: {', '.join(declared)}"
            )
    return allowance


def set_allowance(
    store: Store,
    actor: str,
    toolkit: Callable[[str], RegisteredToolkit],
    principal: str,
    toolkits: Iterable[str] = (),
    tools: Iterable[tuple[str, str]] = (),
) -> Narrowed:
    """Narrow an agent to these toolkits (every tool of each) and tools, replacing what it
    was narrowed to before; naming none narrows it to no tool at all. Audited as
    `allowance_set`, naming the principal and what it may call."""
    target = _principal(store, principal)
    if target.role != "agent":
        raise VaultError(f"{target.name} is an {target.role}: only an agent calls tools")
    allowance = _checked(toolkit, toolkits, tools)
    details = {"principal_id": target.principal_id, **allowance.as_details()}
    store.record_attempt(AuditDraft(actor, AuditAction.ALLOWANCE_SET, details=details))
    return Narrowed(target, allowance)


def remove_allowance(store: Store, actor: str, principal: str) -> tuple[Narrowed, bool]:
    """Widen a principal again: it may call every tool configured for it. Returns it and
    whether this call changed anything (removing twice is harmless and audited once, as
    `allowance_removed`)."""
    target = _principal(store, principal)
    if allowance_in(store.chain_state(), target.principal_id) is None:
        return Narrowed(target, None), False
    details = {"principal_id": target.principal_id}
    store.record_attempt(AuditDraft(actor, AuditAction.ALLOWANCE_REMOVED, details=details))
    return Narrowed(target, None), True


def get_allowance(store: Store, principal: str) -> Narrowed:
    """A principal (by name or id) and its allowance as the verified chain has it."""
    target = _principal(store, principal)
    return Narrowed(target, allowance_in(store.chain_state(), target.principal_id))


def list_allowances(store: Store) -> list[Narrowed]:
    """Every narrowed principal, by name."""
    state = store.chain_state()
    narrowed = [Narrowed(p, allowance_in(state, p.principal_id)) for p in list_principals(store)]
    return sorted((n for n in narrowed if n.allowance is not None), key=lambda n: n.principal.name)
