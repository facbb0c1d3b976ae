"""What an activation document of seed 002 *claims* to select, parsed but not yet trusted.

The shape only: ``manifest.validate`` is the gate that checks it (with ``graph``) and turns it
into a ``ValidatedManifest``. Kept apart from that gate so the graph checks can name the type
they read while the gate depends on them, one way.
"""

from __future__ import annotations

from pydantic import Field

from toolkit_package.common import ContractRef, Digest, Frozen, Ident, Text, Version
from toolkit_package.model import Component, HostServiceRef, PortableMcpEntry, StrategyKind
from toolkit_package.roles import Export

__all__ = ["ActivationManifest", "PackageRef", "Reference"]


class PackageRef(Frozen):
    id: Ident
    version: Version
    content_digest: Digest


class Reference(Frozen):
    uri: Text
    digest: Digest


class ActivationManifest(Frozen):
    package: PackageRef
    strategy: StrategyKind
    configuration_ref: Reference | None = None
    policy_ref: Reference | None = None
    components: tuple[Component, ...] = Field(max_length=1024)
    exports: tuple[Export, ...] = Field(min_length=1, max_length=1024)
    required_contracts: tuple[ContractRef, ...] = Field(default=(), max_length=256)
    host_services: tuple[HostServiceRef, ...] = Field(default=(), max_length=256)
    portable_mcp: tuple[PortableMcpEntry, ...] = Field(default=(), max_length=256)
