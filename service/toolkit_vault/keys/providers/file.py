"""`file`: the key document in a JSON file owned by the user, mode 0600, not a symlink.

Reads refuse a symlink, another owner, and group or other permission bits, all checked on
the descriptor they read (`files.open_private`); writes replace it whole through a fresh
0600 temporary file (`files.write_atomically`). The PKCS#11 provider reads its PIN file
with the same checks (`read_private_file`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from toolkit_vault.files import PrivateFileError, open_private, write_atomically
from toolkit_vault.keys.providers.base import ProviderError, ProviderSettings
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.local import LocalProvider

__all__ = ["KEY_FILE_NAME", "FileProvider", "read_private_file"]

KEY_FILE_NAME = "master-keys.json"


def read_private_file(path: Path, fail: Callable[[str], ProviderError]) -> bytes | None:
    """The file's bytes, None if it does not exist; refuses anything others could change
    (`files.open_private`: never through a symlink, a regular file of this user, 0600)."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except PrivateFileError as exc:
        raise fail(str(exc)) from None
    try:
        with os.fdopen(fd, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror})") from None


class FileProvider(LocalProvider):
    """Options: `path` (default `master-keys.json` in the vault's home)."""

    name = "file"
    option_names = ("path",)

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self.path = Path(settings.options.get("path") or settings.home / KEY_FILE_NAME)
        self.where = f"key file {self.path}"

    def load(self) -> KeyDocument | None:
        data = read_private_file(self.path, self.error)
        return None if data is None else self.parse(data)

    def store(self, document: KeyDocument) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(self.path, document.dumps().encode())
        except OSError as exc:
            raise self.error(f"cannot be written ({exc.strerror})") from None
