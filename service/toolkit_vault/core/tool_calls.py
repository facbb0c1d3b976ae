"""Calling a tool: the use case that puts a call in its scope. A call reaches only the
instance live for the caller's session (its own config, else its principal's) from the
version current in the store, brought in line first as a list is; the tool must be one
its toolkit declares, that the principal may call, with arguments its input schema takes.
Only then does the engine (`tools.calls`) run it. Every call, refused or not, leaves one
audit record (`tool_called`).

The fourth layer of `vault.Vault` (over `configuring.Configuring`).

May import: `core`'s configuring and instances, tools, toolkits, schema, protocol.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import NoReturn

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.configuring import Configuring
from toolkit_vault.core.instances import Mark
from toolkit_vault.core.listing import served_tools, withheld_tools
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import SchemaRefused, ToolkitNotFound, UnknownSession
from toolkit_vault.plugin import ToolResult, answers_calls
from toolkit_vault.protocol import ToolCallRequest, ToolCallResponse
from toolkit_vault.schema import CompiledSchema
from toolkit_vault.telemetry import traces
from toolkit_vault.telemetry.labels import OTHER
from toolkit_vault.telemetry.metrics import METRICS
from toolkit_vault.toolkits.registry import RegisteredToolkit, SourceKind
from toolkit_vault.toolkits.server_processes import ServerRefused
from toolkit_vault.tools.call_audit import arguments_hmac, canonical_hmac
from toolkit_vault.tools.calls import (
    CALL_ENDS,
    CallEngine,
    CallRecord,
    Cancellation,
    checked_arguments,
)
from toolkit_vault.tools.limits import CallAdmission
from toolkit_vault.tools.refusals import CallOutcome, CallRefused, outcome_of

__all__ = ["NoCallLimits", "ToolCalling"]


class NoCallLimits:
    """Every call admitted (stand-in until `tools.limits`: a principal's rate, an
    instance's concurrency)."""

    @contextlib.contextmanager
    def admit(
        self, principal_id: str, instance_key: tuple[str, str]
    ) -> Iterator[Callable[[], None]]:
        yield lambda: None


class _Checked:
    """What a call's checks found that its record needs again: the arguments' canonical
    JSON (their HMAC's input) and whether the tool was one its server serves."""

    __slots__ = ("canonical", "served")

    def __init__(self) -> None:
        self.canonical: bytes | None = None
        self.served = False


class ToolCalling(Configuring):
    """The tool calls of one vault."""

    call_engine: CallEngine
    call_limits: CallAdmission
    record_call: Callable[[CallRecord], None]
    _call_hmac_key: SecretBytes | None  # the audit subkey arguments are HMACed under

    def _call_allowed(self, principal_id: str, toolkit_name: str, tool_name: str) -> bool:
        """Whether an operator lets the principal call this tool (stand-in: every one)."""
        return True

    def call_tool(
        self,
        principal: Principal,
        session_id: str,
        msg: ToolCallRequest,
        cancellation: Cancellation | None = None,
        *,
        here: bool = False,
    ) -> ToolCallResponse:
        """Run one call in the session's scope, or `CallRefused` (its one-word reason);
        `cancellation` ends it early (`tool/cancel/req`, the connection closing). `here`:
        the caller is one of the engine's threads (`CallEngine.submit`), where the tool
        runs too, while an event loop waits with the deadline and `cancellation`; a call
        that waiter answered first is neither recorded nor answered here (`end_call`).
        Traced as a `tool_call` span, child of the request's."""
        with traces.span("tool_call") as traced, self.store.call_under_way():
            answer = self._call_traced(principal, session_id, msg, cancellation, traced, here)
        return answer

    def _call_traced(
        self,
        principal: Principal,
        session_id: str,
        msg: ToolCallRequest,
        cancellation: Cancellation | None,
        traced: traces.Traced,
        here: bool,
    ) -> ToolCallResponse:
        started = time.monotonic()
        name, tool_name = msg.toolkit_name, msg.tool_name
        outcome: CallOutcome = "refused"
        version: int | None = None
        cancellation = cancellation or Cancellation()
        checked = _Checked()
        try:
            if msg.session_id not in ("", session_id):
                raise UnknownSession("unknown session")
            result, version = self._run_call(
                principal, session_id, msg, cancellation, checked, here
            )
            outcome = "tool_error" if result.is_error else "ok"
        except CallRefused as exc:
            outcome = outcome_of(exc.reason)
            raise
        finally:
            if cancellation.end(CALL_ENDS):
                named = self._record_call(
                    principal, session_id, msg, outcome, version, started, checked
                )
                traced.set(toolkit=named[0], tool=named[1], outcome=outcome)
        return ToolCallResponse(
            req_id=msg.id,
            toolkit_name=name,
            tool_name=tool_name,
            content=[dict(block) for block in result.content],
            structured_content=(
                None if result.structured_content is None else dict(result.structured_content)
            ),
            is_error=result.is_error,
        )

    def refuse_call(
        self, principal: Principal, session_id: str, msg: ToolCallRequest, refusal: CallRefused
    ) -> NoReturn:
        """Refuse a call before it starts (a transport's own limit), recorded like any."""
        self._record_call(principal, session_id, msg, "refused", None, time.monotonic())
        raise refusal

    def end_call(
        self,
        principal: Principal,
        session_id: str,
        msg: ToolCallRequest,
        refusal: CallRefused,
        started: float,
    ) -> NoReturn:
        """Answer a call run `here` that its waiter ended first (`timeout`, `cancelled`),
        once its record is written: the tool is told, and its thread answers nothing."""
        self._record_call(principal, session_id, msg, outcome_of(refusal.reason), None, started)
        raise refusal

    def _run_call(
        self,
        principal: Principal,
        session_id: str,
        msg: ToolCallRequest,
        cancellation: Cancellation,
        checked: _Checked,
        here: bool = False,
    ) -> tuple[ToolResult, int]:
        name, tool_name = msg.toolkit_name, msg.tool_name
        # one commit mark for the call's reads at once, the registry's and the session's
        # (read before both: at worst the next call reads again); under calls it moves
        # at every call, each a commit, so two reads of it would follow the chain twice
        mark = self.mark()
        try:
            toolkit = self.toolkit(name, None if mark is None else mark[0])
        except ToolkitNotFound:
            raise CallRefused("unknown_toolkit", "no such toolkit") from None
        imported = toolkit.source.kind is SourceKind.PACKAGE  # its server may list its own
        if toolkit.tool(tool_name) is None and not imported:
            raise CallRefused("unknown_tool", "the toolkit has no such tool")
        configured = self._configured_for_call(principal, session_id, mark)
        if not self._call_allowed(principal.principal_id, name, tool_name):
            raise CallRefused("not_allowed", "this principal may not call this tool")
        if name not in configured:
            raise CallRefused("not_configured", "the toolkit is not configured in this session")
        claim = self.instances.claim(session_id, name, cancellation)
        if claim is None:  # purged or replaced since the read just made
            raise CallRefused("not_configured", "the toolkit is not configured in this session")
        try:
            _ready(claim.instance)
            schema = _input_schema(toolkit, claim.instance, tool_name, checked)
            limit = self.call_engine.limits.argument_bytes
            checked.canonical = checked_arguments(schema, msg.arguments, limit)
            if tool_name in claim.unavailable:
                raise CallRefused("unknown_tool", "the tool is unavailable in this session")
            instance = claim.instance
            if not answers_calls(instance):
                raise CallRefused("unavailable", "the toolkit answers no calls")
            started = None if here else getattr(instance, "started_call", None)
            with self.call_limits.admit(principal.principal_id, (session_id, name)) as slot:
                cancellation.slot = slot
                withholder = lambda: claim.secrets.withholder  # noqa: E731
                with self.store.call_in_tool():
                    if started is not None:  # an imported server's: waited for right here
                        start = partial(started, tool_name, msg.arguments)
                        result = self.call_engine.run_started(name, start, cancellation, withholder)
                    else:
                        run = traces.carried(partial(instance.call_tool, tool_name, msg.arguments))
                        engine = self.call_engine.run_here if here else self.call_engine.run
                        result = engine(name, run, cancellation, withholder)
        finally:
            claim.release()
        if getattr(claim.instance, "unauthorized", False):  # a remote server's 401
            self.oauth.mark_refused(claim.source[0], claim.source[1], toolkit)
        return result, claim.source[1]

    def _configured_for_call(
        self, principal: Principal, session_id: str, mark: Mark | None
    ) -> set[str]:
        """The session's live toolkits, brought in line with the store as a list does, but
        read without a wait where that can tell (`_configured_at_once`): every call's
        record is a commit, so under calls the commit mark moves all the time while the
        session's pointers and the chain's other events stay as they were. Who may call
        what (`_call_allowed`) is then the ledger this brought in line. `mark`: read by
        the caller (`mark`) before anything of this call was read."""
        if mark is not None:
            configured = self._configured_at_once(principal, session_id, mark)
            if configured is not None:
                return configured
        return self._configured(principal, session_id)

    def _record_call(
        self,
        principal: Principal,
        session_id: str,
        msg: ToolCallRequest,
        outcome: CallOutcome,
        version: int | None,
        started: float,
        checked: _Checked | None = None,
    ) -> tuple[str | None, str | None]:
        """Count and audit one call; the toolkit and tool names it recorded (None for a
        name the vault does not know: the agent's own text). `checked`: what the call's
        checks found (the arguments' canonical JSON, a served tool), not looked up again."""
        checked = checked or _Checked()
        digest = ""
        if self._call_hmac_key is not None and checked.canonical is not None:
            digest = canonical_hmac(self._call_hmac_key, checked.canonical)
        elif self._call_hmac_key is not None:
            with contextlib.suppress(ValueError, TypeError):  # arguments no JSON can carry
                digest = arguments_hmac(self._call_hmac_key, msg.arguments)
        # A name the vault does not know is the agent's own text: neither recorded nor a label.
        known = msg.toolkit_name in self.registry
        toolkit = msg.toolkit_name if known else None
        listed = known and msg.tool_name in self.registry.get(msg.toolkit_name).definition.tools
        if known and not listed and checked.served:  # its server served it to this call
            listed = True
        elif known and not listed:  # an imported server's own tool, while it runs
            served = served_tools(self.instances.instance(session_id, msg.toolkit_name))
            listed = served is not None and msg.tool_name in served
        tool = msg.tool_name if listed else None
        elapsed = time.monotonic() - started
        METRICS.observe_tool_call(toolkit or OTHER, tool or OTHER, outcome, elapsed)
        self.record_call(
            CallRecord(
                actor=principal.principal_id,
                session_id=session_id,
                toolkit_name=toolkit,
                version=version,
                tool=tool,
                outcome=outcome,
                duration_ms=round(elapsed * 1000),
                arguments_hmac=digest,
            )
        )
        return toolkit, tool


def _ready(instance: object) -> None:
    """An imported server's process running (started at its first need), or the call
    refused with the reason it cannot take one (`busy`: the cap of servers)."""
    ready = getattr(instance, "ready", None)
    if callable(ready):
        try:
            ready()
        except ServerRefused as refused:
            raise CallRefused(refused.reason, refused.message) from None


def _input_schema(
    toolkit: RegisteredToolkit, instance: object, tool_name: str, checked: _Checked
) -> CompiledSchema:
    """The schema a call's arguments are checked against: the live server's own for an
    imported server (`toolkits.served`), else the one its toolkit declares."""
    served = served_tools(instance)
    if served is not None and tool_name in withheld_tools(instance):
        raise CallRefused(
            "not_accepted", "the server changed this tool since it was pinned: not accepted yet"
        )
    if (toolkit.tool(tool_name) if served is None else served.get(tool_name)) is None:
        raise CallRefused("unknown_tool", "the toolkit has no such tool")
    checked.served = served is not None
    try:
        if served is not None:
            return instance.input_schema(tool_name)  # type: ignore[attr-defined,no-any-return]
        return toolkit.input_schema(tool_name)
    except SchemaRefused:
        raise CallRefused("unavailable", "the tool's input schema is refused") from None
