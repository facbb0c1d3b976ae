"""`env`: the key document in an environment variable, read once and removed from the
environment at once, so no subprocess the vault starts (a toolkit, a shell) inherits it.

Read-only: an operator who rotates edits the variable (a new key, made primary) and
restarts. The value stays in this process's memory only (`base.take_env_secret`).
"""

from __future__ import annotations

from .base import ProviderSettings, take_env_secret
from .document import KeyDocument
from .local import LocalProvider

__all__ = ["ENV_KEYS", "EnvProvider"]

ENV_KEYS = "TOOLKIT_VAULT_MASTER_KEYS"


class EnvProvider(LocalProvider):
    """Options: `variable` (default `TOOLKIT_VAULT_MASTER_KEYS`)."""

    name = "env"
    option_names = ("variable",)

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self.variable = settings.options.get("variable") or ENV_KEYS
        self.where = f"environment variable {self.variable}"
        self.read_only = (
            f"is read-only: put the key document in {self.variable} yourself "
            "(to rotate, add a new key to it and make that key primary)"
        )

    def load(self) -> KeyDocument | None:
        text = take_env_secret(self.variable)
        return None if text is None else self.parse(text.reveal())
