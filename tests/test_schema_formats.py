"""Every `format` the vault asserts is really checked, the same way on every install.

The JSON Schema Test Suite (tests/test_schema_suite.py) covers each format's edge cases;
this covers what the suite cannot: the issue's examples, that the checkers are the vault's
own table rather than whatever jsonschema finds installed, that no checker raises or takes
more than linear time on a string as long as a message, and that none touches the network.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.schema import compile_schema
from toolkit_vault.schema.formats import ANNOTATIONS, FORMATS, format_checker

# The formats JSON Schema 2020-12 defines (Validation, section 7.3), all of them checked.
DEFINED = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
    "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
    "uri-template", "json-pointer", "relative-json-pointer", "regex",
}  # fmt: skip
EXAMPLES = {  # format: (valid, invalid), the invalid ones from the issue first
    "uri": ("https://example.com/a?b#c", ["https://exa mple.com/", "http://[::ffff:01.2.3.4]/"]),
    "date-time": ("1998-12-31T23:59:60Z", ["2024-13-45T99:00:00Z", "1998-12-31T22:59:60Z"]),
    "hostname": ("xn--4dbc5h.example", ["-bad-.example", "a_b.example", "example."]),
    "email": ('"joe bloggs"@example.com', ["te..st@example.com", "joe@[127.0.0.300]"]),
    "idn-email": ("\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8", ["user\uff20example.com"]),
    "idn-hostname": ("\uc2e4\ub840.\ud14c\uc2a4\ud2b8", ["0a.\u05d0", "example\u3002"]),
    "date": ("2024-02-29", ["2023-02-29", "2023-W13-2"]),
    "time": ("23:59:60+00:00", ["23:59:60+01:00", "12:00:00"]),
    "duration": ("P1Y2M3DT4H5M6S", ["P1Y2D", "PT0.5S", "P1WT1H"]),
    "ipv4": ("10.0.0.1", ["10.0.0", "010.0.0.1"]),
    "ipv6": ("::ffff:1.2.3.4", ["fe80::1%eth0", "1::2::3"]),
    "uri-reference": ("//example.com/p", ["a:b c", "//[::ffff:192.168.0.01]/p"]),
    "iri": ("http://\u00e9x.example/\u00e9", ["http://a/\U000f0000", "http://a b/"]),
    "iri-reference": ("/\u00e9?q=\U000f0000", ["\u0085"]),
    "uuid": ("2eb8aa08-aa98-11ea-b4aa-73b441d16380", ["{2eb8aa08-aa98-11ea-b4aa-73b441d16380}"]),
    "uri-template": ("{+var}/x{?a,b*}", ["{a..b}", "a b", "{v:01}"]),
    "json-pointer": ("/a~1b/0", ["a", "/~2"]),
    "relative-json-pointer": ("0#", ["01/a", "\u0661/foo", "1#/a"]),
    "regex": ("^\\S+$", ["\\a", "(?i)a", "(?=x)"]),
}


def validator(fmt: str) -> Any:
    return compile_schema({"type": "object", "properties": {"v": {"format": fmt}}})


def test_the_vault_checks_exactly_the_defined_formats() -> None:
    assert set(FORMATS) == DEFINED == set(EXAMPLES)
    assert set(format_checker().checkers) == DEFINED
    assert set(format_checker(regex=False).checkers) == DEFINED - {"regex"}
    assert {"password"} == ANNOTATIONS


@pytest.mark.parametrize("fmt", sorted(EXAMPLES))
def test_each_format_is_asserted(fmt: str) -> None:
    valid, invalid = EXAMPLES[fmt]
    schema = validator(fmt)
    schema.split({"v": valid})
    schema.split({"v": 12})  # formats apply to strings only
    for value in invalid:
        with pytest.raises(ConfigInvalid) as caught:
            schema.split({"v": value})
        assert caught.value.details == [{"pointer": "/v", "keyword": "format"}], value


def test_password_marks_a_secret_and_asserts_nothing() -> None:
    assert validator("password").split({"v": "anything at all \n"}) == (
        {},
        {"/v": "anything at all \n"},
    )


def test_jsonschemas_own_checkers_play_no_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonschema's table changes with what is installed (no rfc3986-validator: every
    `uri` passes). Emptied, the vault's checks are unchanged."""
    for checker in (jsonschema.Draft202012Validator, jsonschema.Draft7Validator):
        monkeypatch.setattr(checker.FORMAT_CHECKER, "checkers", {})
    monkeypatch.setattr(jsonschema.FormatChecker, "checkers", {})
    schema = compile_schema(
        {"type": "object", "properties": {"v": {"format": "uri"}}, "title": "fresh"}
    )
    with pytest.raises(ConfigInvalid):
        schema.split({"v": "https://exa mple.com/"})


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=["Cs"]), max_size=40))
def test_no_checker_raises(text: str) -> None:
    for name, check in FORMATS.items():
        assert check(text) in (True, False), name


HOSTILE = [
    "a" * 1_000_000,
    "1" * 1_000_000,
    "http://" + "a@" * 500_000,
    "a:" + "/" * 1_000_000,
    "//" + "1." * 500_000,
    "a." * 500_000 + "@b.example",
    '"' + "\\a" * 500_000 + '"@x.example',
    "xn--" + "a" * 1_000_000,
    "{" + "a." * 500_000 + "}",
    "P" + "1" * 1_000_000 + "D",
    "/" + "~0" * 500_000,
    "(" * 300_000 + ")" * 300_000,
    "[" + "\\u{10FFFF}-" * 100_000 + "]",
]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_checkers_take_linear_time_on_a_message_sized_string(fmt: str) -> None:
    check = FORMATS[fmt]
    for text in HOSTILE:
        started = time.perf_counter()
        check(text)
        elapsed = time.perf_counter() - started
        assert elapsed < 1.5, (fmt, text[:20], elapsed)


def test_no_format_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: attempts.append(a) or [])
    for fmt, (valid, invalid) in EXAMPLES.items():
        for value in [valid, *invalid]:
            FORMATS[fmt](value)
    assert attempts == []
