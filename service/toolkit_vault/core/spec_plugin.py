"""The spec's `ToolkitPlugin`, bound to one session of one principal: how the A2E toolkits
messages of a connection reach the vault, by the spec's own dispatch."""

from __future__ import annotations

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import UnknownSession
from toolkit_vault.plugin import ToolkitPlugin
from toolkit_vault.protocol import (
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitListRequest,
    ToolkitListResponse,
)

__all__ = ["VaultToolkitPlugin"]


class VaultToolkitPlugin(ToolkitPlugin):
    """The spec's `ToolkitPlugin`, bound to one session of one principal."""

    name = "toolkit_vault"

    def __init__(self, vault: Vault, principal: Principal, session_id: str) -> None:
        super().__init__()
        self.vault = vault
        self.principal = principal
        self.session_id = session_id
        self.pushes = False  # its connection has a push channel (a WebSocket, stdio)

    def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
        return self.vault.list_toolkits(self.principal, self.session_id, msg)

    def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> ToolkitConfigureResponse:
        if msg.session_id not in ("", self.session_id):
            raise UnknownSession("unknown session")
        return self.vault.configure(self.principal, self.session_id, msg)
