"""Every version's verdict as the audit verification's reconciliation reads it, on a second
core when there is one: what `check --full` and `backup verify` open.

A verdict (`verdict`) is `check`'s, in one place: a row that fails its MAC is not opened,
one the verified walk's state purged is named, one without a wrapped key is counted apart,
the rest are opened in memory (nothing kept). `VersionTally` counts them and names the
failures.

`TallyAsRead` judges the rows reconcile reads (`reconcile.Judge`): their MACs and their
verdicts. A vault of at least a batch of versions, on a machine with a core to spare, has
them judged by a child forked from this process (`_Forked`), a batch or two ahead of the
reconciliation here: the child holds the key ring, the state key and the walk's state only
as this process's memory it was forked with (nothing is sent to it but the version rows as
stored, ciphertext and all, and nothing comes back but a byte a row: its MAC's verdict and
its outcome, never a value or a key), and it exits when this process closes its pipe, or
with it. SECURITY.md says why this shape. A row whose vault key the child's ring lacks (a
rotation since the fork) is judged here again, where the ring reloads, so both paths give
the same verdicts by construction: the same function, on the same row.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing
from toolkit_vault.errors import DecryptionError, StoreError
from toolkit_vault.store.data_keys import ScannedVersion, VersionName
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.reconcile import Finding, Judge, Judged
from toolkit_vault.store.records import open_stored

__all__ = ["BATCH", "RingFor", "TallyAsRead", "VersionTally", "verdict", "workers"]

RingFor = Callable[..., KeyRing]  # key ids -> a ring holding them (`Vault.ring_for`)
Progress = Callable[[int], None]

BATCH = 1000  # rows a batch; a vault with fewer versions is judged in this process
AHEAD = 2  # batches the child is sent before it answers; past them, this process judges too
INTACT, NO_CIPHERTEXT = "intact", "no_ciphertext"
FAILS_MAC = "fails its integrity check"
PURGED = "was purged (the audit chain says so); its row was put back"
NOT_OPENED = "does not decrypt"
_OUTCOMES = (INTACT, NO_CIPHERTEXT, FAILS_MAC, PURGED, NOT_OPENED)
_UNKNOWN_KEY = len(_OUTCOMES)  # the child's ring lacks the row's vault key: judged here
_HOLDS = 0x80  # a verdict byte's bit for "its MAC holds"


def verdict(ring: KeyRing, row: Row, holds: bool, chain: ChainState | None) -> str:
    """What `check` says of one version row as stored, given its MAC's verdict (`holds`):
    `INTACT`, `NO_CIPHERTEXT`, or why it fails (`check_store`'s `VersionTally.see`, which
    reads a `VersionRecord`, says the same: a test holds them alike)."""
    if not holds:
        return FAILS_MAC
    if (
        chain is not None
        and row["status"] != "purged"
        and chain.was_purged(row["session_id"], row["toolkit_name"], row["version"])
    ):
        return PURGED
    if row["wrapped_dek"] is None:
        return NO_CIPHERTEXT
    try:
        open_stored(ring, row)
    except DecryptionError:
        return NOT_OPENED
    return INTACT


def _record_verdict(ring: KeyRing, row: ScannedVersion, chain: ChainState | None) -> str:
    """`verdict` of a version read as a `VersionRecord` (`check_store`, incremental)."""
    record = row.record
    if not row.authentic:
        return FAILS_MAC
    if (
        chain is not None
        and record.status != "purged"
        and chain.was_purged(record.session_id, record.toolkit_name, record.version)
    ):
        return PURGED
    if row.no_ciphertext:
        return NO_CIPHERTEXT
    try:
        context, sealed = record.sealed()
        crypto.open_config(ring, context, sealed)
    except DecryptionError:
        return NOT_OPENED
    return INTACT


class VersionTally:
    """`check_store`'s verdicts (`verdict`), counted; the first 100 failures named."""

    def __init__(self, chain: ChainState | None) -> None:
        self.chain = chain
        self.counts = {INTACT: 0, "failed": 0, NO_CIPHERTEXT: 0}
        self.failed: list[dict[str, Any]] = []
        self.seen = 0

    def see(self, ring: KeyRing, row: ScannedVersion) -> None:
        self.count(row.name, _record_verdict(ring, row, self.chain))

    def count(self, name: VersionName, outcome: str) -> None:
        self.seen += 1
        if outcome in (INTACT, NO_CIPHERTEXT):
            self.counts[outcome] += 1
            return
        self.counts["failed"] += 1
        if len(self.failed) < 100:
            self.failed.append({**name.as_json(), "reason": outcome})

    def result(self, total: int, last_id: int) -> dict[str, Any]:
        return {
            "versions": total,
            **self.counts,
            "failed_versions": self.failed,
            "last_id": last_id,
        }


