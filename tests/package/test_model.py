"""The package description model: exact enum values, literal argv, frozen strict shapes."""

from __future__ import annotations

from typing import Any

import pytest
from package_builders import DIGEST, make_component, make_service
from pydantic import ValidationError

from toolkit_package.model import (
    Component,
    Entrypoint,
    IntegrationPackage,
    Migration,
    StrategyKind,
)
from toolkit_package.roles import ServiceExport


def test_strategy_kinds_are_exactly_the_five_of_the_spec() -> None:
    assert [k.value for k in StrategyKind] == [
        "remote_mcp",
        "local_mcp",
        "native_adapter",
        "configuration_recipe",
        "research_skill",
    ]
    with pytest.raises(ValueError):
        StrategyKind("cli_pack")


@pytest.mark.parametrize("argv", ["node server.js", 7, None, [1, 2], ("node", b"x")])
def test_entrypoint_refuses_anything_but_a_list_of_strings(argv: Any) -> None:
    with pytest.raises(ValidationError):
        Entrypoint.model_validate({"argv": argv})


def test_models_are_frozen_and_refuse_unknown_fields() -> None:
    comp = Component.model_validate(make_component("a"))
    with pytest.raises(ValidationError):
        comp.lifetime = "daemon"  # type: ignore[assignment]
    with pytest.raises(ValidationError):
        Component.model_validate({**make_component("a"), "privileged": True})


def test_remote_endpoint_names_an_observed_contract() -> None:
    data = make_component("remote")
    data["source"] = {
        "kind": "remote_endpoint",
        "endpoint": "https://mcp.example.com",
        "observed_contract_digest": DIGEST,
    }
    data["runtime"] = {"kind": "remote"}
    comp = Component.model_validate(data)
    assert comp.source.kind == "remote_endpoint"
    assert comp.runtime.entrypoint is None


@pytest.mark.parametrize(
    "rollback",
    [
        {"kind": "reversible", "operation": "uninstall"},
        {"kind": "irreversible", "explanation": "sends email"},
        {"kind": "owner_reconciliation", "owner": "host"},
    ],
)
def test_rollback_declarations(rollback: dict[str, Any]) -> None:
    comp = Component.model_validate({**make_component("a"), "rollback": rollback})
    assert comp.rollback.kind == rollback["kind"]


@pytest.mark.parametrize(
    "rollback",
    [{"kind": "irreversible", "explanation": ""}, {"kind": "maybe"}, {"kind": "reversible"}],
)
def test_rollback_must_be_explicit(rollback: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Component.model_validate({**make_component("a"), "rollback": rollback})


def test_shutdown_timeout_behaviour_is_one_of_two() -> None:
    data = make_component("a")
    data["shutdown"]["on_timeout"] = "kill"
    with pytest.raises(ValidationError):
        Component.model_validate(data)
    data["shutdown"]["on_timeout"] = "owner_fencing"
    assert Component.model_validate(data).shutdown.on_timeout.value == "owner_fencing"


def test_migration_names_operation_or_artifact_and_reversibility() -> None:
    with pytest.raises(ValidationError):
        Migration.model_validate({"from_format": "v1", "owner": "a", "reversible": True})
    with pytest.raises(ValidationError):
        Migration.model_validate({"from_format": "v1", "owner": "a", "operation": "up"})
    with pytest.raises(ValidationError):  # "yes" is not a boolean
        Migration.model_validate(
            {"from_format": "v1", "owner": "a", "operation": "up", "reversible": "yes"}
        )


def test_service_export_declares_operations_or_events() -> None:
    data = make_service("s", ("a",))
    ServiceExport.model_validate(data)
    with pytest.raises(ValidationError):
        ServiceExport.model_validate({**data, "operations": []})


def test_integration_package_round_trips() -> None:
    package = IntegrationPackage.model_validate(
        {
            "id": "example.weather",
            "version": "1.0.0",
            "name": "Weather",
            "strategy": "local_mcp",
            "content_digest": DIGEST,
            "components": [make_component("a")],
            "exports": [make_service("s", ("a",))],
        }
    )
    assert IntegrationPackage.model_validate_json(package.model_dump_json()) == package
