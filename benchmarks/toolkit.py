"""The benchmark toolkit: 3 public and 2 secret fields, an initializer that does nothing,
and one tool (`call_api`, any arguments) that answers at once.

The restart scenario installs `BenchToolkit` through a real entry point (a generated
`.dist-info`), so a cold `toolkit-vault stdio` process discovers it like any plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from toolkit_vault.plugin import CallContext, ToolResult
from toolkit_vault.toolkits.registry import (
    SourceKind,
    ToolkitFactory,
    ToolkitRegistry,
    ToolkitSource,
)

__all__ = [
    "BENCH_SCHEMA",
    "BenchToolkit",
    "bench_config",
    "bench_factory",
    "bench_registry",
    "install_entry_point",
]

BENCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "endpoint": {"type": "string"},
        "region": {"type": "string"},
        "timeout_s": {"type": "integer", "minimum": 1},
        "api_key": {"type": "string", "writeOnly": True},
        "password": {"type": "string", "format": "password"},
    },
    "required": ["endpoint", "region", "timeout_s", "api_key", "password"],
    "additionalProperties": False,
}


def bench_config(n: int) -> dict[str, Any]:
    """A distinct config per call, so nothing can be cached between calls."""
    return {
        "endpoint": "https://api.example.test/v1",
        "region": "eu-west-1",
        "timeout_s": 30,
        "api_key": f"sk-bench-{n:08d}-0123456789abcdef0123456789abcdef",
        "password": f"correct-horse-battery-staple-{n}",
    }


def _definition(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "alias": name,
        "description": "A benchmark toolkit with two credentials",
        "category": "bench",
        "tags": ["bench"],
        "schema": BENCH_SCHEMA,
        "tools": ["call_api"],
    }


_ANSWER = ToolResult.text("ok")


class BenchToolkit:
    definition: ClassVar[dict[str, Any]] = _definition("bench")

    def initialize(self, config: dict[str, Any]) -> None:
        return None

    def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> ToolResult:
        """The no-op tool: what a call costs beyond the tool is the vault's."""
        return _ANSWER


def bench_factory(name: str) -> ToolkitFactory:
    return type(f"Bench_{name}", (BenchToolkit,), {"definition": _definition(name)})


def bench_registry(count: int) -> ToolkitRegistry:
    """`bench` plus `bench-001` ... : `count` toolkits in all, no others."""
    registry = ToolkitRegistry()
    registry.register(BenchToolkit, ToolkitSource(SourceKind.ENTRY_POINT, "bench"))
    for n in range(1, count):
        registry.register(
            bench_factory(f"bench-{n:03d}"), ToolkitSource(SourceKind.ENTRY_POINT, "bench")
        )
    return registry


def install_entry_point(where: Path) -> Path:
    """A `.dist-info` declaring `bench` in the vault's entry point group; put `where` on
    PYTHONPATH (with the repository root, for `benchmarks`)."""
    info = where / "tkv_bench_plugin-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tkv-bench-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[toolkit_vault.toolkits]\nbench = benchmarks.toolkit:BenchToolkit\n"
    )
    return where
