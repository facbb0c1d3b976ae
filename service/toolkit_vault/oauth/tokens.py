"""The token set as the vault keeps it: the access token at the schema's `token_field`,
and the rest (refresh token, expiry, scopes, issuer, whether it needs reconnecting) as one
more sealed secret at `TOKEN_SET_KEY`, so both are envelopes of the same version, bound to
it like every secret. The plugin gets the config `without_token_set`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit_vault.schema.values import pointer_tokens

__all__ = ["EXPIRY_MARGIN", "TOKEN_SET_KEY", "TokenSet", "without_token_set"]

TOKEN_SET_KEY = "x-oauth-token-set"  # noqa: S105 (a config key, not a secret)
TOKEN_SET_POINTER = "/" + TOKEN_SET_KEY
EXPIRY_MARGIN = 60.0  # a token expiring within this many seconds is refreshed first


@dataclass(frozen=True)
class TokenSet:
    access_token: str = ""
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    issuer: str | None = None
    reconnect: bool = False  # the server refused the refresh token: a person must connect

    def __repr__(self) -> str:
        return (
            f"TokenSet(expires_at={self.expires_at!r}, scope={self.scope!r}, "
            f"issuer={self.issuer!r}, reconnect={self.reconnect!r})"
        )

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a token set cannot be pickled")

    @classmethod
    def from_response(
        cls, token: Mapping[str, Any], issuer: str | None, now: float, previous: TokenSet | None
    ) -> TokenSet:
        """A token endpoint's answer; a refresh answer without a refresh token keeps the
        previous one (the server did not rotate it), and one without a scope keeps its
        scope (RFC 6749 5.1: unchanged)."""
        access = token.get("access_token")
        if not isinstance(access, str) or not access:
            raise ValueError("no access token in the answer")
        refresh = token.get("refresh_token")
        if not isinstance(refresh, str) or not refresh:
            refresh = previous.refresh_token if previous else None
        expires_in = token.get("expires_in")
        expires_at = None
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
            expires_at = now + float(expires_in)
        scope = token.get("scope")
        if not isinstance(scope, str):
            scope = previous.scope if previous else None
        return cls(access, refresh, expires_at, scope, issuer)

    def expiring(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at - now < EXPIRY_MARGIN

    def secrets(self, token_field: str) -> dict[str, str]:
        """The secret fields of a version holding this set (pointer -> value)."""
        rest = {
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "issuer": self.issuer,
            "reconnect": self.reconnect,
        }
        found = {TOKEN_SET_POINTER: json.dumps(rest, sort_keys=True)}
        if self.access_token:
            found[token_field] = self.access_token
        return found

    @classmethod
    def of_config(cls, config: Mapping[str, Any], token_field: str) -> TokenSet | None:
        """The set a decrypted config holds; None when it holds none (a pasted token)."""
        raw = config.get(TOKEN_SET_KEY)
        if not isinstance(raw, str):
            return None
        rest = json.loads(raw)
        node: Any = config
        for part in pointer_tokens(token_field):
            node = node.get(part) if isinstance(node, Mapping) else None
        access = node if isinstance(node, str) else ""
        return cls(
            access,
            rest.get("refresh_token"),
            rest.get("expires_at"),
            rest.get("scope"),
            rest.get("issuer"),
            bool(rest.get("reconnect")),
        )


def without_token_set(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config a plugin sees: the access token at its field, nothing else of the set."""
    return {k: v for k, v in config.items() if k != TOKEN_SET_KEY}
