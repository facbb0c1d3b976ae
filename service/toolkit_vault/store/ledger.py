"""What the verified audit chain says the state must be: the vault's test of freshness.

A row's MAC (`integrity`) proves that the vault once wrote the row, not that the row is
still the latest word about its entity: a purged version and its pointer, an older pointer
or a principal from before its revocation can be put back from a copy, MACs and all. Every
change of state is written in one transaction with its audit event, so the chain, whose
links and head are keyed, is the one place that says what is current.

`ChainState` is that word, derived event by event (the one definition: the hot path,
`reconcile` and the intake all ask it). `Ledger` is a process's copy of it: it verifies
every link it takes, from the first event on, and never forgets one, so an event deleted
from the database later (to hide a purge or a revocation) is still known here; a chain that
breaks, or a head that moves back below what the process has seen, poisons the ledger and
nothing more is believed. What it takes is read by the store (`Store.follow`); this module
holds no SQL.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolkit_vault.canonical import parse_json
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.chain import CHAIN_START, Signer, links

__all__ = ["LIVE", "Allowed", "ChainState", "Ledger", "PrincipalState", "StateUnknown"]

LIVE = ("ok", "partial")  # statuses that make a version current
_MINE_KEPT = 100_000


class StateUnknown(Exception):
    """The chain cannot be followed (broken, cut back, behind its witness): nothing is
    believed until an operator resolves it. The message says why and what to run."""


@dataclass(frozen=True)
class PrincipalState:
    name: Any
    role: Any
    revoked: bool
    expires_at: Any = None  # as its token_created event says; None: never expires


# What a principal may call, as its last `allowance_set` event says: whole toolkits, and
# single tools as (toolkit, tool). `access.allowances.ToolAllowance` reads it.
Allowed = tuple[frozenset[str], frozenset[tuple[str, str]]]


def allowed_of(details: Mapping[str, Any]) -> Allowed:
    """An `allowance_set` event's toolkits and tools. Fails closed: an item that is not
    what the vault writes (a name, a pair of names) is left out, so a malformed event can
    only narrow a principal further, never widen it."""
    toolkits, tools = details.get("allowed_toolkits"), details.get("allowed_tools")
    whole = toolkits if isinstance(toolkits, list) else []
    single = tools if isinstance(tools, list) else []
    return (
        frozenset(name for name in whole if isinstance(name, str)),
        frozenset(
            (pair[0], pair[1])
            for pair in single
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair)
        ),
    )


_TOOL_PIN_ACTIONS = (
    AuditAction.TOOLS_PINNED,
    AuditAction.TOOLS_CHANGED,
    AuditAction.TOOLS_ACCEPTED,
)


def digests_of(value: Any) -> dict[str, str]:
    """A pin as an event holds it (tool name -> hex digest); anything else left out."""
    if not isinstance(value, Mapping):
        return {}
    return {n: d for n, d in value.items() if isinstance(n, str) and isinstance(d, str)}


def details_of(details: Any) -> dict[str, Any]:
    """An event's details as stored (JSON text) or given (a dict); {} for anything else."""
    if isinstance(details, Mapping):
        return dict(details)
    try:
        value = parse_json(details)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class ChainState:
    """The state the chain's events make, applied in `seq` order."""

    def __init__(self) -> None:
        self.pointers: dict[str, dict[str, int]] = {}  # scope -> toolkit -> current version
        self.latest: dict[str, dict[str, int]] = {}  # scope -> toolkit -> last version written
        self.purged: dict[str, dict[str, int]] = {}  # scope -> toolkit -> last version purged
        self.principals: dict[str, PrincipalState] = {}
        self.imported: dict[str, tuple[Any, Any] | None] = {}  # None: removed
        # How many imports and removals the chain holds: a process whose registry was loaded
        # at another count loads it again (`Vault`), so a change made anywhere shows here.
        self.registry_changes = 0
        self.removed: dict[str, dict[str, int]] = {}  # toolkit -> scope -> last version then
        self.removals: dict[str, int] = {}  # toolkit -> `registry_changes` at its last removal
        # toolkit -> template name -> its public values (`core.templates`)
        self.templates: dict[str, dict[str, dict[str, Any]]] = {}
        # (claim, value) -> the console role a person whose id_token has it gets
        # (`core.console_roles`)
        self.console_roles: dict[tuple[str, str], str] = {}
        # principal id -> what it may call, for a principal an operator narrowed (absent:
        # not narrowed, it may call every tool configured for it; `access.allowances`)
        self.allowances: dict[str, Allowed] = {}
        # (toolkit, package digest) -> tool -> the digest trusted: the first list of an
        # imported server, then what an operator accepted (`toolkits.tool_pins`)
        self.tool_pins: dict[tuple[str, str], dict[str, str]] = {}
        # (toolkit, package digest) -> tool -> a digest a later list showed, not accepted yet
        self.tool_changes: dict[tuple[str, str], dict[str, str]] = {}
        # MCP session ids an operator ended: their next message is refused on any replica
        self.ended_mcp: set[str] = set()

    def apply(self, event: Mapping[Any, Any]) -> None:
        action = event["action"]
        if action == AuditAction.TOOL_CALLED:  # most events, and a call changes no state
            return
        scope, toolkit, version = event["session_id"], event["toolkit_name"], event["version"]
        details = details_of(event["details"])
        if action == AuditAction.CONFIGURE and scope and toolkit and isinstance(version, int):
            latest = self.latest.setdefault(scope, {})
            latest[toolkit] = max(latest.get(toolkit, 0), version)
            if details.get("status") in LIVE:
                self.pointers.setdefault(scope, {})[toolkit] = version
        elif action == AuditAction.PURGE and scope:
            written = self.latest.get(scope, {})
            purged = self.purged.setdefault(scope, {})
            for name in written if toolkit is None else (toolkit,):
                if name in written:
                    purged[name] = written[name]
                self.pointers.get(scope, {}).pop(name, None)
        elif action == AuditAction.TOOLKIT_REMOVED and toolkit:
            for pointers in self.pointers.values():
                pointers.pop(toolkit, None)
            ended = self.removed.setdefault(toolkit, {})
            for scope_id, written in self.latest.items():
                if toolkit in written:
                    ended[scope_id] = written[toolkit]
            self.imported[toolkit] = None
            self.registry_changes += 1
            self.removals[toolkit] = self.registry_changes
        elif action == AuditAction.TOOLKIT_IMPORTED and toolkit:
            self.imported[toolkit] = (details.get("digest"), details.get("schema_digest"))
            self.registry_changes += 1
        elif (
            action == AuditAction.TEMPLATE_SET and toolkit and isinstance(details.get("name"), str)
        ):
            values = details.get("values")
            self.templates.setdefault(toolkit, {})[details["name"]] = (
                values if isinstance(values, dict) else {}
            )
        elif action == AuditAction.TEMPLATE_REMOVED and toolkit:
            self.templates.get(toolkit, {}).pop(str(details.get("name")), None)
        elif action == AuditAction.CONSOLE_ROLE_MAPPED:
            claim, value, role = details.get("claim"), details.get("value"), details.get("role")
            if isinstance(claim, str) and isinstance(value, str) and isinstance(role, str):
                self.console_roles[(claim, value)] = role
        elif action == AuditAction.CONSOLE_ROLE_UNMAPPED:
            self.console_roles.pop((str(details.get("claim")), str(details.get("value"))), None)
        elif action == AuditAction.ALLOWANCE_SET and isinstance(details.get("principal_id"), str):
            self.allowances[details["principal_id"]] = allowed_of(details)
        elif action == AuditAction.ALLOWANCE_REMOVED:
            self.allowances.pop(str(details.get("principal_id")), None)
        elif action in _TOOL_PIN_ACTIONS and toolkit and isinstance(details.get("package"), str):
            self._apply_pins(action, (toolkit, details["package"]), details)
        elif action == AuditAction.MCP_SESSION_ENDED and isinstance(
            details.get("mcp_session"), str
        ):
            self.ended_mcp.add(details["mcp_session"])
        elif action in (AuditAction.TOKEN_CREATED, AuditAction.TOKEN_REVOKED):
            principal_id = details.get("principal_id")
            if isinstance(principal_id, str):
                was = self.principals.get(principal_id)
                if action == AuditAction.TOKEN_CREATED:
                    made = PrincipalState(
                        details.get("name"), details.get("role"), False, details.get("expires_at")
                    )
                else:
                    made = PrincipalState(
                        was and was.name, was and was.role, True, was and was.expires_at
                    )
                self.principals[principal_id] = made

    def _apply_pins(self, action: str, key: tuple[str, str], details: Mapping[str, Any]) -> None:
        """The first pin of a server wins (two processes may both see it first); a change
        seen waits for an operator; an acceptance moves the pin. Fails closed: an entry
        that is not (name, digest) is left out, so a malformed event can only withhold."""
        if action == AuditAction.TOOLS_PINNED:
            self.tool_pins.setdefault(key, digests_of(details.get("pins")))
        elif action == AuditAction.TOOLS_CHANGED:
            self.tool_changes.setdefault(key, {}).update(digests_of(details.get("seen")))
        else:
            accepted = digests_of(details.get("accepted"))
            self.tool_pins.setdefault(key, {}).update(accepted)
            waiting = self.tool_changes.get(key, {})
            for name in accepted:
                waiting.pop(name, None)

    def pointer(self, scope: str, toolkit: str) -> int | None:
        """The version the chain makes current for (scope, toolkit); None: none is."""
        return self.pointers.get(scope, {}).get(toolkit)

    def last_version(self, scope: str, toolkit: str) -> int:
        """The last version number written for (scope, toolkit), of any status; 0: none."""
        return self.latest.get(scope, {}).get(toolkit, 0)

    def ended_by_removal(self, scope: str, toolkit: str, version: int) -> bool:
        """Whether a removal of the toolkit ended this version (every version written before
        it; a version written after a later import of the same name is not ended)."""
        return version <= self.removed.get(toolkit, {}).get(scope, 0)

    def was_purged(self, scope: str, toolkit: str, version: int) -> bool:
        """Whether a purge shredded this version (every version up to the last one then)."""
        return version <= self.purged.get(scope, {}).get(toolkit, 0)