def workers() -> int:
    """How many children judge versions: one when this process may run on two cores and
    runs one thread (the CLI's): a fork copies only the thread that forks, so a lock another
    thread held at that moment (in OpenSSL, say) would never be released in the child."""
    if threading.active_count() > 1:
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return 1 if cores > 1 else 0


class TallyAsRead:
    """A `VersionTally` fed by the audit verification's reconciliation, which reads every
    version row in its snapshot anyway (`audit.verify`'s `versions`), so a full check or
    `backup verify` reads and MACs each version once, judged here or by a forked child
    (the module's docstring). The ring is asked (`ring_for`) again whenever a row judged
    here names a key id not met before."""

    def __init__(self, ring_for: RingFor, advance: Progress | None = None) -> None:
        self.ring_for, self.advance = ring_for, advance
        self.tally: VersionTally | None = None
        self.last_id = 0
        self._keys: set[str] = set()
        self._ring: KeyRing | None = None

    def begin(self, chain: ChainState | None) -> Judge | None:
        """What judges the version rows, held to `chain`, the verified walk's state; None
        when the walk broke (the caller then runs `check_store`, which reads them again)."""
        if chain is None:
            return None
        self.tally = VersionTally(chain)
        return self.judge

    def judge(self, found: Iterator[Finding], mac: Callable[[Row], bool]) -> Iterator[Judged]:
        """Each finding with its row's MAC verdict, in order; every row counted."""
        batch = _batch(found)
        if len(batch) < BATCH or not workers():
            while batch:
                yield from self._here(batch, mac)
                batch = _batch(found)
            return
        ring = self._ring_now()

        def work(keys: Sequence[str], rows: list[Any]) -> bytes:
            return self._verdicts(ring, mac, keys, rows)

        child = _Forked(work)
        try:
            pending: deque[tuple[list[Finding], bytes | None]] = deque()  # None: the child's
            asked = 0  # batches the child has not answered yet
            while batch:
                while pending and (pending[0][1] is not None or child.ready()):
                    asked -= pending[0][1] is None
                    yield from self._merge(*pending.popleft(), child, mac)
                if asked < AHEAD:
                    child.send(_as_sent(batch))
                    pending.append((batch, None))
                    asked += 1
                else:  # the child is busy: this batch is judged here, by the same function
                    pending.append((batch, work(*_as_sent(batch))))
                while len(pending) > 4 * AHEAD:  # bounded memory whatever the child's pace
                    asked -= pending[0][1] is None
                    yield from self._merge(*pending.popleft(), child, mac)
                batch = _batch(found)
            while pending:
                yield from self._merge(*pending.popleft(), child, mac)
        finally:
            child.close()

    def _here(self, batch: list[Finding], mac: Callable[[Row], bool]) -> Iterator[Judged]:
        for finding in batch:
            row = finding[0]
            if row is None:
                yield finding, None
                continue
            holds = mac(row)
            self._see(row, holds)
            yield finding, holds

    def _merge(
        self,
        batch: list[Finding],
        verdicts: bytes | None,
        child: _Forked,
        mac: Callable[[Row], bool],
    ) -> Iterator[Judged]:
        """A batch as judged (a byte a row, in order; None: the child's answer, awaited)."""
        tally = self.tally
        assert tally is not None
        answers = iter(child.receive() if verdicts is None else verdicts)
        for finding in batch:
            row = finding[0]
            if row is None:
                yield finding, None
                continue
            byte = next(answers)
            outcome = byte & ~_HOLDS
            if outcome == _UNKNOWN_KEY:
                yield from self._here([finding], mac)
                continue
            tally.count(_name(row), _OUTCOMES[outcome])
            self._advanced(row["id"])
            yield finding, bool(byte & _HOLDS)

    def _verdicts(
        self, ring: KeyRing, mac: Callable[[Row], bool], keys: Sequence[str], rows: list[Any]
    ) -> bytes:
        """Each row's MAC verdict and outcome, a byte each (in the child, or here when it
        is busy); a row under a vault key `ring` lacks is left to `_here` (`_merge`)."""
        tally = self.tally
        assert tally is not None
        out = bytearray()
        for values in rows:
            row = dict(zip(keys, values, strict=True))
            holds = mac(row)
            key_id = row["kek_id"]
            if holds and isinstance(key_id, str) and key_id not in ring:
                out.append(_UNKNOWN_KEY)
                continue
            outcome = _OUTCOMES.index(verdict(ring, row, holds, tally.chain))
            out.append(outcome | (_HOLDS if holds else 0))
        return bytes(out)

    def _ring_now(self) -> KeyRing:
        if self._ring is None:
            self._ring = self.ring_for(*sorted(self._keys))
        return self._ring

    def _see(self, row: Row, authentic: bool) -> None:
        tally = self.tally
        assert tally is not None
        key_id = row["kek_id"]
        if self._ring is None or (isinstance(key_id, str) and key_id not in self._keys):
            if isinstance(key_id, str):
                self._keys.add(key_id)
            self._ring = self.ring_for(*sorted(self._keys))
        tally.count(_name(row), verdict(self._ring, row, authentic, tally.chain))
        self._advanced(row["id"])

    def _advanced(self, row_id: int) -> None:
        tally = self.tally
        assert tally is not None
        self.last_id = row_id
        if self.advance and tally.seen % 1000 == 0:
            self.advance(1000)

    def result(self) -> dict[str, Any]:
        tally = self.tally
        assert tally is not None
        if self.advance and tally.seen % 1000:
            self.advance(tally.seen % 1000)
        return tally.result(tally.seen, self.last_id)


