"""Validation of activation manifests: every refusal is named, the digest is canonical, the
dependency order is deterministic, and only validate() produces a ValidatedManifest."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
import rfc8785
from package_builders import (
    diamond,
    make_component,
    make_frontend,
    make_manifest,
    make_service,
)
from pydantic import ValidationError

from toolkit_package.manifest import (
    ActivationManifest,
    ManifestRefused,
    ValidatedManifest,
    validate,
)
from toolkit_package.model import Entrypoint

GATE = re.escape("only toolkit_package.manifest.validate")


def refusal(manifest: Any) -> ManifestRefused:
    with pytest.raises(ManifestRefused) as info:
        validate(manifest)
    return info.value


def test_diamond_validates_in_deterministic_topological_order() -> None:
    validated = validate(diamond())
    assert validated.dependency_order == ("d", "b", "c", "a")
    shuffled = diamond()
    shuffled["components"].reverse()
    assert validate(shuffled).dependency_order == ("d", "b", "c", "a")


def test_dependency_order_puts_every_dependency_first() -> None:
    order = validate(diamond()).dependency_order
    for before, after in [("b", "a"), ("c", "a"), ("d", "b"), ("d", "c")]:
        assert order.index(before) < order.index(after)


def test_payload_digest_is_sha256_of_rfc8785_canonical_payload() -> None:
    validated = validate(diamond())
    canonical = rfc8785.dumps(validated.manifest.model_dump(mode="json"))
    assert validated.payload_digest == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_digest_stable_under_key_order_and_whitespace() -> None:
    data = diamond()
    compact = json.dumps(data, separators=(",", ":"))
    spaced = json.dumps(data, indent=7, sort_keys=True)

    def reorder(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: reorder(node[k]) for k in reversed(list(node))}
        if isinstance(node, list):
            return [reorder(v) for v in node]
        return node

    reversed_keys = "\n\t " + json.dumps(reorder(data), indent=1) + "  \n"
    digests = {validate(text).payload_digest for text in (compact, spaced, reversed_keys)}
    digests.add(validate(compact.encode()).payload_digest)
    digests.add(validate(data).payload_digest)
    digests.add(validate(ActivationManifest.model_validate_json(spaced)).payload_digest)
    assert len(digests) == 1


def test_digest_changes_with_content() -> None:
    changed = diamond()
    changed["components"][3]["version"] = "1.0.1"
    changed["components"][1]["dependencies"][0]["version"] = "1.0.1"
    changed["components"][2]["dependencies"][0]["version"] = "1.0.1"
    assert validate(changed).payload_digest != validate(diamond()).payload_digest


def test_cycle_refused_naming_each_component_on_it() -> None:
    data = make_manifest(
        [
            make_component("a", deps=(("b", "1.0.0"),)),
            make_component("b", deps=(("c", "1.0.0"),)),
            make_component("c", deps=(("a", "1.0.0"),)),
        ],
        [make_service("s", ("a",))],
    )
    refused = refusal(data)
    cycle = [d.component for d in refused.diagnostics if d.code == "dependency_cycle"]
    assert cycle == ["a", "b", "c"]


def test_self_dependency_is_a_cycle() -> None:
    data = make_manifest([make_component("a", deps=(("a", "1.0.0"),))], [make_service("s", ("a",))])
    assert refusal(data).codes == {"dependency_cycle"}


def test_dependency_on_unselected_component_refused() -> None:
    data = make_manifest(
        [make_component("a", deps=(("missing", "1.0.0"),))], [make_service("s", ("a",))]
    )
    refused = refusal(data)
    assert refused.codes == {"dependency_unselected"}
    assert refused.diagnostics[0].component == "a"


def test_dependency_version_mismatch_refused() -> None:
    data = make_manifest(
        [make_component("a", deps=(("b", "2.0.0"),)), make_component("b", version="1.0.0")],
        [make_service("s", ("a",))],
    )
    refused = refusal(data)
    assert refused.codes == {"dependency_version_mismatch"}
    assert refused.diagnostics[0].component == "a"


def test_component_unreachable_from_exports_refused() -> None:
    data = make_manifest(
        [make_component("a"), make_component("orphan")], [make_service("s", ("a",))]
    )
    refused = refusal(data)
    assert refused.codes == {"unreachable_component"}
    assert refused.diagnostics[0].component == "orphan"


@pytest.mark.parametrize("owner_lifetime", ["persistent", "daemon"])
def test_request_lifetime_supporting_long_lived_component_refused(owner_lifetime: str) -> None:
    data = make_manifest(
        [
            make_component("svc", lifetime=owner_lifetime, deps=(("helper", "1.0.0"),)),
            make_component("helper", lifetime="request"),
        ],
        [make_service("s", ("svc",))],
    )
    refused = refusal(data)
    assert refused.codes == {"request_lifetime_supports_persistent"}
    assert refused.diagnostics[0].component == "helper"


def test_request_lifetime_supporting_persistent_frontend_refused() -> None:
    data = make_manifest(
        [make_component("chat", lifetime="request")],
        [make_frontend("chat-ui", ("chat",), persistence="persistent")],
    )
    refused = refusal(data)
    assert refused.codes == {"request_lifetime_supports_persistent"}
    assert refused.diagnostics[0].component == "chat"


def test_request_lifetime_is_fine_for_stateless_frontend_and_session_owner() -> None:
    data = make_manifest(
        [
            make_component("chat", lifetime="request"),
            make_component("svc", lifetime="session", deps=(("helper", "1.0.0"),)),
            make_component("helper", lifetime="request"),
        ],
        [make_frontend("ui", ("chat",), persistence="none"), make_service("s", ("svc",))],
    )
    assert validate(data).dependency_order == ("chat", "helper", "svc")


@pytest.mark.parametrize(
    "argv",
    [
        "node server.js --port 8080",
        ["node server.js"],
        ["sh", "-c", "node server.js | tee log"],
        ["/bin/bash", "-c", "curl example | sh"],
        ["$(which node)", "server.js"],
        [],
        ["node", 7],
        ["node", "a\x00b"],
    ],
)
def test_entrypoint_not_literal_argv_refused(argv: Any) -> None:
    data = make_manifest([make_component("a", argv=argv)], [make_service("s", ("a",))])
    refused = refusal(data)
    assert "entrypoint_not_argv" in refused.codes
    assert {d.component for d in refused.diagnostics} == {"a"}


def test_argv_may_carry_shell_characters_as_literal_arguments() -> None:
    argv = ["node", "server.js", "--pattern=*.md", "--sep=;"]
    data = make_manifest([make_component("a", argv=argv)], [make_service("s", ("a",))])
    assert validate(data).manifest.components[0].runtime.entrypoint == Entrypoint(argv=tuple(argv))


def test_shape_refusal_names_the_component_by_id() -> None:
    data = make_manifest(
        [make_component("b"), make_component("a", argv="node a.js")],
        [make_service("s", ("a", "b"))],
    )
    (diagnostic,) = refusal(data).diagnostics
    assert (diagnostic.code, diagnostic.component) == ("entrypoint_not_argv", "a")
    assert "node a.js" not in diagnostic.message


def test_graph_refusals_reported_together_for_parsed_manifest() -> None:
    data = make_manifest(
        [make_component("a", deps=(("b", "9.9.9"),)), make_component("b"), make_component("z")],
        [make_service("s", ("a",))],
    )
    assert refusal(data).codes == {"dependency_version_mismatch", "unreachable_component"}


def test_migration_must_be_run_by_state_owner() -> None:
    state = {
        "namespace": "cache",
        "owner": "a",
        "format": "v2",
        "migrations": [
            {"from_format": "v1", "owner": "someone-else", "operation": "up", "reversible": True}
        ],
    }
    data = make_manifest([make_component("a", state=(state,))], [make_service("s", ("a",))])
    assert refusal(data).codes == {"migration_not_owner_bound"}


def test_malformed_and_hostile_documents_refused_with_diagnostics() -> None:
    assert refusal({"package": 3}).codes == {"malformed_manifest"}
    assert refusal("[" * 100 + "]" * 100).codes == {"nesting_too_deep"}
    assert refusal('{"a": 1, "a": 2}').codes == {"duplicate_key"}
    assert refusal(b"\xff").codes == {"not_utf8"}


def test_unknown_fields_refused() -> None:
    data = diamond()
    data["components"][0]["grants"] = ["root"]
    assert refusal(data).codes == {"malformed_manifest"}


def test_validated_manifest_cannot_be_constructed_directly() -> None:
    good = validate(diamond())
    fields: dict[str, Any] = {
        "manifest": good.manifest,
        "payload_digest": good.payload_digest,
        "dependency_order": good.dependency_order,
    }
    with pytest.raises(ValidationError, match=GATE):
        ValidatedManifest(
            manifest=good.manifest,
            payload_digest=good.payload_digest,
            dependency_order=good.dependency_order,
        )
    with pytest.raises(ValidationError, match=GATE):
        ValidatedManifest.model_validate(good.model_dump())
    with pytest.raises(ValidationError, match=GATE):
        ValidatedManifest.model_validate_json(good.model_dump_json())
    with pytest.raises(ValidationError):
        ValidatedManifest.model_validate(fields, context={"gate": object()})
    with pytest.raises(TypeError):
        ValidatedManifest.model_construct(**fields)
    with pytest.raises(TypeError):
        good.model_copy(update={"payload_digest": "sha256:" + "0" * 64})


def test_validated_manifest_is_frozen() -> None:
    good = validate(diamond())
    with pytest.raises(ValidationError):
        good.payload_digest = "sha256:" + "0" * 64


def test_validate_rechecks_a_manifest_built_without_validation() -> None:
    parsed = ActivationManifest.model_validate(diamond())
    comp = parsed.components[0]
    bad_entry = Entrypoint.model_construct(argv="node server.js")
    bad_runtime = comp.runtime.model_copy(update={"entrypoint": bad_entry})
    bad = parsed.model_copy(
        update={"components": (comp.model_copy(update={"runtime": bad_runtime}),)}
    )
    assert "entrypoint_not_argv" in refusal(bad).codes
