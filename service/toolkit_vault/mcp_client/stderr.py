"""A server's stderr into the vault's log: line by line, each line bounded and stripped of
control characters, passed through the caller's redaction (which knows the credentials this
server was given) and then the process-wide one (`logs.redact`), and the whole stream capped
so a chatty or hostile server cannot fill the log.

An imported server is code the vault did not write; its stderr is where it prints a stack
trace with its environment in it, or its API key on purpose. Nothing of a line reaches a
log handler before both redactions have run over it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import anyio.abc

from toolkit_vault import logs

__all__ = ["MAX_LINE_CHARS", "MAX_STDERR_BYTES", "StderrSink"]

logger = logging.getLogger("toolkit_vault.mcp_client.stderr")

MAX_LINE_CHARS = 2000  # longer lines are cut (a stack trace's lines fit)
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS  # what one line is read up to before the rest is dropped
MAX_STDERR_BYTES = 256 * 1024  # per process; past it, one notice and nothing more
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # keeps tab; strips ANSI escapes' ESC

Redactor = Callable[[str], str]


class StderrSink:
    """Logs one server's stderr lines through `redact` (the caller's) and `logs.redact`."""

    def __init__(self, label: str, redact: Redactor) -> None:
        self._label = label
        self._redact = redact
        self._seen = 0
        self._capped = False

    def line(self, raw: bytes) -> None:
        """Log one line of the server's stderr (or nothing, past the cap). The whole line is
        redacted before it is cut to its bound, so a cut never leaves half a secret."""
        if self._capped:
            return
        self._seen += len(raw)
        if self._seen > MAX_STDERR_BYTES:
            self._capped = True
            logger.warning("upstream %s: stderr past its cap, the rest is not logged", self._label)
            return
        text = _CONTROL.sub("", raw.decode("utf-8", "replace").rstrip("\r\n"))
        text = logs.redact(self._redact(text))[:MAX_LINE_CHARS]
        if text:
            logger.info("upstream %s stderr: %s", self._label, text)

    async def drain(self, stream: anyio.abc.ByteReceiveStream) -> None:
        """Read `stream` to its end, a line at a time. Of a line longer than
        `_MAX_LINE_BYTES`, its start is logged and the rest dropped up to its newline (so no
        piece of it starts in the middle of a secret)."""
        buffer = b""
        skipping = False
        try:
            async for chunk in stream:
                buffer += chunk
                while buffer:
                    cut = buffer.find(b"\n")
                    if cut < 0:
                        if len(buffer) > _MAX_LINE_BYTES:
                            if not skipping:
                                self.line(buffer[:_MAX_LINE_BYTES])
                            skipping, buffer = True, b""
                        break
                    if not skipping:
                        self.line(buffer[:cut])
                    skipping, buffer = False, buffer[cut + 1 :]
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        if buffer and not skipping:
            self.line(buffer)
