"""The plugin side of `tool/call` (issue 50): both plugin shapes declare tools with input
schemas and answer calls on the instance their configuration set up; the registry keeps a
`Tool` for every listed name, its input schema checked and compiled at registration; a
tool's answer becomes a `ToolResult` of plain JSON or is refused without quoting it; the
built-in `filesystem` tools answer inside the root and fail as `is_error` results that
name no path; imported bundles keep their tools' descriptions and schemas; the conformance
mixins cover all of it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ConfigInvalid, SchemaRefused, VaultError
from toolkit_vault.plugin import (
    CallContext,
    PluginAnswerRefused,
    ResultRefused,
    SpecToolkit,
    Tool,
    ToolkitPlugin,
    ToolResult,
    answers_calls,
    as_tool_result,
)
from toolkit_vault.protocol import (
    ToolCallRequest,
    ToolCallResponse,
    ToolInfo,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
    ToolListRequest,
    ToolListResponse,
)
from toolkit_vault.settings import VaultSettings
from toolkit_vault.testing import ToolkitConformance, ToolkitPluginConformance
from toolkit_vault.toolkits import filesystem
from toolkit_vault.toolkits.filesystem import UNAVAILABLE, FilesystemToolkit
from toolkit_vault.toolkits.imports import PackageRefused, PackageToolkit, import_package
from toolkit_vault.toolkits.registry import (
    BUILT_IN,
    RegisteredToolkit,
    SourceKind,
    ToolkitRegistry,
    ToolkitSource,
    coerce_definition,
)
from toolkit_vault.toolkits.tool_declarations import ToolsRefused

pytestmark = pytest.mark.one_database

CANARY = "tkv-canary-tools-7c1f"
SOURCE = ToolkitSource(SourceKind.ENTRY_POINT, "tool-tests")
BUNDLE = Path(__file__).parent / "fixtures" / "mcp" / "bundles" / "mcpb" / "hello-world-node.json"
QUERY = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1}},
    "required": ["query"],
    "additionalProperties": False,
}
KEYED = {
    "type": "object",
    "properties": {"api_key": {"type": "string", "writeOnly": True}},
    "required": ["api_key"],
}


def context(seconds: float = 30) -> CallContext:
    return CallContext(deadline=time.monotonic() + seconds)


class Searcher:
    """The single-toolkit shape: `tools` declares one of its two tools; `call_tool` answers."""

    definition: ClassVar[dict[str, Any]] = {
        "name": "searcher",
        "schema": KEYED,
        "tools": ["search", "ping"],
    }
    tools: ClassVar[list[Tool]] = [Tool("search", "Search the index", QUERY)]

    def __init__(self) -> None:
        self._key: str | None = None

    def initialize(self, config: dict[str, Any]) -> None:
        self._key = config["api_key"]

    def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> Any:
        if self._key is None:
            raise VaultError("not configured")
        if name == "search":
            return {
                "content": [{"type": "text", "text": f"1 hit for {arguments['query']}"}],
                "structuredContent": {"hits": 1},
            }
        return "pong"


NOTES = ToolkitDefinition(name="notes", schema=KEYED, tools=["add", "count"])
PLAIN = ToolkitDefinition(name="plain", schema={"type": "object"}, tools=["noop"])
ADD = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


class NotesPlugin(ToolkitPlugin):
    """The spec's shape, serving two toolkits; `_list_tools` declares `notes`'s `add` only."""

    listed_tools = 0  # how often any instance was asked for its tools

    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, Any] | None = None
        self.notes: list[str] = []

    def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
        return ToolkitListResponse(req_id=msg.id, toolkits=[NOTES, PLAIN])

    def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> ToolkitConfigureResponse:
        self.config = dict(msg.config)
        return ToolkitConfigureResponse(req_id=msg.id, toolkit_name=msg.toolkit_name)

    def _list_tools(self, msg: ToolListRequest) -> ToolListResponse:
        NotesPlugin.listed_tools += 1
        add = ToolInfo(name="add", toolkit="notes", description="Add a note", input_schema=ADD)
        return ToolListResponse(req_id=msg.id, tools=[add])

    def _call_tool(self, msg: ToolCallRequest) -> Any:
        if msg.tool_name == "add":
            self.notes.append(msg.arguments["text"])
            text = f"{len(self.notes)} notes"
            return ToolCallResponse(
                req_id=msg.id,
                toolkit_name=msg.toolkit_name,
                tool_name=msg.tool_name,
                content=[{"type": "text", "text": text}],
            )
        return {"content": [], "structuredContent": {"count": len(self.notes)}, "isError": False}


def registered_notes() -> RegisteredToolkit:
    registry = ToolkitRegistry()
    registry.register_plugin(NotesPlugin, SOURCE)
    return registry.get("notes")


# -- as_tool_result -------------------------------------------------------------------------


class ForeignResponse(BaseModel):
    """Another library's `tool/call/resp` model: same fields, not ours."""

    type: str = "tool/call/resp"
    content: list[dict[str, Any]] = []
    structured_content: dict[str, Any] | None = None
    is_error: bool = False


