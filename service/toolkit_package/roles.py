"""Role exports of seed 002: what a package offers a host as a service or as a frontend.

Both roles may name shared components while keeping independent activation and removal. Labels
here are the package's own claims: a declared effect is an untrusted input to the policy owner,
and a live (e.g. voice) contract is a requirement on the host, never a live-session receipt.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from toolkit_package.common import ContractRef, Count, Digest, Frozen, Ident, Millis, Name, Text

__all__ = [
    "Admission",
    "Authentication",
    "Cleanup",
    "ControlContract",
    "ConversationContract",
    "DeclaredEffect",
    "DeliveryContract",
    "DiagnosticsExport",
    "Enforcement",
    "EventDecl",
    "Export",
    "FrontendExport",
    "LiveContract",
    "Modality",
    "Operation",
    "ResourceContract",
    "ResultLimits",
    "ServiceExport",
]


class DeclaredEffect(StrEnum):
    """The package's own label: input to the policy owner, never a permission decision."""

    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"


class Modality(StrEnum):
    TEXT = "text"
    VOICE = "voice"
    IMAGE = "image"
    VIDEO = "video"


class ResourceContract(Frozen):
    max_duration_ms: Millis
    max_memory_bytes: Count | None = None
    network: Literal["none", "declared_hosts", "any"] = "none"
    filesystem: Literal["none", "read", "read_write"] = "none"


class ResultLimits(Frozen):
    max_bytes: Count
    max_items: Count | None = None


class Operation(Frozen):
    name: Name
    schema_digest: Digest
    declared_effect: DeclaredEffect
    resource_contract: ResourceContract
    result_limits: ResultLimits


class EventDecl(Frozen):
    name: Name
    schema_digest: Digest


class Authentication(Frozen):
    kind: Literal["none", "host_delegated", "credential_reference", "oauth2"]
    credential_refs: tuple[Name, ...] = ()


class Enforcement(Frozen):
    owner: Literal["host", "component", "shared"]
    description: Text = ""


class DiagnosticsExport(Frozen):
    operation: Name | None = None
    log_format: Name | None = None


class Cleanup(Frozen):
    owner: Ident
    operation: Name | None = None
    on_removal: Literal["delete_state", "retain_state", "owner_decides"]


class ServiceExport(Frozen):
    role: Literal["service"]
    id: Ident
    components: tuple[Ident, ...] = Field(min_length=1, max_length=256)
    operations: tuple[Operation, ...] = Field(default=(), max_length=1024)
    events: tuple[EventDecl, ...] = Field(default=(), max_length=1024)
    authentication: Authentication
    enforcement: Enforcement
    diagnostics: DiagnosticsExport
    cleanup: Cleanup

    @model_validator(mode="after")
    def _declares_something(self) -> ServiceExport:
        if not self.operations and not self.events:
            raise ValueError("a service export declares operations or events")
        return self


class Admission(Frozen):
    kind: Literal["open", "host_authenticated", "allowlist"]


class ConversationContract(Frozen):
    persistence: Literal["none", "session", "persistent"]
    max_turns: Count | None = None


class DeliveryContract(Frozen):
    mode: Literal["push", "pull", "streaming"]
    max_message_bytes: Count


class ControlContract(Frozen):
    operations: tuple[Name, ...] = Field(min_length=1)


class LiveContract(Frozen):
    """A requirement on the host (e.g. a voice contract), not a live-session receipt."""

    modality: Modality
    contract: ContractRef


class FrontendExport(Frozen):
    role: Literal["frontend"]
    id: Ident
    components: tuple[Ident, ...] = Field(min_length=1, max_length=256)
    modalities: tuple[Modality, ...] = Field(min_length=1)
    admission: Admission
    conversation: ConversationContract
    delivery: DeliveryContract
    control: ControlContract | None = None
    live: LiveContract | None = None

    @property
    def persistent(self) -> bool:
        """A frontend that holds a conversation or a live channel outlives any one request."""
        return self.conversation.persistence != "none" or self.live is not None


Export = Annotated[ServiceExport | FrontendExport, Field(discriminator="role")]
