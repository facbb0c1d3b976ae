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

from toolkit_vault.oauth.client import OAuthClient, OAuthFailed
from toolkit_vault.oauth.metadata import Endpoints, discover
from toolkit_vault.oauth.spec import OAuthSpec, oauth_spec, redirect_uri
from toolkit_vault.oauth.tokens import TOKEN_SET_KEY, TokenSet, without_token_set

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
