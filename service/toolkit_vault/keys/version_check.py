"""The decrypt check: every stored version's verdict, on every core.

A verdict is `check`'s, in one place (`VersionTally.see`): a row that fails its MAC is not
opened, one the verified walk's state purged is named, one without a wrapped key is counted
apart, the rest are opened in memory (`opening.opens`; nothing kept). The first 100
failures are named, in row order.

On a vault of at least `PARALLEL_MIN` versions, on a machine with a core to spare, the rows
to open are sent in batches to worker children (`opening`: a fresh interpreter each, handed
the key ring on a pipe), a batch or two ahead, while this process reads and MACs the next
rows; a batch arriving while every worker holds `AHEAD` is opened here, so the work splits
itself by pace. Verdicts are counted in row order whoever opened the row, so the report is the
one-core report. A worker that ends early fails the check (`StoreError`): a row is never
counted that nobody opened.
"""

from __future__ import annotations

import pickle
import select
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from toolkit_vault.children import end_child, python_child, read_exactly, spare_cores, widen_pipe
from toolkit_vault.crypto import KeyRing
from toolkit_vault.errors import StoreError
from toolkit_vault.keys.opening import COLUMNS, FAILS, OPENS, RAISED, opens, sent
from toolkit_vault.store.data_keys import VersionName, count_versions, version_rows
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.storage import Store

__all__ = [
    "PARALLEL_MIN",
    "RingFor",
    "TallyAsRead",
    "VersionTally",
    "check_store",
    "workers",
]

Progress = Callable[[int], None]
RingFor = Callable[..., KeyRing]  # key ids -> a ring holding them (`Vault.ring_for`)
Name = tuple[int, str, str, int]  # a `VersionName`'s fields: made only for a failure

PARALLEL_MIN = 5_000  # fewer versions are opened in this process (a worker takes time to start)
BATCH = 200  # rows a batch sent to a worker
AHEAD = 8  # batches a worker holds before this process opens the next one itself (fewer
# left it idle: the verifying process opened a third of the rows, the worker waited)
INTACT, NO_CIPHERTEXT = "intact", "no_ciphertext"
FAILS_MAC = "fails its integrity check"
PURGED = "was purged (the audit chain says so); its row was put back"
NOT_OPENED = "does not decrypt"
_PIPE_BYTES = 1 << 20  # about AHEAD batches in the pipe: sending one seldom waits


def workers(versions: int) -> int:
    """How many worker children open `versions` versions: none below `PARALLEL_MIN`."""
    return 0 if versions < PARALLEL_MIN else spare_cores(4)


def check_store(
    store: Store,
    ring_for: RingFor,
    start: Callable[[int], Progress] | None = None,
    after: int = 0,
    chain: ChainState | None = None,
) -> dict[str, Any]:
    """Decrypt-verify every stored version (with a row id past `after`) in memory (MAC,
    commitment, AAD, JSON); reveal nothing. A version whose row fails its MAC counts as
    failed without being opened. Each batch asks `ring_for` the key ids it names, so a ring
    rotated elsewhere is reloaded. `last_id`: the last row id read. `chain`: the state the
    verified chain makes, when the caller has it (None: the store's, as followed, once
    there is a row to hold to it: an incremental check with no new version follows none)."""
    total = count_versions(store, after)
    advance = start(total) if start else None
    last_id = after
    with VersionTally(chain, workers(total)) as tally:
        for rows in version_rows(store, 1000, after=after):
            if chain is None and last_id == after:
                tally.chain = _followed(store)
            last_id = rows[-1][0]["id"]
            ring = ring_for(*{r["kek_id"] for r, _ in rows if isinstance(r["kek_id"], str)})
            for row, authentic in rows:
                tally.see(ring, row, authentic)
            if advance:
                advance(len(rows))
        return tally.result(total, last_id)


def _followed(store: Store) -> ChainState | None:
    try:
        return store.chain_state()
    except StateUnknown:
        return None  # the audit part of `check` says why


