"""Structured logs: JSON lines with request ids, and redaction of every decrypted secret."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from toolkit_vault import logs
from toolkit_vault.core.connection import connect
from toolkit_vault.logs import (
    REQUEST_ID,
    JsonFormatter,
    RedactingFilter,
    configure_logging,
    log_request,
    redact,
    register_secrets,
)

SECRET = "tkv-canary-logs-5c2e"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tkv-test-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_json_lines_with_request_id(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    token = REQUEST_ID.set("req-42")
    logger.info("request", extra={"method": "POST", "path": "/a2e", "status": 200})
    REQUEST_ID.reset(token)
    entry = json.loads(stream.getvalue())
    assert entry["request_id"] == "req-42" and entry["status"] == 200
    assert entry["level"] == "info" and entry["message"] == "request"


def test_registered_secrets_are_redacted_everywhere(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    register_secrets([{"nested": [SECRET]}, "short"])
    logger.warning("oops %s in %r", SECRET, {"k": SECRET})
    try:
        raise RuntimeError(f"bad token {SECRET}")
    except RuntimeError:
        logger.exception("failed")
    text = stream.getvalue()
    assert SECRET not in text
    assert text.count("[REDACTED]") >= 3
    assert redact("short words stay") == "short words stay"  # short values are not tracked


def test_configure_registers_the_secrets_it_decrypts(vault: object) -> None:
    from toolkit_vault.access.principals import Principal
    from toolkit_vault.core.vault import Vault

    assert isinstance(vault, Vault)
    conn = connect(vault, Principal("local", "agent"))
    conn.handle_raw(json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]}))
    secret = "tkv-canary-registered-91"
    config = {"endpoint": "e", "api_key": secret}
    conn.handle_raw(
        json.dumps({"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config})
    )
    assert redact(f"x {secret} y") == "x [REDACTED] y"


def test_redaction_finds_each_of_many_secrets_wherever_it_stands() -> None:
    """Secrets are looked up by their first characters: many sharing a prefix, one that is
    another's prefix, one at the very end of the text, and text shorter than a secret."""
    many = [f"tkv-canary-many-{n:05d}-x" for n in range(20_000)]
    register_secrets(many)
    register_secrets(["tkv-canary-many-0", "q7-end"])  # the shortest a secret can be
    line = f"a {many[7]} b {many[19_999]}{many[3]} c tkv-canary-many-0! d q7-end"
    assert redact(line) == "a [REDACTED] b [REDACTED][REDACTED] c [REDACTED]! d [REDACTED]"
    assert redact("q7-en") == "q7-en"
    assert redact("abc") == "abc"


def test_a_line_utf8_cannot_carry_is_still_one_json_line() -> None:
    """Formatted directly: a record holding a lone surrogate would break pytest's own log
    capture, which is not what this checks."""
    formatter = JsonFormatter()

    def line(message: str) -> str:
        record = logging.LogRecord(
            "tkv-test-logs", logging.WARNING, __file__, 1, message, None, None
        )
        return formatter.format(record)

    odd = "odd " + chr(0xD800) + " text, ünïcode kept"
    odd_line, plain_line = line(odd), line("plain ünïcode")
    odd_line.encode()  # writable as UTF-8: the surrogate is escaped
    assert json.loads(odd_line)["message"] == odd
    assert '"plain ünïcode"' in plain_line  # non-ASCII kept as it is


