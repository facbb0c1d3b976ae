"""Malformed and refused input through every transport: a well-formed error, nothing stored.

Hypothesis builds hostile A2E messages (wrong field types, missing and unknown types, other
versions, huge and deeply nested values, invalid UTF-8 and Unicode, duplicate keys, not
JSON at all). Each goes through a live channel (see conftest: the in-process `Connection`,
one long-lived `toolkit-vault stdio` process, and HTTP POST and a WebSocket on one real
`toolkit-vault serve` per test) on SQLite and PostgreSQL. Every one must get exactly one
`error` of the right code, the channel must answer a list request right after (the same
HTTP connection, the same WebSocket), and the store must be as it was.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adversarial_support import (
    Channel,
    HttpChannel,
    assert_error,
    audit_actions,
    config_rows,
    counts,
    line,
)
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import MAX_DEPTH, MAX_MESSAGE_BYTES
from toolkit_vault.schema import compile_schema

from tkv_test_plugins import SECRETIVE_SCHEMA

CANARY = "tkv-canary-malformed-5e1f"
LIST = line({"type": "toolkit/list/req", "id": "after"})
EXAMPLES = {"connection": 300, "stdio": 150, "http": 100, "websocket": 100}

VALID: dict[str, dict[str, Any]] = {
    "handshake/req": {"capabilities": ["toolkits"], "session_id": None},
    "toolkit/list/req": {"filter_kind": "", "filter_tags": ["test"]},
    "toolkit/configure/req": {
        "session_id": "",
        "toolkit_name": "secretive",
        "config": {"endpoint": "https://x.test", "api_key": CANARY},
    },
}
FIELD_KINDS: dict[str, dict[str, str]] = {
    "handshake/req": {"capabilities": "list[str]", "session_id": "str|None"},
    "toolkit/list/req": {"filter_kind": "str", "filter_tags": "list[str]"},
    "toolkit/configure/req": {"session_id": "str", "toolkit_name": "str", "config": "dict"},
}
ENVELOPE_KINDS = {"id": "str", "version": "version", "ts": "float"}
RESPONSE_TYPES = ["handshake/resp", "toolkit/list/resp", "toolkit/configure/resp", "error"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.just(CANARY)
)
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _wrong(kind: str) -> st.SearchStrategy[Any]:
    """A JSON value a strict parser must refuse for a field of this kind."""
    if kind == "str":
        return json_values.filter(lambda v: not isinstance(v, str))
    if kind == "str|None":
        return json_values.filter(lambda v: v is not None and not isinstance(v, str))
    if kind == "dict":
        return json_values.filter(lambda v: not isinstance(v, dict))
    if kind == "float":
        return json_values.filter(lambda v: isinstance(v, bool) or not isinstance(v, int | float))
    if kind == "list[str]":
        return json_values.filter(lambda v: not isinstance(v, list)) | st.lists(
            json_values, min_size=1, max_size=4
        ).filter(lambda v: any(not isinstance(x, str) for x in v))
    assert kind == "version"
    return json_values.filter(
        lambda v: not isinstance(v, str) or not re.fullmatch(r"1(\.\d+)*", v)
    ) | st.sampled_from(["2.0", "0.9", "", "v1", "1.0a", "1..0", "1.0.x"])


Case = tuple[bytes, str | None]  # raw message, the id its error must echo (None: "")


def _message(msg_type: str, n: int) -> dict[str, Any]:
    return {"type": msg_type, "id": f"m-{n}", **VALID[msg_type]}


@st.composite
def wrong_types(draw: st.DrawFn) -> Case:
    msg_type = draw(st.sampled_from(sorted(VALID)))
    fields = {**FIELD_KINDS[msg_type], **ENVELOPE_KINDS}
    field = draw(st.sampled_from(sorted(fields)))
    message = _message(msg_type, draw(st.integers(0, 10**6)))
    message[field] = draw(_wrong(fields[field]))
    return line(message), message["id"] if field != "id" else None


@st.composite
def unknown_types(draw: st.DrawFn) -> Case:
    message = _message(draw(st.sampled_from(sorted(VALID))), draw(st.integers(0, 10**6)))
    choice = draw(st.integers(0, 2))
    if choice == 0:
        del message["type"]  # the only required field
    elif choice == 1:
        message["type"] = draw(
            st.sampled_from([*RESPONSE_TYPES, "toolkit/status/event", "toolkit/unknown/req"])
            | st.text(max_size=30).filter(lambda t: t not in VALID)
        )
    else:
        message["type"] = draw(json_values.filter(lambda v: not isinstance(v, str)))
    return line(message), message["id"]


@st.composite
def too_deep(draw: st.DrawFn) -> Case:
    message = _message(draw(st.sampled_from(sorted(VALID))), draw(st.integers(0, 10**6)))
    depth = draw(st.integers(MAX_DEPTH, 400))  # + the message itself: past the limit
    value: Any = CANARY
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    message[draw(st.sampled_from(["config", "extra", "filter_tags"]))] = value
    return line(message), message["id"]


@st.composite
def not_json(draw: st.DrawFn) -> Case:
    valid = line(_message(draw(st.sampled_from(sorted(VALID))), 1))
    variant = draw(st.integers(0, 8))
    raw: bytes
    if variant == 0:
        raw = valid[: draw(st.integers(1, len(valid) - 1))]  # truncated
    elif variant == 1:
        raw = valid + draw(st.sampled_from([b" x", b"}", b",", b"{}", b"\x00"]))
    elif variant == 2:
        raw = valid.replace(b'"id"', b"id", 1)  # unquoted key
    elif variant == 3:
        constant = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"]))
        raw = valid[:-1] + b', "ts": ' + constant + b"}"
    elif variant == 4:
        raw = b"[" * 100_000 + b"]" * 100_000  # deeper than any recursive parser allows
    elif variant == 5:
        raw = draw(
            st.text(min_size=1, max_size=200)
            .map(lambda t: t.replace("\n", " ").encode())
            .filter(lambda r: r.strip() and not _is_object(r))
        )
    elif variant == 6:
        raw = line(draw(json_values.filter(lambda v: not isinstance(v, dict))))
    elif variant == 7:
        raw = b'{"type": "toolkit/list/req", "big": ' + b"9" * 5_000 + b"}"
    else:
        raw = b'{"type": "toolkit/list/req", "id": 1' + b"0" * 400 + b"}"
    return raw, None


@st.composite
def lone_surrogates(draw: st.DrawFn) -> Case:
    """`\\ud800` is JSON syntax but no Unicode character: no response could carry it."""
    escape = draw(st.sampled_from([b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"a\\ud83d"]))
    valid = line(_message(draw(st.sampled_from(sorted(VALID))), 1))
    where = draw(st.integers(0, 3))
    if where == 0:
        return b'{"type": "toolkit/list/req", "id": "' + escape + b'"}', None
    if where == 1:
        return b'{"id": "m-1", "type": "' + escape + b'"}', "m-1"
    if where == 2:
        return valid[:-1] + b', "extra": "' + escape + b'"}', "m-1"
    return b'{"' + escape + b'": 1, ' + valid[1:], "m-1"


@st.composite
def invalid_utf8(draw: st.DrawFn) -> Case:
    valid = line(_message(draw(st.sampled_from(sorted(VALID))), 1))
    bad = draw(
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"])
    )
    if draw(st.booleans()):
        return valid[:-1] + b', "extra": "' + bad + b'"}', None
    surrogate = b"\xed\xa0\x80"  # UTF-8 of U+D800: json.loads decodes it ("surrogatepass")
    return valid[:-1] + b', "extra": "' + surrogate + b'"}', "m-1"


@st.composite
def duplicate_keys(draw: st.DrawFn) -> Case:
    msg_type = draw(st.sampled_from(sorted(VALID)))
    key = draw(st.sampled_from(["type", "id", *FIELD_KINDS[msg_type]]))
    body = json.dumps(_message(msg_type, 1))[1:-1]
    if draw(st.booleans()):
        again = json.dumps(key) + ": " + json.dumps(CANARY)
        return ("{" + body + ", " + again + "}").encode(), None
    inner = '{"endpoint": "a", "api_key": "b", "api_key": ' + json.dumps(CANARY) + "}"
    message = '{"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": '
    return (message + inner + "}").encode(), None


@st.composite
def oversized(draw: st.DrawFn) -> Case:
    message = _message(draw(st.sampled_from(sorted(VALID))), 1)
    excess = draw(st.integers(1, 5_000))
    size = len(line({**message, "pad": ""}))
    message["pad"] = CANARY * ((MAX_MESSAGE_BYTES - size) // len(CANARY))
    message["pad"] += "x" * (MAX_MESSAGE_BYTES - len(line(message)) + excess)
    raw = line(message)
    assert len(raw) == MAX_MESSAGE_BYTES + excess
    return raw, None


def _is_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


malformed = st.one_of(
    wrong_types(),
    unknown_types(),
    too_deep(),
    not_json(),
    lone_surrogates(),
    invalid_utf8(),
    duplicate_keys(),
    oversized(),
)


def _usable(channel: Channel) -> None:
    (response,) = channel.exchange(LIST)
    assert response["type"] == "toolkit/list/resp" and response["req_id"] == "after"


def _refused_config(config: dict[str, Any]) -> bool:
    try:
        compile_schema(SECRETIVE_SCHEMA).validate(config)
    except Exception:
        return True
    return False


config_values = st.dictionaries(
    st.sampled_from(["endpoint", "api_key", "mode", "auth", "tokens", "headers", "other"]),
    json_values,
    max_size=5,
)


@st.composite
def refused_configures(draw: st.DrawFn) -> tuple[bytes, str]:
    """Well-formed configure requests the vault must refuse: (raw, expected message)."""
    n = draw(st.integers(0, 10**6))
    if draw(st.booleans()):
        name = draw(st.text(max_size=30).filter(lambda t: t not in ("secretive", "filesystem")))
        config = draw(config_values)
        expected = "toolkit not found"
    else:
        name, expected = "secretive", "config does not match the toolkit schema"
        config = draw(config_values.filter(_refused_config))
    message = {"type": "toolkit/configure/req", "id": f"c-{n}", "toolkit_name": name}
    return line({**message, "config": config}), expected


def test_hostile_messages_get_the_right_error_and_store_nothing(
    channel: Channel, vault: Vault
) -> None:
    """Malformed: INVALID_MESSAGE and nothing written at all. Well-formed but refused
    (unknown toolkit, invalid config): RUNTIME_ERROR and only its `configure_refused` event."""
    before, rows = counts(vault), config_rows(vault)
    refused = 0

    @settings(
        max_examples=EXAMPLES[channel.name],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        st.one_of(malformed.map(lambda c: (c, None)), refused_configures().map(lambda c: (None, c)))
    )
    def check(cases: tuple[Case | None, tuple[bytes, str] | None]) -> None:
        nonlocal refused
        bad, refusal = cases
        if bad is not None:
            raw, echoed = bad
            note(f"{raw[:300]!r} ({len(raw)} bytes), echo {echoed!r}")
            out = channel.exchange(raw)
            assert len(out) == 1, out
            assert_error(out[0], "INVALID_MESSAGE", echoed or "")
        else:
            assert refusal is not None
            raw, expected = refusal
            note(repr(raw))
            out = channel.exchange(raw)
            assert len(out) == 1, out
            assert_error(out[0], "RUNTIME_ERROR", json.loads(raw)["id"])
            assert out[0]["message"] == expected
            refused += 1
        assert CANARY not in json.dumps(out)
        _usable(channel)
        assert counts(vault) == {**before, "audit_events": before["audit_events"] + refused}

    check()
    assert config_rows(vault) == rows
    assert (
        audit_actions(vault)[len(audit_actions(vault)) - refused :]
        == ["configure_refused"] * refused
    )


def test_edge_cases_on_one_live_channel(channel: Channel, vault: Vault) -> None:
    """Protocol edges one after another on the same channel, which must stay usable."""
    before = counts(vault)

    # One session per connection; a configure naming another session is refused. (Each
    # HTTP POST is a connection of its own: a handshake there is judged on its own.)
    again = channel.exchange(line({"type": "handshake/req", "id": "h2", "capabilities": []}))
    if channel.name == "http":
        assert_error(again[0], "CAPABILITY_NOT_NEGOTIATED", "h2")
    else:
        assert_error(again[0], "INVALID_MESSAGE", "h2")
    foreign = {"type": "toolkit/configure/req", "id": "f1", "session_id": "another-session"}
    foreign |= {"toolkit_name": "filesystem", "config": {"root_dir": "/tmp"}}
    (error,) = channel.exchange(line(foreign))
    assert_error(error, "RUNTIME_ERROR", "f1")
    assert error["message"] == "unknown session"

    # The size limit is the message's own on every transport (framing bytes do not count).
    message: dict[str, Any] = {"type": "toolkit/list/req", "id": "edge", "pad": ""}
    message["pad"] = "x" * (MAX_MESSAGE_BYTES - len(line(message)))
    at_limit = line(message)
    assert len(at_limit) == MAX_MESSAGE_BYTES
    (response,) = channel.exchange(at_limit)
    assert response["type"] == "toolkit/list/resp" and response["req_id"] == "edge"
    (error,) = channel.exchange(at_limit[:-1] + b" }")
    assert_error(error, "INVALID_MESSAGE", "")
    assert error["details"] == [{"limit": "message_bytes", "max": MAX_MESSAGE_BYTES}]
    # An empty message (stdio frames by line: it has none there) is refused as not JSON.
    if channel.name != "stdio":
        for raw in (b"", b" ", b"\t\r\n"):
            (error,) = channel.exchange(raw)
            assert_error(error, "INVALID_MESSAGE", "")
    if isinstance(channel, HttpChannel):
        # The session header is untrusted input too: any other value is an unknown session.
        for header in ("x" * 8000, "\xff\xfe", "a\u00e9", channel.session_id + "x"):
            status, body = channel.post(LIST, headers={"A2E-Session": header})
            assert status == 200
            assert_error(json.loads(body), "RUNTIME_ERROR")
            assert json.loads(body)["message"] == "unknown session"
        # Whitespace around a field value is not part of it (RFC 9110 5.5), whether or not
        # the HTTP parser strips it: the same session either way.
        for header in (channel.session_id + " ", "\t" + channel.session_id + " \t"):
            status, body = channel.post(LIST, headers={"A2E-Session": header})
            assert json.loads(body)["type"] == "toolkit/list/resp", body
        # A body without a length (chunked) is refused at the limit, never buffered whole.
        peak = channel.server.peak_rss()
        status, body = channel.post(iter([at_limit[:-1]] + [b" " * 2**20] * 64 + [b"}"]))
        assert status == 413
        assert_error(json.loads(body), "INVALID_MESSAGE", "")
        assert json.loads(body)["details"] == [{"limit": "message_bytes", "max": MAX_MESSAGE_BYTES}]
        assert channel.server.peak_rss() - peak < 32 * 2**20

    # `\\ud800` is JSON syntax but no Unicode: refused, and never echoed (no reply could
    # be encoded with it).
    for raw, echoed in (
        (b'{"type": "toolkit/list/req", "id": "\\ud800"}', ""),
        (b'{"type": "toolkit/list/req", "id": "x", "filter_kind": "\\udfff"}', "x"),
        (b'{"type": "toolkit/configure/req", "id": "y", "toolkit_name": "\\ud800"}', "y"),
        (
            b'{"type": "toolkit/configure/req", "id": "z", "toolkit_name": "secretive",'
            b' "config": {"endpoint": "e", "api_key": "\\ud800"}}',
            "z",
        ),
        (
            b'{"type": "toolkit/configure/req", "id": "w", "toolkit_name": "secretive",'
            b' "config": {"endpoint": "e", "api_key": "k", "headers": {"\\ud800": "v"}}}',
            "w",
        ),
        (b'{"type": "handshake/req", "id": "v", "session_id": "a\\ud800"}', "v"),
    ):
        (error,) = channel.exchange(raw)
        assert_error(error, "INVALID_MESSAGE", echoed)
    assert counts(vault) == before

    # Secret values are sealed as canonical JSON (RFC 8785): a number it cannot represent
    # is refused before anything is stored, and never echoed (the value can be a secret).
    secret_number = 98_765_432_109_876_543_210_123  # beyond 2**53: not an I-JSON number
    config = {"endpoint": "e", "api_key": "k", "auth": {"pin": secret_number}}
    raw = line({"type": "toolkit/configure/req", "id": "n1", "toolkit_name": "secretive"})
    raw = raw[:-1] + b', "config": ' + json.dumps(config).encode() + b"}"
    (error,) = channel.exchange(raw)
    assert_error(error, "RUNTIME_ERROR", "n1")
    assert error["details"] == [{"pointer": "/auth/pin", "keyword": "i-json"}]
    assert str(secret_number) not in json.dumps(error)
    _usable(channel)
    after = counts(vault)
    assert after["config_versions"] == before["config_versions"]
    assert after["audit_events"] == before["audit_events"] + 1  # configure_refused