class VersionTally:
    """`check_store`'s verdict on each version, one row at a time, given its MAC's verdict
    (module docstring); `processes`: the worker children that open rows beside this one.
    Used as a context manager: the workers end with it, whatever happened."""

    def __init__(self, chain: ChainState | None, processes: int = 0) -> None:
        self.chain = chain
        self.counts = {INTACT: 0, "failed": 0, NO_CIPHERTEXT: 0}
        self.failed: list[dict[str, Any]] = []
        self.seen = 0
        self._processes = processes
        self._workers: list[_Worker] = []
        # rows read, not yet counted: (name, verdict, or None and the row's values to open)
        self._batch: list[tuple[Name, str | None, tuple[Any, ...] | None]] = []
        self._ring: KeyRing | None = None
        # batches sent or opened, in row order: (batch, its ring, its answer or its worker)
        self._pending: deque[tuple[list[Any], KeyRing, bytes | _Worker]] = deque()

    def see(self, ring: KeyRing, row: Mapping[str, Any], authentic: bool) -> None:
        self.seen += 1
        name = (row["id"], row["session_id"], row["toolkit_name"], row["version"])
        chain, verdict = self.chain, None
        if not authentic:
            verdict = FAILS_MAC
        elif (
            chain is not None
            and row["status"] != "purged"
            and chain.was_purged(row["session_id"], row["toolkit_name"], row["version"])
        ):
            verdict = PURGED
        elif row["wrapped_dek"] is None:
            verdict = NO_CIPHERTEXT
        elif not self._processes:
            verdict = INTACT if opens(ring, row) else NOT_OPENED
        if verdict is not None and not self._pending and not self._batch:
            self._count(name, verdict)
            return
        self._batch.append((name, verdict, None if verdict is not None else sent(row)))
        self._ring = ring
        if len(self._batch) >= BATCH:
            self._dispatch()

    def result(self, total: int, last_id: int) -> dict[str, Any]:
        """The counts and the failures named, once every row handed in is counted."""
        if self._batch:
            self._dispatch()
        self._settle(0)
        return {
            "versions": total,
            **self.counts,
            "failed_versions": self.failed,
            "last_id": last_id,
        }

    def _count(self, name: Name, verdict: str) -> None:
        if verdict in (INTACT, NO_CIPHERTEXT):
            self.counts[verdict] += 1
            return
        self.counts["failed"] += 1
        if len(self.failed) < 100:
            self.failed.append({**VersionName(*name).as_json(), "reason": verdict})

    def _dispatch(self) -> None:
        """The batch to the least busy worker with room, else opened here."""
        batch, ring = self._batch, self._ring
        assert ring is not None
        self._batch = []
        rows = [values for _, _, values in batch if values is not None]
        if not self._workers and rows:
            self._workers = [_Worker() for _ in range(self._processes)]
        worker = min(self._workers, key=lambda w: w.asked, default=None)
        answer: bytes | _Worker
        if rows and worker is not None and worker.asked < AHEAD:
            worker.send(ring, rows)
            answer = worker
        else:
            answer = bytes(_opened(ring, values) for values in rows)
        self._pending.append((batch, ring, answer))
        self._settle(4 * AHEAD * max(1, self._processes))

    def _settle(self, limit: int) -> None:
        """Count the batches at the head whose answers are in, waiting for them while more
        than `limit` are pending (0: until every one is counted)."""
        while self._pending:
            batch, ring, answer = self._pending[0]
            if isinstance(answer, _Worker):
                if len(self._pending) <= limit and not answer.ready():
                    return
                answer = answer.receive()
            self._pending.popleft()
            if len(answer) != sum(values is not None for _, _, values in batch):
                raise StoreError("a worker opening the config versions answered out of turn")
            answers = iter(answer)
            for name, verdict, values in batch:
                if values is not None:
                    code = next(answers)
                    if code == RAISED:  # opened here again: it raises here, as it always did
                        code = _opened(ring, values)
                    verdict = INTACT if code == OPENS else NOT_OPENED
                assert verdict is not None
                self._count(name, verdict)

    def __enter__(self) -> VersionTally:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for worker in self._workers:
            worker.close()
        self._workers = []


