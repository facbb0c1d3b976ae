"""The main chain's links, checked in batches and on every core: what makes a full `audit
verify` cost the HMACs and little else.

A link is HMAC(audit key, previous link || the event as RFC 8785 JSON) (`store.chain`).
Checking it needs only the event and the stored link before it, so batches of events can
be checked apart, each from the stored link of the event before its first: a batch holds
when every link in it does. Where one does not, `verify` walks that batch again one event
at a time to say what broke, as it always did.

The workers are child processes of this one (`links_check`, started with the interpreter
that runs this, never forked from it): each is handed the audit key once, on its stdin,
then batches; it answers each with the index of its first bad link, or None.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolkit_vault.audit.links_check import as_event, first_bad
from toolkit_vault.errors import StoreError
from toolkit_vault.keys.version_check import spare_cores
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.chain import Signer, links
from toolkit_vault.store.chain_snapshot import ChainSnapshot
from toolkit_vault.store.ledger import ChainState

__all__ = ["PARALLEL_MIN", "Batch", "Break", "ChainWalk", "check_batches", "first_bad"]

Problem = Literal["edited", "deleted", "inserted", "truncated", "behind", "unaudited", "state"]
_WHAT = {
    "edited": "edited (its MAC does not match its content)",
    "inserted": "inserted (it is not part of the signed chain)",
}


@dataclass(frozen=True)
class Break:
    seq: int
    problem: Problem
    message: str


Batch = list[tuple[Any, ...]]  # rows as `ChainSnapshot.event_rows` reads them
# (seq, ts, actor, action, session_id, toolkit_name, version, details, mac)
PARALLEL_MIN = 50_000  # fewer events are checked in this process (workers take time to start)


def workers(events: int) -> int:
    """How many processes check `events` links: none (this one) below `PARALLEL_MIN`,
    else one per core this process may run on, at most four."""
    return 0 if events < PARALLEL_MIN else spare_cores(4)


def check_batches(
    key: bytes, batches: Iterable[tuple[bytes, Batch]], processes: int
) -> Generator[tuple[bytes, Batch, int | None], None, None]:
    """(previous link, batch, its first bad index) for each (previous link, batch), in
    order: checked here, or by `processes` workers in turn, a batch or two ahead."""
    if processes <= 0:
        for previous, rows in batches:
            yield previous, rows, first_bad(key, previous, rows)
        return
    children = [_worker(key) for _ in range(processes)]
    pending: deque[tuple[subprocess.Popen[bytes], bytes, Batch]] = deque()
    try:
        for number, (previous, rows) in enumerate(batches):
            child = children[number % processes]
            assert child.stdin is not None
            pickle.dump((previous, [tuple(row) for row in rows]), child.stdin)
            child.stdin.flush()
            pending.append((child, previous, rows))
            while len(pending) > 2 * processes:
                yield _answer(*pending.popleft())
        while pending:
            yield _answer(*pending.popleft())
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                if child.stdin is not None:
                    child.stdin.close()
            child.kill()
            child.wait()


def _worker(key: bytes) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-m", "toolkit_vault.audit.links_check"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdin is not None
    pickle.dump(key, child.stdin)
    return child


def _answer(
    child: subprocess.Popen[bytes], previous: bytes, rows: Batch
) -> tuple[bytes, Batch, int | None]:
    assert child.stdout is not None
    try:
        found: int | None = pickle.load(child.stdout)  # noqa: S301 (our own child's pipe)
    except (EOFError, pickle.UnpicklingError):
        raise StoreError("a worker checking the audit chain's links ended early") from None
    return previous, rows, found


class ChainWalk:
    """One walk of the main chain in a snapshot: every link after a start, in batches
    (checked by `workers`), the state the events make applied as they are read."""

    def __init__(
        self,
        snapshot: ChainSnapshot,
        key: bytes,
        sign: Signer,
        trusted_head: int | None,
        state: ChainState,
    ) -> None:
        self._snapshot, self._key, self._sign = snapshot, key, sign
        self._trusted_head, self._state = trusted_head, state
        self._gap: Break | None = None  # a seq out of order, met by the reader

    def run(
        self, since: int, link: bytes, batch_size: int, events: int
    ) -> tuple[int, bytes, Break | None]:
        """Verify every link after event `since` (whose stored link is `link`) in seq
        order; stop at the first that does not hold. Returns the last verified seq (events
        1..it hold), its link, and the break. `events`: how many there are (to choose
        whether workers are worth starting)."""
        good, previous = since, link
        batches = self._batches(since, link, batch_size)
        checked = check_batches(self._key, batches, workers(events - since))
        for before, rows, bad in checked:
            if bad is not None:
                checked.close()
                return self._broken(before, rows, bad)
            good, previous = int(rows[-1][0]), bytes(rows[-1][8])
        return good, previous, self._gap

    def _batches(self, since: int, link: bytes, batch_size: int) -> Iterator[tuple[bytes, Batch]]:
        """(the stored link before it, a batch), cut where a seq is out of order."""
        expected, previous = since + 1, link
        reader = self._snapshot.event_rows(since or None, batch_size=batch_size)
        try:
            for rows in reader:
                for index, row in enumerate(rows):
                    seq = row[0]
                    if seq != expected:
                        self._gap = _gap(seq, expected)
                        if index:
                            yield previous, rows[:index]
                        return
                    expected += 1
                    if row[3] != AuditAction.TOOL_CALLED:  # (most events; a call changes no state)
                        self._state.apply(as_event(row))
                yield previous, rows
                stored = rows[-1][8]
                previous = bytes(stored) if isinstance(stored, bytes | memoryview) else b""
        finally:
            reader.close()

    def _broken(self, before: bytes, rows: Batch, bad: int) -> tuple[int, bytes, Break]:
        previous = before if bad == 0 else bytes(rows[bad - 1][8])
        good = int(rows[bad][0]) - 1
        if bad + 1 < len(rows):
            following: Sequence[Any] | None = rows[bad + 1]
        else:
            after = self._snapshot.event_rows(good + 1, batch_size=1)
            following = next((batch[0] for batch in after if batch), None)
            after.close()
        event = as_event(rows[bad])
        problem = _classify(
            self._sign,
            previous,
            event,
            None if following is None else as_event(following),
            self._trusted_head,
        )
        seq = event["seq"]
        return good, previous, Break(seq, problem, f"event {seq} was {_WHAT[problem]}")


def _gap(seq: int, expected: int) -> Break:
    if seq < expected:
        return Break(seq, "inserted", f"event {seq} is out of sequence")
    return Break(expected, "deleted", f"event {expected} was deleted (the chain jumps to {seq})")


def _classify(
    sign: Signer,
    previous: bytes,
    event: Mapping[str, Any],
    following: Mapping[str, Any] | None,
    trusted_head: int | None,
) -> Problem:
    """Edited keeps its stored link (the next event chains from it); inserted does not."""
    seq = event["seq"]
    if trusted_head is not None and seq > trusted_head:
        return "inserted"
    if following is not None and following["seq"] == seq + 1:
        if links(sign, bytes(event["mac"]), following):
            return "edited"
        if links(sign, previous, {**following, "seq": seq}):
            return "inserted"  # the next event is the original of this seq, renumbered
    return "edited"
