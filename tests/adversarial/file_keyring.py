"""A keyring backend for the key refusal tests: secure-looking, kept in a JSON file.

Selected only through `PYTHON_KEYRING_BACKEND=file_keyring.FileKeyring`, with the file named
by `TKV_TEST_KEYRING_FILE`, so every process of one test sees the same entries (an OS
keyring would). Its priority passes the vault's check; the point is what other, insecure
backends do to a home that it initialized.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend


class FileKeyring(KeyringBackend):
    priority = 5  # type: ignore[assignment]

    @staticmethod
    def _path() -> Path:
        return Path(os.environ["TKV_TEST_KEYRING_FILE"])

    def _entries(self) -> dict[str, str]:
        try:
            entries: dict[str, str] = json.loads(self._path().read_text())
        except FileNotFoundError:
            return {}
        return entries

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = {**self._entries(), f"{service}/{username}": password}
        self._path().write_text(json.dumps(entries))

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        del entries[f"{service}/{username}"]
        self._path().write_text(json.dumps(entries))
