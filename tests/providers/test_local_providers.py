"""The local providers (file, env, keyring): today's key document and today's refusals,
now behind wrap/unwrap. Every refusal is a `ProviderError` naming the provider and never
echoing key material."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import keyring
import keyring.backend
import keyring.backends.fail
import keyring.backends.null
import keyrings.alt.file
import pytest
from provider_support import MemoryKeyring, settings

from toolkit_vault import crypto
from toolkit_vault.crypto import SecretBytes, new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers import ProviderError, ProviderSettings, blob_header
from toolkit_vault.keys.providers import file as file_module
from toolkit_vault.keys.providers.base import pack_blob, wrap_aad
from toolkit_vault.keys.providers.env import ENV_KEYS, EnvProvider
from toolkit_vault.keys.providers.file import KEY_FILE_NAME, FileProvider
from toolkit_vault.keys.providers.os_keyring import KeyringProvider
from toolkit_vault.keys.providers.testing import CONTEXT

KEY_A, KEY_B = bytes(range(32)), bytes(range(32, 64))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _doc(primary: str = "kek-1", **encoded: str) -> str:
    """Today's key document, written out literally (keys.py's format, unchanged)."""
    keys = encoded or {"kek-1": _b64(KEY_A)}
    return json.dumps({"format": 1, "primary": primary, "keys": keys})


def _write(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


def _file(tmp_path: Path) -> FileProvider:
    return FileProvider(settings(tmp_path, path=str(tmp_path / KEY_FILE_NAME)))


# --- the key document ----------------------------------------------------------------------


def test_todays_document_is_read_and_written_unchanged(tmp_path: Path) -> None:
    path = _write(
        tmp_path / KEY_FILE_NAME, _doc("kek-2", **{"kek-1": _b64(KEY_A), "kek-2": _b64(KEY_B)})
    )
    provider = _file(tmp_path)
    assert (provider.status().current, provider.status().key_ids) == ("kek-2", ("kek-1", "kek-2"))
    assert provider.rotate() == "kek-3"
    written = json.loads(path.read_text())
    assert written["format"] == 1 and written["primary"] == "kek-3"
    assert written["keys"]["kek-1"] == _b64(KEY_A) and written["keys"]["kek-2"] == _b64(KEY_B)
    assert len(base64.b64decode(written["keys"]["kek-3"])) == 32


def test_create_writes_a_first_key_document(tmp_path: Path) -> None:
    provider = FileProvider(settings(tmp_path))
    assert provider.status().current is None
    assert provider.create_master_key() == "kek-1"
    path = tmp_path / "home" / KEY_FILE_NAME
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["primary"], sorted(doc["keys"])) == (1, "kek-1", ["kek-1"])


def test_blobs_move_between_the_local_providers_with_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_keyring: MemoryKeyring
) -> None:
    text = _doc("kek-2", **{"kek-1": _b64(KEY_A), "kek-2": _b64(KEY_B)})
    _write(tmp_path / KEY_FILE_NAME, text)
    memory_keyring.entries[("toolkit-vault", "master-keys:vault-test")] = text
    monkeypatch.setenv(ENV_KEYS, text)
    providers = [
        _file(tmp_path),
        EnvProvider(settings(tmp_path)),
        KeyringProvider(settings(tmp_path)),
    ]
    key = new_key()
    for writer in providers:
        blob = writer.wrap(key, CONTEXT)
        assert blob_header(blob) == ("local", "kek-2")
        for reader in providers:
            assert reader.unwrap(blob, CONTEXT).reveal() == key.reveal()


def test_a_blob_of_another_kind_of_provider_is_refused_clearly(tmp_path: Path) -> None:
    provider = _file(tmp_path)
    provider.create_master_key()
    foreign = pack_blob("aws-kms", "arn:aws:kms:eu-west-1:1:key/x", b"\x01" * 64)
    with pytest.raises(ProviderError, match=r"wrapped by another kind of provider \(aws-kms\)"):
        provider.unwrap(foreign, CONTEXT)


# --- rotation, retirement and other processes -------------------------------------------------


def test_a_key_rotated_by_another_process_is_found(tmp_path: Path) -> None:
    server = _file(tmp_path)
    server.create_master_key()
    server.status()  # the document is now held in memory
    operator = _file(tmp_path)
    assert operator.rotate() == "kek-2"
    key = new_key()
    blob = operator.wrap(key, CONTEXT)
    assert server.unwrap(blob, CONTEXT).reveal() == key.reveal()  # reread once, found
    assert blob_header(server.wrap(key, CONTEXT))[1] == "kek-2"  # and the new primary with it


def test_retire_removes_an_old_key_never_the_primary(tmp_path: Path) -> None:
    provider = _file(tmp_path)
    provider.create_master_key()
    old = provider.wrap(new_key(), CONTEXT)
    provider.rotate()
    with pytest.raises(ProviderError, match="kek-2 is the primary master key"):
        provider.retire("kek-2")
    provider.retire("kek-1")
    assert provider.status().key_ids == ("kek-2",)
    with pytest.raises(ProviderError, match="master key kek-1 is not there") as caught:
        _file(tmp_path).unwrap(old, CONTEXT)
    assert f"key provider file (key file {tmp_path / KEY_FILE_NAME})" in str(caught.value)
    with pytest.raises(ProviderError, match="master key kek-9 is not there"):
        provider.retire("kek-9")


def test_rotate_and_retire_need_a_document(tmp_path: Path) -> None:
    for action in (_file(tmp_path).rotate, lambda: _file(tmp_path).retire("kek-1")):
        with pytest.raises(ProviderError, match="holds no master key"):
            action()
    assert not (tmp_path / KEY_FILE_NAME).exists()


# --- the file provider's refusals --------------------------------------------------------------


def test_the_file_is_stored_0600_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        FileProvider(settings(tmp_path)).create_master_key()
    finally:
        os.umask(previous)
    path = tmp_path / "home" / KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [KEY_FILE_NAME]


def test_a_failed_store_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = _file(tmp_path)
    provider.create_master_key()
    before = (tmp_path / KEY_FILE_NAME).read_bytes()

    def broken_replace(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_module.os, "replace", broken_replace)
    with pytest.raises(ProviderError, match=r"cannot be written \(No space left on device\)"):
        provider.rotate()
    monkeypatch.undo()
    assert (tmp_path / KEY_FILE_NAME).read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE_NAME]
    assert provider.status().key_ids == ("kek-1",)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666, 0o601])
def test_a_permissive_mode_is_refused(tmp_path: Path, mode: int) -> None:
    _write(tmp_path / KEY_FILE_NAME, _doc(), mode)
    with pytest.raises(ProviderError, match=f"has mode {mode:04o}; it must be 0600") as caught:
        _file(tmp_path).status()
    assert "key provider file" in str(caught.value) and _b64(KEY_A) not in str(caught.value)


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlink_is_refused(tmp_path: Path, dangling: bool) -> None:
    target = _write(tmp_path / "real.json", _doc())
    if dangling:
        target.unlink()
    (tmp_path / KEY_FILE_NAME).symlink_to(target)
    with pytest.raises(ProviderError, match="is a symlink; refusing to follow it"):
        _file(tmp_path).wrap(new_key(), CONTEXT)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE_NAME).mkdir()
    with pytest.raises(ProviderError, match="is not a regular file"):
        _file(tmp_path).status()


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_a_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    os.chown(_write(tmp_path / KEY_FILE_NAME, _doc()), 65534, 65534)
    with pytest.raises(ProviderError, match="is not owned by the current user"):
        _file(tmp_path).status()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_doc(**{"kek-1": _b64(KEY_A[:31])}), "32 bytes, not 31"),
        (_doc(**{"kek-1": "%%%not-base64%%%"}), "not valid base64"),
        ("this is not json", "not a JSON key document"),
        ("", "not a JSON key document"),
        (b"\xff\xfe not utf-8", "not a JSON key document"),
        (json.dumps({"format": 2, "primary": "kek-1", "keys": {}}), "version 1"),
        (_doc("kek-9"), "must name a primary key among its keys"),
        (_doc(**{"": _b64(KEY_A)}, primary=""), "key id that is empty"),
    ],
)
def test_bad_contents_are_refused_without_echoing_them(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    _write(tmp_path / KEY_FILE_NAME, content)
    with pytest.raises(ProviderError, match=message) as caught:
        _file(tmp_path).status()
    assert str(tmp_path / KEY_FILE_NAME) in str(caught.value)
    assert _b64(KEY_A) not in str(caught.value) and _b64(KEY_A[:31]) not in str(caught.value)


# --- the env provider ------------------------------------------------------------------------


def _child_sees(variable: str) -> str:
    code = f"import os; print(os.environ.get({variable!r}, 'absent'))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_env_document_leaves_the_environment_once_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEYS, _doc())
    assert _child_sees(ENV_KEYS) != "absent"  # the check below can fail
    provider = EnvProvider(settings(tmp_path))
    key = new_key()
    blob = provider.wrap(key, CONTEXT)
    assert ENV_KEYS not in os.environ and _child_sees(ENV_KEYS) == "absent"
    assert EnvProvider(settings(tmp_path)).unwrap(blob, CONTEXT).reveal() == key.reveal()


def test_env_set_again_replaces_and_empty_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_KEYS, _doc())
    assert EnvProvider(settings(tmp_path)).status().key_ids == ("kek-1",)
    monkeypatch.setenv(ENV_KEYS, _doc("kek-2", **{"kek-1": _b64(KEY_A), "kek-2": _b64(KEY_B)}))
    assert EnvProvider(settings(tmp_path)).status().current == "kek-2"
    monkeypatch.setenv(ENV_KEYS, "")
    assert EnvProvider(settings(tmp_path)).status().current is None
    with pytest.raises(ProviderError, match=f"environment variable {ENV_KEYS}.*holds no master"):
        EnvProvider(settings(tmp_path)).wrap(new_key(), CONTEXT)


def test_env_is_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, _doc())
    provider = EnvProvider(settings(tmp_path))
    for action in (provider.create_master_key, provider.rotate, lambda: provider.retire("kek-1")):
        with pytest.raises(ProviderError, match=f"read-only: put the key document in {ENV_KEYS}"):
            action()


def test_env_bad_document_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TKV_TEST_KEYS", _doc(**{"kek-1": _b64(KEY_A[:31])}))
    with pytest.raises(ProviderError, match="environment variable TKV_TEST_KEYS") as caught:
        EnvProvider(settings(tmp_path, variable="TKV_TEST_KEYS")).status()
    assert _b64(KEY_A[:31]) not in str(caught.value)
    assert "TKV_TEST_KEYS" not in os.environ


# --- the keyring provider --------------------------------------------------------------------


class LowPriorityKeyring(MemoryKeyring):
    priority = 0.5  # type: ignore[assignment]


keyring.backend.KeyringBackend._classes.discard(LowPriorityKeyring)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(keyring.backends.fail.Keyring, id="fail"),
        pytest.param(keyring.backends.null.Keyring, id="null"),
        pytest.param(keyrings.alt.file.PlaintextKeyring, id="plaintext"),
        pytest.param(LowPriorityKeyring, id="low-priority"),
    ],
)
def test_insecure_keyrings_are_refused(
    tmp_path: Path, memory_keyring: MemoryKeyring, backend: type[keyring.backend.KeyringBackend]
) -> None:
    keyring.set_keyring(backend())
    with pytest.raises(ProviderError, match=r"no secure OS keyring.*--key-provider file") as caught:
        KeyringProvider(settings(tmp_path))
    assert "key provider keyring" in str(caught.value)


def test_keyring_entry_is_per_vault(tmp_path: Path, memory_keyring: MemoryKeyring) -> None:
    KeyringProvider(ProviderSettings(tmp_path, "vault-a")).create_master_key()
    assert KeyringProvider(ProviderSettings(tmp_path, "vault-b")).status().current is None
    assert list(memory_keyring.entries) == [("toolkit-vault", "master-keys:vault-a")]


def test_a_locked_keyring_is_a_clear_error(tmp_path: Path, memory_keyring: MemoryKeyring) -> None:
    provider = KeyringProvider(settings(tmp_path))
    provider.create_master_key()
    memory_keyring.locked = True
    with pytest.raises(ProviderError, match=r"cannot be read \(KeyringLocked\)") as caught:
        provider.rotate()
    assert "key provider keyring (OS keyring (MemoryKeyring) entry master-keys:vault-test)" in str(
        caught.value
    )


def test_a_blob_that_opens_but_holds_no_256_bit_key_is_refused(tmp_path: Path) -> None:
    """Only someone holding the master key could make one; still never a short key."""
    _write(tmp_path / KEY_FILE_NAME, _doc())
    short = crypto.seal(SecretBytes(KEY_A), bytes(16), wrap_aad("local", "kek-1", CONTEXT))
    with pytest.raises(DecryptionError):
        _file(tmp_path).unwrap(pack_blob("local", "kek-1", short), CONTEXT)
