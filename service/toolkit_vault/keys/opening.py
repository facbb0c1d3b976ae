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
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing
from toolkit_vault.errors import DecryptionError, StoreError
from toolkit_vault.store.data_keys import ScannedVersion, VersionName, scanned
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.reconcile import Finding, Judge, Judged

__all__ = ["BATCH", "RingFor", "TallyAsRead", "VersionTally", "verdict", "workers"]

RingFor = Callable[..., KeyRing]  # key ids -> a ring holding them (`Vault.ring_for`)
Progress = Callable[[int], None]

BATCH = 1000  # rows a batch; a vault with fewer versions is judged in this process
INTACT, NO_CIPHERTEXT = "intact", "no_ciphertext"
FAILS_MAC = "fails its integrity check"
PURGED = "was purged (the audit chain says so); its row was put back"
NOT_OPENED = "does not decrypt"
_OUTCOMES = (INTACT, NO_CIPHERTEXT, FAILS_MAC, PURGED, NOT_OPENED)
_UNKNOWN_KEY = len(_OUTCOMES)  # the child's ring lacks the row's vault key: judged here
_HOLDS = 0x80  # a verdict byte's bit for "its MAC holds"


def verdict(ring: KeyRing, row: ScannedVersion, chain: ChainState | None) -> str:
    """What `check` says of one version row, given its MAC's verdict (`row.authentic`):
    `INTACT`, `NO_CIPHERTEXT`, or why it fails."""
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
        self.count(row.name, verdict(ring, row, self.chain))

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
    """How many children judge versions: one when this process may run on two cores."""
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
        child = _Forked(lambda keys, rows: self._child_verdicts(ring, mac, keys, rows))
        try:
            pending: deque[list[Finding]] = deque()
            while batch:
                child.send(_as_sent(batch))
                pending.append(batch)
                if len(pending) > 2:
                    yield from self._merge(pending.popleft(), child.receive(), mac)
                batch = _batch(found)
            while pending:
                yield from self._merge(pending.popleft(), child.receive(), mac)
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
        self, batch: list[Finding], verdicts: bytes, mac: Callable[[Row], bool]
    ) -> Iterator[Judged]:
        """A batch as the child judged it (a byte a row, in order)."""
        tally = self.tally
        assert tally is not None
        answers = iter(verdicts)
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
            name = VersionName(row["id"], row["session_id"], row["toolkit_name"], row["version"])
            tally.count(name, _OUTCOMES[outcome])
            self._advanced(row["id"])
            yield finding, bool(byte & _HOLDS)

    def _child_verdicts(
        self, ring: KeyRing, mac: Callable[[Row], bool], keys: Sequence[str], rows: list[Any]
    ) -> bytes:
        """In the child: each row's MAC verdict and outcome, a byte each."""
        tally = self.tally
        assert tally is not None
        out = bytearray()
        for values in rows:
            row = dict(zip(keys, values, strict=True))
            holds = mac(row)
            version = scanned(row, holds)
            key_id = version.record.kek_id
            if holds and isinstance(key_id, str) and key_id not in ring:
                out.append(_UNKNOWN_KEY)
                continue
            outcome = _OUTCOMES.index(verdict(ring, version, tally.chain))
            out.append(outcome | (_HOLDS if holds else 0))
        return bytes(out)

    def _ring_now(self) -> KeyRing:
        if self._ring is None:
            self._ring = self.ring_for(*sorted(self._keys))
        return self._ring

    def _see(self, row: Row, authentic: bool) -> None:
        version, tally = scanned(row, authentic), self.tally
        assert tally is not None
        key_id = version.record.kek_id
        if self._ring is None or (isinstance(key_id, str) and key_id not in self._keys):
            if isinstance(key_id, str):
                self._keys.add(key_id)
            self._ring = self.ring_for(*sorted(self._keys))
        tally.see(self._ring, version)
        self._advanced(version.row_id)

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
        self._up = os.fdopen(up_r, "rb")

    def send(self, batch: Any) -> None:
        pickle.dump(batch, self._down, protocol=pickle.HIGHEST_PROTOCOL)
        self._down.flush()

    def receive(self) -> bytes:
        try:
            answer = pickle.load(self._up)  # noqa: S301 (our own child's pipe)
        except (EOFError, pickle.UnpicklingError):
            raise StoreError("the process opening the versions ended early") from None
        if not isinstance(answer, bytes):
            raise StoreError("the process opening the versions answered nonsense")
        return answer

    def close(self) -> None:
        """Its pipes closed, then reaped: at the end of its input it exits; a child still
        writing an answer no one reads gets a broken pipe and exits too."""
        with contextlib.suppress(OSError):
            self._down.close()
        with contextlib.suppress(OSError):
            self._up.close()
        os.waitpid(self._pid, 0)


def _serve(work: Callable[..., bytes], down: int, up: int) -> None:
    given, answers = os.fdopen(down, "rb"), os.fdopen(up, "wb")
    while True:
        try:
            batch = pickle.load(given)  # noqa: S301 (its parent, over a pipe only it holds)
        except EOFError:
            return
        pickle.dump(work(*batch), answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
