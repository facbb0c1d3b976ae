"""The pkcs11 provider against a SoftHSM2 token: the master key is generated on the token
and never leaves it, the context is the AES-GCM associated data, and the PIN never comes
from the settings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pkcs11
import pytest
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
from pkcs11.mechanisms import GCMParams
from provider_support import SOFTHSM_MODULE, TOKEN_LABEL, USER_PIN, settings

from toolkit_vault.crypto import new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers import ProviderError
from toolkit_vault.keys.providers.base import unpack_blob, wrap_aad
from toolkit_vault.keys.providers.hsm import PIN_ENV, Pkcs11Provider
from toolkit_vault.keys.providers.testing import CONTEXT


@pytest.fixture
def provider(tmp_path: Path, pkcs11_options: dict[str, str]) -> Pkcs11Provider:
    made = Pkcs11Provider(settings(tmp_path, **pkcs11_options))
    assert made.create_master_key() == "kek-1"
    return made


@pytest.fixture
def session(softhsm_conf: Path) -> Iterator[Any]:
    """Our own session on the test token, to look at what the provider left there."""
    token = pkcs11.lib(SOFTHSM_MODULE).get_token(token_label=TOKEN_LABEL)
    with token.open(user_pin=USER_PIN, rw=True) as opened:
        yield opened


def _master(session: Any, provider: Pkcs11Provider, kek_id: str = "kek-1") -> Any:
    return session.get_key(
        object_class=ObjectClass.SECRET_KEY, label=provider.key_label, id=kek_id.encode()
    )


def test_the_master_key_stays_on_the_token(provider: Pkcs11Provider, session: Any) -> None:
    master = _master(session, provider)
    assert master.key_type == KeyType.AES and master[Attribute.VALUE_LEN] == 32
    assert master[Attribute.TOKEN] and master[Attribute.PRIVATE]
    assert master[Attribute.SENSITIVE] and master[Attribute.ALWAYS_SENSITIVE]
    assert not master[Attribute.EXTRACTABLE] and master[Attribute.NEVER_EXTRACTABLE]
    assert not master[Attribute.WRAP] and not master[Attribute.UNWRAP]
    with pytest.raises(pkcs11.exceptions.AttributeSensitive):
        master[Attribute.VALUE]
    wrapping = session.generate_key(KeyType.AES, 256, template={Attribute.WRAP: True})
    with pytest.raises(pkcs11.exceptions.KeyUnextractable):
        wrapping.wrap_key(master, mechanism=Mechanism.AES_KEY_WRAP)


def test_the_context_is_the_gcm_associated_data_on_the_token(
    provider: Pkcs11Provider, session: Any
) -> None:
    """Decrypting the payload straight on the token: only the wrap's own associated data
    opens it, so the binding is the token's AES-GCM, not a check in our code."""
    key = new_key()
    scheme, kek_id, payload = unpack_blob(provider.wrap(key, CONTEXT))
    master = _master(session, provider, kek_id)
    iv, sealed = payload[:12], payload[12:]
    assert provider.unwrap(provider.wrap(key, CONTEXT), CONTEXT).reveal() == key.reveal()

    def open_with(context: tuple[str | int, ...]) -> bytes:
        params = GCMParams(iv, wrap_aad(scheme, kek_id, context), 128)
        return bytes(master.decrypt(sealed, mechanism=Mechanism.AES_GCM, mechanism_param=params))

    assert open_with(CONTEXT) == key.reveal()
    with pytest.raises(pkcs11.exceptions.PKCS11Error):
        open_with((*CONTEXT[:-1], "elsewhere"))


def test_keys_of_another_label_do_not_open_our_blobs(
    tmp_path: Path, provider: Pkcs11Provider, pkcs11_options: dict[str, str]
) -> None:
    blob = provider.wrap(new_key(), CONTEXT)
    other = Pkcs11Provider(settings(tmp_path, **{**pkcs11_options, "key_label": "tkv-other"}))
    other.create_master_key()
    with pytest.raises(DecryptionError):
        other.unwrap(blob, CONTEXT)


