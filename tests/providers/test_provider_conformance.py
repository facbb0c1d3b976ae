"""Every shipped key provider against the conformance mixin, each on its real medium:
a 0600 file, an environment variable, a keyring backend, moto's KMS over HTTP and a
SoftHSM2 token."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from provider_support import MemoryKeyring, free_port, settings

from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.keys.providers.aws_kms import AwsKmsProvider
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.env import ENV_KEYS, EnvProvider
from toolkit_vault.keys.providers.file import FileProvider
from toolkit_vault.keys.providers.hsm import Pkcs11Provider
from toolkit_vault.keys.providers.os_keyring import KeyringProvider
from toolkit_vault.keys.providers.testing import ProviderConformance


class TestFileProvider(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _home(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        FileProvider(settings(tmp_path)).create_master_key()

    def make_provider(self) -> KeyProvider:
        return FileProvider(settings(self.tmp_path))

    def make_unreachable(self) -> KeyProvider:
        blocker = self.tmp_path / "not-a-directory"
        blocker.write_text("")
        return FileProvider(settings(self.tmp_path, path=str(blocker / "master-keys.json")))


class TestEnvProvider(ProviderConformance):
    rotates = False

    @pytest.fixture(autouse=True)
    def _env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        monkeypatch.setenv(ENV_KEYS, KeyDocument.first().with_new_primary().dumps())

    def make_provider(self) -> KeyProvider:
        return EnvProvider(settings(Path("/nonexistent")))

    def make_unreachable(self) -> KeyProvider:
        return EnvProvider(settings(Path("/nonexistent"), variable="TKV_TEST_UNSET_VARIABLE"))


class TestKeyringProvider(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _keyring(self, memory_keyring: MemoryKeyring, tmp_path: Path) -> None:
        self.backend, self.tmp_path = memory_keyring, tmp_path
        KeyringProvider(settings(tmp_path)).create_master_key()

    def make_provider(self) -> KeyProvider:
        self.backend.locked = False
        return KeyringProvider(settings(self.tmp_path))

    def make_unreachable(self) -> KeyProvider:
        provider = KeyringProvider(settings(self.tmp_path))
        self.backend.locked = True
        return provider


class TestAwsKmsProvider(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _kms(self, moto_endpoint: str, kms_key: str, tmp_path: Path) -> None:
        self.options = {"key_id": kms_key, "endpoint_url": moto_endpoint}
        self.tmp_path = tmp_path

    def make_provider(self) -> KeyProvider:
        return AwsKmsProvider(settings(self.tmp_path, **self.options))

    def make_unreachable(self) -> KeyProvider:
        closed = f"http://127.0.0.1:{free_port()}"
        return AwsKmsProvider(settings(self.tmp_path, **{**self.options, "endpoint_url": closed}))


class TestPkcs11Provider(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _token(self, pkcs11_options: dict[str, str], tmp_path: Path) -> None:
        self.options, self.tmp_path = pkcs11_options, tmp_path
        Pkcs11Provider(settings(tmp_path, **pkcs11_options)).create_master_key()

    def make_provider(self) -> KeyProvider:
        return Pkcs11Provider(settings(self.tmp_path, **self.options))

    def make_unreachable(self) -> KeyProvider:
        options: dict[str, Any] = {**self.options, "token_label": "no-such-token"}
        return Pkcs11Provider(settings(self.tmp_path, **options))


def test_env_provider_leaves_nothing_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, KeyDocument.first().dumps())
    EnvProvider(settings(Path("/nonexistent"))).status()
    assert ENV_KEYS not in os.environ
