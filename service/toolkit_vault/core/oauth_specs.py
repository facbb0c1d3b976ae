"""What every part of the OAuth policy shares: each toolkit's `x-oauth` read once per
schema digest (`OAuthSpecs`), the client for a spec's server, the secret fields a version
keeps besides its token set, what an audit event may say of a token set, and the words a
person reads when only they can fix a connection.

The policy itself is split by what it does: `oauth_connect` (the connect flow through an
intake link), `oauth_refresh` (refresh once, before an initialization), `oauth_revoke`
(revocation before a purge), `oauth_schedule` (refresh ahead of expiry), composed by
`oauth_tokens` (what the vault holds). The protocol side lives in the `oauth` package.

May import: oauth, schema, logs, errors, toolkits (the registered toolkit type).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolkit_vault.errors import SchemaRefused
from toolkit_vault.logs import register_secrets
from toolkit_vault.oauth import OAuthSpec, TokenSet, oauth_spec
from toolkit_vault.schema.values import pointer_tokens
from toolkit_vault.toolkits.registry import RegisteredToolkit

if TYPE_CHECKING:  # the HTTP client (authlib, httpx) loads at a first connection, not here
    from toolkit_vault.oauth import Endpoints, OAuthClient

__all__ = [
    "RECONNECT",
    "REFRESH_ACTOR",
    "OAuthSpecs",
    "client_for",
    "client_secret_of",
    "kept_secrets",
    "token_facts",
    "value_at",
]

REFRESH_ACTOR = "oauth:refresh"
RECONNECT = "the authorization expired or was revoked: a person must connect again"
log = logging.getLogger(__name__)


class OAuthSpecs:
    """Each toolkit's `x-oauth`, read once per schema digest."""

    def __init__(self) -> None:
        self._specs: dict[str, OAuthSpec | None] = {}
        self._lock = threading.Lock()

    def of(self, toolkit: RegisteredToolkit) -> OAuthSpec | None:
        """The toolkit's `x-oauth`, once per schema digest; None without one (or a wrong
        one, logged: such a toolkit cannot connect)."""
        digest = toolkit.schema.digest
        with self._lock:
            if digest in self._specs:
                return self._specs[digest]
        try:
            spec = oauth_spec(toolkit.definition.config_schema)
        except SchemaRefused as exc:
            log.warning("toolkit %s: %s", toolkit.definition.name, exc.message)
            spec = None
        with self._lock:
            self._specs[digest] = spec
        return spec


def value_at(config: Mapping[str, Any], pointer: str) -> Any:
    """The value a JSON pointer (`token_field`, `client_secret_field`) reaches in a config,
    its tokens unescaped (`~1` is `/`, `~0` is `~`); None where nothing is."""
    node: Any = config
    for part in pointer_tokens(pointer):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def client_for(spec: OAuthSpec, client_secret: str | None = None) -> tuple[OAuthClient, Endpoints]:
    """A client of the spec's server, with the endpoints its metadata names."""
    from toolkit_vault.oauth import OAuthClient, discover

    found = discover(spec)
    client = OAuthClient(spec, found.authorization_endpoint, found.token_endpoint, client_secret)
    return client, found


def client_secret_of(spec: OAuthSpec, config: Mapping[str, Any]) -> str | None:
    """A confidential client's secret as the stored config holds it (None: public)."""
    if spec.client_secret_field is None:
        return None
    node = value_at(config, spec.client_secret_field)
    if isinstance(node, str):
        register_secrets([node])
        return node
    return None


def kept_secrets(spec: OAuthSpec, client_secret: str | None) -> dict[str, str]:
    """The secret fields a new version carries besides the token set: the client secret."""
    if spec.client_secret_field is None or client_secret is None:
        return {}
    return {spec.client_secret_field: client_secret}


def token_facts(tokens: TokenSet, previous: TokenSet | None = None) -> dict[str, Any]:
    """What an audit event may say of a token set: never a token."""
    facts: dict[str, Any] = {
        "issuer": tokens.issuer,
        "scope": tokens.scope,
        "expires_at": tokens.expires_at,
        "has_refresh_token": tokens.refresh_token is not None,
    }
    if previous is not None:
        facts["refresh_token_rotated"] = tokens.refresh_token != previous.refresh_token
    return facts
