"""The audit chain's links checked on every core (`audit.walk.check_batches`): a batch a
worker checks and one this process checks while the workers are busy give the same answer
in the same order, a bad link is found wherever its batch went, and a worker that dies
fails the walk, never passes it."""

from __future__ import annotations

import hmac
import os
import sys
from typing import Any

import pytest

from toolkit_vault.audit import walk
from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import CHAIN_START, audit_payload

KEY = os.urandom(32)


def _chain(count: int) -> list[tuple[Any, ...]]:
    """`count` linked events as `ChainSnapshot.event_rows` reads them."""
    rows, previous = [], CHAIN_START
    for seq in range(1, count + 1):
        event = {
            "seq": seq,
            "ts": 1700000000.5 + seq,
            "actor": "local",
            "action": "configure",
            "session_id": "s",
            "toolkit_name": "t",
            "version": seq,
            "details": f'{{"n": {seq}}}',
        }
        previous = hmac.digest(KEY, previous + audit_payload(event), "sha256")
        rows.append((*event.values(), previous))
    return rows


def _batches(rows: list[tuple[Any, ...]], size: int) -> list[tuple[bytes, list[Any]]]:
    out, previous = [], CHAIN_START
    for start in range(0, len(rows), size):
        out.append((previous, rows[start : start + size]))
        previous = rows[start + size - 1][8]
    return out


def _answers(batches: list[tuple[bytes, list[Any]]], processes: int) -> list[int | None]:
    return [bad for _, _, bad in walk.check_batches(KEY, batches, processes)]


@pytest.mark.parametrize("bad_batch", [0, 3, 7, 11])
@pytest.mark.parametrize("ahead", [0, 2, 100])  # every batch here; either; every one sent
def test_workers_and_this_process_find_the_same_bad_link(
    bad_batch: int, ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walk, "AHEAD", ahead)
    rows = _chain(60)
    at = bad_batch % 3  # the first, second or third event of its batch
    seq = bad_batch * 5 + at + 1
    rows[seq - 1] = (*rows[seq - 1][:7], '{"n": 0}', rows[seq - 1][8])  # edited details
    batches = _batches(rows, 5)
    expected = [at if n == bad_batch else None for n in range(12)]
    assert _answers(batches, 0) == expected
    assert _answers(batches, 1) == expected  # 12 batches
    assert _answers(batches, 2) == expected


def test_batches_are_checked_here_while_the_worker_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = []
    checked = walk.first_bad

    def counted(key: bytes, previous: bytes, rows: Any) -> int | None:
        here.append(rows[0][0])
        return checked(key, previous, rows)

    monkeypatch.setattr(walk, "first_bad", counted)
    batches = _batches(_chain(200), 2)
    assert _answers(batches, 1) == [None] * 100
    assert here  # the worker, starting, was still busy with its first batches


def test_a_worker_that_dies_fails_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/true")  # every worker child ends at once
    with pytest.raises(StoreError, match="ended early"):
        _answers(_batches(_chain(40), 2), 1)
