"""Builders for activation manifests as plain JSON data, and the example vector directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "package"
DIGEST = "sha256:" + "ab" * 32
EXAMPLES = [
    "server-argv-variable-secret.json",
    "server-remote-secret-header.json",
    "server-secret-env.json",
    "server-snake-case.json",
    "bundle-manifest.json",
    "client-config.json",
]

Json = dict[str, Any]


def make_component(
    cid: str,
    *,
    version: str = "1.0.0",
    deps: tuple[tuple[str, str], ...] = (),
    lifetime: str = "session",
    argv: Any = ("node", "server/index.js"),
    state: tuple[Json, ...] = (),
    host_contracts: tuple[Json, ...] = (),
) -> Json:
    return {
        "id": cid,
        "version": version,
        "source": {"kind": "artifact", "uri": f"pkg://{cid}", "digest": DIGEST},
        "runtime": {"kind": "node", "entrypoint": {"argv": argv}},
        "placement": "subprocess",
        "lifetime": lifetime,
        "activation_scope": "session",
        "dependencies": [{"component": c, "version": v} for c, v in deps],
        "host_contracts": list(host_contracts),
        "state": list(state),
        "readiness": {"kind": "operation", "operation": "ping", "timeout_ms": 5000},
        "shutdown": {
            "owner": cid,
            "operation": "shutdown",
            "max_wait_ms": 10000,
            "on_timeout": "preserve_uncertainty",
        },
        "rollback": {"kind": "irreversible", "explanation": "writes to an external tracker"},
    }


def make_service(eid: str, components: tuple[str, ...]) -> Json:
    return {
        "role": "service",
        "id": eid,
        "components": list(components),
        "operations": [
            {
                "name": "search",
                "schema_digest": DIGEST,
                "declared_effect": "read",
                "resource_contract": {"max_duration_ms": 30000, "network": "declared_hosts"},
                "result_limits": {"max_bytes": 65536, "max_items": 100},
            }
        ],
        "authentication": {"kind": "credential_reference", "credential_refs": ["api_key"]},
        "enforcement": {"owner": "host"},
        "diagnostics": {"operation": "health"},
        "cleanup": {"owner": "host", "on_removal": "retain_state"},
    }


def make_frontend(eid: str, components: tuple[str, ...], persistence: str = "session") -> Json:
    return {
        "role": "frontend",
        "id": eid,
        "components": list(components),
        "modalities": ["text"],
        "admission": {"kind": "host_authenticated"},
        "conversation": {"persistence": persistence},
        "delivery": {"mode": "streaming", "max_message_bytes": 65536},
    }


def make_manifest(components: list[Json], exports: list[Json], **extra: Any) -> Json:
    manifest: Json = {
        "package": {"id": "example.weather", "version": "1.0.0", "content_digest": DIGEST},
        "strategy": "local_mcp",
        "components": components,
        "exports": exports,
    }
    manifest.update(extra)
    return manifest


def diamond() -> Json:
    """A -> B, A -> C, B -> D, C -> D (A depends on B and C, both depend on D)."""
    return make_manifest(
        [
            make_component("a", deps=(("b", "1.0.0"), ("c", "1.0.0"))),
            make_component("b", deps=(("d", "1.0.0"),)),
            make_component("c", deps=(("d", "1.0.0"),)),
            make_component("d"),
        ],
        [make_service("search", ("a",))],
    )
