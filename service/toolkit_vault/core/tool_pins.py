"""An operator's side of pinned tools (`toolkits.tool_pins`): what an imported server's pin
holds and which of its tools wait, and accepting them, for the command line alike.

An acceptance takes what a server was seen to list (the `tools_changed` events' digests),
never what it lists at the moment of accepting: the operator accepts the change they were
shown, so a server that changes a tool again after that is withheld again.
"""

from __future__ import annotations

from collections.abc import Iterable

from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import RegisteredToolkit, SourceKind
from toolkit_vault.toolkits.tool_pins import PinnedTools, package_of, pinned_tools

__all__ = ["accept_tools", "show_tools"]


def _imported(toolkit: RegisteredToolkit) -> str:
    """The package digest of an imported toolkit (whose server may pin its tools)."""
    name = toolkit.definition.name
    if toolkit.source.kind is not SourceKind.PACKAGE:
        raise VaultError(
            f"{name[:80]!r} is the {toolkit.source} toolkit: only an imported server's "
            "tools are pinned"
        )
    return package_of(toolkit.definition)


def show_tools(store: Store, toolkit: RegisteredToolkit) -> PinnedTools:
    """The pin of an imported toolkit's server (as its definition is now) and the tools a
    later list showed changed or added, not accepted yet."""
    package = _imported(toolkit)
    return pinned_tools(store.chain_state(), toolkit.definition.name, package)


def accept_tools(
    store: Store, actor: str, toolkit: RegisteredToolkit, tools: Iterable[str] = ()
) -> PinnedTools:
    """Accept the waiting tools of an imported server (all of them, or those named), as
    they were seen; audited `tools_accepted`. A name with no change waiting is refused."""
    name = toolkit.definition.name
    shown = show_tools(store, toolkit)
    waiting = {t: d for t, d in shown.changed.items() if shown.pinned.get(t) != d}
    chosen = set(tools)
    unknown = sorted(chosen - waiting.keys())
    if unknown:
        raise VaultError(
            f"no change of {', '.join(repr(t[:80]) for t in unknown[:5])} waits in {name[:80]!r}"
            f" (waiting: {', '.join(sorted(waiting)) or 'none'})"
        )
    accepted = {t: d for t, d in sorted(waiting.items()) if not chosen or t in chosen}
    if not accepted:
        raise VaultError(f"no changed tool of {name[:80]!r} waits to be accepted")
    details = {"package": shown.package, "accepted": accepted}
    draft = AuditDraft(actor, AuditAction.TOOLS_ACCEPTED, toolkit_name=name, details=details)
    store.record_attempt(draft)
    return show_tools(store, toolkit)