TEXT = {"type": "text", "text": "hello"}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("hello", ToolResult((TEXT,))),
        (
            ToolResult((TEXT,), {"a": [1, 2.5, None]}, True),
            ToolResult((TEXT,), {"a": [1, 2.5, None]}, True),
        ),
        (ToolCallResponse(content=[TEXT], is_error=True), ToolResult((TEXT,), None, True)),
        (
            ForeignResponse(content=[TEXT], structured_content={"n": 1}),
            ToolResult((TEXT,), {"n": 1}),
        ),
        ({"content": [TEXT], "is_error": True}, ToolResult((TEXT,), None, True)),
        (
            {"content": [], "structuredContent": {"n": 1}, "isError": True},
            ToolResult((), {"n": 1}, True),
        ),
        ({"structured_content": {"n": 1}}, ToolResult((), {"n": 1})),
        (
            {"content": ({"type": "image", "data": "AA==", "mimeType": "image/png"},)},
            ToolResult(({"type": "image", "data": "AA==", "mimeType": "image/png"},)),
        ),
    ],
)
def test_as_tool_result_takes_every_shape_a_tool_may_answer(
    answer: object, expected: ToolResult
) -> None:
    assert as_tool_result(answer) == expected


def test_as_tool_result_keeps_a_copy_the_tool_can_no_longer_change() -> None:
    structured: dict[str, Any] = {"items": ["a"]}
    block = {"type": "text", "text": "a"}
    result = as_tool_result(ToolResult((block,), structured))
    structured["items"].append(CANARY)
    block["text"] = CANARY
    assert result == ToolResult(({"type": "text", "text": "a"},), {"items": ["a"]})


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": CANARY}
    for _ in range(levels):
        value = {"x": value}
    return value


