"""Pinned tools of an imported server: what protects an agent from a "rug pull".

A server the vault runs chooses its own tools: their names, descriptions and schemas are
its text, shown to a model that acts on them. A server trusted when it was imported can
change them later (an update, a restart, `notifications/tools/list_changed`): the same
`read_file`, now telling the model to send the key elsewhere. So the first `tools/list` of
an imported server is pinned, per toolkit and per version of its definition (the package
digest: a re-import of another package under the name pins afresh), as digests per tool
(`mcp_client.pinning`); every later list, in any process, is compared with that pin, and a
tool whose name, description or schema changed, or that the pin does not hold, is
withheld (neither listed nor called: `not_accepted`) until an operator accepts it
(`toolkits tools accept`). A tool the server no longer lists simply goes.

The pin lives in the verified audit chain alone, like allowances and templates: the first
list's `tools_pinned` (the first one in the chain wins, when two processes see a server
first at once), a changed list's `tools_changed` (what was seen, once per new digest) and
an operator's `tools_accepted`; `ChainState.tool_pins` and `tool_changes` read them back.
An edited or deleted event breaks the chain rather than trusting a tool, and each has its
actor and time. When the chain cannot be believed, every tool is withheld.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit_vault.errors import StoreError
from toolkit_vault.mcp_client import compare_pins, pin_digest
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = ["PIN_ACTOR", "PinnedTools", "ToolPins", "package_of", "pinned_tools"]

PIN_ACTOR = "vault:tool-pins"  # the vault itself, seeing a server's list
log = logging.getLogger(__name__)


def package_of(definition: ToolkitDefinition) -> str:
    """The version of an imported definition its pins belong to: its package digest."""
    package = definition.config_schema.get("x-toolkit-package")
    digest = package.get("digest") if isinstance(package, Mapping) else None
    return digest if isinstance(digest, str) else ""


class ToolPins:
    """The pin of one imported toolkit's server, as its instances see it (`served`)."""

    def __init__(self, store: Store, toolkit: str, package: str) -> None:
        self._store = store
        self.toolkit = toolkit
        self.package = package
        # the last answer of `withheld`: copies of the pin it compared (the chain's state
        # changes its pins in place: an acceptance) and of the list, compared by value: each
        # live instance of the toolkit (one a session) holds a list of its own, equal to the
        # others', so one by identity was compared again at nearly every call
        self._last: tuple[dict[str, str], dict[str, str], frozenset[str]] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.toolkit, self.package)

    def see(self, current: Mapping[str, str]) -> frozenset[str]:
        """Take a fresh `tools/list` (name -> digest): the first one is pinned (audited);
        a later one's changed or added tools, when not seen before, are audited. Returns
        the tools to withhold (`withheld`), every one when the chain cannot be believed."""
        try:
            state = self._store.chain_state()
            if self.key not in state.tool_pins:
                self._record(
                    AuditAction.TOOLS_PINNED,
                    {"package": self.package, "pins": dict(current), "digest": pin_digest(current)},
                )
                state = self._store.chain_state()
            changes = compare_pins(state.tool_pins.get(self.key, {}), current)
            seen = {name: current[name] for name in sorted((*changes.added, *changes.changed))}
            waiting = state.tool_changes.get(self.key, {})
            if any(waiting.get(name) != digest for name, digest in seen.items()):
                self._record(
                    AuditAction.TOOLS_CHANGED,
                    {
                        "package": self.package,
                        "seen": seen,
                        "changed": list(changes.changed),
                        "added": list(changes.added),
                        "removed": list(changes.removed),
                    },
                )
        except StateUnknown as exc:
            log.error("tools of %s are withheld: %s", self.toolkit[:80], exc)
            return frozenset(current)
        if seen:
            log.warning(
                "tools of %s withheld until an operator accepts them: %s",
                self.toolkit[:80],
                ", ".join(seen)[:400],
            )
        return self.withheld(current)

    def withheld(self, current: Mapping[str, str]) -> frozenset[str]:
        """The tools of `current` the pin does not hold as they are (changed or added), as
        the chain stood when this process last followed it (a list or a call follows it
        first, so an acceptance made anywhere shows at once); every one when the chain
        cannot be believed. Reads nothing: a list and a call ask it for every tool."""
        try:
            pinned = self._store.followed_state().tool_pins.get(self.key)
        except (StateUnknown, StoreError):  # a chain not believed, or not followed at all
            return frozenset(current)
        if pinned is None:
            return frozenset(current)
        last = self._last
        if last is not None and last[1] == current and last[0] == pinned:
            return last[2]  # a call asks twice, every session's call again: compared once
        found = self._not_pinned(pinned, current)
        self._last = (dict(pinned), dict(current), found)
        return found

    @staticmethod
    def _not_pinned(pinned: Mapping[str, str], current: Mapping[str, str]) -> frozenset[str]:
        """The tools of `current` that `pinned` does not hold as they are."""
        changes = compare_pins(pinned, current)
        return frozenset((*changes.added, *changes.changed))

    def _record(self, action: AuditAction, details: dict[str, Any]) -> None:
        draft = AuditDraft(PIN_ACTOR, action, toolkit_name=self.toolkit, details=details)
        self._store.record_attempt(draft)


@dataclass(frozen=True)
class PinnedTools:
    """What the chain says of one imported toolkit's tools (`toolkits tools show`)."""

    toolkit: str
    package: str
    pinned: Mapping[str, str]  # tool -> the digest trusted
    changed: Mapping[str, str]  # tool -> a digest seen since, not accepted

    def as_json(self) -> dict[str, Any]:
        names = sorted(self.pinned.keys() | self.changed.keys())
        return {
            "toolkit": self.toolkit,
            "package": self.package,
            "pinned": bool(self.pinned),
            "tools": [
                {
                    "name": name,
                    "pinned": self.pinned.get(name),
                    "seen": self.changed.get(name),
                    "state": _state(self.pinned.get(name), self.changed.get(name)),
                }
                for name in names
            ],
        }


def _state(pinned: str | None, seen: str | None) -> str:
    if seen is None or seen == pinned:
        return "pinned"
    return "added" if pinned is None else "changed"


def pinned_tools(state: ChainState, toolkit: str, package: str) -> PinnedTools:
    key = (toolkit, package)
    return PinnedTools(
        toolkit, package, dict(state.tool_pins.get(key, {})), dict(state.tool_changes.get(key, {}))
    )
