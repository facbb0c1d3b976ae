"""toolkit-package: a pure, bounded metadata model of toolkit packages (seed 002).

Nothing here executes integration code, opens package files, touches the network or grants
authority. ``inspect_command`` (the ``toolkit-package-inspect`` command) is the only module
doing I/O, bounded stdin to stdout, and is deliberately not imported here so ``python -m``
runs it clean.
"""

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
