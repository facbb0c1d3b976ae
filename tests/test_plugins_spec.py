"""Plugins in the spec's shape: a `ToolkitPlugin` serving many toolkits, installed from a
distribution of its own and discovered through `importlib.metadata` entry points, next to
the single-toolkit shape. Both shapes pass the conformance mixins."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from typing import Any, ClassVar

import pytest

from spec_support import CANARY, configure, hello, mail_config, send, spec_module
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.plugin import PluginAnswerRefused
from toolkit_vault.protocol import ToolkitConfigureRequest, ToolkitListRequest
from toolkit_vault.settings import VaultSettings
from toolkit_vault.testing import ToolkitConformance, ToolkitPluginConformance
from toolkit_vault.toolkits.registry import (
    ENTRY_POINT_GROUP,
    SourceKind,
    ToolkitRegistry,
    ToolkitSource,
)

pytestmark = pytest.mark.one_database

tkv = spec_module()
SuitePlugin, PushingToolkit = tkv.SuitePlugin, tkv.PushingToolkit


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    for records in (SuitePlugin.received, SuitePlugin.seen_messages, SuitePlugin.instances):
        records.clear()
    PushingToolkit.instances.clear()


def test_discovered_through_the_entry_points_of_its_own_distribution(spec_vault: Vault) -> None:
    entries = {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    assert entries["spec_suite"].dist is not None
    assert entries["spec_suite"].dist.name == "tkv-spec-plugins"
    sources = {t.definition.name: str(t.source) for t in spec_vault.registry.all()}
    assert sources["spec-mail"] == sources["spec-calendar"] == "entry point spec_suite"
    assert sources["spec-pager"] == "entry point spec_single"


def test_a_vault_without_the_distribution_does_not_see_it(vault: Vault) -> None:
    assert "spec_suite" not in {entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)}
    assert "spec-mail" not in vault.registry


def test_listed_as_the_plugin_defines_them(spec_vault: Vault) -> None:
    conn, _ = hello(spec_vault)
    (listed,) = send(conn, {"type": "toolkit/list/req", "filter_tags": ["spec"]})
    expected = [json.loads(d.model_dump_json(by_alias=True)) for d in (tkv.CALENDAR, tkv.MAIL)]
    assert listed["toolkits"] == expected


def test_the_config_reaches_the_plugin_at_initialization_only(
    spec_vault: Vault, home: VaultSettings
) -> None:
    conn, session = hello(spec_vault)
    out = configure(conn, "spec-mail", mail_config())
    assert (out[0]["status"], out[0]["message"]) == ("ok", "Toolkit configured successfully")
    assert SuitePlugin.received == [("spec-mail", mail_config())]
    sample, configured = SuitePlugin.instances[0], SuitePlugin.instances[-1]
    assert sample.config is None and configured.config == mail_config()  # a fresh instance
    for _ in range(2):
        send(conn, {"type": "toolkit/list/req"})
    configure(conn, "spec-calendar", {"calendar": "work"})  # refused by the schema first
    assert SuitePlugin.received == [("spec-mail", mail_config())]
    assert SuitePlugin.seen_messages == ["toolkit/list/req", "toolkit/configure/req"]
    assert CANARY not in json.dumps(out)
    restarted = open_vault(home)  # a new process resuming the session: decrypted from the store
    try:
        resumed, _ = hello(restarted, session)
        assert SuitePlugin.received == [("spec-mail", mail_config())] * 2
        assert SuitePlugin.seen_messages == ["toolkit/list/req", "toolkit/configure/req"] * 2
        (listed,) = send(resumed, {"type": "toolkit/list/req", "filter_tags": ["mail"]})
        assert [(t["name"], t["configured"]) for t in listed["toolkits"]] == [("spec-mail", True)]
    finally:
        restarted.store.engine.dispose()


@pytest.mark.parametrize(
    ("mode", "status", "message"),
    [
        ("partial", "partial", "tools unavailable: send"),
        ("partial-unnamed", "partial", "tools unavailable: read, search, send"),
        ("error", "error", "toolkit initialization failed (ToolkitReportedError)"),
        ("raise", "error", "toolkit initialization failed (RuntimeError)"),
        ("other-name", "error", "toolkit initialization failed (PluginAnswerRefused)"),
        ("not-a-response", "error", "toolkit initialization failed (PluginAnswerRefused)"),
    ],
)
def test_the_answers_status_maps_to_the_designs(
    spec_vault: Vault, mode: str, status: str, message: str
) -> None:
    conn, _ = hello(spec_vault)
    out = configure(conn, "spec-mail", mail_config(mode=mode))
    assert (out[0]["status"], out[0]["message"]) == (status, message)
    assert out[1]["configured"] is (status != "error")
    assert CANARY not in json.dumps(out)  # the plugin's own words (which quote it) stay out
    (listed,) = send(conn, {"type": "toolkit/list/req", "filter_tags": ["mail"]})
    assert listed["toolkits"][0]["configured"] is (status != "error")


class ForeignPlugin:
    """Written against another library's `ToolkitPlugin`: same methods, its own messages."""

    def _list_toolkits(self, msg: Any) -> dict[str, Any]:
        good = {"name": "foreign", "schema": {"type": "object"}, "tools": ["ping"]}
        hostile = {"name": "hostile", "schema": {"$ref": "https://example.test/s"}, "tools": ["x"]}
        return {"type": "toolkit/list/resp", "req_id": msg.id, "toolkits": [hostile, good]}

    def _configure_toolkit(self, msg: Any) -> dict[str, Any]:
        return {"type": "toolkit/configure/resp", "toolkit_name": msg.toolkit_name, "status": "ok"}