REFUSED_ANSWERS = {
    "nothing": None,
    "a number": 5,
    "bytes": CANARY.encode(),
    "a list": [CANARY],
    "a mapping that is no result": {"answer": CANARY},
    "content not a list": {"content": CANARY},
    "a block that is no mapping": {"content": [CANARY]},
    "a block of no type": {"content": [{"text": CANARY}]},
    "a block of a type MCP does not define": {"content": [{"type": "html", "text": CANARY}]},
    "a text block without text": {"content": [{"type": "text", "data": CANARY}]},
    "structured content not an object": {"content": [], "structured_content": [CANARY]},
    "is_error not a boolean": {"content": [TEXT], "is_error": CANARY},
    "both spellings": {"content": [], "is_error": True, "isError": False, "note": CANARY},
    "not finite": {"structured_content": {CANARY: float("nan")}},
    "a set": {"structured_content": {"v": {CANARY}}},
    "a key that is not text": {"structured_content": {1: CANARY}},
    "an object": {"structured_content": {"v": object()}, "note": CANARY},
    "too deep": {"structured_content": _deep(80)},
    "a secret key in a bad place": {"structured_content": {CANARY: {"v": b"x"}}},
    "a result whose content is no list": ToolResult(content=CANARY),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("answer", REFUSED_ANSWERS.values(), ids=REFUSED_ANSWERS.keys())
def test_as_tool_result_refuses_anything_else_without_quoting_it(answer: object) -> None:
    with pytest.raises(ResultRefused) as caught:
        as_tool_result(answer)
    assert isinstance(caught.value, PluginAnswerRefused)
    assert CANARY not in str(caught.value) and CANARY not in repr(caught.value.details)


# -- the registry's tools ---------------------------------------------------------------------


def test_every_listed_tool_has_a_tool_declared_or_taking_any_object() -> None:
    registered = ToolkitRegistry().register(Searcher, SOURCE)
    assert [t.name for t in registered.tools] == ["search", "ping"]
    assert registered.tool("search") == Tool("search", "Search the index", QUERY)
    assert registered.tool("ping") == Tool("ping") and Tool("ping").input_schema == {
        "type": "object"
    }
    assert registered.tool("nope") is None and registered.tool("") is None
    made_by_hand = RegisteredToolkit(coerce_definition(Searcher.definition), Searcher, SOURCE)
    assert [t.input_schema for t in made_by_hand.tools] == [{"type": "object"}] * 2

    class Named(Searcher):  # a `tools` attribute of names (a plugin written before tools)
        tools: ClassVar[list[Any]] = ["ping"]

    assert ToolkitRegistry().register(Named, SOURCE).tools == (Tool("search"), Tool("ping"))


def test_input_schemas_are_compiled_at_registration_and_check_arguments() -> None:
    registered = ToolkitRegistry().register(Searcher, SOURCE)
    registered.input_schema("search").validate({"query": "x"})
    for invalid in ({}, {"query": ""}, {"query": 5}, {"query": "x", "extra": CANARY}):
        with pytest.raises(ConfigInvalid) as caught:
            registered.input_schema("search").validate(invalid)
        assert CANARY not in str(caught.value) + repr(caught.value.details)
    registered.input_schema("ping").validate({"anything": [1]})
    with pytest.raises(KeyError):
        registered.input_schema("nope")


HOSTILE_INPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "remote $ref": {"type": "object", "properties": {"q": {"$ref": "https://x.test/s.json"}}},
    "lookahead": {"type": "object", "properties": {"q": {"pattern": "^(?=x)"}}},
    "root not an object": {"type": "array"},
    "unknown format": {"type": "object", "properties": {"q": {"format": "color"}}},
    "not JSON": {"type": "object", "properties": {"q": {"enum": [{1, 2}]}}},
}


def _declaring(schema: Any, *, output: bool = False) -> type[Searcher]:
    tool = (
        Tool("search", input_schema=QUERY, output_schema=schema)
        if output
        else Tool("search", input_schema=schema)
    )

    class Declaring(Searcher):
        tools: ClassVar[list[Tool]] = [tool]

    return Declaring


@pytest.mark.parametrize("schema", HOSTILE_INPUT_SCHEMAS.values(), ids=HOSTILE_INPUT_SCHEMAS.keys())
def test_a_hostile_input_schema_refuses_the_toolkit_at_registration(schema: Any) -> None:
    registry = ToolkitRegistry()
    with pytest.raises(SchemaRefused, match=r"^tool 'search': "):
        registry.register(_declaring(schema), SOURCE)
    assert "searcher" not in registry
    with pytest.raises(SchemaRefused, match=r"^tool 'search': "):
        registry.register(_declaring(schema, output=True), SOURCE)  # an output schema too
    assert "searcher" not in registry


def test_a_spec_plugins_toolkit_with_a_hostile_input_schema_is_left_out_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Hostile(NotesPlugin):
        def _list_tools(self, msg: ToolListRequest) -> ToolListResponse:
            bad = ToolInfo(
                name="noop", toolkit="plain", input_schema=HOSTILE_INPUT_SCHEMAS["lookahead"]
            )
            return ToolListResponse(tools=[*super()._list_tools(msg).tools, bad])

    registry = ToolkitRegistry()
    registered = registry.register_plugin(Hostile, SOURCE)
    assert [t.definition.name for t in registered] == ["notes"]
    assert "toolkit plain of entry point tool-tests refused: tool 'noop': " in caplog.text


