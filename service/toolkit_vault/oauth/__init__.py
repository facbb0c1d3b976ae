"""OAuth connections, the protocol side: what a schema's `x-oauth` declares (`spec`), the
authorization server's endpoints (`metadata`: RFC 8414, then OpenID discovery), the token
set as the vault stores it (`tokens`), and the client calls (`client`: authorization code
with PKCE S256, refresh, revocation), all through authlib's httpx client.

Policy (when to refresh, once per scope and toolkit, what to store and audit, whom to
tell) lives in `core.oauth_*` (connect, refresh, revoke, schedule); this package decides
nothing and stores nothing.
May import: schema, errors, logs, canonical (and authlib, httpx); never the store, core
or transports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolkit_vault.oauth.failures import OAuthFailed
from toolkit_vault.oauth.spec import OAuthSpec, oauth_spec, redirect_uri
from toolkit_vault.oauth.tokens import TOKEN_SET_KEY, TokenSet, without_token_set

if TYPE_CHECKING:
    from toolkit_vault.oauth.client import OAuthClient
    from toolkit_vault.oauth.metadata import Endpoints, discover

# The names whose modules import authlib and httpx, imported at their first use: a command
# that only reads a schema's `x-oauth` (`toolkits list`) never pays for the HTTP client.
_WITH_CLIENT = {
    "OAuthClient": "client",
    "Endpoints": "metadata",
    "discover": "metadata",
}

__all__ = [
    "TOKEN_SET_KEY",
    "Endpoints",
    "OAuthClient",
    "OAuthFailed",
    "OAuthSpec",
    "TokenSet",
    "discover",
    "oauth_spec",
    "redirect_uri",
    "without_token_set",
]


def __getattr__(name: str) -> Any:
    """Import a client-side name at its first use (see above), then keep it."""
    module = _WITH_CLIENT.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
