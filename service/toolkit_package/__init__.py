"""toolkit-package: a pure, bounded metadata model of toolkit packages (seed 002).

Nothing here executes integration code, opens package files, touches the network or grants
authority. ``inspect_command`` (the ``toolkit-package-inspect`` command) is the only module
doing I/O, bounded stdin to stdout, and is deliberately not imported here so ``python -m``
runs it clean.

The names below are imported at their first use (``__getattr__``): the importers and
bundles alone cost a CLI command that lists stored toolkits about 0.1 s, and such a command
needs only ``model`` and ``toolkit`` (issue 53). A type checker sees them as plain imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit_package.activation import ActivationManifest
    from toolkit_package.compat import (
        Gap,
        HostCompatibility,
        StateObligation,
        check_host,
        state_changes_from,
    )
    from toolkit_package.importers import (
        ConfigInput,
        ImportDiagnostic,
        ImportedServer,
        ImportRefused,
        ImportResult,
        import_metadata,
    )
    from toolkit_package.manifest import (
        Diagnostic,
        ManifestRefused,
        ValidatedManifest,
        payload_digest,
        validate,
    )
    from toolkit_package.model import Component, IntegrationPackage, StrategyKind
    from toolkit_package.toolkit import ImportedToolkit, to_toolkit_definitions

# each public name, and the module it comes from
_MODULES = {
    "ActivationManifest": "activation",
    **dict.fromkeys(
        ["Gap", "HostCompatibility", "StateObligation", "check_host", "state_changes_from"],
        "compat",
    ),
    **dict.fromkeys(
        [
            "ConfigInput",
            "ImportDiagnostic",
            "ImportedServer",
            "ImportRefused",
            "ImportResult",
            "import_metadata",
        ],
        "importers",
    ),
    **dict.fromkeys(
        ["Diagnostic", "ManifestRefused", "ValidatedManifest", "payload_digest", "validate"],
        "manifest",
    ),
    **dict.fromkeys(["Component", "IntegrationPackage", "StrategyKind"], "model"),
    **dict.fromkeys(["ImportedToolkit", "to_toolkit_definitions"], "toolkit"),
}

__all__ = [
    "ActivationManifest",
    "Component",
    "ConfigInput",
    "Diagnostic",
    "Gap",
    "HostCompatibility",
    "ImportDiagnostic",
    "ImportRefused",
    "ImportResult",
    "ImportedServer",
    "ImportedToolkit",
    "IntegrationPackage",
    "ManifestRefused",
    "StateObligation",
    "StrategyKind",
    "ValidatedManifest",
    "check_host",
    "import_metadata",
    "payload_digest",
    "state_changes_from",
    "to_toolkit_definitions",
    "validate",
]


def __getattr__(name: str) -> Any:
    """Import a public name at its first use (see the module), then keep it."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