@pytest.mark.parametrize(
    ("declared", "refusal"),
    [
        ([Tool("search"), Tool("delete")], "declares tool 'delete', which its definition's tools"),
        ([Tool("search"), {"name": "search"}], "declares tool 'search' twice"),
    ],
)
def test_declarations_describe_listed_names_and_add_none(declared: list[Any], refusal: str) -> None:
    class Contradicting(Searcher):
        tools: ClassVar[list[Any]] = declared

    registry = ToolkitRegistry()
    with pytest.raises(ToolsRefused, match=refusal):
        registry.register(Contradicting, SOURCE)
    assert "searcher" not in registry


@pytest.mark.parametrize(
    "declared",
    [
        [5],
        [b"search"],
        [{"description": "no name"}],
        [{"name": "search", "inputSchema": [1]}],
        [{"name": "search", "input_schema": {}, "inputSchema": {}}],
        CANARY,
    ],
)
def test_what_is_no_tool_declaration_is_refused(declared: Any) -> None:
    class Odd(Searcher):
        tools: ClassVar[Any] = declared

    with pytest.raises(VaultError) as caught:
        ToolkitRegistry().register(Odd, SOURCE)
    assert CANARY not in caught.value.message


def test_mcp_shaped_declarations_are_read() -> None:
    class Mcp(Searcher):
        tools: ClassVar[list[Any]] = [
            {
                "name": "search",
                "description": "d",
                "inputSchema": QUERY,
                "annotations": {"readOnlyHint": True},
            }
        ]

    tool = ToolkitRegistry().register(Mcp, SOURCE).tool("search")
    assert tool == Tool("search", "d", QUERY, annotations={"readOnlyHint": True})


# -- the spec's shape -------------------------------------------------------------------------


def test_a_spec_plugin_declares_tools_and_answers_on_its_configured_instance() -> None:
    notes = registered_notes()
    assert [(t.name, t.description) for t in notes.tools] == [("add", "Add a note"), ("count", "")]
    assert notes.tool("add") is not None and notes.tool("add").input_schema == ADD  # type: ignore[union-attr]
    first, second = notes.factory(), notes.factory()
    assert isinstance(first, SpecToolkit) and isinstance(second, SpecToolkit)
    assert answers_calls(first)
    with pytest.raises(VaultError, match="not configured"):
        first.call_tool("add", {"text": "x"}, context())
    first.initialize({"api_key": CANARY})
    second.initialize({"api_key": "another"})
    assert first.call_tool("add", {"text": "a"}, context()) == ToolResult.text("1 notes")
    assert first.call_tool("add", {"text": "b"}, context()) == ToolResult.text("2 notes")
    assert first.call_tool("count", {}, context()) == ToolResult((), {"count": 2})
    assert second.call_tool("count", {}, context()) == ToolResult((), {"count": 0})
    assert first._plugin.config == {"api_key": CANARY}  # the instance configure set up


def test_the_registry_hands_each_instance_the_tools_it_checked() -> None:
    notes = registered_notes()
    asked = NotesPlugin.listed_tools
    instance = notes.factory()
    assert isinstance(instance, SpecToolkit) and instance.tools == notes.tools
    assert NotesPlugin.listed_tools == asked  # one session's initialization asks nothing
    direct = SpecToolkit(NotesPlugin, NOTES)  # outside the registry: asks its own plugin
    assert direct.tools == (notes.tool("add"),) and NotesPlugin.listed_tools == asked + 1


def test_handle_dispatches_tool_messages_to_the_optional_methods() -> None:
    plugin = NotesPlugin()
    listed = plugin.handle(ToolListRequest())
    assert isinstance(listed, ToolListResponse) and [t.name for t in listed.tools] == ["add"]
    called = plugin.handle(
        ToolCallRequest(toolkit_name="notes", tool_name="add", arguments={"text": "x"})
    )
    assert isinstance(called, ToolCallResponse) and called.content == [
        {"type": "text", "text": "1 notes"}
    ]

    class Bare(ToolkitPlugin):
        def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
            return ToolkitListResponse(toolkits=[PLAIN])

        def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> ToolkitConfigureResponse:
            return ToolkitConfigureResponse(toolkit_name=msg.toolkit_name)

    with pytest.raises(TypeError, match="not a toolkit message"):
        Bare().handle(ToolCallRequest(toolkit_name="plain", tool_name="noop"))
    plain = ToolkitRegistry().register_plugin(Bare, SOURCE)[0]
    assert plain.tools == (Tool("noop"),)
    instance = plain.factory()
    assert not answers_calls(instance)  # a spec plugin without _call_tool answers no call


