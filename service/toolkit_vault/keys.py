"""Key providers: where the master keys (KEKs) live, and the refusal to keep them unsafely.

Three providers share one document format, so keys move between them unchanged:

    {"format": 1, "primary": "kek-2", "keys": {"kek-1": "<base64>", "kek-2": "<base64>"}}

- `keyring`: the OS keyring; the fail, null and plaintext backends are refused.
- `file`: a JSON file owned by the user, mode 0600, not a symlink, replaced atomically.
- `env`: `TOOLKIT_VAULT_MASTER_KEYS` holds the document; read-only.

Providers are asked once at start-up; nothing here ever invents a key on a failed load.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .crypto import KEY_BYTES, KeyRing, SecretBytes, new_key
from .errors import KeyProviderError

__all__ = [
    "ENV_KEYS",
    "KEY_FILE_NAME",
    "EnvProvider",
    "FileProvider",
    "KeyProvider",
    "KeyringProvider",
    "MasterKeys",
    "ProviderName",
    "provider_for",
]

ProviderName = Literal["keyring", "file", "env"]
ENV_KEYS = "TOOLKIT_VAULT_MASTER_KEYS"
# Shown in the env provider's errors: the operator writes the document by hand.
DOCUMENT_FORMAT = (
    '{"format": 1, "primary": "kek-1", "keys": {"kek-1": "<32 random bytes, base64>"}}'
)
KEY_FILE_NAME = "master-keys.json"
_KEYRING_SERVICE = "toolkit-vault"
_KEK_ID = re.compile(r"kek-([0-9]{1,9})", re.ASCII)


@dataclass(frozen=True, repr=False)
class MasterKeys:
    """The key document, parsed; keys stay in `SecretBytes`."""

    primary: str
    keys: dict[str, SecretBytes]

    def __repr__(self) -> str:
        return f"MasterKeys(primary={self.primary!r}, ids={sorted(self.keys)})"

    @classmethod
    def first(cls) -> MasterKeys:
        return cls("kek-1", {"kek-1": new_key()})

    def with_new_primary(self, taken: Iterable[str] = ()) -> MasterKeys:
        """Add a fresh key, numbered past every id here and in `taken` (the store's)."""
        numbers = [int(m[1]) for k in (*self.keys, *taken) if (m := _KEK_ID.fullmatch(k))]
        kek_id = f"kek-{max(numbers, default=0) + 1}"
        return MasterKeys(kek_id, {**self.keys, kek_id: new_key()})

    def without(self, kek_id: str) -> MasterKeys:
        if kek_id == self.primary:
            raise KeyProviderError(f"{kek_id} is the primary master key and cannot be removed")
        if kek_id not in self.keys:
            raise KeyProviderError(f"master key {kek_id} is not in the provider")
        return MasterKeys(self.primary, {k: v for k, v in self.keys.items() if k != kek_id})

    def ring(self) -> KeyRing:
        return KeyRing(self.keys, self.primary)

    def dumps(self) -> str:
        keys = {k: base64.b64encode(v.reveal()).decode() for k, v in sorted(self.keys.items())}
        return json.dumps({"format": 1, "primary": self.primary, "keys": keys}, indent=2)

    @classmethod
    def loads(cls, text: str, where: str) -> MasterKeys:
        try:
            doc: Any = json.loads(text)
        except ValueError:
            raise KeyProviderError(f"{where} is not a JSON key document") from None
        if not isinstance(doc, dict) or type(doc.get("format")) is not int or doc["format"] != 1:
            raise KeyProviderError(f"{where} is not a version 1 key document")
        primary, raw = doc.get("primary"), doc.get("keys")
        if not isinstance(primary, str) or not isinstance(raw, dict) or primary not in raw:
            raise KeyProviderError(f"{where} must name a primary key among its keys")
        keys: dict[str, SecretBytes] = {}
        for kek_id, encoded in raw.items():
            try:
                key = base64.b64decode(str(encoded), validate=True)
            except ValueError:  # binascii.Error, or non-ASCII text
                raise KeyProviderError(f"{where}: key {kek_id} is not valid base64") from None
            if len(key) != KEY_BYTES:
                raise KeyProviderError(
                    f"{where}: key {kek_id} must be {KEY_BYTES} bytes, not {len(key)}"
                )
            keys[str(kek_id)] = SecretBytes(key)
        return cls(primary, keys)


class KeyProvider(ABC):
    """Loads and stores the key document; `where` names it in every message."""

    name: ProviderName
    where: str

    @abstractmethod
    def load(self) -> MasterKeys | None:
        """The stored keys, or None when this provider holds none yet."""

    @abstractmethod
    def store(self, keys: MasterKeys) -> None:
        """Replace the stored document (atomically where the medium allows)."""


class FileProvider(KeyProvider):
    name: ProviderName = "file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = f"key file {path}"

    def load(self) -> MasterKeys | None:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            raise KeyProviderError(f"{self.where} is a symlink; refusing to follow it")
        if not stat.S_ISREG(info.st_mode):
            raise KeyProviderError(f"{self.where} is not a regular file")
        if info.st_uid != os.getuid():
            raise KeyProviderError(f"{self.where} is not owned by the current user")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise KeyProviderError(
                f"{self.where} has mode {mode:04o}; it must be 0600 (chmod 600 {self.path})"
            )
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            opened = os.fstat(handle.fileno())
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise KeyProviderError(f"{self.where} changed while it was being read")
            data = handle.read()
        try:
            return MasterKeys.loads(data.decode("utf-8"), self.where)
        except UnicodeDecodeError:
            raise KeyProviderError(f"{self.where} is not a JSON key document") from None

    def store(self, keys: MasterKeys) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        temp = Path(name)  # mkstemp creates it 0600 with a fresh random name
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(keys.dumps())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


_env_document: str | None = None  # the env provider's document, once taken from os.environ


class EnvProvider(KeyProvider):
    """Reads the key document once and removes it from `os.environ`, so no process this
    one starts (a toolkit's subprocess, a shell) inherits the master keys."""

    name: ProviderName = "env"
    where = f"environment variable {ENV_KEYS}"

    def load(self) -> MasterKeys | None:
        global _env_document
        taken = os.environ.pop(ENV_KEYS, None)
        if taken is not None:  # set again (empty: cleared) since it was last taken
            _env_document = taken or None
        if not _env_document:
            return None
        try:
            return MasterKeys.loads(_env_document, self.where)
        except KeyProviderError as exc:  # never the content: how it is wrong, and the form
            raise KeyProviderError(f"{exc.message}; it must be JSON: {DOCUMENT_FORMAT}") from None

    def store(self, keys: MasterKeys) -> None:
        raise KeyProviderError(
            f"the env key provider is read-only: put the key document in {ENV_KEYS} yourself, "
            f"as JSON: {DOCUMENT_FORMAT}"
        )


class KeyringProvider(KeyProvider):
    name: ProviderName = "keyring"

    def __init__(self, vault_id: str) -> None:
        self.username = f"master-keys:{vault_id}"
        self.backend = _secure_keyring_backend()
        self.where = f"OS keyring ({type(self.backend).__name__}) entry {self.username}"

    def load(self) -> MasterKeys | None:
        text = self.backend.get_password(_KEYRING_SERVICE, self.username)
        return MasterKeys.loads(text, self.where) if text else None

    def store(self, keys: MasterKeys) -> None:
        self.backend.set_password(_KEYRING_SERVICE, self.username, keys.dumps())


def _secure_keyring_backend() -> Any:
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
            raise KeyProviderError(
                f"no secure OS keyring is available (found {kind}); "
                "use --key-provider file to keep the master key in a 0600 file instead"
            )
    return backend


def provider_for(name: ProviderName, home: Path, vault_id: str) -> KeyProvider:
    if name == "file":
        return FileProvider(home / KEY_FILE_NAME)
    if name == "env":
        return EnvProvider()
    if name == "keyring":
        return KeyringProvider(vault_id)
    raise KeyProviderError(f"unknown key provider {name!r}; use keyring, file or env")
