"""Conformance test mixins that any toolkit plugin can run against itself, in either shape.

    from toolkit_vault.testing import ToolkitConformance, ToolkitPluginConformance

    class TestMyToolkit(ToolkitConformance):          # single toolkit: definition + initialize
        factory = MyToolkit
        valid_config = {"token": "...", "region": "eu"}
        invalid_configs = [{}, {"token": 5}]
        valid_calls = [("search", {"query": "x"})]    # optional: tools it answers (call_tool)
        invalid_arguments = [("search", {})]          # refused by the tool's input schema

    class TestMyPlugin(ToolkitPluginConformance):     # the spec's ToolkitPlugin, many toolkits
        plugin_factory = MyPlugin
        valid_configs = {"mail": {"api_key": "..."}, "calendar": {"token": "..."}}
        invalid_configs = {"mail": [{}]}
        valid_calls = {"mail": [("send", {"to": "a@b.test"})]}   # optional, by toolkit
        invalid_arguments = {"mail": [("send", {})]}

Like keyring's backend test suite: the vault's assumptions about a plugin, as tests.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any, ClassVar

from toolkit_vault.plugin import (
    CallContext,
    SpecToolkit,
    ToolResult,
    answers_calls,
    as_tool_result,
    declared_tools,
    is_spec_plugin,
    listed_definitions,
)
from toolkit_vault.protocol import (
    Message,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitListRequest,
    ToolkitStatusEvent,
)
from toolkit_vault.schema import CompiledSchema, compile_schema
from toolkit_vault.toolkits.registry import (
    RegisteredToolkit,
    SourceKind,
    ToolkitFactory,
    ToolkitRegistry,
    ToolkitSource,
    coerce_definition,
)

__all__ = ["ToolkitConformance", "ToolkitPluginConformance"]

Call = tuple[str, dict[str, Any]]  # a tool's name and the arguments of one call
SOURCE = ToolkitSource(SourceKind.ENTRY_POINT, "conformance")


class ToolkitConformance:
    factory: ClassVar[ToolkitFactory]
    valid_config: ClassVar[dict[str, Any]]
    invalid_configs: ClassVar[list[dict[str, Any]]] = []
    valid_calls: ClassVar[list[Call]] = []  # each answered by `call_tool` once configured
    invalid_arguments: ClassVar[list[Call]] = []  # each refused by its tool's input schema

    def test_definition_has_the_spec_fields(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        assert definition.name and definition.tools
        assert all(isinstance(tool, str) and tool for tool in definition.tools)

    def test_schema_registers_and_accepts_the_valid_config(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        compile_schema(definition.config_schema).validate(self.valid_config)

    def test_schema_refuses_invalid_configs(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        _refuses(definition.config_schema, self.invalid_configs)

    def test_factory_builds_independent_instances(self) -> None:
        assert type(self).factory() is not type(self).factory()

    def test_initialize_reports_only_its_own_tools(self) -> None:
        instance = type(self).factory()
        config = copy.deepcopy(self.valid_config)
        unavailable = instance.initialize(config)
        assert config == self.valid_config, "initialize must not modify the config it is given"
        tools = coerce_definition(instance.definition).tools
        assert unavailable is None or set(unavailable) <= set(tools)

    def test_repr_does_not_reveal_the_config(self) -> None:
        instance = type(self).factory()
        instance.initialize(copy.deepcopy(self.valid_config))
        _hides(repr(instance) + str(instance), self.valid_config)

    def test_push_callback_if_any_takes_a_function(self) -> None:
        bind = getattr(type(self).factory(), "set_push_callback", None)
        assert bind is None or callable(bind)
        if bind is not None:
            bind(lambda event: None)

    def _registered(self) -> RegisteredToolkit:
        """Registered as the vault registers it: declared tools and input schemas checked."""
        return ToolkitRegistry().register(type(self).factory, SOURCE)

    def test_tools_register_with_checked_input_schemas(self) -> None:
        _tools_register(self._registered())

    def test_input_schemas_accept_valid_calls_and_refuse_invalid_arguments(self) -> None:
        _check_arguments(self._registered(), self.valid_calls, self.invalid_arguments)

    def test_calls_are_answered_with_results_that_hide_the_config(self) -> None:
        if not self.valid_calls:
            return
        instance = type(self).factory()
        instance.initialize(copy.deepcopy(self.valid_config))
        assert answers_calls(instance), "valid_calls given, but the toolkit has no call_tool"
        secrets = self._registered().schema.split(self.valid_config)[1]
        _answers(instance, self.valid_calls, secrets)


class ToolkitPluginConformance:
    """For the spec's shape: `_list_toolkits` and `_configure_toolkit`, push by callback, and
    optionally `_list_tools` and `_call_tool`."""

    plugin_factory: ClassVar[Callable[[], Any]]
    valid_configs: ClassVar[dict[str, dict[str, Any]]]  # toolkit name -> a config it accepts
    invalid_configs: ClassVar[dict[str, list[dict[str, Any]]]] = {}
    valid_calls: ClassVar[dict[str, list[Call]]] = {}  # toolkit name -> calls it answers
    invalid_arguments: ClassVar[dict[str, list[Call]]] = {}

    def _plugin(self) -> Any:
        plugin = type(self).plugin_factory()
        assert is_spec_plugin(plugin), "needs _list_toolkits and _configure_toolkit"
        return plugin

    def test_list_answers_the_request_with_valid_definitions(self) -> None:
        request = ToolkitListRequest()
        answer = self._plugin().handle(request)
        assert answer.type == "toolkit/list/resp" and answer.req_id == request.id
        names = [coerce_definition(d).name for d in listed_definitions(self._plugin())]
        assert names and len(names) == len(set(names)), "toolkit names must be unique"
        assert set(self.valid_configs) <= set(names)

    def test_every_toolkit_registers(self) -> None:
        registered = ToolkitRegistry().register_plugin(type(self).plugin_factory, SOURCE)
        expected = {coerce_definition(d).name for d in listed_definitions(self._plugin())}
        assert {t.definition.name for t in registered} == expected
        for toolkit in registered:
            assert toolkit.definition.tools, f"{toolkit.definition.name} bundles no tool"
            _tools_register(toolkit)

    def test_declared_tools_belong_to_listed_toolkits(self) -> None:
        names = {coerce_definition(d).name for d in listed_definitions(self._plugin())}
        assert set(declared_tools(self._plugin())) <= names, "tools of a toolkit not listed"

    def test_input_schemas_accept_valid_calls_and_refuse_invalid_arguments(self) -> None:
        registered = ToolkitRegistry().register_plugin(type(self).plugin_factory, SOURCE)
        by_name = {toolkit.definition.name: toolkit for toolkit in registered}
        for name in set(self.valid_calls) | set(self.invalid_arguments):
            valid, invalid = self.valid_calls.get(name, []), self.invalid_arguments.get(name, [])
            _check_arguments(by_name[name], valid, invalid)

    def test_calls_are_answered_on_the_configured_instance(self) -> None:
        definitions = {d.name: d for d in listed_definitions(self._plugin())}
        for name, calls in self.valid_calls.items():
            toolkit = SpecToolkit(type(self).plugin_factory, coerce_definition(definitions[name]))
            assert answers_calls(toolkit), "valid_calls given, but the plugin has no _call_tool"
            toolkit.initialize(copy.deepcopy(self.valid_configs[name]))
            _answers(toolkit, calls, self._secrets(name))

    def test_schemas_accept_valid_and_refuse_invalid_configs(self) -> None:
        schemas = {d.name: d.config_schema for d in listed_definitions(self._plugin())}
        for name, config in self.valid_configs.items():
            compile_schema(schemas[name]).validate(config)
        for name, configs in self.invalid_configs.items():
            _refuses(schemas[name], configs)

    def _secrets(self, name: str) -> dict[str, Any]:
        """The secret values of the valid config of `name`, as the vault's split marks them."""
        schema = {d.name: d.config_schema for d in listed_definitions(self._plugin())}[name]
        return compile_schema(schema).split(self.valid_configs[name])[1]

    def test_configure_answers_for_the_named_toolkit(self) -> None:
        for name, valid in self.valid_configs.items():
            config = copy.deepcopy(valid)
            request = ToolkitConfigureRequest(toolkit_name=name, config=config)
            answer = self._plugin().handle(request)
            assert isinstance(answer, ToolkitConfigureResponse)
            assert (answer.req_id, answer.toolkit_name) == (request.id, name)
            assert answer.status in ("ok", "partial"), f"{name}: a valid config failed"
            assert config == valid, "_configure_toolkit must not modify the config it is given"
            _hides(answer.message or "", self._secrets(name))

    def test_the_vault_runs_each_toolkit(self) -> None:
        for definition in listed_definitions(self._plugin()):
            if definition.name in self.valid_configs:
                toolkit = SpecToolkit(type(self).plugin_factory, coerce_definition(definition))
                toolkit.initialize(copy.deepcopy(self.valid_configs[definition.name]))
                _hides(repr(toolkit), self._secrets(definition.name))

    def test_emit_event_reaches_the_push_callback(self) -> None:
        plugin, received = self._plugin(), list[Message]()
        plugin.set_push_callback(received.append)
        event: Message = ToolkitStatusEvent(configured=False, status="error", message="expired")
        plugin.emit_event(event)
        assert received == [event]

    def test_instances_are_independent(self) -> None:
        assert type(self).plugin_factory() is not type(self).plugin_factory()

    def test_repr_does_not_reveal_a_config(self) -> None:
        for name, valid in self.valid_configs.items():
            plugin = self._plugin()
            plugin.handle(ToolkitConfigureRequest(toolkit_name=name, config=copy.deepcopy(valid)))
            _hides(repr(plugin) + str(plugin), self._secrets(name))