@pytest.mark.parametrize(
    "answer",
    [
        ToolCallResponse(toolkit_name="plain", tool_name="add", content=[TEXT]),
        {"toolkit_name": "notes", "tool_name": "count", "content": [TEXT]},
        ToolkitConfigureResponse(toolkit_name="notes"),
        {"content": CANARY},
        CANARY,
    ],
)
def test_a_plugins_answer_for_another_tool_or_of_another_shape_is_refused(answer: Any) -> None:
    class Wrong(NotesPlugin):
        def _call_tool(self, msg: ToolCallRequest) -> Any:
            return answer

    instance = SpecToolkit(Wrong, NOTES)
    instance.initialize({"api_key": "k"})
    with pytest.raises(PluginAnswerRefused) as caught:
        instance.call_tool("add", {"text": "x"}, context())
    assert CANARY not in str(caught.value)


def test_a_spec_plugin_discovered_through_its_entry_point_brings_its_tools(
    spec_vault: Vault,
) -> None:
    mail = spec_vault.registry.get("spec-mail")
    assert [t.name for t in mail.tools] == ["send", "read", "search"]
    assert mail.tool("search") == Tool(
        "search",
        "Search the mailbox",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}},
            "required": ["query"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": True},
    )
    assert mail.tool("send") == Tool("send")
    instance = mail.factory()
    assert isinstance(instance, SpecToolkit) and answers_calls(instance)
    instance.initialize({"endpoint": "https://mail.example.test", "api_key": CANARY})
    answer = instance.call_tool("search", {"query": "x"}, context())
    assert answer == ToolResult.text("search: nothing found at https://mail.example.test")


# -- the built-in filesystem ------------------------------------------------------------------


@pytest.fixture
def fs(tmp_path: Path) -> FilesystemToolkit:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.txt").write_text(CANARY)
    toolkit = FilesystemToolkit()
    toolkit.initialize({"root_dir": str(root)})
    return toolkit


def test_the_filesystem_declares_its_three_tools_with_input_schemas() -> None:
    registered = ToolkitRegistry.default().get("filesystem")
    assert registered.source == BUILT_IN and registered.tools == filesystem.TOOLS
    assert [t.name for t in registered.tools] == ["read_file", "write_file", "list_dir"]
    registered.input_schema("read_file").validate({"path": "a.txt"})
    registered.input_schema("write_file").validate({"path": "a.txt", "content": ""})
    registered.input_schema("list_dir").validate({})
    for name, invalid in [
        ("read_file", {}),
        ("read_file", {"path": 5}),
        ("read_file", {"path": ""}),
        ("read_file", {"path": "a", "mode": "rb"}),
        ("write_file", {"path": "a"}),
        ("write_file", {"path": "a", "content": 5}),
        ("list_dir", {"path": None}),
    ]:
        with pytest.raises(ConfigInvalid):
            registered.input_schema(name).validate(invalid)


def test_filesystem_calls_write_read_and_list(fs: FilesystemToolkit) -> None:
    assert answers_calls(fs)
    written = fs.call_tool("write_file", {"path": "a/b.txt", "content": "héllo"}, context())
    assert written == ToolResult.text("written")
    assert fs.call_tool("read_file", {"path": "a/b.txt"}, context()) == ToolResult.text("héllo")
    listed = fs.call_tool("list_dir", {}, context())
    assert listed.structured_content == {"entries": ["a"]} and not listed.is_error
    assert json.loads(listed.content[0]["text"]) == {"entries": ["a"]}
    assert fs.call_tool("list_dir", {"path": "a"}, context()).structured_content == {
        "entries": ["b.txt"]
    }
    assert as_tool_result(listed) == listed


