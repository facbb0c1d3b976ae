"""The server's worker threads: results, errors and context come back; a request that went
away leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time

import pytest

from toolkit_vault.store.writer import Write
from toolkit_vault.transports.workers import Workers

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def test_work_runs_in_a_worker_with_the_callers_context() -> None:
    async def main() -> tuple[str, str]:
        workers = Workers(2, "test-workers")
        request_id.set("r-1")
        return await workers.run(lambda: (threading.current_thread().name, request_id.get()))

    thread, seen = asyncio.run(main())
    assert thread.startswith("test-workers_")
    assert seen == "r-1"


def test_an_error_reaches_the_awaiting_request() -> None:
    def fail(message: str) -> None:
        raise LookupError(message)

    async def main() -> None:
        await Workers(1, "test-workers").run(fail, "nope")

    with pytest.raises(LookupError, match="nope"):
        asyncio.run(main())


def test_a_request_that_went_away_gets_nothing_and_the_workers_go_on() -> None:
    release = threading.Event()

    problems: list[object] = []

    async def main() -> int:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: problems.append(context)
        )
        workers = Workers(1, "test-workers")
        waiting = asyncio.ensure_future(workers.run(release.wait))
        await asyncio.sleep(0.05)
        waiting.cancel()
        release.set()
        await asyncio.sleep(0.05)  # the settle lands on a cancelled future: no error
        return await workers.run(lambda: 7)

    assert asyncio.run(main()) == 7
    assert problems == []


class _Done:
    def __init__(self, writes: list[Write]) -> None:
        self.writes = writes


def test_work_with_writes_left_committing_is_answered_once_every_write_is_settled() -> None:
    """`run_settled`: the result comes back only after the last of its writes settles
    (from other threads), not when the work returns nor when the first one settles."""
    writes = [Write(lambda conn: None, None) for _ in range(3)]
    writes[1].settle()  # settled before the work returns: not waited for
    heard: list[str] = []

    async def main() -> list[str]:
        waiting = asyncio.ensure_future(Workers(1, "test-workers").run_settled(_Done, writes))
        for write in (writes[0], writes[2]):
            await asyncio.sleep(0.05)
            assert not waiting.done()
            heard.append(f"settling {writes.index(write)}")
            threading.Thread(target=write.settle).start()
        done = await waiting
        assert done.writes is writes and all(w.settled for w in writes)
        return heard

    assert asyncio.run(main()) == ["settling 0", "settling 2"]


def test_work_with_no_write_left_is_answered_at_once() -> None:
    async def main() -> _Done:
        return await Workers(1, "test-workers").run_settled(_Done, [])

    assert asyncio.run(main()).writes == []


def test_the_threads_end_once_the_pool_is_collected() -> None:
    def alive() -> int:
        return sum(t.name.startswith("test-collected_") for t in threading.enumerate())

    async def main() -> None:
        await Workers(3, "test-collected").run(lambda: None)

    asyncio.run(main())
    gc.collect()
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive() == 0
