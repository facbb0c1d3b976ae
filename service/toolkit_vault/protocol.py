"""A2E toolkits wire protocol, version "1.0": every message of the spec, wire-exact.

Field names, defaults and order follow the toolkits specification (and our minimal
handshake, and the part of the `tools` capability the spec's relationship needs:
`tool/list`, whose entries carry the `toolkit` field). Parsing is strict about types (a
string is never coerced into a number) and lenient about unknown extra fields, as the design
asks. `parse_message` is the one entry point for untrusted bytes: it bounds size and depth,
refuses duplicate keys, and turns every failure into `InvalidMessage`, whose details name
locations, never values.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from typing import Any, Literal, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from toolkit_vault.versions import PROTOCOL_VERSION

__all__ = [
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "ConfigureStatus",
    "ErrorCode",
    "ErrorMessage",
    "HandshakeRequest",
    "HandshakeResponse",
    "IntakeOptions",
    "InvalidMessage",
    "Message",
    "Request",
    "ToolCallRequest",
    "ToolCallResponse",
    "ToolCancelRequest",
    "ToolCancelResponse",
    "ToolInfo",
    "ToolListRequest",
    "ToolListResponse",
    "ToolkitConfigureRequest",
    "ToolkitConfigureResponse",
    "ToolkitDefinition",
    "ToolkitListRequest",
    "ToolkitListResponse",
    "ToolkitStatusEvent",
    "dump_message",
    "dump_toolkit_list",
    "parse_message",
]

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_DEPTH = 64
_SUPPORTED_VERSION = re.compile(r"1(\.\d+)*")
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))  # the version and variant bits
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)  # version 4, RFC 4122 variant

_LIST_LINE = (  # ToolkitListResponse's fields, in its order
    '{"type":"toolkit/list/resp","id":"%s","version":"%s","ts":%r,"req_id":%s,"toolkits":[%s]}'
)
_json_string = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps builds one a call
ErrorCode = Literal["INVALID_MESSAGE", "RUNTIME_ERROR", "CAPABILITY_NOT_NEGOTIATED", "UNAUTHORIZED"]
ConfigureStatus = Literal["ok", "error", "partial"]


def _new_id() -> str:
    """A random (version 4) UUID from Python's generator, not the OS's: a message id names
    a message and grants nothing (a session id does, and comes from `uuid.uuid4`), and this
    is much cheaper on a path that makes two per list. Formatted here as `str` of a
    `uuid.UUID` would, without building one."""
    digits = "%032x" % (random.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET)
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class Message(_Wire):
    """Envelope fields every A2E message carries, in the spec's order."""

    type: str
    id: str = Field(default_factory=_new_id)
    version: str = PROTOCOL_VERSION
    ts: float = Field(default_factory=time.time)


class ToolkitDefinition(_Wire):
    """A toolkit manifest; `schema` is the JSON Schema its config must match."""

    name: str
    alias: str = ""
    description: str = ""
    category: str = ""
    tags: list[str] = Field(default_factory=list)
    icon_svg: str | None = None
    config_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    tools: list[str]
    configured: bool = False
    version: str = "1.0.0"
    # extension: when the credential configured in this session ends (epoch seconds), if a
    # check or the credential said (`core.expiry`); absent otherwise, as for a spec peer
    expires_at: int | None = Field(default=None, exclude_if=lambda v: v is None)


class ToolkitListRequest(Message):
    type: Literal["toolkit/list/req"] = "toolkit/list/req"
    filter_kind: str = ""
    filter_tags: list[str] = Field(default_factory=list)


class ToolkitListResponse(Message):
    type: Literal["toolkit/list/resp"] = "toolkit/list/resp"
    req_id: str = ""
    toolkits: list[ToolkitDefinition] = Field(default_factory=list)


class IntakeOptions(_Wire):
    """Extension: `"intake": {"expires_in": seconds}` asks for a link shorter-lived than
    the vault's default (never longer)."""

    expires_in: int | None = Field(default=None, ge=1)


def _without_unused(data: dict[str, Any], **unused: Any) -> dict[str, Any]:
    """Drop extension fields left at their default: a spec-only peer sees the spec's shape."""
    return {k: v for k, v in data.items() if k not in unused or v != unused[k]}


class ToolkitConfigureRequest(Message):
    type: Literal["toolkit/configure/req"] = "toolkit/configure/req"
    session_id: str = ""
    toolkit_name: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    intake: bool | IntakeOptions = False  # extension: a person enters the secrets (intake link)
    # extension: "principal" stores the config for the principal, in all its sessions
    scope: Literal["session", "principal"] = "session"
    # extension: an operator's environment template gives the public fields (`templates`)
    template: str | None = None

    @model_serializer(mode="wrap")
    def _spec_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unused(handler(self), intake=False, scope="session", template=None)

    def __repr__(self) -> str:
        # The config carries credentials: never let a repr or a traceback show it.
        return (
            f"ToolkitConfigureRequest(id={self.id!r}, session_id={self.session_id!r}, "
            f"toolkit_name={self.toolkit_name!r}, scope={self.scope!r}, "
            f"config=<{len(self.config)} fields hidden>)"
        )

    __str__ = __repr__