@pytest.mark.parametrize(
    "path",
    [
        f"../{CANARY}",
        f"a/../../{CANARY}",
        f"/etc/{CANARY}",
        "../outside.txt",
        f"link/{CANARY}",
        "sneaky",
        f"../{CANARY}/../root/f",  # out and back in as written: refused before the disk is asked
    ],
)
def test_a_path_outside_the_root_is_an_error_result_that_echoes_nothing(
    fs: FilesystemToolkit, tmp_path: Path, path: str
) -> None:
    os.symlink(tmp_path, fs.root / "link")
    os.symlink(tmp_path / "outside.txt", fs.root / "sneaky")
    (fs.root / "f").write_text("inside")
    for name, arguments in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("list_dir", {"path": path}),
    ]:
        result = fs.call_tool(name, arguments, context())
        assert result == ToolResult.text(UNAVAILABLE, is_error=True), (name, path)
    assert (tmp_path / "outside.txt").read_text() == CANARY  # nothing written outside
    assert not (tmp_path / CANARY).exists() and sorted(p.name for p in fs.root.iterdir()) == [
        "f",
        "link",
        "sneaky",
    ]
    assert (fs.root / "f").read_text() == "inside"
    for name in ("read_file", "list_dir"):  # a missing path inside looks the same
        missing = fs.call_tool(name, {"path": f"missing-{CANARY}"}, context())
        assert missing == ToolResult.text(UNAVAILABLE, is_error=True)


def test_a_cancelled_or_late_call_touches_nothing(fs: FilesystemToolkit) -> None:
    cancelled = context()
    cancelled.cancelled.set()
    for given in (cancelled, context(-1)):
        result = fs.call_tool("write_file", {"path": "late.txt", "content": "x"}, given)
        assert result.is_error and "cancelled" in result.content[0]["text"]
    assert not (fs.root / "late.txt").exists()


def test_reads_and_listings_are_bounded_and_text_only(
    fs: FilesystemToolkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filesystem, "MAX_READ_BYTES", 8)
    monkeypatch.setattr(filesystem, "MAX_ENTRIES", 2)
    (fs.root / "big.txt").write_text(CANARY)
    (fs.root / "small.txt").write_text("12345678")
    (fs.root / "binary").write_bytes(b"\xff\xfe" + CANARY.encode()[:4])
    big = fs.call_tool("read_file", {"path": "big.txt"}, context())
    assert big == ToolResult.text("the file is larger than 8 bytes", is_error=True)
    assert fs.call_tool("read_file", {"path": "small.txt"}, context()) == ToolResult.text(
        "12345678"
    )
    binary = fs.call_tool("read_file", {"path": "binary"}, context())
    assert binary == ToolResult.text("the file is not UTF-8 text", is_error=True)
    listed = fs.call_tool("list_dir", {}, context())
    assert listed == ToolResult.text("the directory holds more than 2 entries", is_error=True)
    surrogate = fs.call_tool("write_file", {"path": "s.txt", "content": "\ud800"}, context())
    assert surrogate.is_error and not (fs.root / "s.txt").exists()


def test_filesystem_arguments_are_checked_again_and_unknown_tools_refused(
    fs: FilesystemToolkit,
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {}),
        ("read_file", {"path": 5}),
        ("write_file", {"path": "a"}),
    ]
    for name, arguments in calls:
        result = fs.call_tool(name, arguments, context())
        assert result.is_error and "must be text" in result.content[0]["text"]
    assert fs.call_tool("delete", {"path": "a"}, context()).is_error
    with pytest.raises(VaultError, match="not configured"):
        FilesystemToolkit().call_tool("list_dir", {}, context())


# -- imported bundles -------------------------------------------------------------------------


def _bundle(**tool: Any) -> bytes:
    doc = json.loads(BUNDLE.read_text())
    doc["tools"][0].update(tool)
    return json.dumps(doc).encode()


@pytest.mark.usefixtures("stored_only")  # a vault that keeps configs: it runs no bundle
def test_an_imported_bundle_carries_its_tools_descriptions_and_schemas(
    vault: Vault, home: VaultSettings
) -> None:
    description = json.loads(BUNDLE.read_text())["tools"][0]["description"]
    schema = {"type": "object", "properties": {"format": {"enum": ["iso", "unix"]}}}
    import_package(vault.store, vault.registry, _bundle(inputSchema=schema), "local")
    expected = Tool("get_current_time", description, schema)
    assert vault.registry.get("hello-world-node").tools == (expected,)
    vault.registry.get("hello-world-node").input_schema("get_current_time").validate(
        {"format": "iso"}
    )
    again = open_vault(home)  # another process reads them from the store
    try:
        toolkit = again.registry.get("hello-world-node")
        assert toolkit.tools == (expected,)
        instance = toolkit.factory()
        assert isinstance(instance, PackageToolkit) and not answers_calls(instance)
    finally:
        again.store.engine.dispose()


