"""Host compatibility (required gaps block, optional ones degrade explicitly) and state
migration obligations (reported, never performed)."""

from __future__ import annotations

from typing import Any

import pytest
from package_builders import make_component, make_frontend, make_manifest, make_service

from toolkit_package.compat import Gap, StateObligation, check_host, state_changes_from
from toolkit_package.manifest import ActivationManifest, ValidatedManifest, validate


def manifest_with_contracts() -> ValidatedManifest:
    frontend = make_frontend("voice-ui", ("svc",))
    frontend["modalities"] = ["voice"]
    frontend["live"] = {
        "modality": "voice",
        "contract": {"name": "host.voice", "version": "1.0", "optional": True},
    }
    data = make_manifest(
        [
            make_component(
                "svc",
                host_contracts=(
                    {"name": "a2e.toolkits", "version": "1.2"},
                    {"name": "host.notifications", "version": "2.0", "optional": True},
                ),
            )
        ],
        [make_service("s", ("svc",)), frontend],
        required_contracts=[{"name": "a2e.core", "version": "1.0"}],
        host_services=[{"name": "secret-store"}, {"name": "metrics", "optional": True}],
    )
    return validate(data)


def test_fully_compatible_host_has_no_gaps() -> None:
    contracts = {
        "a2e.core": "1.0",
        "a2e.toolkits": "1.3",
        "host.notifications": "2.1",
        "host.voice": "1.0",
    }
    result = check_host(manifest_with_contracts(), contracts, ["secret-store", "metrics"])
    assert result.required_gaps == ()
    assert result.optional_degradations == ()
    assert not result.blocking


def test_required_gap_blocks_and_optional_gap_degrades_explicitly() -> None:
    result = check_host(
        manifest_with_contracts(), {"a2e.core": "1.0", "a2e.toolkits": "1.1"}, ["secret-store"]
    )
    assert result.blocking
    assert result.required_gaps == (Gap("contract", "a2e.toolkits", "1.2", "1.1", "svc"),)
    assert result.optional_degradations == (
        Gap("contract", "host.notifications", "2.0", None, "svc"),
        Gap("contract", "host.voice", "1.0", None, "voice-ui"),
        Gap("service", "metrics", None, None, None),
    )


def test_missing_required_service_and_other_major_version_block() -> None:
    result = check_host(
        manifest_with_contracts(),
        {"a2e.core": "2.0", "a2e.toolkits": "1.2", "host.notifications": "2.0", "host.voice": "1"},
        [],
    )
    assert {(g.kind, g.name) for g in result.required_gaps} == {
        ("contract", "a2e.core"),
        ("service", "secret-store"),
    }
    assert [g.name for g in result.optional_degradations] == ["metrics"]


def test_check_host_needs_a_validated_manifest() -> None:
    parsed = ActivationManifest.model_validate(make_manifest([], [make_service("s", ("x",))]))
    with pytest.raises(TypeError):
        check_host(parsed, {}, [])  # type: ignore[arg-type]


def with_state(fmt: str, *migrations: dict[str, Any], owner: str = "svc") -> ValidatedManifest:
    state = {"namespace": "issues-cache", "owner": owner, "format": fmt, "migrations": migrations}
    other = {"namespace": "settings", "owner": "svc", "format": "s1"}
    component = make_component("svc", state=(state, other))
    if owner != "svc":
        component["id"] = owner
        component["shutdown"]["owner"] = owner
    return validate(make_manifest([component], [make_service("s", (component["id"],))]))


def test_reversible_and_irreversible_migration_obligations() -> None:
    v1 = with_state("v1")
    v2 = with_state(
        "v2", {"from_format": "v1", "owner": "svc", "operation": "up-1-2", "reversible": True}
    )
    v3 = with_state(
        "v3",
        {"from_format": "v2", "owner": "svc", "artifact": "mig/2-3.sql", "reversible": False},
    )
    assert state_changes_from(v2, v1) == [
        StateObligation("issues-cache", "svc", "v1", "v2", "up-1-2", None, True, True)
    ]
    assert state_changes_from(v3, v2) == [
        StateObligation("issues-cache", "svc", "v2", "v3", None, "mig/2-3.sql", False, True)
    ]
    assert state_changes_from(v2, v2) == []


def test_unsupported_prior_format_is_an_unsupported_obligation() -> None:
    v1 = with_state("v1")
    v3 = with_state(
        "v3", {"from_format": "v2", "owner": "svc", "operation": "up", "reversible": True}
    )
    (obligation,) = state_changes_from(v3, v1)
    assert not obligation.supported
    assert obligation.diagnostic == "unsupported_prior_format"
    assert (obligation.from_format, obligation.to_format) == ("v1", "v3")


def test_changed_owner_and_dropped_state_are_reported() -> None:
    prior = with_state("v1")
    moved = with_state("v1", owner="other")
    obligations = state_changes_from(moved, prior)
    assert [(o.namespace, o.diagnostic) for o in obligations] == [("issues-cache", "owner_changed")]
    bare = validate(make_manifest([make_component("svc")], [make_service("s", ("svc",))]))
    dropped = state_changes_from(bare, prior)
    assert [(o.namespace, o.to_format, o.diagnostic) for o in dropped] == [
        ("issues-cache", None, "state_no_longer_declared"),
        ("settings", None, "state_no_longer_declared"),
    ]
    assert state_changes_from(prior, bare) == []  # new state has nothing to migrate
