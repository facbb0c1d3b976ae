"""`keyring`: the key document in the OS keyring, refusing the fail, null and plaintext
backends and any backend of priority below 1 (fail closed: never a file in disguise).

`import keyring` below is the keyring library (absolute imports), not this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit_vault.keys.providers.base import ProviderError, ProviderSettings
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.local import LocalProvider

__all__ = ["KeyringProvider"]

_SERVICE = "toolkit-vault"


class KeyringProvider(LocalProvider):
    """No options: the entry is `master-keys:<vault id>` under the service `toolkit-vault`."""

    name = "keyring"

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self.username = f"master-keys:{settings.vault_id}"
        self.where = f"OS keyring entry {self.username}"
        self.backend = _secure_keyring_backend(self.error)
        self.where = f"OS keyring ({type(self.backend).__name__}) entry {self.username}"

    def load(self) -> KeyDocument | None:
        try:
            text = self.backend.get_password(_SERVICE, self.username)
        except Exception as exc:  # backends raise their own types (dbus, locked, ...)
            raise self.error(f"cannot be read ({type(exc).__name__})") from None
        return self.parse(text) if text else None

    def store(self, document: KeyDocument) -> None:
        try:
            self.backend.set_password(_SERVICE, self.username, document.dumps())
        except Exception as exc:
            raise self.error(f"cannot be written ({type(exc).__name__})") from None


def _secure_keyring_backend(error: Callable[[str], ProviderError]) -> Any:
    """The OS keyring backend, refusing the fail, null and plaintext ones (fail closed)."""
    import keyring  # imported lazily: backend discovery is slow and has side effects
    from keyring.backends import fail, null
    from keyring.backends.chainer import ChainerBackend

    insecure: tuple[type, ...] = (fail.Keyring, null.Keyring)
    try:
        from keyrings.alt.file import PlaintextKeyring

        insecure += (PlaintextKeyring,)
    except ImportError:
        pass
    backend = keyring.get_keyring()
    members = list(backend.backends) if isinstance(backend, ChainerBackend) else [backend]
    for member in members or [backend]:
        try:
            priority = float(type(member).priority)
        except Exception:
            priority = 0.0
        if not members or priority < 1 or isinstance(member, insecure):
            kind = f"{type(member).__module__}.{type(member).__name__}"
            raise error(
                f"no secure OS keyring is available (found {kind}); "
                "use --key-provider file to keep the master key in a 0600 file instead"
            )
    return backend
