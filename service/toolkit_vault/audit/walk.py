"""The main chain's links, checked in batches and on every core: what makes a full `audit
verify` cost the HMACs and little else.

A link is HMAC(audit key, previous link || the event as RFC 8785 JSON) (`store.chain`).
Checking it needs only the event and the stored link before it, so batches of events can
be checked apart, each from the stored link of the event before its first: a batch holds
when every link in it does. Where one does not, `verify` walks that batch again one event
at a time to say what broke, as it always did.

The workers are child processes of this one (`links_check`, started with the interpreter
that runs this, never forked from it): each is handed the audit key once, on its stdin,
then batches; it answers each with the index of its first bad link, or None. A batch read
while every worker holds `AHEAD` is checked in this process (`check_batches`).
"""

from __future__ import annotations

import pickle
import select
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolkit_vault.audit.links_check import ANSWER, as_event, first_bad
from toolkit_vault.children import end_child, python_child, read_exactly, spare_cores, widen_pipe
from toolkit_vault.errors import StoreError
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
AHEAD = 2  # batches a worker holds before this process checks the next one itself
# a batch of `audit.verify.BATCH_SIZE` events pickled is about 0.9 MiB: with the default
# 64 KiB pipe, sending the next one waited for the worker to finish the one before
_PIPE_BYTES = 1 << 20


def workers(events: int) -> int:
    """How many processes check `events` links: none (this one) below `PARALLEL_MIN`,
    else one per core this process may run on, at most four."""
    return 0 if events < PARALLEL_MIN else spare_cores(4)


def check_batches(
    key: bytes, batches: Iterable[tuple[bytes, Batch]], processes: int
) -> Generator[tuple[bytes, Batch, int | None], None, None]:
    """(previous link, batch, its first bad index) for each (previous link, batch), in
    order: checked here, or by `processes` workers, each up to `AHEAD` batches ahead; a
    batch read while every worker holds that many is checked here, so the split follows
    the pace of each (the worker no longer sets the walk's pace while this process waits
    on it: `backup verify`, issue 53)."""
    if processes <= 0:
        for previous, rows in batches:
            yield previous, rows, first_bad(key, previous, rows)
        return
    children = [_Child(key) for _ in range(processes)]
    # in order: (previous link, batch, the worker checking it, or its answer found here)
    pending: deque[tuple[bytes, Batch, _Child | _Found]] = deque()
    try:
        for previous, rows in batches:
            while pending and _answered(pending[0][2]):
                yield _answer(*pending.popleft())
            child = min(children, key=lambda c: c.asked)
            if child.asked < AHEAD:
                child.send(previous, rows)
                pending.append((previous, rows, child))
            else:
                pending.append((previous, rows, _Found(first_bad(key, previous, rows))))
            while len(pending) > 2 * AHEAD * processes:  # bounded: the batches held
                yield _answer(*pending.popleft())
        while pending:
            yield _answer(*pending.popleft())
    finally:
        for child in children:
            child.close()


@dataclass(frozen=True)
class _Found:
    """A batch's answer, found in this process."""

    bad: int | None


def _answered(answer: _Child | _Found) -> bool:
    return isinstance(answer, _Found) or answer.ready()


def _answer(
    previous: bytes, rows: Batch, answer: _Child | _Found
) -> tuple[bytes, Batch, int | None]:
    found = answer.bad if isinstance(answer, _Found) else answer.receive()
    return previous, rows, found


class _Child:
    """A worker child checking links (`links_check`, started with the interpreter that
    runs this, never forked from it): handed the key once, then batches; it answers each,
    in order, with `links_check.ANSWER`'s 8 bytes, read on the descriptor (`ready` asks it
    without waiting)."""

    def __init__(self, key: bytes) -> None:
        self._process = python_child("-m", "toolkit_vault.audit.links_check")
        assert self._process.stdin is not None and self._process.stdout is not None
        self._to = self._process.stdin
        self._from = self._process.stdout.fileno()
        widen_pipe(self._to.fileno(), _PIPE_BYTES)
        self.asked = 0  # batches sent and not yet answered
        self._write(key)

    def _write(self, payload: Any) -> None:
        try:
            pickle.dump(payload, self._to)
            self._to.flush()
        except BrokenPipeError:
            raise StoreError("a worker checking the audit chain's links ended early") from None

    def send(self, previous: bytes, rows: Batch) -> None:
        self._write((previous, [tuple(row) for row in rows]))
        self.asked += 1

    def ready(self) -> bool:
        """Whether an answer (or the worker's end) is waiting, without waiting for it."""
        return bool(select.select([self._from], [], [], 0)[0])

    def receive(self) -> int | None:
        data = read_exactly(self._from, ANSWER.size)
        if data is None:
            raise StoreError("a worker checking the audit chain's links ended early")
        self.asked -= 1
        (bad,) = ANSWER.unpack(data)
        return None if bad < 0 else int(bad)

    def close(self) -> None:
        end_child(self._process)


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