def test_any_object_with_the_spec_methods_registers_toolkit_by_toolkit() -> None:
    registry = ToolkitRegistry()
    registered = registry.register_plugin(
        ForeignPlugin, ToolkitSource(SourceKind.ENTRY_POINT, "foreign")
    )
    assert [t.definition.name for t in registered] == ["foreign"]  # the hostile one left out
    assert registry.get("foreign").factory().initialize({}) is None


def test_a_plugin_whose_list_is_not_a_list_response_is_refused() -> None:
    class Lister(ForeignPlugin):
        def _list_toolkits(self, msg: Any) -> Any:
            return "spec-mail"

    registry = ToolkitRegistry()
    with pytest.raises(PluginAnswerRefused, match="did not answer with a toolkit/list/resp"):
        registry.register_plugin(Lister, ToolkitSource(SourceKind.ENTRY_POINT, "lister"))
    assert registry.all() == []


class TestSuitePluginConformance(ToolkitPluginConformance):
    plugin_factory = SuitePlugin
    valid_configs: ClassVar[dict[str, dict[str, Any]]] = {
        "spec-mail": mail_config(),
        "spec-calendar": {"calendar": "work", "token": "tkv-canary-calendar"},
    }
    invalid_configs: ClassVar[dict[str, list[dict[str, Any]]]] = {
        "spec-mail": [{}, {"endpoint": "x", "api_key": 5}, {**mail_config(), "extra": 1}],
        "spec-calendar": [{"calendar": "work"}],
    }
    valid_calls: ClassVar[dict[str, list[tuple[str, dict[str, Any]]]]] = {
        "spec-mail": [("search", {"query": "invoice"}), ("send", {"to": "a@b.test"})],
        "spec-calendar": [("list_events", {})],
    }
    invalid_arguments: ClassVar[dict[str, list[tuple[str, dict[str, Any]]]]] = {
        "spec-mail": [("search", {}), ("search", {"query": ""})]
    }


class TestPushingToolkitConformance(ToolkitConformance):
    factory = PushingToolkit
    valid_config: ClassVar[dict[str, Any]] = {"pager_key": "tkv-canary-pager"}
    invalid_configs: ClassVar[list[dict[str, Any]]] = [{}, {"pager_key": 5}]


def test_the_plugin_conformance_mixin_catches_a_plugin_that_breaks_the_contract() -> None:
    class Careless(SuitePlugin):  # echoes the credential and answers for no one
        def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> Any:
            answer = super()._configure_toolkit(msg)
            return answer.model_copy(update={"req_id": "", "message": str(msg.config)})

    class Mute(SuitePlugin):
        def _list_toolkits(self, msg: ToolkitListRequest) -> Any:
            return super()._list_toolkits(msg).model_copy(update={"req_id": "other"})

    class CarelessCheck(TestSuitePluginConformance):
        plugin_factory = Careless

    class MuteCheck(TestSuitePluginConformance):
        plugin_factory = Mute

    with pytest.raises(AssertionError):
        CarelessCheck().test_configure_answers_for_the_named_toolkit()
    with pytest.raises(AssertionError):
        MuteCheck().test_list_answers_the_request_with_valid_definitions()
