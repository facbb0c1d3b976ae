"""`OAuthFailed`, apart from the client that raises it: the policy side catches it (a
refresh that failed, a connection refused) without importing the HTTP client, which loads
at a first connection."""

from __future__ import annotations

from toolkit_vault.errors import VaultError

__all__ = ["OAuthFailed"]


class OAuthFailed(VaultError):
    """The authorization server refused or could not be reached; `code` says which
    (`invalid_grant` means a person must connect again)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
