"""A2E over JSON lines on stdin/stdout: one message per line in, one or more lines out.

A thin shell over `A2EConnection`: it reads bounded lines, writes every response and event as
one line, and keeps going after any bad input. Nothing but protocol goes to stdout. Serving
the process's own stdin and stdout, it is the process: toolkit plugins initialize in it with
their decrypted configs, so every log record it makes is redacted (`redact_every_record`)
before anything reaches stderr.

A tool call runs on a thread of its own, beside the lines that follow it (so a
`tool/cancel/req` can reach it), and its answer is written when it is ready: answers to
calls may come out of order, matched by their `req_id`. The end of stdin waits for the
calls in flight to answer; the process ending ends them.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.connection import A2EConnection, connect, read_request
from toolkit_vault.core.vault import Vault
from toolkit_vault.logs import redact_every_record
from toolkit_vault.protocol import MAX_MESSAGE_BYTES, Message, ToolCallRequest, dump_message
from toolkit_vault.telemetry import metrics, traces
from toolkit_vault.tools.calls import Cancellation
from toolkit_vault.transports.observed import kind, outcome

__all__ = ["serve_stdio"]


def serve_stdio(
    vault: Vault,
    principal: Principal,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
) -> None:
    if stdin is None and stdout is None:  # the process's own streams: this is the process
        redact_every_record()
    source = stdin or sys.stdin.buffer
    sink = stdout or sys.stdout
    lock = threading.Lock()

    def write(lines: list[str]) -> None:
        with lock:
            for line in lines:
                sink.write(line + "\n")
            sink.flush()

    def push(event: Message) -> None:
        write([dump_message(event)])

    connection: A2EConnection = connect(vault, principal, push)
    calls: list[threading.Thread] = []

    def answer(request: Message, cancellation: Cancellation | None = None) -> None:
        started = time.perf_counter()
        with traces.span("request", transport="stdio", message__type=kind(request)):
            if isinstance(request, ToolCallRequest) and cancellation is not None:
                reply = connection.call(request, cancellation)
                for record in reply.writes:  # answered once its audit record is committed
                    with contextlib.suppress(Exception):  # `lines` answers a failed one
                        record.wait()
                answered = reply.lines()
            else:
                answered = connection.respond(request)
        elapsed = time.perf_counter() - started
        metrics.observe_request("stdio", kind(request), outcome(answered[0]), elapsed)
        write(answered)

    try:
        while True:
            line = source.readline(MAX_MESSAGE_BYTES + 2)
            if not line:
                break
            if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
                _discard_rest_of_line(source)  # answered below as an oversized message
            elif not line.strip():
                continue
            else:
                line = line.rstrip(b"\r\n")  # framing: the size limit is the message's own
            request = read_request(line, MAX_MESSAGE_BYTES)
            if isinstance(request, ToolCallRequest):
                calls[:] = [call for call in calls if call.is_alive()]
                cancellation = connection.expect_call(request)  # before a cancel is read
                call = threading.Thread(
                    target=answer, args=(request, cancellation), name="toolkit-vault-call"
                )
                call.start()
                calls.append(call)
                continue
            answer(request)
        for call in calls:
            call.join()
    finally:
        connection.close()


def _discard_rest_of_line(source: IO[bytes]) -> None:
    while True:
        chunk = source.readline(64 * 1024)
        if not chunk or chunk.endswith(b"\n"):
            return
