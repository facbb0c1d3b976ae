"""The local providers' shared half: the key document is read into memory and the master
key wraps with the vault's own committing AEAD (`crypto.seal`), bound to the context.

The file, keyring and env providers differ only in where the document lives (`load` and
`store`); their blobs share the scheme `local`, so a vault moves between them by moving
the document. The document is read once and kept; an unknown key id in a blob rereads it
once (another process may have rotated), then names the missing key.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable

from toolkit_vault import crypto
from toolkit_vault.crypto import KEY_BYTES, SecretBytes
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers.base import (
    Context,
    KeyProvider,
    ProviderSettings,
    ProviderStatus,
    checked_key,
    pack_blob,
    unpack_blob,
    wrap_aad,
)
from toolkit_vault.keys.providers.document import DocumentError, KeyDocument

__all__ = ["SCHEME", "LocalProvider"]

SCHEME = "local"
_NONE_YET = (
    "holds no master key (restore it; `toolkit-vault init` creates one for a new vault only)"
)


class LocalProvider(KeyProvider):
    """A provider holding the key document itself. `read_only` media refuse to change it."""

    read_only = ""  # when set: why the medium cannot change, and what to do instead

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._lock = threading.Lock()
        self._document: KeyDocument | None = None

    @abstractmethod
    def load(self) -> KeyDocument | None:
        """The stored document, or None when the medium holds none yet."""

    def store(self, document: KeyDocument) -> None:
        """Replace the stored document (atomically where the medium allows)."""
        raise self.error(self.read_only)

    def parse(self, text: str | bytes) -> KeyDocument:
        try:
            return KeyDocument.loads(text)
        except DocumentError as exc:
            raise self.error(str(exc)) from None

    def _held(self, *, reread: bool = False) -> KeyDocument:
        with self._lock:
            if self._document is None or reread:
                self._document = self.load()
            if self._document is None:
                raise self.error(_NONE_YET)
            return self._document

    def wrap(self, key: SecretBytes, context: Context) -> bytes:
        document = self._held()
        kek_id = document.primary
        aad = wrap_aad(SCHEME, kek_id, context)
        sealed = crypto.seal(document.keys[kek_id], checked_key(key).reveal(), aad)
        return pack_blob(SCHEME, kek_id, sealed)

    def unwrap(self, blob: bytes, context: Context) -> SecretBytes:
        scheme, kek_id, payload = unpack_blob(blob)
        if scheme != SCHEME:
            raise self.foreign(scheme)
        kek = self._held().keys.get(kek_id) or self._held(reread=True).keys.get(kek_id)
        if kek is None:
            raise self.error(f"master key {kek_id} is not there")
        plaintext = crypto.unseal(kek, payload, wrap_aad(SCHEME, kek_id, context))
        if len(plaintext) != KEY_BYTES:
            raise DecryptionError
        return SecretBytes(plaintext)

    def status(self) -> ProviderStatus:
        with self._lock:
            self._document = self.load()
            held = self._document
        if held is None:
            return ProviderStatus(self.name, self.where, None, ())
        return ProviderStatus(self.name, self.where, held.primary, tuple(sorted(held.keys)))

    def _change(self, edit: Callable[[KeyDocument | None], KeyDocument]) -> str:
        """Apply one edit to the freshly read document, store it, keep it; the new primary."""
        if self.read_only:
            raise self.error(self.read_only)
        with self._lock:
            try:
                changed = edit(self.load())
            except DocumentError as exc:
                raise self.error(str(exc)) from None
            self.store(changed)
            self._document = changed
            return changed.primary

    def create_master_key(self) -> str:
        def create(held: KeyDocument | None) -> KeyDocument:
            if held is not None:
                ids = ", ".join(sorted(held.keys))
                raise DocumentError(f"already holds master keys ({ids}); rotate instead")
            return KeyDocument.first()

        return self._change(create)

    def rotate(self) -> str:
        return self._change(lambda held: _existing(held).with_new_primary())

    def retire(self, key_id: str) -> None:
        self._change(lambda held: _existing(held).without(key_id))


def _existing(held: KeyDocument | None) -> KeyDocument:
    if held is None:
        raise DocumentError(_NONE_YET)
    return held
