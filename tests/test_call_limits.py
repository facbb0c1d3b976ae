"""Call limits (issue 50): a principal's call rate (a token bucket) and an instance's
concurrency, each refused at once with `busy`, so one agent cannot starve the others; set
by the operator through the environment, a bad value refused at start-up."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings
from toolkit_vault.tools.limits import (
    BURST_VARIABLE,
    CONCURRENCY_VARIABLE,
    RATE_VARIABLE,
    CallAdmission,
)
from toolkit_vault.tools.refusals import CallRefused


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refused(limits: CallAdmission, principal: str, instance: object) -> CallRefused | None:
    """The refusal of one call, or None when it was admitted (and ended at once)."""
    try:
        with limits.admit(principal, instance):
            return None
    except CallRefused as exc:
        return exc


def test_a_principal_past_its_rate_is_refused_busy_and_others_are_not() -> None:
    clock = Clock()
    limits = CallAdmission(rate=2.0, burst=3, concurrency=None, clock=clock)
    assert [refused(limits, "alice", "i") for _ in range(3)] == [None, None, None]  # the burst
    busy = refused(limits, "alice", "i")
    assert busy is not None and busy.reason == "busy"
    assert busy.details == [{"reason": "busy"}, {"limit": "rate"}]
    assert "at most 2 a second" in busy.message
    assert refused(limits, "bob", "i") is None  # another agent is not starved
    clock.now += 0.5  # one token back, at 2 a second
    assert refused(limits, "alice", "i") is None
    assert refused(limits, "alice", "i") is not None
    clock.now += 60  # refilled up to the burst, no further
    assert [refused(limits, "alice", "i") for _ in range(4)].count(None) == 3


def test_an_instance_runs_at_most_its_concurrency_and_a_slot_comes_back() -> None:
    limits = CallAdmission(rate=None, concurrency=2)
    release = threading.Event()
    entered = threading.Barrier(3)

    def slow() -> None:
        with limits.admit("alice", ("scope", "filesystem")):
            entered.wait(5)
            release.wait(5)

    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(slow) for _ in range(2)]
        entered.wait(5)
        assert limits.running(("scope", "filesystem")) == 2
        busy = refused(limits, "bob", ("scope", "filesystem"))
        assert busy is not None and busy.reason == "busy"
        assert busy.details == [{"reason": "busy"}, {"limit": "concurrency"}]
        assert refused(limits, "bob", ("scope", "weather")) is None  # another instance
        release.set()
        for done in running:
            done.result(5)
    assert limits.running(("scope", "filesystem")) == 0
    assert refused(limits, "bob", ("scope", "filesystem")) is None


def test_a_failing_call_gives_its_slot_back() -> None:
    limits = CallAdmission(rate=None, concurrency=1)
    with pytest.raises(RuntimeError), limits.admit("alice", "i"):
        raise RuntimeError("the tool failed")
    assert limits.running("i") == 0 and refused(limits, "alice", "i") is None


def test_a_slot_given_back_early_is_given_back_once() -> None:
    """A call its event loop answered (deadline, cancel) gives its slot back while its tool
    still runs; when the tool ends, nothing more is given back: another call's slot stays
    taken."""
    limits = CallAdmission(rate=None, concurrency=2)
    with limits.admit("alice", "i") as give_back:
        give_back()
        assert limits.running("i") == 0
        with limits.admit("bob", "i"):
            give_back()  # again: nothing
            assert limits.running("i") == 1
        assert limits.running("i") == 0
    assert limits.running("i") == 0
    with limits.admit("alice", "i"), limits.admit("bob", "i"):
        assert refused(limits, "carol", "i") is not None


def test_under_many_threads_the_limits_hold_exactly() -> None:
    """Sixteen callers at once on one instance limited to four: never more than four run,
    every other call is refused busy, and none is lost or counted twice."""
    limits = CallAdmission(rate=None, concurrency=4)
    lock, peak, now, outcomes = threading.Lock(), [0], [0], {"ok": 0, "busy": 0}
    start = threading.Barrier(16)

    def call() -> None:
        start.wait(5)
        for _ in range(50):
            try:
                with limits.admit("alice", "i"):
                    with lock:
                        now[0] += 1
                        peak[0] = max(peak[0], now[0])
                    time.sleep(0.001)
                    with lock:
                        now[0] -= 1
                outcome = "ok"
            except CallRefused as exc:
                assert exc.reason == "busy"
                outcome = "busy"
            with lock:
                outcomes[outcome] += 1

    with ThreadPoolExecutor(16) as pool:
        for done in [pool.submit(call) for _ in range(16)]:
            done.result(30)
    assert peak[0] == 4
    assert outcomes["ok"] + outcomes["busy"] == 16 * 50 and outcomes["busy"] > 0
    assert limits.running("i") == 0


def test_the_rate_holds_under_many_threads() -> None:
    """A burst of 10 and a rate too slow to refill during the test: of 200 calls from 8
    threads, exactly 10 are admitted."""
    limits = CallAdmission(rate=0.001, burst=10, concurrency=None)
    admitted = []

    def call() -> None:
        for _ in range(25):
            admitted.append(refused(limits, "alice", "i") is None)

    with ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(call) for _ in range(8)]:
            done.result(30)
    assert admitted.count(True) == 10 and len(admitted) == 200


def test_the_operator_sets_them_through_the_environment() -> None:
    default = CallAdmission.from_environment({})
    assert (default.settings.rate, default.settings.burst) == (50.0, 100)
    assert default.settings.concurrency == 8
    chosen = CallAdmission.from_environment(
        {RATE_VARIABLE: "5", BURST_VARIABLE: "7", CONCURRENCY_VARIABLE: "2"}
    )
    assert (chosen.settings.rate, chosen.settings.burst, chosen.settings.concurrency) == (5, 7, 2)
    off = CallAdmission.from_environment({RATE_VARIABLE: "off", CONCURRENCY_VARIABLE: "OFF"})
    assert off.settings.rate is None and off.settings.concurrency is None
    assert all(refused(off, "alice", "i") is None for _ in range(1000))
    for name, value in (
        (RATE_VARIABLE, "fast"),
        (RATE_VARIABLE, "0"),
        (RATE_VARIABLE, "nan"),
        (CONCURRENCY_VARIABLE, "2.5"),
        (BURST_VARIABLE, "-1"),
    ):
        with pytest.raises(VaultError, match=name):
            CallAdmission.from_environment({name: value})


def test_the_vault_reads_them_at_start(
    vault: Vault, home: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert vault.call_limits.settings.concurrency == 8
    monkeypatch.setenv(CONCURRENCY_VARIABLE, "nope")
    with pytest.raises(VaultError, match=CONCURRENCY_VARIABLE):
        open_vault(load_settings())
