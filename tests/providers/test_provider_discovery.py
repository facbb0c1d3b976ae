"""Discovery: providers are entry points in `toolkit_vault.key_providers`; a broken one is
refused with a message naming it, and nothing falls back to another provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from provider_support import PLUGINS, settings

from toolkit_vault.errors import KeyProviderError
from toolkit_vault.keys.providers import (
    ENTRY_POINT_GROUP,
    ProviderError,
    load_provider,
    provider_class,
    provider_names,
)
from toolkit_vault.keys.providers.aws_kms import AwsKmsProvider
from toolkit_vault.keys.providers.env import EnvProvider
from toolkit_vault.keys.providers.file import FileProvider
from toolkit_vault.keys.providers.hsm import Pkcs11Provider
from toolkit_vault.keys.providers.os_keyring import KeyringProvider

SHIPPED = {
    "file": FileProvider,
    "env": EnvProvider,
    "keyring": KeyringProvider,
    "aws-kms": AwsKmsProvider,
    "pkcs11": Pkcs11Provider,
}


@pytest.fixture
def test_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))


def test_the_group_is_the_designed_one() -> None:
    assert ENTRY_POINT_GROUP == "toolkit_vault.key_providers"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_providers_are_entry_points(name: str) -> None:
    assert name in provider_names()
    assert provider_class(name) is SHIPPED[name]
    assert SHIPPED[name].name == name


def test_load_provider_builds_from_settings(tmp_path: Path) -> None:
    provider = load_provider("file", settings(tmp_path, path=str(tmp_path / "keys.json")))
    assert isinstance(provider, FileProvider) and provider.path == tmp_path / "keys.json"


def test_unknown_provider_names_the_installed_ones(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="unknown key provider 'vault-transit'") as caught:
        load_provider("vault-transit", settings(tmp_path))
    assert "aws-kms, env, file, keyring, pkcs11" in str(caught.value)
    assert isinstance(caught.value, KeyProviderError) and caught.value.provider == "vault-transit"


def test_a_third_party_provider_loads(test_plugins: None, tmp_path: Path) -> None:
    provider = load_provider("tkv-test-good", settings(tmp_path))
    assert type(provider).__name__ == "Good" and provider.name == "tkv-test-good"
    assert provider.create_master_key() == "kek-1"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("tkv-test-broken-import", "failed to load (ModuleNotFoundError)"),
        ("tkv-test-not-a-provider", "is not a KeyProvider"),
        ("tkv-test-misnamed", "calls itself 'file'"),
        ("tkv-test-crashes", "failed to start (RuntimeError)"),
        ("tkv-test-twice", "registered twice"),
    ],
)
def test_a_broken_provider_is_refused_naming_it(
    test_plugins: None, tmp_path: Path, name: str, message: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        load_provider(name, settings(tmp_path))
    text = str(caught.value)
    assert f"key provider {name}" in text and message in text
    assert "secret-canary" not in text
    error = caught.value  # nothing chained that a traceback would print
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_a_broken_provider_does_not_disturb_the_others(test_plugins: None, tmp_path: Path) -> None:
    assert isinstance(load_provider("file", settings(tmp_path)), FileProvider)


@pytest.mark.parametrize("name", ["file", "env", "keyring", "aws-kms", "pkcs11"])
def test_unknown_options_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=f"key provider {name}: unknown option 'secret'"):
        load_provider(name, settings(tmp_path, secret="x"))


@pytest.mark.parametrize("option", ["aws_access_key_id", "aws_secret_access_key", "pin"])
def test_credentials_are_never_options(option: str, tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="unknown option"):
        load_provider("aws-kms", settings(tmp_path, **{option: "x"}))
    with pytest.raises(ProviderError, match="unknown option"):
        load_provider("pkcs11", settings(tmp_path, **{option: "x"}))