def _name(row: Row) -> VersionName:
    return VersionName(row["id"], row["session_id"], row["toolkit_name"], row["version"])


def _batch(found: Iterator[Finding]) -> list[Finding]:
    batch: list[Finding] = []
    for finding in found:
        batch.append(finding)
        if len(batch) == BATCH:
            break
    return batch


def _as_sent(batch: list[Finding]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """A batch's rows as the child is sent them: their column names once, then each row's
    values as stored (a driver's memoryview as the bytes it views, which every check reads
    alike)."""
    rows = [f[0] for f in batch if f[0] is not None]
    keys = tuple(rows[0].keys()) if rows else ()
    return keys, [
        tuple(bytes(v) if type(v) is memoryview else v for v in row.values()) for row in rows
    ]


class _Forked:
    """A child forked from this process that answers each batch sent with `work(*batch)`.
    It inherits this process's memory (the keys are not sent: SECURITY.md), reads batches
    from one pipe and writes answers to another, and `os._exit`s when its pipe ends or on
    any error, so it never returns into this process's code; no cyclic GC runs in it (a
    collected connection object must not speak on a socket the parent still uses)."""

    def __init__(self, work: Callable[..., bytes]) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the child
            code = 1
            try:
                gc.disable()
                os.close(down_w)
                os.close(up_r)
                _serve(work, down_r, up_w)
                code = 0
            finally:
                os._exit(code)
        os.close(down_r)
        os.close(up_w)
        self._down = os.fdopen(down_w, "wb")
        self._up = up_r  # read unbuffered: `ready` asks the pipe itself

    def ready(self) -> bool:
        """Whether an answer (or the child's end) is waiting, without waiting for it."""
        return bool(select.select([self._up], [], [], 0)[0])

    def send(self, batch: Any) -> None:
        pickle.dump(batch, self._down, protocol=pickle.HIGHEST_PROTOCOL)
        self._down.flush()

    def receive(self) -> bytes:
        """The next answer: its length in 4 bytes, then its bytes (`_serve`)."""
        size = int.from_bytes(self._read(4), "big")
        return self._read(size)

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            more = os.read(self._up, size - len(data))
            if not more:
                raise StoreError("the process opening the versions ended early")
            data += more
        return data

    def close(self) -> None:
        """Its pipes closed, then reaped: at the end of its input it exits; a child still
        writing an answer no one reads gets a broken pipe and exits too."""
        with contextlib.suppress(OSError):
            self._down.close()
        with contextlib.suppress(OSError):
            os.close(self._up)
        os.waitpid(self._pid, 0)


def _serve(work: Callable[..., bytes], down: int, up: int) -> None:
    given = os.fdopen(down, "rb")
    while True:
        try:
            batch = pickle.load(given)  # noqa: S301 (its parent, over a pipe only it holds)
        except EOFError:
            return
        answer = work(*batch)
        data = len(answer).to_bytes(4, "big") + answer
        while data:
            data = data[os.write(up, data) :]