class Ledger:
    """A process's verified copy of the chain's state; thread-safe.

    The store reads (the witness first, then the head and the events after `seq` in one
    statement) without the lock and hands each read to `take` under it; `require()` hands
    out the state.
    """

    def __init__(self, sign: Signer) -> None:
        self._sign = sign
        self.lock = threading.Lock()  # held around `take`
        self.state = ChainState()
        self.seq = 0
        self.mac = CHAIN_START
        self.failure: str | None = None
        self._mine: dict[int, Mapping[str, Any]] = {}  # events this process committed
        # The last event `state` holds, with its link: `seq` and `mac` are the last one read,
        # `applied` may be further on, by events of this process (`committed`).
        self.applied = 0
        self._applied_mac = CHAIN_START

    def committed(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Events this process wrote and committed (with the link each followed): when the
        ledger reaches them it takes them as written here, without verifying again what it
        signed itself, and only checks that the stored link is the one it made. One that
        links to the last event the state holds is applied at once: nothing was committed
        between them, so the state is current without a read (the read still checks its
        stored link when it reaches it)."""
        with self.lock:
            for event in events:
                seq = event["seq"]
                if seq <= self.seq:
                    continue
                self._mine[seq] = event
                if (
                    self.failure is None
                    and seq == self.applied + 1
                    and event["previous"] == self._applied_mac
                ):
                    self.state.apply(event)
                    self.applied, self._applied_mac = seq, bytes(event["mac"])
            while len(self._mine) > _MINE_KEPT:  # a process that writes but rarely follows
                del self._mine[next(iter(self._mine))]

    def start_at(self, seq: int, mac: bytes, state: ChainState) -> None:
        """(Lock held, nothing taken yet.) Start from a verified checkpoint (`checkpoints`):
        `state` is what the chain makes at event `seq`, whose link is `mac`; the events
        after it are taken, and verified, as after any other."""
        self.state, self.seq, self.mac = state, seq, mac
        self.applied, self._applied_mac = seq, mac

    def applied_at(self) -> tuple[int, bytes]:
        """(Lock held.) The last event `state` holds, and its link (`chain_word` reads on
        from there)."""
        return self.applied, self._applied_mac

    def require(self) -> ChainState:
        """The state, or StateUnknown when it cannot be believed."""
        if self.failure is not None:
            raise StateUnknown(self.failure)
        return self.state

    def take(
        self,
        witness: tuple[int, bytes] | None,
        after: int,
        head: int | None,
        events: Iterable[Mapping[str, Any]],
        *,
        partial: bool = False,
    ) -> None:
        """(Lock held.) Verify and apply the events of one read: those after `after`, in
        order, with the stored head's seq from the same snapshot, and the witness read
        before them (so every event it names was committed by then). Events another read
        took meanwhile are skipped; every new one must link to the last one taken.
        `partial`: a batch of a longer read, whose end is checked with its last batch."""
        if self.failure is not None:
            return
        last = after
        for event in events:
            seq = last = event["seq"]
            if seq <= self.seq:
                continue
            mine = self._mine.pop(seq, None)
            if mine is not None and mine["previous"] == self.mac:
                holds = hmac.compare_digest(bytes(event["mac"]), mine["mac"])
                event = mine  # what was signed here, whatever the row now says
            else:
                holds = links(self._sign, self.mac, event)
            if seq != self.seq + 1 or not holds:
                self.failure = (
                    f"the audit chain does not verify at event {self.seq + 1}: nothing stored "
                    "is believed (run `toolkit-vault audit verify`)"
                )
                return
            if seq > self.applied:  # else applied as it was committed here
                self.state.apply(event)
                self.applied, self._applied_mac = seq, bytes(event["mac"])
            self.seq, self.mac = seq, bytes(event["mac"])
            passed = witness is not None and seq == witness[0]
            if passed and witness is not None and not hmac.compare_digest(self.mac, witness[1]):
                self.failure = (
                    f"the audit chain differs from its witness at event {seq}: this is not "
                    "the database this vault home wrote (run `toolkit-vault audit verify`; "
                    "after a deliberate restore, `toolkit-vault audit accept-restore`)"
                )
                return
        while self._mine and next(iter(self._mine)) <= self.seq:
            del self._mine[next(iter(self._mine))]
        if partial:
            return
        stored = 0 if head is None else int(head)
        if stored < last:
            self.failure = (
                f"the audit chain went back from event {last} to {stored} while this "
                "process followed it: events were deleted (run `toolkit-vault audit verify`)"
            )
        elif stored > last:
            self.failure = (
                f"the audit chain head names event {stored} but the events end at {last}: "
                "events were deleted (run `toolkit-vault audit verify`)"
            )
        elif witness is not None and self.seq < witness[0]:
            self.failure = behind(witness[0], self.seq)


def behind(witnessed: int, head: int) -> str:
    return (
        f"the database is behind its witness: this vault home saw audit event {witnessed}, "
        f"the database ends at {head} (an older copy was put back); stored state is not "
        "believed and writes are refused until an operator who restored it on purpose runs "
        "`toolkit-vault audit accept-restore`"
    )