class ToolkitConfigureResponse(Message):
    type: Literal["toolkit/configure/resp"] = "toolkit/configure/resp"
    req_id: str = ""
    toolkit_name: str = ""
    status: ConfigureStatus = "ok"
    message: str | None = None
    intake_url: str | None = None  # extension: where a person enters the secret fields

    @model_serializer(mode="wrap")
    def _spec_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unused(handler(self), intake_url=None)


class HandshakeRequest(Message):
    type: Literal["handshake/req"] = "handshake/req"
    capabilities: list[str] = Field(default_factory=list)
    session_id: str | None = None


class HandshakeResponse(Message):
    type: Literal["handshake/resp"] = "handshake/resp"
    req_id: str = ""
    session_id: str = ""
    capabilities: list[str] = Field(default_factory=list)


class ToolkitStatusEvent(Message):
    type: Literal["toolkit/status/event"] = "toolkit/status/event"
    session_id: str = ""
    toolkit_name: str = ""
    configured: bool = False
    status: ConfigureStatus = "ok"
    message: str | None = None
    intake_url: str | None = None  # extension: where a person connects again (OAuth)

    @model_serializer(mode="wrap")
    def _spec_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unused(handler(self), intake_url=None)


def _absent_if_none(value: Any) -> bool:
    return value is None


class ToolInfo(_Wire):
    """One tool of a configured toolkit; `toolkit` names that toolkit (the spec's relationship).

    Extension (`tool/call`): `input_schema` is the JSON Schema a call's arguments must
    match; `output_schema` and `annotations` (MCP's tool annotations) where the tool has
    them, absent otherwise."""

    name: str
    toolkit: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=_absent_if_none)
    annotations: dict[str, Any] | None = Field(default=None, exclude_if=_absent_if_none)


class ToolListRequest(Message):
    type: Literal["tool/list/req"] = "tool/list/req"


class ToolListResponse(Message):
    type: Literal["tool/list/resp"] = "tool/list/resp"
    req_id: str = ""
    tools: list[ToolInfo] = Field(default_factory=list)


class ToolCallRequest(Message):
    """Extension of the `tools` capability: call one tool of a toolkit configured in the
    session, inside the vault (docs/protocol.md)."""

    type: Literal["tool/call/req"] = "tool/call/req"
    session_id: str = ""
    toolkit_name: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallResponse(Message):
    """A tool's result, in the shape of MCP's `tools/call` result (`content`,
    `structuredContent`, `isError`), snake_case like the spec's own fields. `is_error` is
    the tool's own failure; a call the vault refuses is an `error` message instead."""

    type: Literal["tool/call/resp"] = "tool/call/resp"
    req_id: str = ""
    toolkit_name: str = ""
    tool_name: str = ""
    content: list[dict[str, Any]] = Field(default_factory=list)
    structured_content: dict[str, Any] | None = None
    is_error: bool = False


class ToolCancelRequest(Message):
    """Cancel a call in flight on this connection: `call_id` is its `tool/call/req`'s id."""

    type: Literal["tool/cancel/req"] = "tool/cancel/req"
    call_id: str


class ToolCancelResponse(Message):
    """`cancelled`: whether a call of that id was in flight (it then answers `cancelled`)."""

    type: Literal["tool/cancel/resp"] = "tool/cancel/resp"
    req_id: str = ""
    call_id: str = ""
    cancelled: bool = False


class ErrorMessage(Message):
    type: Literal["error"] = "error"
    req_id: str = ""
    code: ErrorCode = "RUNTIME_ERROR"
    message: str = ""
    details: list[dict[str, Any]] = Field(default_factory=list)


Request = (
    HandshakeRequest
    | ToolkitListRequest
    | ToolkitConfigureRequest
    | ToolListRequest
    | ToolCallRequest
    | ToolCancelRequest
)
_REQUESTS: dict[str, TypeAdapter[Any]] = {
    model.model_fields["type"].default: TypeAdapter(model)
    for model in (
        HandshakeRequest,
        ToolkitListRequest,
        ToolkitConfigureRequest,
        ToolListRequest,
        ToolCallRequest,
        ToolCancelRequest,
    )
}


