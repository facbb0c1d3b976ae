"""The narrow protocols through which the vault and its collaborators reach each other,
so that neither imports the other's module: the intake links a configure may answer with
(`IntakeOffer`, implemented by `intake.Intake`) and the OAuth token policy an
initialization, a configure and a purge consult (`TokenSource`, `oauth_tokens`).

May import: protocol, access, store (records), toolkits, errors; nothing in `core`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from toolkit_vault.access.principals import Principal
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.protocol import ToolkitConfigureRequest, ToolkitConfigureResponse
from toolkit_vault.store.records import VersionRecord
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["IntakeOffer", "TokenSource"]


class IntakeOffer(Protocol):
    """The intake links a configure may answer with (`intake.Intake`, when the web console
    is mounted)."""

    def covers(
        self, toolkit: RegisteredToolkit, msg: ToolkitConfigureRequest, error: ConfigInvalid
    ) -> bool: ...

    def request(
        self,
        principal: Principal,
        scope_id: str,
        toolkit: RegisteredToolkit,
        msg: ToolkitConfigureRequest,
    ) -> ToolkitConfigureResponse: ...

    def offer(
        self,
        principal_id: str,
        scope_id: str,
        toolkit: RegisteredToolkit,
        public: dict[str, Any],
        why: str,
    ) -> str: ...


class TokenSource(Protocol):
    """The OAuth token policy (`oauth_tokens.OAuthTokens`): a stored config's token made
    fresh before a toolkit is initialized, whether a configure must connect instead, and
    the revocation of a scope's token sets before a purge."""

    def ready(
        self, record: VersionRecord, toolkit: RegisteredToolkit, config: dict[str, Any]
    ) -> tuple[dict[str, Any], int]: ...

    def wants_connect(self, toolkit: RegisteredToolkit, config: Mapping[str, Any]) -> bool: ...

    def revoke(self, actor: str, scope_id: str, toolkit_name: str | None = None) -> list[str]: ...
