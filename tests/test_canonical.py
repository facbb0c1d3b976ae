"""`canonical_json` is RFC 8785 byte for byte: every MAC, digest and chain link depends on it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolkit_vault.canonical import canonical_json, parse_json

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.integers(min_value=2**53 - 3, max_value=2**64),  # past the safe range: both refuse
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=1e-5, max_value=1e17),  # around the fast path's edges
    st.sampled_from([1e-4, 1e16, 9999999999999998.0, 0.0001000001, -0.0, 1.0, 5e-324]),
    st.text(),
    st.text(alphabet=st.characters(max_codepoint=0x1F)),  # control characters
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
)
_KEYS = st.one_of(st.text(), st.text(alphabet=st.characters(min_codepoint=0xE000)))
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=5),
    ),
    max_leaves=30,
)


def _outcome(encode: Any, value: Any) -> bytes | type[BaseException]:
    try:
        return bytes(encode(value))
    except (ValueError, TypeError) as exc:
        return type(exc)


@settings(max_examples=500, deadline=None)
@given(_JSON)
@example({"\U00010000": 1, "\uffff": 2})  # UTF-16 order differs from code point order
@example({"ts": 1796107434.695888, "details": {"changed": ["/a"], "status": "configured"}})
@example(1e16)
@example([-(2**53)])
@example(0.0001)
@example(-1.5)
@example(math.inf)
@example("\ud800")
def test_the_bytes_are_rfc8785s(value: Any) -> None:
    assert _outcome(canonical_json, value) == _outcome(rfc8785.dumps, value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [True, None, 0.5]}, b'{"a":[true,null,0.5],"b":1}'),
        (1796107434.695888, b"1796107434.695888"),
        (2.0, b"2"),  # never Python's `2.0`
        (1e-7, b"1e-7"),  # nor `1e-07`
        ("tab\there \u2028 \x7f", '"tab\\there \u2028 \x7f"'.encode()),
    ],
)
def test_known_encodings(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


def _parsed(parse: Any, text: Any) -> Any:
    try:
        return ("value", parse(text))
    except (ValueError, TypeError) as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(
    _JSON,
    st.sampled_from(["", " ", "\n", "\ufeff"]),
    st.sampled_from(["", " ", "\t\n", "x", " x", "}", ",1", "\ufeff"]),
)
@example('{"a": 1}', "", "garbage")
def test_parse_json_is_json_loads(value: Any, before: str, after: str) -> None:
    """`parse_json` takes the C scanner's word only for a whole string: text after the
    value, whitespace around it or a BOM give `json.loads`'s own answer or error."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (ValueError, TypeError):
        return
    text = before + text + after
    assert repr(_parsed(parse_json, text)) == repr(_parsed(json.loads, text))
    encoded = text.encode("utf-8", "surrogatepass")
    assert repr(_parsed(parse_json, encoded)) == repr(_parsed(json.loads, encoded))


@pytest.mark.parametrize("odd", [None, 1, b"{}", bytearray(b"[1]"), '{"a":1}x', "[1] [2]", ""])
def test_parse_json_answers_odd_input_as_json_loads(odd: Any) -> None:
    assert repr(_parsed(parse_json, odd)) == repr(_parsed(json.loads, odd))