def _tools_register(toolkit: RegisteredToolkit) -> None:
    """A `Tool` for every listed name, each input schema compiled (the registry refused a
    toolkit whose schema it cannot run, so reaching here means it can)."""
    assert [t.name for t in toolkit.tools] == list(dict.fromkeys(toolkit.definition.tools))
    for tool in toolkit.tools:
        assert toolkit.tool(tool.name) == tool
        toolkit.input_schema(tool.name)


def _check_arguments(toolkit: RegisteredToolkit, valid: list[Call], invalid: list[Call]) -> None:
    for name, arguments in valid:
        assert toolkit.tool(name) is not None, f"{name} is not a tool of {toolkit.definition.name}"
        toolkit.input_schema(name).validate(arguments)
    for name, arguments in invalid:
        _refuses_with(toolkit.input_schema(name), [arguments])


def _answers(toolkit: Any, calls: list[Call], secrets: dict[str, Any]) -> None:
    """Each call answered with a result `as_tool_result` takes, its arguments unmodified, and
    no secret of the config in it (the vault would withhold such a result whole)."""
    for name, arguments in calls:
        given = copy.deepcopy(arguments)
        context = CallContext(deadline=time.monotonic() + 30)
        result = as_tool_result(toolkit.call_tool(name, given, context))
        assert isinstance(result, ToolResult)
        assert given == arguments, "call_tool must not modify the arguments it is given"
        shown = json.dumps([result.content, result.structured_content])
        _hides(shown, secrets)


def _refuses(schema: dict[str, Any], configs: list[dict[str, Any]]) -> None:
    _refuses_with(compile_schema(schema), configs)


def _refuses_with(compiled: CompiledSchema, configs: list[dict[str, Any]]) -> None:
    for config in configs:
        try:
            compiled.validate(config)
        except Exception as exc:  # ConfigInvalid, checked by name to keep this import-light
            assert type(exc).__name__ == "ConfigInvalid"
        else:
            raise AssertionError("an invalid config was accepted")


def _hides(text: str, config: Any) -> None:
    for value in _strings(config):
        if len(value) >= 8:
            assert value not in text, "a config value shows where it must not"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
