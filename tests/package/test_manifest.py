"""Validation of activation manifests: every refusal is named, the digest is canonical, the
dependency order is deterministic, and only validate() produces a ValidatedManifest."""

from __future__ import annotations

import copy
import copyreg
import hashlib
import json
import pickle
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
from pydantic import BaseModel, ValidationError

from toolkit_package.compat import check_host, state_changes_from
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


@pytest.mark.parametrize("owner_lifetime", ["persistent", "daemon"])
def test_request_lifetime_anywhere_below_a_daemon_refused(owner_lifetime: str) -> None:
    """daemon -> session -> session -> request: the daemon still relies on the request one."""
    data = make_manifest(
        [
            make_component("svc", lifetime=owner_lifetime, deps=(("mid", "1.0.0"),)),
            make_component("mid", lifetime="session", deps=(("low", "1.0.0"),)),
            make_component("low", lifetime="session", deps=(("helper", "1.0.0"),)),
            make_component("helper", lifetime="request"),
        ],
        [make_service("s", ("svc",))],
    )
    refused = refusal(data)
    assert [(d.code, d.component) for d in refused.diagnostics] == [
        ("request_lifetime_supports_persistent", "helper")
    ]
    assert "'svc'" in refused.diagnostics[0].message


def test_request_lifetime_below_a_persistent_frontend_through_a_session_refused() -> None:
    data = make_manifest(
        [
            make_component("chat", lifetime="session", deps=(("render", "1.0.0"),)),
            make_component("render", lifetime="request"),
        ],
        [make_frontend("chat-ui", ("chat",), persistence="persistent")],
    )
    refused = refusal(data)
    assert [(d.code, d.component) for d in refused.diagnostics] == [
        ("request_lifetime_supports_persistent", "render")
    ]
    assert "chat-ui" in refused.diagnostics[0].message


def test_lifetime_walk_survives_a_cycle_and_still_reports_it() -> None:
    data = make_manifest(
        [
            make_component("svc", lifetime="daemon", deps=(("a", "1.0.0"),)),
            make_component("a", deps=(("b", "1.0.0"),)),
            make_component("b", deps=(("a", "1.0.0"), ("r", "1.0.0"))),
            make_component("r", lifetime="request"),
        ],
        [make_service("s", ("svc",))],
    )
    assert refusal(data).codes == {"dependency_cycle", "request_lifetime_supports_persistent"}


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


def _tampered_state(good: ValidatedManifest) -> dict[str, Any]:
    """pydantic's own pickle state of ``good``, with the digest and the order rewritten."""
    state = BaseModel.__getstate__(good)
    fields = dict(state["__dict__"])
    fields["payload_digest"] = "sha256:" + "0" * 64
    fields["dependency_order"] = tuple(reversed(good.dependency_order))
    return {**state, "__dict__": fields}


class _Forge:
    """Pickles as "a ValidatedManifest with this state": what a crafted pickle says."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __reduce__(self) -> Any:
        return (copyreg._reconstructor, (ValidatedManifest, object, None), self.state)


def test_validated_manifest_cannot_be_pickled() -> None:
    good = validate(diamond())
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(good, protocol=protocol)


def test_crafted_pickle_of_a_validated_manifest_is_refused_on_load() -> None:
    crafted = pickle.dumps(_Forge(_tampered_state(validate(diamond()))))
    with pytest.raises(TypeError, match="cannot be unpickled"):
        pickle.loads(crafted)  # noqa: S301 (the point of the test)


def test_forged_value_past_the_gate_fails_check_host() -> None:
    """Whatever builds an instance around the gate (a pickle calling pydantic's own
    ``__setstate__``, fields rewritten in place) carries no valid seal: check_host refuses."""
    good = validate(diamond())
    assert check_host(good, {}, []).required_gaps == ()
    forged = ValidatedManifest.__new__(ValidatedManifest)
    BaseModel.__setstate__(forged, _tampered_state(good))  # the seal copied from `good`
    assert forged.dependency_order == ("a", "c", "b", "d")
    with pytest.raises(TypeError, match="call validate"):
        check_host(forged, {}, [])
    with pytest.raises(TypeError, match="call validate"):
        state_changes_from(forged, good)
    edited = validate(diamond())
    edited.__dict__["dependency_order"] = ("a", "b", "c", "d")
    with pytest.raises(TypeError, match="call validate"):
        check_host(edited, {}, [])
    bare = ValidatedManifest.__new__(ValidatedManifest)
    with pytest.raises(TypeError, match="call validate"):
        check_host(bare, {}, [])


def test_copies_are_the_same_sealed_value() -> None:
    good = validate(diamond())
    assert copy.copy(good) is good and copy.deepcopy(good) is good
    assert good.model_copy() is good and good.model_copy(deep=True) is good
    assert check_host(copy.deepcopy(good), {}, []).required_gaps == ()