class InvalidMessage(Exception):
    """An inbound message that cannot be parsed; `req_id` is echoed when it was readable."""

    def __init__(self, message: str, *, req_id: str = "", details: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.message = message
        self.req_id = req_id
        self.details = details


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _refuse_constant(name: str) -> NoReturn:
    """`parse_constant`: NaN and Infinity are Python's extensions, not JSON."""
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """`parse_float`: a number like 1e400 would become infinity, which JSON cannot carry."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _is_unicode(value: Any) -> bool:
    """False when a key or string holds a lone surrogate (the escape `\\ud800` decodes to
    one): I-JSON (RFC 7493) forbids it, and no response could carry it back."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _openings(raw: str | bytes) -> int:
    """How many objects and arrays open in `raw`, at most; `_depth` is at most one more."""
    if isinstance(raw, str):
        return raw.count("{") + raw.count("[")
    return raw.count(b"{") + raw.count(b"[")


def _plain_ascii(raw: str | bytes) -> bool:
    """ASCII with no `\\u` escape: then no string in it can hold a lone surrogate."""
    if isinstance(raw, str):
        return raw.isascii() and "\\u" not in raw
    return raw.isascii() and b"\\u" not in raw


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return deepest


class _Decoders(threading.local):
    """One strict decoder per thread: `json.loads` with hooks builds a decoder per call,
    a quarter of a small message's parse."""

    def __init__(self) -> None:
        self.strict = json.JSONDecoder(
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
            parse_float=_finite,
        )


_DECODERS = _Decoders()


def _loads(raw: str | bytes) -> Any:
    """`json.loads(raw, ...)` with the hooks above (bytes in UTF-8, -16 or -32)."""
    if isinstance(raw, bytes):
        raw = raw.decode(json.detect_encoding(raw), "surrogatepass")
    return _DECODERS.strict.decode(raw)


def parse_message(raw: str | bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Request:
    """Parse one untrusted inbound message or raise `InvalidMessage`."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise InvalidMessage(
            f"message of {size} bytes exceeds the limit of {max_bytes} bytes",
            details=[{"limit": "message_bytes", "max": max_bytes}],
        )
    try:
        data = _loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = "duplicate object key" if "duplicate" in str(exc) else "not valid JSON"
        raise InvalidMessage(f"message is {reason}", details=[]) from None
    if not isinstance(data, dict):
        raise InvalidMessage("message is not a JSON object", details=[])
    plain = _plain_ascii(raw)
    ident = data.get("id")
    req_id: str = ident if isinstance(ident, str) and (plain or _is_unicode(ident)) else ""
    if _openings(raw) >= MAX_DEPTH and _depth(data) > MAX_DEPTH:
        raise InvalidMessage(
            f"message nests deeper than {MAX_DEPTH} levels",
            req_id=req_id,
            details=[{"limit": "depth", "max": MAX_DEPTH}],
        )
    if not plain and not _is_unicode(data):
        raise InvalidMessage(
            "message has a string that is not valid Unicode", req_id=req_id, details=[]
        )
    version = data.get("version", PROTOCOL_VERSION)
    if not isinstance(version, str) or not _SUPPORTED_VERSION.fullmatch(version):
        raise InvalidMessage(
            f"unsupported protocol version; this host speaks {PROTOCOL_VERSION}",
            req_id=req_id,
            details=[{"pointer": "/version", "keyword": "version"}],
        )
    msg_type = data.get("type")
    adapter = _REQUESTS.get(msg_type) if isinstance(msg_type, str) else None
    if adapter is None:
        raise InvalidMessage("unknown message type", req_id=req_id, details=[{"pointer": "/type"}])
    try:
        request: Request = adapter.validate_python(data)
    except ValidationError as exc:
        details = [
            {"pointer": "/" + "/".join(str(part) for part in err["loc"]), "keyword": err["type"]}
            for err in exc.errors(include_input=False, include_url=False)
        ]
        raise InvalidMessage(
            "message fields have the wrong type", req_id=req_id, details=details
        ) from None
    return request


def dump_message(message: Message) -> str:
    """Serialize with the spec's field names and order, as one compact JSON line."""
    return message.model_dump_json(by_alias=True)


def dump_toolkit_list(
    req_id: str, toolkits: list[str], ident: str | None = None, ts: float | None = None
) -> str:
    """The line `dump_message` gives for a `ToolkitListResponse` to `req_id` with
    `toolkits`, each serialized already (as `dump_message` would): serializing them again,
    then building and serializing the response around them, was most of a list's CPU.
    `ident` (a message id) and `ts` default as the model's do; the test holds the two
    lines equal, byte for byte."""
    return _LIST_LINE % (
        ident or _new_id(),
        PROTOCOL_VERSION,
        time.time() if ts is None else ts,
        _json_string(req_id),
        ",".join(toolkits),
    )
