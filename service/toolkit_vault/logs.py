"""Structured logs (JSON lines) with request ids, and a redaction filter by value.

Log calls never pass config values; the redaction filter is the second line of defence:
every secret value the process decrypts is registered here, and any log record whose
message or arguments contain one has it replaced before a handler sees it (`serve`: by a
filter on its one handler; `stdio`, where plugins run beside a stderr anyone may read: as
each record is made, `redact_every_record`). Secrets are
indexed by their first characters, so redacting a line costs one lookup per character of
the line, not one search per secret ever registered (which made every request's log line
slower with each secret a server had decrypted).

The request log's line (`log_request`), one a request, is the busy one: where `serve`'s
JSON handler alone takes it, it skips the logging module and is written with others.

Libraries log what the vault never would: an HTTP client's INFO line is the request's URL,
whose query may hold a credential check's secret, and its DEBUG lines headers and bodies.
`hold_library_loggers` keeps those loggers at WARNING in `serve` and `stdio`.

`TOOLKIT_VAULT_LOG_COPY=DIR` (off by default; the test suite sets it) makes `serve` and
`stdio` also write every record of every level, after redaction, to a file of their own in
DIR (`copy_log`), so a scan of DIR finds any secret a process logged at any level; what
stderr shows does not change.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

import orjson

__all__ = [
    "HELD_LOGGERS",
    "LOG_COPY_VARIABLE",
    "REQUEST_ID",
    "JsonFormatter",
    "RedactingFilter",
    "configure_logging",
    "copy_log",
    "hold_library_loggers",
    "log_request",
    "redact",
    "redact_every_record",
    "register_secrets",
]

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_MIN_SECRET_LENGTH = 6  # shorter values would redact ordinary words
_secrets: dict[str, set[str]] = {}  # first _MIN_SECRET_LENGTH characters -> secrets
_secrets_lock = threading.Lock()


def register_secrets(values: Iterable[Any]) -> None:
    """Remember decrypted secret strings (at any depth) so logs can never show them."""
    found: list[str] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str) and len(value) >= _MIN_SECRET_LENGTH:
            found.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    if found:
        with _secrets_lock:
            for secret in found:
                _secrets.setdefault(secret[:_MIN_SECRET_LENGTH], set()).add(secret)


def redact(text: str) -> str:
    """`text` with every registered secret it contains replaced by `[REDACTED]`."""
    if len(text) < _MIN_SECRET_LENGTH:
        return text  # too short to hold one
    known: set[str] = set()
    with _secrets_lock:
        if _secrets:
            for start in range(len(text) - _MIN_SECRET_LENGTH + 1):
                alike = _secrets.get(text[start : start + _MIN_SECRET_LENGTH])
                if alike:
                    known.update(s for s in alike if s in text)
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, "[REDACTED]")
    return text


def _redact_record(record: logging.LogRecord) -> None:
    """Render a record's message and traceback once, with every known secret replaced."""
    try:
        message = redact(record.getMessage())
    except Exception:  # arguments that do not fit the message: logging's own error report
        message = UNFIT_MESSAGE  # would print them as they are, so neither is kept
    record.msg, record.args = message, None
    if record.exc_info:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        record.exc_info = None


UNFIT_MESSAGE = "(a log message whose arguments do not fit it: not shown)"


class RedactingFilter(logging.Filter):
    """Render each record's message once, with every known secret replaced."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


_every_record_redacted = False


def redact_every_record() -> None:
    """Redact every log record this process makes, as it is made, and route warnings and a
    thread's uncaught exception through logging, for a process whose stderr must hold no
    secret while plugins run in it (`stdio`).

    A handler's filter (`configure_logging`) sees only the records that reach that handler;
    a plugin may log through a handler of its own on a logger that does not propagate, or
    replace the root logger's handlers (`basicConfig(force=True)`). Every record, whichever
    logger and handler, is made by the record factory: redacted there, none gets past.
    `warnings.warn` and `threading.excepthook` write to stderr without logging, so they are
    sent through it. Installed once; calling again changes nothing."""
    global _every_record_redacted
    if _every_record_redacted:
        return
    make = logging.getLogRecordFactory()

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        _redact_record(record)
        return record

    _every_record_redacted = True
    logging.setLogRecordFactory(redacting_factory)
    logging.captureWarnings(True)
    threading.excepthook = _log_thread_exception


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """A thread's uncaught exception, logged (so redacted) instead of printed as it is."""
    if args.exc_type is SystemExit:
        return  # as the default hook: a thread that exits is silent
    name = args.thread.name if args.thread is not None else "unknown"
    logging.getLogger(__name__).error(
        "uncaught exception in thread %s", name, exc_info=args.exc_value
    )


