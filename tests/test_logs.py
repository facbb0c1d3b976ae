"""Structured logs: JSON lines with request ids, and redaction of every decrypted secret."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from toolkit_vault.logs import (
    REQUEST_ID,
    JsonFormatter,
    RedactingFilter,
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
    from toolkit_vault.service import Principal, Vault

    assert isinstance(vault, Vault)
    conn = vault.connect(Principal("local", "agent"))
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
