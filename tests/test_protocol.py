"""Wire protocol: the spec's examples are test vectors; bad input is INVALID_MESSAGE."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit_vault import protocol
from toolkit_vault.protocol import (
    InvalidMessage,
    ToolkitConfigureRequest,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
    dump_message,
    parse_message,
)

VECTORS = json.loads((Path(__file__).parent / "vectors" / "wire_examples.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["messages"], ids=lambda v: v["model"])
def test_spec_wire_examples_round_trip(vector: dict[str, str]) -> None:
    model = getattr(protocol, vector["model"])
    parsed = model.model_validate_json(vector["json"])
    wire = dump_message(parsed)
    assert json.loads(wire) == json.loads(vector["json"])
    assert list(json.loads(wire)) == list(json.loads(vector["json"]))  # the spec's order


@pytest.mark.parametrize("vector", VECTORS["messages"][0::2], ids=lambda v: v["model"])
def test_spec_requests_parse_through_the_untrusted_entry(vector: dict[str, str]) -> None:
    parsed = parse_message(vector["json"])
    assert json.loads(dump_message(parsed)) == json.loads(vector["json"])


@pytest.mark.parametrize(("name", "fields"), VECTORS["defaults"].items())
def test_defaults_and_field_order(name: str, fields: list[str]) -> None:
    model = getattr(protocol, name)
    message = model()
    data = json.loads(dump_message(message))
    assert list(data) == fields
    assert data["version"] == "1.0" and isinstance(data["ts"], float)
    assert len(data["id"]) == 36  # a UUID4 string


def test_unknown_extra_fields_are_ignored() -> None:
    parsed = parse_message('{"type":"toolkit/list/req","id":"a","surprise":{"x":1}}')
    assert isinstance(parsed, ToolkitListRequest) and parsed.id == "a"


def test_minor_versions_are_accepted() -> None:
    assert parse_message('{"type":"toolkit/list/req","version":"1.3"}').version == "1.3"


@pytest.mark.parametrize("vector", VECTORS["invalid"], ids=lambda v: v["why"])
def test_invalid_messages(vector: dict[str, str]) -> None:
    raw: str | bytes = bytes.fromhex(vector["raw_hex"]) if "raw_hex" in vector else vector["raw"]
    with pytest.raises(InvalidMessage) as caught:
        parse_message(raw)
    assert caught.value.message
    for detail in caught.value.details:
        assert set(detail) <= {"pointer", "keyword", "limit", "max"}


def test_invalid_message_echoes_a_readable_id() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message('{"type":"toolkit/nope","id":"keep-me"}')
    assert caught.value.req_id == "keep-me"


def test_an_id_no_response_could_carry_is_not_echoed() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message('{"type":"toolkit/nope","id":"x\\ud800"}')
    assert caught.value.req_id == ""


def test_message_ids_are_canonical_version_4_uuids() -> None:
    for _ in range(2000):
        ident = protocol._new_id()
        parsed = uuid.UUID(ident)
        assert str(parsed) == ident
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16-be", "utf-32-le"])
def test_bytes_are_read_in_every_json_encoding(encoding: str) -> None:
    """As `json.loads` reads bytes (RFC 8259 allows only UTF-8 on the wire; a peer sending
    UTF-16 gets the same answer as before the parser kept its decoder)."""
    raw = '{"type":"toolkit/list/req","id":"é-1"}'.encode(encoding)
    assert parse_message(raw).id == "é-1"


@pytest.mark.parametrize(
    "raw", ['\ufeff{"type":"toolkit/list/req"}', b'{"type":"toolkit/list/req"']
)
def test_a_byte_order_mark_or_a_cut_message_is_refused(raw: str | bytes) -> None:
    with pytest.raises(InvalidMessage, match="not valid JSON"):
        parse_message(raw)


def test_size_and_depth_are_bounded() -> None:
    big = json.dumps({"type": "toolkit/list/req", "pad": "x" * protocol.MAX_MESSAGE_BYTES})
    with pytest.raises(InvalidMessage, match="exceeds the limit"):
        parse_message(big)
    deep = '{"type":"toolkit/configure/req","config":' + '{"a":' * 100 + "1" + "}" * 101
    with pytest.raises(InvalidMessage, match="deeper"):
        parse_message(deep)
    with pytest.raises(InvalidMessage):
        parse_message("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("inner", ['{"a":', "["])
def test_the_depth_bound_is_exact(inner: str) -> None:
    """The message is level 1, its fields level 2: MAX_DEPTH levels pass, one more is
    refused, wherever the parser's shortcut (counting brackets) stops looking."""
    closing = "}" if inner.startswith("{") else "]"

    def nested(levels: int) -> str:
        containers = levels - 3  # the message, the config object, and the innermost 1
        config = '{"k":' + inner * containers + "1" + closing * containers + "}"
        return '{"type":"toolkit/configure/req","config":' + config + "}"

    assert parse_message(nested(protocol.MAX_DEPTH)).type == "toolkit/configure/req"
    with pytest.raises(InvalidMessage, match="deeper"):
        parse_message(nested(protocol.MAX_DEPTH + 1))


@given(
    req_id=st.text(st.characters(exclude_categories=["Cs"])),
    ts=st.floats(min_value=0.001, max_value=2**33),  # a millisecond after 1970, to 2242
)
def test_a_list_with_its_toolkits_serialized_ahead_is_the_same_line(req_id: str, ts: float) -> None:
    """`dump_toolkit_list` writes the response around definitions serialized once: the
    very line `dump_message` gives for the whole response, for none, one or several, any
    request id (escapes, non-ASCII, astral) and any time (below a millisecond after 1970
    the two would write a float's exponent differently)."""
    definitions = [
        ToolkitDefinition.model_validate(
            {"name": f"t{n}", "schema": {"type": "object", "x-secret": n}, "tools": ["a"]}
        )
        for n in range(3)
    ]
    ident = protocol._new_id()
    for count in range(4):
        shown = definitions[:count]
        whole = ToolkitListResponse(id=ident, ts=ts, req_id=req_id, toolkits=shown)
        line = protocol.dump_toolkit_list(req_id, [dump_message(d) for d in shown], ident, ts)
        assert line == dump_message(whole)
    assert json.loads(protocol.dump_toolkit_list(req_id, []))["id"] != ident


def test_wrong_type_details_never_carry_the_value() -> None:
    canary = "tkv-canary-protocol"
    with pytest.raises(InvalidMessage) as caught:
        parse_message(json.dumps({"type": "toolkit/configure/req", "config": [canary], "id": 3}))
    assert canary not in repr(caught.value.details) and canary not in caught.value.message


def test_configure_request_repr_hides_config() -> None:
    msg = ToolkitConfigureRequest(toolkit_name="x", config={"api_key": "tkv-canary-repr"})
    assert "tkv-canary-repr" not in repr(msg) and "tkv-canary-repr" not in str(msg)
    assert "tkv-canary-repr" in dump_message(msg)  # the wire form is the agent's own


json_values: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "type",
                "id",
                "version",
                "ts",
                "config",
                "filter_tags",
                "capabilities",
                "session_id",
                "toolkit_name",
            ]
        ),
        json_values,
    )
)
def test_parse_never_raises_anything_else(data: dict[str, Any]) -> None:
    with contextlib.suppress(InvalidMessage):
        parse_message(json.dumps(data))