_FIELDS = ("method", "path", "status", "duration_ms", "principal", "event")  # extras shown


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, request id, message, extra fields."""

    _stamp = (-1, "")  # the last line's second, and "time" for it: one strftime a second

    def format(self, record: logging.LogRecord) -> str:
        fields = {key: getattr(record, key) for key in _FIELDS if hasattr(record, key)}
        if record.exc_text:
            fields["error"] = record.exc_text
        level, message = record.levelname.lower(), record.getMessage()
        return self.line(record.created, level, record.name, message, fields)

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, Any]
    ) -> str:
        second, stamp = self._stamp
        if int(created) != second:
            second = int(created)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
            self._stamp = (second, stamp)
        entry: dict[str, Any] = {
            "ts": round(created, 6),
            "time": stamp,
            "level": level,
            "logger": name,
            "request_id": REQUEST_ID.get(),
            "message": message,
            **fields,
        }
        try:  # orjson: far cheaper a line; it refuses what UTF-8 cannot carry (a lone
            return orjson.dumps(entry).decode()  # surrogate), which json.dumps then escapes
        except TypeError:
            return json.dumps(entry)


FLUSH_S = 0.05  # the longest a request line waits to be written
MAX_PENDING = 1000  # request lines waiting that are written at once


class JsonLinesHandler(logging.StreamHandler[TextIO]):
    """The stream `configure_logging` writes JSON lines to. Request lines (`log_request`)
    wait up to `FLUSH_S` in memory and go out together, one write for many (a write a
    request was a visible share of a busy server's CPU); any other record goes out at once, after
    the request lines before it, as does everything when the handler is flushed (at exit,
    by `logging.shutdown`). A process killed outright loses at most `FLUSH_S` of request
    lines; the audit chain, not this log, is the record of what changed."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._due = threading.Event()
        self._flusher: threading.Thread | None = None

    def add_line(self, line: str) -> None:
        """A request line, written within `FLUSH_S` (at once if many are waiting)."""
        self.acquire()
        try:
            self._pending.append(line)
            waiting = len(self._pending)
        finally:
            self.release()
        if waiting >= MAX_PENDING:
            self.flush()
        elif waiting == 1:
            if self._flusher is None or not self._flusher.is_alive():
                self._flusher = threading.Thread(
                    target=self._flush_soon, name="toolkit-vault-log", daemon=True
                )
                self._flusher.start()
            self._due.set()

    def emit(self, record: logging.LogRecord) -> None:
        self._write_pending()  # (`handle` holds the lock) what came first goes out first
        super().emit(record)

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_pending()
            super().flush()
        finally:
            self.release()

    def _write_pending(self) -> None:
        if self._pending:
            lines, self._pending = self._pending, []
            try:
                self.stream.write("".join(line + self.terminator for line in lines))
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": lines[0]}))

    def _flush_soon(self) -> None:
        while True:
            self._due.wait()
            time.sleep(FLUSH_S)
            self._due.clear()
            self.flush()


# The handler `configure_logging` installed for JSON lines, and its formatter.
_json_lines: tuple[JsonLinesHandler, JsonFormatter] | None = None


def log_request(logger: logging.Logger, fields: dict[str, Any]) -> None:
    """The request log's line: `logger.info("request", extra=fields)`.

    Where `configure_logging` set up JSON lines and its handler alone takes this logger's
    records (as `serve` runs: no other handler, no filter of anyone's, the level open), the
    line, the very bytes the logging module would write, is handed to that handler directly,
    which writes it with others (`JsonLinesHandler`): the logging module's record, filter
    and formatter and a write a line were a visible share of a busy server's CPU a
    configure (paired runs, `benchmarks.ab`; BENCHMARKS.md). Anything else (a test
    capturing records, another configuration) goes through logging. Either way the path,
    the one field a client writes freely (the message is this constant), has every
    registered secret redacted from it here: the redaction filter sees only a record's
    message."""
    path = fields.get("path")
    if isinstance(path, str):
        fields = {**fields, "path": redact(path)}
    installed = _json_lines
    if installed is None or not _alone(installed[0], logger):
        logger.info("request", extra=fields)
        return
    handler, formatter = installed
    shown = {key: fields[key] for key in _FIELDS if key in fields}
    handler.add_line(formatter.line(time.time(), "info", logger.name, "request", shown))


def _alone(handler: logging.Handler, logger: logging.Logger) -> bool:
    """Whether an INFO record of `logger` would reach `handler` and no other handler, with
    no filter on its way but the redaction filter `configure_logging` gave the handler."""
    if not logger.isEnabledFor(logging.INFO) or handler.level > logging.INFO:
        return False
    reached: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return False
        reached += current.handlers
        current = current.parent if current.propagate else None
    return reached == [handler] and len(handler.filters) == 1


LOG_COPY_VARIABLE = "TOOLKIT_VAULT_LOG_COPY"
# Loggers that write a request's URL (INFO: httpx), headers, bodies or frames (DEBUG), of the
# HTTP clients the vault and its plugins use: a URL's query or a header may hold a secret
# (an `x-verify` check's, an OAuth exchange's), and nothing redacts what was never known.
HELD_LOGGERS = (
    "httpx", "httpcore", "urllib3", "requests", "authlib", "botocore", "boto3", "s3transfer",
    "aiohttp.client", "websockets", "hpack", "h2",
    "mcp", "httpx2", "httpcore2",  # the MCP SDK (issue 51): its DEBUG lines hold whole messages
)  # fmt: skip


def hold_library_loggers() -> None:
    """Keep the HTTP client loggers at WARNING (their failures still show), and uvicorn's at
    INFO: at DEBUG it traces every WebSocket frame, which holds whatever a client sent (a
    config before it is split), and `serve` offers no way to turn it on."""
    for name in HELD_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("uvicorn").setLevel(logging.INFO)


def copy_log(command: str) -> str | None:
    """With `TOOLKIT_VAULT_LOG_COPY=DIR`, also write every record of every level, after
    redaction, as JSON lines to `DIR/<command>-<pid>.log` (0600, not through a symlink);
    the path, or None when the setting is off. The root logger is opened to DEBUG for it;
    the handlers already there keep the level they showed, so stderr does not change (with
    none, logging's last resort, WARNING to stderr, is kept as a handler)."""
    directory = os.environ.get(LOG_COPY_VARIABLE)
    if not directory:
        return None
    root = logging.getLogger()
    if not root.handlers and logging.lastResort is not None:
        root.addHandler(logging.lastResort)
    for handler in root.handlers:
        if handler.level == logging.NOTSET:
            handler.setLevel(root.level)
    path = os.path.join(directory, f"{command}-{os.getpid()}.log")
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    stream = open(os.open(path, flags, 0o600), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    copy = logging.StreamHandler(stream)
    copy.setFormatter(JsonFormatter())
    copy.addFilter(RedactingFilter())
    root.addHandler(copy)
    root.setLevel(logging.DEBUG)
    return path


def configure_logging(level: str = "INFO", json_lines: bool = True) -> None:
    """Route every logger through the redaction filter to stderr, as JSON lines or text;
    the HTTP client loggers held at WARNING (`hold_library_loggers`)."""
    global _json_lines
    handler: logging.StreamHandler[TextIO]
    _json_lines = None
    if json_lines:
        lines, formatter = JsonLinesHandler(sys.stderr), JsonFormatter()
        lines.setFormatter(formatter)
        handler, _json_lines = lines, (lines, formatter)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    handler.setLevel(level.upper())  # a log copy (`copy_log`) may open the root further
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    hold_library_loggers()
    # Neither format shows a record's source line, thread or process: skip gathering them
    # (the logging HOWTO's "Optimization": gathering them made each request's line dearer).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
