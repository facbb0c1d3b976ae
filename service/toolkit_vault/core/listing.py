"""Listing: a session's toolkits and tools, answered from the live instances, from
memory when nothing changed since the session's last read (`answer_without_blocking`, on a
transport's event loop), else after bringing them in line with the store.

The second layer of `vault.Vault` (over `instance_sync.InstanceSync`).

May import: `core`'s instance sync and instances, protocol, store, toolkits, tools.
"""

from __future__ import annotations

from collections.abc import Mapping

from toolkit_vault.access.allowances import ToolAllowance, allowance_in
from toolkit_vault.access.principals import Principal
from toolkit_vault.core.instance_sync import InstanceSync
from toolkit_vault.core.instances import Mark
from toolkit_vault.plugin import Tool
from toolkit_vault.protocol import (
    Message,
    ToolInfo,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
    ToolListRequest,
    ToolListResponse,
    dump_message,
    dump_toolkit_list,
)
from toolkit_vault.store.scopes import principal_scope
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["ANSWERED_WITHOUT_BLOCKING", "Listing"]

# what `answer_without_blocking` may answer
ANSWERED_WITHOUT_BLOCKING = (ToolkitListRequest, ToolListRequest)


class Listing(InstanceSync):
    """The lists of one vault."""

    def list_toolkits(
        self, principal: Principal, session_id: str, msg: ToolkitListRequest
    ) -> ToolkitListResponse:
        configured = self._configured(principal, session_id)
        ends = self.instances.ends(session_id, configured)
        allowance = self._listed_allowance(principal.principal_id)
        toolkits = [definition for definition, _ in self._listed(configured, msg, ends, allowance)]
        return ToolkitListResponse(req_id=msg.id, toolkits=toolkits)

    def answer_without_blocking(
        self,
        principal: Principal,
        session_id: str,
        msg: Message,
        mark: Mark | None = None,
    ) -> str | None:
        """The answer to a list that needs no wait, as JSON, so a transport may give it on
        its event loop: this process's instances are still what the store says, because
        nothing was committed to the store since this session's list last read it
        (`Store.commit_mark`), or because the session's pointers, read without waiting
        (`Store.pointers_at_once`), are still the ones its instances were made from. None:
        `handle` it in a worker thread (a toolkit to initialize again, a read that would
        wait, PostgreSQL). `mark`: a `mark()` taken after the message arrived (a transport
        shares one among the lists that arrived together: `access.SharedMarks`); None:
        taken here."""
        if not isinstance(msg, ANSWERED_WITHOUT_BLOCKING):
            return None
        mark = mark or self.mark()
        if mark is None:
            return None
        configured = self._configured_at_once(principal, session_id, mark)
        if configured is None:
            return None
        chain = self.store.chain_state_at_mark(mark[0])  # who may call what (`allowances`)
        if chain is None:
            return None
        allowance = allowance_in(chain, principal.principal_id)
        if isinstance(msg, ToolListRequest):
            return dump_message(self._tools(session_id, configured, msg, allowance))
        ends = self.instances.ends(session_id, configured)
        listed = [json for _, json in self._listed(configured, msg, ends, allowance)]
        return dump_toolkit_list(msg.id, listed)

    def _configured_at_once(
        self, principal: Principal, session_id: str, mark: Mark
    ) -> set[str] | None:
        """The session's live toolkits, if they are still what the store says and that can
        be told without a wait: nothing committed since its last read, or its pointers and
        the chain, read at once (`Store.pointers_at_once`, `chain_state_at_once`), still
        those its instances were made from (then `mark` is noted as its read). None: bring
        it in line (`_sync`)."""
        configured = self.instances.live_if_read(session_id, mark)
        if configured is not None:
            return configured
        had = self.instances.sources(session_id)
        scope_id = principal_scope(principal.principal_id)
        if self.store.pointers_at_once(session_id, scope_id) != had:
            return None  # something to bring in line, or no quick read: `_sync` it
        chain = self.store.chain_state_at_mark(mark[0])  # the mark read before the pointers
        if chain is None or self._stale(had, chain):
            return None  # a version the chain no longer makes current, or no quick read
        if chain.registry_changes != self.registry_follower.seen:
            return None  # an import or removal to load first
        return self.instances.live_if_unchanged(session_id, had, mark)  # None: changed here

    def _listed_allowance(self, principal_id: str) -> ToolAllowance | None:
        """`allowance` as of the read `_configured` just made (or found still true): the
        ledger that read followed, so a list reads the store once, not twice."""
        return allowance_in(self.store.followed_state(), principal_id)

    def allowance(self, principal_id: str) -> ToolAllowance | None:
        """The toolkits and tools an operator narrowed the principal to, as the verified
        chain has them now (`access.allowances`); None: not narrowed."""
        return allowance_in(self.store.chain_state(), principal_id)

    def _listed(
        self,
        configured: set[str],
        msg: ToolkitListRequest,
        ends: Mapping[str, float],
        allowance: ToolAllowance | None,
    ) -> list[tuple[ToolkitDefinition, str]]:
        """What the list shows: each toolkit its filters keep, as `RegisteredToolkit.listed`;
        one whose credential has a known end says when (`expires_at`, an extension). A
        narrowed principal sees only the toolkits it may call a tool of."""
        shown = []
        for toolkit in self.registry.all():
            definition = toolkit.definition
            if allowance is not None and not allowance.shows(definition.name):
                continue
            if msg.filter_kind and definition.category != msg.filter_kind:
                continue
            if msg.filter_tags and not set(msg.filter_tags) <= set(definition.tags):
                continue
            if definition.name in ends:
                ending = {"configured": True, "expires_at": int(ends[definition.name])}
                dated = definition.model_copy(update=ending)
                shown.append((dated, dated.model_dump_json(by_alias=True)))
                continue
            shown.append(toolkit.listed(definition.name in configured))
        return shown

    def list_tools(
        self, principal: Principal, session_id: str, msg: ToolListRequest
    ) -> ToolListResponse:
        """The tools of every toolkit configured in the session, each naming its toolkit;
        the ones a `partial` status named unavailable, and those the principal may not call
        (`allowance`), are left out."""
        configured = self._configured(principal, session_id)
        allowance = self._listed_allowance(principal.principal_id)
        return self._tools(session_id, configured, msg, allowance)

    def _tools(
        self,
        session_id: str,
        configured: set[str],
        msg: ToolListRequest,
        allowance: ToolAllowance | None,
    ) -> ToolListResponse:
        tools = []
        for toolkit in self.registry.all():
            name = toolkit.definition.name
            if name not in configured:
                continue
            served = served_tools(self.instances.instance(session_id, name))
            listed = toolkit.definition.tools if served is None else list(served)
            tools += [
                _info(toolkit, tool, served)
                for tool in listed
                if tool not in self.instances.unavailable(session_id, name)
                and (allowance is None or allowance.permits(name, tool))
            ]
        return ToolListResponse(req_id=msg.id, tools=tools)

    def _configured(self, principal: Principal, session_id: str) -> set[str]:
        """Toolkits with a current config in the store (the session's or its principal's)
        and a live instance made from it in this process. What another process changed
        since is taken up here, silently: the list itself tells the agent. The store is
        read unless nothing was committed to it since this session's last read."""
        mark = self.mark()  # taken before the read: what is committed during it shows next
        if self.instances.live_if_read(session_id, mark) is None:
            self._sync(session_id, principal.principal_id)
        return self.instances.live_after_read(session_id, mark)

    def mark(self) -> Mark | None:
        """What a list's read of the store stays true for: the store's commit mark and how
        often this process dropped what a read installed; None when the store gives no
        mark (then every list reads). Never raises."""
        dropped = self.instances.dropped
        store_mark = self.store.commit_mark()
        return None if store_mark is None else (store_mark, dropped)

    async def mark_on_loop(self) -> Mark | None:
        """`mark` on an event loop (`Store.commit_mark_on_loop`)."""
        dropped = self.instances.dropped
        store_mark = await self.store.commit_mark_on_loop()
        return None if store_mark is None else (store_mark, dropped)


def served_tools(instance: object) -> Mapping[str, Tool] | None:
    """The tools a live instance serves itself (an imported server's own `tools/list`,
    `toolkits.served`), by name; None for a toolkit whose definition lists them."""
    served = getattr(instance, "served_tools", None)
    return served() if callable(served) else None


def withheld_tools(instance: object) -> frozenset[str]:
    """The tools a live imported server lists that its pin withholds (`toolkits.tool_pins`:
    changed or added since it was pinned, not accepted by an operator)."""
    withheld = getattr(instance, "withheld_tools", None)
    return withheld() if callable(withheld) else frozenset()


def _info(
    toolkit: RegisteredToolkit, name: str, served: Mapping[str, Tool] | None = None
) -> ToolInfo:
    """A tool as `tool/list` shows it: with the input schema its calls are checked
    against, and its output schema and annotations where it declares them."""
    tool = (toolkit.tool(name) if served is None else served.get(name)) or Tool(name)
    return ToolInfo(
        name=name,
        toolkit=toolkit.definition.name,
        description=tool.description or None,
        input_schema=dict(tool.input_schema),
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        annotations=None if tool.annotations is None else dict(tool.annotations),
    )