def test_retire_destroys_an_old_key_and_never_the_current(
    provider: Pkcs11Provider, session: Any
) -> None:
    old = provider.wrap(new_key(), CONTEXT)
    assert provider.rotate() == "kek-2"
    with pytest.raises(ProviderError, match="kek-2 is the current master key"):
        provider.retire("kek-2")
    provider.retire("kek-1")
    assert provider.status().key_ids == ("kek-2",)
    with pytest.raises(pkcs11.exceptions.NoSuchKey):
        _master(session, provider, "kek-1")
    with pytest.raises(ProviderError, match="master key kek-1 is not on the token"):
        provider.unwrap(old, CONTEXT)
    with pytest.raises(ProviderError, match="kek-1 is not on the token"):
        provider.retire("kek-1")


def test_pin_from_the_environment_is_removed_from_it(
    tmp_path: Path, pkcs11_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {k: v for k, v in pkcs11_options.items() if k != "pin_file"}
    monkeypatch.setenv(PIN_ENV, USER_PIN)
    provider = Pkcs11Provider(settings(tmp_path, **options))
    assert PIN_ENV not in os.environ
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ.get({PIN_ENV!r}, 'absent'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "absent"
    assert provider.create_master_key() == "kek-1"
    assert Pkcs11Provider(settings(tmp_path, **options)).status().current == "kek-1"


def test_pin_from_a_named_variable(
    tmp_path: Path, pkcs11_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {k: v for k, v in pkcs11_options.items() if k != "pin_file"}
    monkeypatch.setenv("TKV_TEST_HSM_PIN", USER_PIN)
    provider = Pkcs11Provider(settings(tmp_path, **options, pin_env="TKV_TEST_HSM_PIN"))
    assert provider.create_master_key() == "kek-1"
    assert "TKV_TEST_HSM_PIN" not in os.environ


def test_a_wrong_pin_is_refused_clearly(
    tmp_path: Path, provider: Pkcs11Provider, pkcs11_options: dict[str, str]
) -> None:
    wrong = tmp_path / "wrong-pin"
    wrong.write_text("0000-not-the-pin")
    wrong.chmod(0o600)
    options = {**pkcs11_options, "pin_file": str(wrong)}
    with pytest.raises(ProviderError, match="refused the PIN") as caught:
        Pkcs11Provider(settings(tmp_path, **options)).status()
    assert "0000-not-the-pin" not in str(caught.value)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_pin_file_others_can_read_is_refused(
    tmp_path: Path, pkcs11_options: dict[str, str], pin_file: Path, mode: int
) -> None:
    pin_file.chmod(mode)
    with pytest.raises(ProviderError, match=f"PIN file {pin_file} has mode {mode:04o}"):
        Pkcs11Provider(settings(tmp_path, **pkcs11_options))


def test_no_pin_is_a_clear_error(
    tmp_path: Path, pkcs11_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PIN_ENV, "")  # also forgets a PIN an earlier test left in the process
    with pytest.raises(ProviderError, match=f"has no PIN: set {PIN_ENV} or the pin_file"):
        Pkcs11Provider(settings(tmp_path, **{**pkcs11_options, "pin_file": ""}))
    missing = str(tmp_path / "no-such-pin-file")
    with pytest.raises(ProviderError, match="has no PIN"):
        Pkcs11Provider(settings(tmp_path, **{**pkcs11_options, "pin_file": missing}))


def test_a_missing_module_is_a_clear_error(tmp_path: Path, pkcs11_options: dict[str, str]) -> None:
    options = {**pkcs11_options, "module": str(tmp_path / "libnothing.so")}
    with pytest.raises(ProviderError, match="cannot load the PKCS#11 module") as caught:
        Pkcs11Provider(settings(tmp_path, **options)).status()
    assert "libnothing.so" in str(caught.value)


@pytest.mark.parametrize("missing", ["module", "token_label"])
def test_module_and_token_label_are_required(
    tmp_path: Path, pkcs11_options: dict[str, str], missing: str
) -> None:
    options = {k: v for k, v in pkcs11_options.items() if k != missing}
    with pytest.raises(ProviderError, match="needs the module and token_label options"):
        Pkcs11Provider(settings(tmp_path, **options))


def test_rotation_numbers_keys_past_the_highest(provider: Pkcs11Provider) -> None:
    assert [provider.rotate() for _ in range(3)] == ["kek-2", "kek-3", "kek-4"]
    provider.retire("kek-2")
    assert provider.rotate() == "kek-5"
    assert provider.status().key_ids == ("kek-1", "kek-3", "kek-4", "kek-5")