def test_a_bundle_whose_tool_schema_the_vault_cannot_run_is_skipped(vault: Vault) -> None:
    hostile = {"type": "object", "properties": {"q": {"$ref": "https://x.test/s.json"}}}
    with pytest.raises(PackageRefused, match="invalid_tool_schema: tool 'get_current_time'"):
        import_package(vault.store, vault.registry, _bundle(inputSchema=hostile), "local")
    assert "hello-world-node" not in vault.registry


# -- the conformance mixins -------------------------------------------------------------------


class TestSearcherConformance(ToolkitConformance):
    factory = Searcher
    valid_config: ClassVar[dict[str, Any]] = {"api_key": CANARY}
    invalid_configs: ClassVar[list[dict[str, Any]]] = [{}]
    valid_calls: ClassVar[list[tuple[str, dict[str, Any]]]] = [
        ("search", {"query": "weather"}),
        ("ping", {}),
    ]
    invalid_arguments: ClassVar[list[tuple[str, dict[str, Any]]]] = [("search", {})]


class TestNotesPluginConformance(ToolkitPluginConformance):
    plugin_factory = NotesPlugin
    valid_configs: ClassVar[dict[str, dict[str, Any]]] = {"notes": {"api_key": CANARY}}
    valid_calls: ClassVar[dict[str, list[tuple[str, dict[str, Any]]]]] = {
        "notes": [("add", {"text": "x"}), ("count", {})]
    }
    invalid_arguments: ClassVar[dict[str, list[tuple[str, dict[str, Any]]]]] = {
        "notes": [("add", {}), ("add", {"text": 1})]
    }


class TestFilesystemCallConformance(ToolkitConformance):
    factory = FilesystemToolkit
    valid_config: ClassVar[dict[str, Any]] = {"root_dir": "/tmp"}
    valid_calls: ClassVar[list[tuple[str, dict[str, Any]]]] = [("read_file", {"path": "-"})]
    invalid_arguments: ClassVar[list[tuple[str, dict[str, Any]]]] = [
        ("read_file", {}),
        ("write_file", {"path": "x"}),
    ]


def test_the_conformance_mixins_catch_a_tool_that_breaks_the_contract() -> None:
    class Leaky(Searcher):
        def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> Any:
            return {"content": [], "structured_content": {"key": self._key}}

    class Mutating(Searcher):
        def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> Any:
            arguments.clear()
            return "done"

    class LeakyNotes(NotesPlugin):
        def _call_tool(self, msg: ToolCallRequest) -> Any:
            return {"content": [{"type": "text", "text": str(self.config)}]}

    class NoAnswer(NotesPlugin):
        _call_tool = None  # type: ignore[assignment]

    class LeakyCheck(TestSearcherConformance):
        factory = Leaky

    class MutatingCheck(TestSearcherConformance):
        factory = Mutating

    class LeakyNotesCheck(TestNotesPluginConformance):
        plugin_factory = LeakyNotes

    class NoAnswerCheck(TestNotesPluginConformance):
        plugin_factory = NoAnswer

    class LaxCheck(TestSearcherConformance):  # an argument the schema accepts, said invalid
        invalid_arguments: ClassVar[list[tuple[str, dict[str, Any]]]] = [("ping", {})]

    for check in (LeakyCheck(), MutatingCheck()):
        with pytest.raises(AssertionError):
            check.test_calls_are_answered_with_results_that_hide_the_config()
    for plugin_check in (LeakyNotesCheck(), NoAnswerCheck()):
        with pytest.raises(AssertionError):
            plugin_check.test_calls_are_answered_on_the_configured_instance()
    with pytest.raises(AssertionError):
        LaxCheck().test_input_schemas_accept_valid_calls_and_refuse_invalid_arguments()
