"""The secrets a live instance was initialized with, as the withheld rule searches for
them (`withhold.Withholder`): the values at the config's secret fields (its schema says
which), and an OAuth connection's refresh token. Kept with the instance when it is made,
from the config as decrypted (or as just submitted); split and compiled into one search
only when the first call's result needs it, so a configure or a resume that no call
follows pays nothing for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.schema import CompiledSchema
from toolkit_vault.tools.withhold import Withholder, secret_values

__all__ = ["ScopeSecrets"]


class ScopeSecrets:
    """One instance's config, and the withholder made of its secrets on first use."""

    __slots__ = ("_config", "_lock", "_schema", "_token_set", "_withholder")

    def __init__(
        self,
        schema: Callable[[], CompiledSchema],
        config: Mapping[str, Any],
        token_set: Any = None,
    ) -> None:
        """`schema`: the toolkit's compiled config schema, when first needed; `config`:
        what the instance was given (public and secret fields); `token_set`: the OAuth
        token set stored beside it, if any (its JSON text)."""
        self._schema = schema
        self._config: Mapping[str, Any] | None = config
        self._token_set = token_set
        self._withholder: Withholder | None = None
        self._lock = threading.Lock()

    @property
    def withholder(self) -> Withholder:
        found = self._withholder
        if found is not None:
            return found
        with self._lock:
            if self._withholder is None:
                self._withholder = Withholder(self._values())
                self._config = self._token_set = None
            return self._withholder

    def _values(self) -> list[str]:
        """The secret values. A config its schema no longer splits (it cannot be, as stored
        versions are bound to their schema's digest), or whose schema no longer compiles,
        gives every string in it: fail closed."""
        config = self._config or {}
        try:
            values = list(secret_values(self._schema().split(config)[1]))
        except (ConfigInvalid, SchemaRefused):
            values = list(secret_values(config))
        if isinstance(self._token_set, str):
            with contextlib.suppress(ValueError, AttributeError):
                values.extend(secret_values(json.loads(self._token_set).get("refresh_token")))
        return values

    def __repr__(self) -> str:
        return "ScopeSecrets(<secrets>)"

    def __reduce__(self) -> Any:
        raise TypeError("scope secrets cannot be pickled")