REQUEST = {"method": "POST", "path": "/a2e", "status": 200, "duration_ms": 1.5, "principal": "p"}
Logged = Callable[[], tuple[logging.Logger, io.StringIO]]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def serve_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[Logged]:
    """`configure_logging` as `serve` calls it, writing to a string, and a request logger
    whose records reach its handler alone, made when the test asks, in its body:
    pytest's capture attaches itself to every logger that does not propagate when the test
    starts. The root logger is restored afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("INFO", json_lines=True)
    (handler,) = root.handlers
    root.handlers[:], root.level = saved

    def made() -> tuple[logging.Logger, io.StringIO]:
        logger = logging.getLogger(f"tkv-test-requests-{uuid.uuid4().hex}")
        logger.handlers[:], logger.propagate = [handler], False
        logger.setLevel(logging.INFO)
        return logger, stream

    yield made
    handler.flush()
    monkeypatch.setattr(logs, "_json_lines", None)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_request_line_is_the_record_logging_would_write(serve_logging: Logged) -> None:
    """`log_request` skips the logging module when its handler alone takes the line (as
    `serve` runs), and writes what the logging module would have written."""
    logger, stream = serve_logging()
    token = REQUEST_ID.set("req-7")
    try:
        log_request(logger, dict(reversed(REQUEST.items())))  # fields shown in one order
        assert stream.getvalue() == ""  # waiting to be written with others
        logger.info("request", extra=REQUEST)
    finally:
        REQUEST_ID.reset(token)
    direct, through_logging = _lines(stream)
    assert list(direct) == list(through_logging)  # the same keys, in the same order
    assert {k: v for k, v in direct.items() if k != "ts"} == {
        k: v for k, v in through_logging.items() if k != "ts"
    }
    assert direct["request_id"] == "req-7" and direct["message"] == "request"


def test_a_request_line_reaches_every_handler_and_filter_in_its_way(
    serve_logging: Logged,
) -> None:
    """Another handler (a test's capture, an operator's own) or a filter on the way gets
    the record, as from `logger.info`; a level that drops INFO drops the line."""
    logger, stream = serve_logging()
    capture = _Kept()
    logger.addHandler(capture)
    try:
        log_request(logger, REQUEST)
    finally:
        logger.removeHandler(capture)
    seen = [(r.getMessage(), getattr(r, "path", None)) for r in capture.records]
    assert seen == [("request", "/a2e")]
    assert len(_lines(stream)) == 1  # through logging: written at once

    dropped: list[str] = []

    def drop(record: logging.LogRecord) -> bool:
        dropped.append(record.getMessage())
        return False

    logger.addFilter(drop)
    try:
        log_request(logger, REQUEST)
    finally:
        logger.removeFilter(drop)
    logger.setLevel(logging.WARNING)
    log_request(logger, REQUEST)
    logger.handlers[0].flush()
    assert dropped == ["request"]
    assert len(_lines(stream)) == 1  # the first line only: filtered, then below the level


def test_request_lines_wait_briefly_and_never_behind_a_later_record(
    serve_logging: Logged,
) -> None:
    """Request lines are written together within FLUSH_S, without anything else written;
    any other record goes out at once, after the request lines before it. (Every text is
    shorter than a secret can be: another test in this process may have registered a word.)"""
    logger, stream = serve_logging()
    log_request(logger, REQUEST | {"path": "/p1"})
    assert stream.getvalue() == ""
    deadline = time.monotonic() + 5
    while not stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [line["path"] for line in _lines(stream)] == ["/p1"]
    log_request(logger, REQUEST | {"path": "/p2"})
    logger.warning("w3")
    assert [line.get("path", line["message"]) for line in _lines(stream)] == [
        "/p1",
        "/p2",
        "w3",
    ]


def test_many_request_lines_waiting_are_written_at_once(serve_logging: Logged) -> None:
    logger, stream = serve_logging()
    for n in range(logs.MAX_PENDING):
        log_request(logger, REQUEST | {"status": n})
    assert len(_lines(stream)) == logs.MAX_PENDING  # without waiting for FLUSH_S


def test_a_secret_in_a_request_path_is_redacted(serve_logging: Logged) -> None:
    """The path is the client's to write (`/v1/<anything>`): a secret this process knows is
    redacted from it on either way a request line goes out."""
    logger, stream = serve_logging()
    secret = "tkv-canary-in-a-path-77f3"
    register_secrets([secret])
    log_request(logger, REQUEST | {"path": f"/v1/{secret}/x"})  # straight to the handler
    logger.addHandler(_Kept())  # now through logging
    log_request(logger, REQUEST | {"path": f"/v1/{secret}"})
    logger.handlers[0].flush()
    assert [line["path"] for line in _lines(stream)] == ["/v1/[REDACTED]/x", "/v1/[REDACTED]"]


def test_a_message_its_arguments_do_not_fit_is_replaced(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    """logging reports a record it cannot format with its arguments as they are (on
    stderr, past every filter): the redaction renders the message first, and one that
    cannot be rendered is replaced by a fixed text, its arguments dropped."""
    logger, stream = captured
    register_secrets([SECRET])
    logger.warning("a number: %d", SECRET)
    assert json.loads(stream.getvalue())["message"] == logs.UNFIT_MESSAGE
