"""Settings: read once from the environment and the home's record, then frozen.

`init` writes `vault.json` in the home (database URL, key provider, vault id), so every
later command run with the same home needs no flag. The environment overrides the record.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import VaultError
from .keys import ProviderName

__all__ = ["RECORD_NAME", "EnvSettings", "VaultSettings", "load_settings", "write_record"]

RECORD_NAME = "vault.json"


class EnvSettings(BaseSettings):
    """The `TOOLKIT_VAULT_*` environment variables the design names."""

    model_config = SettingsConfigDict(env_prefix="TOOLKIT_VAULT_", frozen=True, extra="ignore")

    home: Path = Path("./var")
    database_url: str | None = None
    key_provider: ProviderName | None = None


@dataclass(frozen=True)
class VaultSettings:
    home: Path
    database_url: str
    key_provider: ProviderName
    vault_id: str
    initialized: bool

    @property
    def record_path(self) -> Path:
        return self.home / RECORD_NAME


def default_database_url(home: Path) -> str:
    return f"sqlite:///{home / 'vault.db'}"


def load_settings(key_provider: ProviderName | None = None) -> VaultSettings:
    """Resolve settings: flag, then environment, then the home's record, then defaults."""
    env = EnvSettings()
    home = env.home.expanduser().absolute()
    record: dict[str, str] = {}
    path = home / RECORD_NAME
    if path.exists():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise VaultError(f"{path} is not valid JSON; restore it or remove the home") from None
    provider = key_provider or env.key_provider or record.get("key_provider") or "keyring"
    if provider not in ("keyring", "file", "env"):
        raise VaultError(f"unknown key provider {provider!r}; use keyring, file or env")
    return VaultSettings(
        home=home,
        database_url=env.database_url or record.get("database_url") or default_database_url(home),
        key_provider=provider,  # type: ignore[arg-type]
        vault_id=record.get("vault_id") or str(uuid.uuid4()),
        initialized=bool(record),
    )


def write_record(settings: VaultSettings) -> None:
    """Record the chosen database and key provider in the home (0600, atomically)."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {
        "format": 1,
        "vault_id": settings.vault_id,
        "database_url": settings.database_url,
        "key_provider": settings.key_provider,
    }
    temp = settings.record_path.with_suffix(".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
    os.replace(temp, settings.record_path)
