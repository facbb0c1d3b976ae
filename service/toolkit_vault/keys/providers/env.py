"""`env`: the key document in an environment variable, read once and removed from the
environment at once, so no subprocess the vault starts (a toolkit, a shell) inherits it.

Read-only: an operator who rotates edits the variable (a new key, made primary) and
restarts. The value stays in this process's memory only (`base.take_env_secret`).
"""

from __future__ import annotations

from toolkit_vault.keys.providers.base import ProviderSettings, take_env_secret
from toolkit_vault.keys.providers.document import DocumentError, KeyDocument
from toolkit_vault.keys.providers.local import LocalProvider

__all__ = ["DOCUMENT_FORMAT", "ENV_KEYS", "EnvProvider"]

ENV_KEYS = "TOOLKIT_VAULT_MASTER_KEYS"
# Shown in this provider's errors: the operator writes the document by hand.
DOCUMENT_FORMAT = (
    '{"format": 1, "primary": "kek-1", "keys": {"kek-1": "<32 random bytes, base64>"}}'
)


class EnvProvider(LocalProvider):
    """Options: `variable` (default `TOOLKIT_VAULT_MASTER_KEYS`)."""

    name = "env"
    option_names = ("variable",)

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self.variable = settings.options.get("variable") or ENV_KEYS
        self.where = f"environment variable {self.variable}"
        self.read_only = (
            f"is read-only: put the key document in {self.variable} yourself, as JSON: "
            f"{DOCUMENT_FORMAT} (to rotate, add a new key to it and make that key primary)"
        )

    def parse(self, text: str | bytes) -> KeyDocument:
        try:
            return KeyDocument.loads(text)
        except DocumentError as exc:  # never the content: only how it is wrong, and the form
            raise self.error(f"{exc}; it must be JSON: {DOCUMENT_FORMAT}") from None

    def load(self) -> KeyDocument | None:
        text = take_env_secret(self.variable)
        return None if text is None else self.parse(text.reveal())
