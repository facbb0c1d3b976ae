"""The key provider interface: where the master key lives, asked only to wrap and unwrap.

A provider never hands its master key to the vault. It wraps a 256-bit key the vault
chose (a vault key) and unwraps it again, both bound to a context: the caller's tuple of
ids that says what the wrapped key is for. A blob moved to another context fails to
unwrap. The medium enforces the binding: AES-GCM associated data for the local and PKCS#11
providers, the KMS `EncryptionContext` for AWS.

Every blob starts with a small public header, the same for all providers:

    b"TKVW" || version (1) || len(scheme) (1) || scheme || len(key id) (1) || key id || payload

`scheme` says how the payload was made (`local` is shared by the file, keyring and env
providers, so their key documents move between them unchanged); `key id` names the master
key. The header lets an operator's tool say which master key holds a blob without a call
to the provider; each provider authenticates it (associated data, or the key KMS reports).

Errors have two layers, as everywhere in the vault: `ProviderError` (a `KeyProviderError`)
for a provider that is missing, unreachable, misconfigured or refusing, always naming the
provider; and the one opaque `DecryptionError` for a blob that does not open in its context.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NoReturn

from toolkit_vault.crypto import KEY_BYTES, SecretBytes, associated_data
from toolkit_vault.errors import DecryptionError, KeyProviderError

__all__ = [
    "Context",
    "KeyProvider",
    "ProviderError",
    "ProviderSettings",
    "ProviderStatus",
    "blob_header",
    "check_context",
    "checked_key",
    "pack_blob",
    "take_env_secret",
    "unpack_blob",
    "wrap_aad",
]

Context = tuple[str | int, ...]
_MAGIC = b"TKVW"
_BLOB_VERSION = 1
_AAD_LABEL = "toolkit-vault/master-wrap/v1"


class ProviderError(KeyProviderError):
    """The provider is missing, unreachable, misconfigured or refused; the message names it."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(message)
        self.provider = provider


@dataclass(frozen=True)
class ProviderSettings:
    """What a provider is built from: the vault's home and id, and its own options
    (strings, as they come from `vault.json`, the environment or a command-line flag).
    Credentials are never options: each provider reads them from its own standard place."""

    home: Path
    vault_id: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderStatus:
    """The master keys a provider holds; `current` wraps new blobs (None: holds none yet)."""

    provider: str
    where: str
    current: str | None
    key_ids: tuple[str, ...]
    details: Mapping[str, str] = field(default_factory=dict)


class KeyProvider(ABC):
    """One place a master key lives. Subclasses set `name` and `option_names`, set `where`
    in `__init__` (a human name for every message), validate their options there, and
    reach the medium only when asked (construction does no I/O beyond reading settings)."""

    name: ClassVar[str]
    option_names: ClassVar[tuple[str, ...]] = ()
    where: str

    def __init__(self, settings: ProviderSettings) -> None:
        unknown = sorted(set(settings.options) - set(self.option_names))
        if unknown:
            takes = ", ".join(self.option_names) or "no options"
            raise ProviderError(
                self.name, f"key provider {self.name}: unknown option {unknown[0]!r} ({takes})"
            )
        self.settings = settings

    @abstractmethod
    def wrap(self, key: SecretBytes, context: Context) -> bytes:
        """Wrap a 256-bit key under the current master key, bound to `context`."""

    @abstractmethod
    def unwrap(self, blob: bytes, context: Context) -> SecretBytes:
        """The key `wrap` was given, or `DecryptionError` if the blob does not open in
        `context`; `ProviderError` if the provider cannot be asked or lacks the key."""

    @abstractmethod
    def status(self) -> ProviderStatus:
        """The master key ids the provider holds and which one is current."""

    def create_master_key(self) -> str:
        """Create the first master key (at `init`) and return its id."""
        raise self.error("cannot create a master key here; create it yourself")

    def rotate(self) -> str:
        """Make a new current master key; blobs under the old ones still unwrap."""
        raise self.error("cannot rotate its master key here; rotate it yourself")

    def retire(self, key_id: str) -> None:
        """Remove an old master key once nothing is wrapped under it (the caller checks)."""
        raise self.error(f"cannot remove master key {key_id} here; remove it yourself")

    def recorded_options(self) -> dict[str, str]:
        """The options `init` records in the home, so later commands find the same master
        key without a flag (a provider that created its key adds where it is)."""
        return dict(self.settings.options)

    def error(self, problem: str) -> ProviderError:
        return ProviderError(self.name, f"key provider {self.name} ({self.where}): {problem}")

    def foreign(self, scheme: str) -> ProviderError:
        return self.error(f"this key was wrapped by another kind of provider ({scheme})")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(where={self.where!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be pickled")


def check_context(context: Context) -> Context:
    """A context is a non-empty tuple of str and int (bool is refused: True == 1)."""
    if (
        not isinstance(context, tuple)
        or not context
        or any(type(part) not in (str, int) for part in context)
    ):
        raise TypeError("a wrap context is a non-empty tuple of str and int")
    return context


def wrap_aad(scheme: str, key_id: str, context: Context) -> bytes:
    """Associated data for AEAD providers: binds the header's scheme and key id too."""
    return associated_data(_AAD_LABEL, scheme, key_id, *check_context(context))


def pack_blob(scheme: str, key_id: str, payload: bytes) -> bytes:
    parts = [scheme.encode(), key_id.encode()]
    if not all(0 < len(part) < 256 for part in parts):
        raise ValueError("scheme and key id must be 1-255 bytes")
    head = bytes([_BLOB_VERSION, len(parts[0])]) + parts[0] + bytes([len(parts[1])]) + parts[1]
    return _MAGIC + head + payload


def unpack_blob(blob: bytes) -> tuple[str, str, bytes]:
    """(scheme, key id, payload); any malformed header is the opaque `DecryptionError`."""
    try:
        if not isinstance(blob, bytes) or blob[:4] != _MAGIC or blob[4] != _BLOB_VERSION:
            raise DecryptionError
        at = 5
        fields: list[str] = []
        for _ in range(2):
            size = blob[at]
            value = blob[at + 1 : at + 1 + size]
            if size == 0 or len(value) != size:
                raise DecryptionError
            fields.append(value.decode("utf-8"))
            at += 1 + size
    except (IndexError, UnicodeDecodeError):
        raise DecryptionError from None
    return fields[0], fields[1], blob[at:]


def blob_header(blob: bytes) -> tuple[str, str]:
    """The public (scheme, master key id) of a blob, without asking any provider."""
    scheme, key_id, _ = unpack_blob(blob)
    return scheme, key_id


def checked_key(key: SecretBytes) -> SecretBytes:
    if not isinstance(key, SecretBytes) or len(key) != KEY_BYTES:
        raise TypeError(f"only {KEY_BYTES * 8}-bit keys in SecretBytes are wrapped")
    return key


_taken: dict[str, SecretBytes] = {}
_taken_lock = threading.Lock()


def take_env_secret(variable: str) -> SecretBytes | None:
    """Read a secret from the environment and remove it there, so no subprocess the vault
    starts (a toolkit, a shell) inherits it. The value is kept for the process: a later
    read gets it back; setting the variable again replaces it. The process's *initial*
    environment block (`/proc/PID/environ`, readable by the same user) cannot be scrubbed."""
    with _taken_lock:
        value = os.environ.pop(variable, None)
        if value:
            _taken[variable] = SecretBytes(value.encode())
        elif value is not None:  # set but empty: the operator cleared it
            _taken.pop(variable, None)
        return _taken.get(variable)
