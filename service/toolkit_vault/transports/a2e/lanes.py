"""Which threads an A2E message runs on, and where it is parsed, for both HTTP routes.

A2E messages take threads of their own where the store commits on its writer thread
(SQLite): a message's work is then Python under the GIL, so two threads do it all, and
queued messages run back to back instead of each waking one of eight: less CPU a request
and more configures and lists a second (BENCHMARKS.md). On PostgreSQL a message waits on
round trips, and the pool's size in threads overlaps them. A configure that waits on a
credential check (`Vault.waits_on_a_check`: any agent can make one wait up to the check's
deadline) runs on threads of its own, never on those the other agents' messages need. A
tool call runs whole on the engine's threads (`calling.answer_call`); `calling` here
records and answers one its event loop ended first (deadline, cancel), and runs a call
that named no session."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit_vault.core.connection import read_request
from toolkit_vault.core.vault import Vault
from toolkit_vault.core.verification import MAX_CHECKS
from toolkit_vault.protocol import Message, ToolCallRequest
from toolkit_vault.transports.workers import Workers

__all__ = ["A2E_GROUPED_WORKERS", "CALL_WORKERS", "CHECK_WORKERS", "PARSE_ON_LOOP", "Lanes"]

# A message this small is parsed on the event loop (tens of microseconds), so a list that
# needs no I/O is answered there, with no hand-over to a worker thread; a larger one is
# parsed in the worker, where it cannot hold up every other connection.
PARSE_ON_LOOP = 8 * 1024
A2E_GROUPED_WORKERS = 2
# Threads for configures that wait on a credential check: twice the checks allowed in flight,
# so one beyond them is refused at once (`CheckSlots`) rather than queued behind them.
CHECK_WORKERS = 2 * MAX_CHECKS
# Threads that write the record of a tool call ended by its deadline or a cancel (the tool
# itself runs on the engine's own pool): calls beyond them wait their turn.
CALL_WORKERS = 32


@dataclass(frozen=True)
class Lanes:
    """The A2E threads (`a2e`), the threads of configures waiting on a check (`checking`)
    and those of tool calls (`calling`)."""

    vault: Vault
    a2e: Workers
    checking: Workers
    calling: Workers

    @classmethod
    def for_vault(cls, vault: Vault, workers: Workers) -> Lanes:
        """Lanes for `vault`: threads of their own where it commits in groups, else
        `workers`, the app's (as many as pooled connections)."""
        grouped = vault.store.commits_in_groups
        a2e = Workers(A2E_GROUPED_WORKERS, "toolkit-vault-a2e") if grouped else workers
        checking = Workers(CHECK_WORKERS, "toolkit-vault-check")
        return cls(vault, a2e, checking, Workers(CALL_WORKERS, "toolkit-vault-call"))

    def route(self, message: Message) -> Workers:
        """The threads a message runs on: their own for a tool call and for a configure
        that waits on a check."""
        if isinstance(message, ToolCallRequest):
            return self.calling
        return self.checking if self.vault.waits_on_a_check(message) else self.a2e

    async def read(self, raw: str | bytes, max_bytes: int) -> Message:
        """`read_request`, on the loop for a small message, else in an A2E thread."""
        if len(raw) <= PARSE_ON_LOOP:
            return read_request(raw, max_bytes)
        return await self.a2e.run(read_request, raw, max_bytes)
