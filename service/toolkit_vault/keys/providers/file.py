"""`file`: the key document in a JSON file owned by the user, mode 0600, not a symlink.

Reads refuse a symlink, another owner, group or other permission bits, and a file swapped
while it was opened; writes replace it whole through a fresh 0600 temporary file
(`files.write_atomically`). The PKCS#11 provider reads its PIN file with the same checks
(`read_private_file`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from toolkit_vault.files import write_atomically
from toolkit_vault.keys.providers.base import ProviderError, ProviderSettings
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.local import LocalProvider

__all__ = ["KEY_FILE_NAME", "FileProvider", "read_private_file"]

KEY_FILE_NAME = "master-keys.json"


def read_private_file(path: Path, fail: Callable[[str], ProviderError]) -> bytes | None:
    """The file's bytes, None if it does not exist; refuses anything others could change."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise fail("is a symlink; refusing to follow it")
    if not stat.S_ISREG(info.st_mode):
        raise fail("is not a regular file")
    if info.st_uid != os.getuid():
        raise fail("is not owned by the current user")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise fail(f"has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            opened = os.fstat(handle.fileno())
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise fail("changed while it was being read")
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
