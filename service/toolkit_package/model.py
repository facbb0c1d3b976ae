"""The package description of seed 002: what a toolkit package *says* it is.

Everything here is inert, frozen metadata. Nothing in this module executes integration code,
grants authority or proves an external fact: a declared effect label is an untrusted input to
the policy owner, a remote endpoint names an *observed* service contract (not immutable bytes),
a readiness or shutdown declaration is a promise the owner must realize, and a metadata timeout
can neither kill a process nor prove that an external effect ended.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictStr, model_validator

from toolkit_package.common import ContractRef, Digest, Frozen, Ident, Millis, Name, Text, Version
from toolkit_package.roles import Export
from toolkit_package.strategy import StrategyKind

__all__ = [
    "ActivationScope",
    "ArtifactSource",
    "Component",
    "Dependency",
    "Entrypoint",
    "HostServiceRef",
    "HostSource",
    "IntegrationPackage",
    "IrreversibleRollback",
    "Lifetime",
    "Migration",
    "OwnerReconciliation",
    "Placement",
    "PortableMcpEntry",
    "Readiness",
    "RemoteEndpointSource",
    "ReversibleRollback",
    "Rollback",
    "Runtime",
    "RuntimeKind",
    "Shutdown",
    "Source",
    "StateContract",
    "StrategyKind",
    "TimeoutBehaviour",
]


class Lifetime(StrEnum):
    REQUEST = "request"
    SESSION = "session"
    PERSISTENT = "persistent"
    DAEMON = "daemon"


class ActivationScope(StrEnum):
    REQUEST = "request"
    SESSION = "session"
    WORKSPACE = "workspace"
    HOST = "host"


class Placement(StrEnum):
    IN_PROCESS = "in_process"
    SUBPROCESS = "subprocess"
    CONTAINER = "container"
    REMOTE = "remote"
    HOST = "host"


class RuntimeKind(StrEnum):
    PYTHON = "python"
    NODE = "node"
    BINARY = "binary"
    CONTAINER = "container"
    REMOTE = "remote"
    HOST = "host"


class TimeoutBehaviour(StrEnum):
    """What a shutdown timeout means: the outcome stays uncertain, or the owner fences."""

    PRESERVE_UNCERTAINTY = "preserve_uncertainty"
    OWNER_FENCING = "owner_fencing"


class ArtifactSource(Frozen):
    """Implementation bytes pinned by digest."""

    kind: Literal["artifact"]
    uri: Text
    digest: Digest


class RemoteEndpointSource(Frozen):
    """An observed service contract. It does not pretend to pin the remote implementation."""

    kind: Literal["remote_endpoint"]
    endpoint: Text
    observed_contract_digest: Digest


class HostSource(Frozen):
    kind: Literal["host"]
    service: Name


Source = Annotated[ArtifactSource | RemoteEndpointSource | HostSource, Field(discriminator="kind")]


class Entrypoint(Frozen):
    """A literal argv vector. A string (a shell expression) is refused by the type itself."""

    argv: tuple[StrictStr, ...] = Field(min_length=1, max_length=256)
    working_directory: Text | None = None


class Runtime(Frozen):
    kind: RuntimeKind
    entrypoint: Entrypoint | None = None


class Dependency(Frozen):
    """An exact selected version of another component, never a range."""

    component: Ident
    version: Version


class HostServiceRef(Frozen):
    name: Name
    optional: StrictBool = False


class Migration(Frozen):
    """An owner-bound step from one accepted prior format to the contract's current format."""

    from_format: Name
    owner: Ident
    operation: Name | None = None
    artifact: Text | None = None
    reversible: StrictBool

    @model_validator(mode="after")
    def _names_its_work(self) -> Migration:
        if self.operation is None and self.artifact is None:
            raise ValueError("a migration names its operation or artifact")
        return self


class StateContract(Frozen):
    namespace: Name
    owner: Ident
    format: Name
    migrations: tuple[Migration, ...] = Field(default=(), max_length=64)


class Readiness(Frozen):
    """How readiness would be established; declaring it establishes nothing."""

    kind: Literal["none", "operation", "host_observed"]
    operation: Name | None = None
    timeout_ms: Millis | None = None


class Shutdown(Frozen):
    owner: Ident
    operation: Name
    max_wait_ms: Millis
    on_timeout: TimeoutBehaviour


class ReversibleRollback(Frozen):
    kind: Literal["reversible"]
    operation: Name


class IrreversibleRollback(Frozen):
    kind: Literal["irreversible"]
    explanation: Annotated[str, Field(min_length=1, max_length=4096)]


class OwnerReconciliation(Frozen):
    kind: Literal["owner_reconciliation"]
    owner: Ident
    operation: Name | None = None


Rollback = Annotated[
    ReversibleRollback | IrreversibleRollback | OwnerReconciliation, Field(discriminator="kind")
]


class Component(Frozen):
    id: Ident
    version: Version
    source: Source
    runtime: Runtime
    placement: Placement
    lifetime: Lifetime
    activation_scope: ActivationScope
    dependencies: tuple[Dependency, ...] = Field(default=(), max_length=256)
    host_contracts: tuple[ContractRef, ...] = Field(default=(), max_length=256)
    state: tuple[StateContract, ...] = Field(default=(), max_length=64)
    readiness: Readiness
    shutdown: Shutdown
    rollback: Rollback


class PortableMcpEntry(Frozen):
    name: Name
    component: Ident
    transport: Literal["stdio", "streamable-http", "sse"]


class IntegrationPackage(Frozen):
    """The discoverable description: everything a package offers, nothing selected yet."""

    id: Ident
    version: Version
    name: Name
    description: Text = ""
    strategy: StrategyKind
    content_digest: Digest
    configuration_schema_digest: Digest | None = None
    components: tuple[Component, ...] = Field(max_length=1024)
    exports: tuple[Export, ...] = Field(max_length=1024)
    required_contracts: tuple[ContractRef, ...] = Field(default=(), max_length=256)
    host_services: tuple[HostServiceRef, ...] = Field(default=(), max_length=256)
    portable_mcp: tuple[PortableMcpEntry, ...] = Field(default=(), max_length=256)