class TallyAsRead:
    """A `VersionTally` fed by another reader: the audit verification's reconciliation,
    which reads and MACs every version row in its snapshot anyway (`audit.verify`'s
    `versions`), so a full check or `backup verify` reads and MACs each version once.
    The ring is asked (`ring_for`) again whenever a row names a key id not met before.
    Used as a context manager, as its tally is."""

    def __init__(self, ring_for: RingFor, advance: Progress | None = None) -> None:
        self.ring_for, self.advance = ring_for, advance
        self.tally: VersionTally | None = None
        self.last_id = 0
        self._keys: set[str] = set()
        self._ring: KeyRing | None = None

    def begin(
        self, chain: ChainState | None, versions: int = 0
    ) -> Callable[[Row, bool], None] | None:
        """What sees each row, held to `chain`, the verified walk's state; None when the
        walk broke (the caller then runs `check_store`, which reads the versions again).
        `versions`: how many there are (whether workers are worth starting)."""
        if chain is None:
            return None
        self.tally = VersionTally(chain, workers(versions))
        return self._see

    def _see(self, row: Row, authentic: bool) -> None:
        tally = self.tally
        assert tally is not None
        key_id = row["kek_id"]
        if self._ring is None or (isinstance(key_id, str) and key_id not in self._keys):
            if isinstance(key_id, str):
                self._keys.add(key_id)
            self._ring = self.ring_for(*sorted(self._keys))
        tally.see(self._ring, row, authentic)
        self.last_id = row["id"]
        if self.advance and tally.seen % 1000 == 0:
            self.advance(1000)

    def result(self) -> dict[str, Any]:
        tally = self.tally
        assert tally is not None
        if self.advance and tally.seen % 1000:
            self.advance(tally.seen % 1000)
        return tally.result(tally.seen, self.last_id)

    def __enter__(self) -> TallyAsRead:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.tally is not None:
            self.tally.__exit__(kind, exc, tb)


def _opened(ring: KeyRing, values: tuple[Any, ...]) -> int:
    return OPENS if opens(ring, dict(zip(COLUMNS, values, strict=True))) else FAILS


class _Worker:
    """A worker child opening versions (`python -m toolkit_vault.keys.opening`, started
    with the interpreter that runs this, never forked from it): sent the ring whenever this
    process's grew, then batches; it answers each, in order."""

    def __init__(self) -> None:
        self._child = python_child("-m", "toolkit_vault.keys.opening")
        assert self._child.stdin is not None and self._child.stdout is not None
        self._to = self._child.stdin
        self._from = self._child.stdout.fileno()  # read on the descriptor: `ready` asks it
        widen_pipe(self._to.fileno(), _PIPE_BYTES)
        self._ring: KeyRing | None = None
        self.asked = 0  # batches sent and not yet answered

    def send(self, ring: KeyRing, rows: list[tuple[Any, ...]]) -> None:
        material = None if ring is self._ring else ring.reveal()
        self._ring = ring
        try:
            pickle.dump((material, rows), self._to, protocol=pickle.HIGHEST_PROTOCOL)
            self._to.flush()
        except BrokenPipeError:
            raise StoreError("a worker opening the config versions ended early") from None
        self.asked += 1

    def ready(self) -> bool:
        """Whether an answer (or the worker's end) is waiting, without waiting for it."""
        return bool(select.select([self._from], [], [], 0)[0])

    def receive(self) -> bytes:
        size = int.from_bytes(self._read(4), "big")
        answer = self._read(size)
        self.asked -= 1
        return answer

    def _read(self, size: int) -> bytes:
        data = read_exactly(self._from, size)
        if data is None:
            raise StoreError("a worker opening the config versions ended early")
        return data

    def close(self) -> None:
        end_child(self._child)
