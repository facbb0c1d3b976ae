"""A conformance test mixin that any toolkit plugin can run against itself.

    from toolkit_vault.testing import ToolkitConformance

    class TestMyToolkit(ToolkitConformance):
        factory = MyToolkit
        valid_config = {"token": "...", "region": "eu"}
        invalid_configs = [{}, {"token": 5}]

Like keyring's backend test suite: the vault's assumptions about a plugin, as tests.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from .registry import ToolkitFactory, coerce_definition
from .schema import compile_schema

__all__ = ["ToolkitConformance"]


class ToolkitConformance:
    factory: ClassVar[ToolkitFactory]
    valid_config: ClassVar[dict[str, Any]]
    invalid_configs: ClassVar[list[dict[str, Any]]] = []

    def test_definition_has_the_spec_fields(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        assert definition.name and definition.tools
        assert all(isinstance(tool, str) and tool for tool in definition.tools)

    def test_schema_registers_and_accepts_the_valid_config(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        compile_schema(definition.config_schema).validate(self.valid_config)

    def test_schema_refuses_invalid_configs(self) -> None:
        definition = coerce_definition(type(self).factory().definition)
        schema = compile_schema(definition.config_schema)
        for config in self.invalid_configs:
            try:
                schema.validate(config)
            except Exception as exc:  # ConfigInvalid, checked by name to keep this import-light
                assert type(exc).__name__ == "ConfigInvalid"
            else:
                raise AssertionError("an invalid config was accepted")

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
        text = repr(instance) + str(instance)
        for value in _strings(self.valid_config):
            if len(value) >= 8:
                assert value not in text, "a config value shows in the toolkit's repr"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
