"""What `toolkits show` lists of this process's local servers (`server_states`), with a
stand-in session instead of a real process: a server that drained its calls after its last
holder let go (a reconfigure) and then stopped, or was stopped by a purge while draining,
is no longer shown; it was, while it drained.
"""

from __future__ import annotations

import uuid

import pytest

from toolkit_vault.toolkits.server_processes import ServerProcess, ServerProcesses, server_states


class _Session:
    """Just enough of an `UpstreamHandle` for the table: running, no process of its own."""

    state = "running"
    pid = None
    tools = ()

    def close(self) -> None:
        self.state = "closed"


def _shown(toolkit: str) -> list[tuple[str, str]]:
    return [(s["scope"], s["state"]) for s in server_states(toolkit)]


@pytest.mark.parametrize("ends", ["its call ends", "a purge of its toolkit"])
def test_a_drained_server_that_stopped_is_no_longer_shown(ends: str) -> None:
    toolkit, scope = f"drained-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    table = ServerProcesses()
    holder, newer = object(), object()

    def starter(process: ServerProcess) -> tuple[_Session, object]:
        return _Session(), lambda: None  # type: ignore[return-value]

    process = table.hold((scope, toolkit, 1), holder, starter)
    process.enter()  # a call in flight on version 1
    table.hold((scope, toolkit, 2), newer, starter)  # the reconfigure's version
    table.release(process, holder, at_once=False)  # retired: it drains its call
    assert (scope, "running") in _shown(toolkit)
    if ends == "a purge of its toolkit":
        process.stop_unheld()
        assert _shown(toolkit) == [(scope, "stopped")]  # gone at once, its call cut short
    process.leave()  # the call ends
    assert process.state == "stopped"
    assert _shown(toolkit) == [(scope, "stopped")]  # version 2, never started, still held
    assert all(s["version"] == 2 for s in server_states(toolkit))
