"""Key providers: the key document, the 0600 file, the env variable and the OS keyring.

Every refusal must be a `KeyProviderError` whose message says what to fix and never echoes
key material. The keyring tests swap the process-wide keyring backend, so a fixture puts
the original back after each one.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import keyring.backend
import keyring.backends.fail
import keyring.backends.null
import keyring.core
import keyrings.alt.file
import pytest
from keyring.backends.chainer import ChainerBackend

from toolkit_vault import keys as keys_module
from toolkit_vault.crypto import KeyRing, SecretBytes
from toolkit_vault.errors import KeyProviderError
from toolkit_vault.keys import (
    ENV_KEYS,
    KEY_FILE_NAME,
    EnvProvider,
    FileProvider,
    KeyringProvider,
    MasterKeys,
    provider_for,
)

KEY_A, KEY_B = bytes(range(32)), bytes(range(32, 64))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _doc(primary: str = "kek-1", **encoded: str) -> str:
    keys = encoded or {"kek-1": _b64(KEY_A)}
    return json.dumps({"format": 1, "primary": primary, "keys": keys})


def _revealed(keys: MasterKeys) -> tuple[str, dict[str, bytes]]:
    return keys.primary, {kek_id: key.reveal() for kek_id, key in keys.keys.items()}


def _same(first: MasterKeys, second: MasterKeys) -> bool:
    return _revealed(first) == _revealed(second)


def _write(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


# --- MasterKeys ---------------------------------------------------------------------------


def test_with_new_primary_adds_keys_and_keeps_old_ones() -> None:
    first = MasterKeys.first()
    second = first.with_new_primary()
    third = second.with_new_primary()
    assert (first.primary, sorted(first.keys)) == ("kek-1", ["kek-1"])
    assert (second.primary, sorted(second.keys)) == ("kek-2", ["kek-1", "kek-2"])
    assert (third.primary, sorted(third.keys)) == ("kek-3", ["kek-1", "kek-2", "kek-3"])
    assert third.keys["kek-1"].reveal() == first.keys["kek-1"].reveal()
    assert third.keys["kek-2"].reveal() == second.keys["kek-2"].reveal()
    assert len({key.reveal() for key in third.keys.values()}) == 3
    assert all(len(key) == 32 for key in third.keys.values())


def test_new_primary_never_reuses_a_removed_id() -> None:
    keys = MasterKeys.first().with_new_primary().with_new_primary().without("kek-2")
    assert sorted(keys.keys) == ["kek-1", "kek-3"]
    assert keys.with_new_primary().primary == "kek-4"


def test_new_primary_after_non_numbered_ids() -> None:
    keys = MasterKeys.loads(_doc("main", main=_b64(KEY_A)), "test")
    assert keys.with_new_primary().primary == "kek-1"


@pytest.mark.parametrize("odd_id", ["7", "kek-²"])
def test_new_primary_tolerates_any_loaded_id(odd_id: str) -> None:
    keys = MasterKeys.loads(_doc(odd_id, **{odd_id: _b64(KEY_A)}), "test")
    assert keys.with_new_primary().primary.startswith("kek-")


def test_without_refuses_the_primary() -> None:
    keys = MasterKeys.first().with_new_primary()
    with pytest.raises(KeyProviderError, match="kek-2 is the primary"):
        keys.without("kek-2")
    assert sorted(keys.without("kek-1").keys) == ["kek-2"]
    assert sorted(keys.keys) == ["kek-1", "kek-2"]


def test_master_keys_repr_shows_no_key_material() -> None:
    keys = MasterKeys.loads(_doc("kek-2", **{"kek-1": _b64(KEY_A), "kek-2": _b64(KEY_B)}), "t")
    text = repr(keys)
    assert "kek-1" in text and "kek-2" in text
    for raw in (KEY_A, KEY_B):
        assert _b64(raw) not in text and raw.hex() not in text and repr(raw) not in text
    with pytest.raises(TypeError):
        pickle.dumps(keys)


def test_dumps_loads_round_trip() -> None:
    keys = MasterKeys.first().with_new_primary()
    text = keys.dumps()
    doc = json.loads(text)
    assert doc["format"] == 1 and doc["primary"] == "kek-2"
    assert sorted(doc["keys"]) == ["kek-1", "kek-2"]
    loaded = MasterKeys.loads(text, "test")
    assert _same(loaded, keys)
    ring = loaded.ring()
    assert isinstance(ring, KeyRing)
    assert (ring.primary_id, ring.ids) == ("kek-2", ["kek-1", "kek-2"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not a JSON key document"),
        ("[]", "version 1"),
        (json.dumps({"format": 2, "primary": "kek-1", "keys": {}}), "version 1"),
        (_doc("kek-2"), "primary"),
        (json.dumps({"format": 1, "primary": "kek-1", "keys": []}), "primary"),
        (json.dumps({"format": 1, "primary": 1, "keys": {"1": _b64(KEY_A)}}), "primary"),
        (_doc(**{"kek-1": _b64(KEY_A[:31])}), "32 bytes, not 31"),
        (_doc(**{"kek-1": _b64(KEY_A + b"\x00")}), "32 bytes, not 33"),
        (_doc(**{"kek-1": "not base64!"}), "not valid base64"),
        (_doc(**{"kek-1": _b64(KEY_A)[:-1]}), "not valid base64"),
        (_doc(**{"kek-1": _b64(KEY_A) + "\n"}), "not valid base64"),
        pytest.param(
            _doc(**{"kek-1": "ключ"}),
            "not valid base64",
            id="non-ascii",
        ),
    ],
)
def test_loads_refuses_bad_documents(text: str, message: str) -> None:
    with pytest.raises(KeyProviderError, match=message) as caught:
        MasterKeys.loads(text, "the test document")
    assert str(caught.value).startswith("the test document")
    assert _b64(KEY_A) not in str(caught.value) and _b64(KEY_A[:31]) not in str(caught.value)


# --- FileProvider -------------------------------------------------------------------------


def test_file_store_then_load(tmp_path: Path) -> None:
    provider = FileProvider(tmp_path / KEY_FILE_NAME)
    keys = MasterKeys.first().with_new_primary()
    provider.store(keys)
    loaded = provider.load()
    assert loaded is not None and _same(loaded, keys)
    assert str(tmp_path / KEY_FILE_NAME) in provider.where


def test_file_is_stored_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "home" / KEY_FILE_NAME
    previous = os.umask(0)
    try:
        FileProvider(path).store(MasterKeys.first())
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_store_replaces_a_permissive_file_with_a_0600_one(tmp_path: Path) -> None:
    path = _write(tmp_path / KEY_FILE_NAME, _doc(), 0o644)
    provider = FileProvider(path)
    keys = MasterKeys.first()
    provider.store(keys)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = provider.load()
    assert loaded is not None and _same(loaded, keys)


def test_store_leaves_no_temp_files(tmp_path: Path) -> None:
    provider = FileProvider(tmp_path / KEY_FILE_NAME)
    keys = MasterKeys.first()
    provider.store(keys)
    provider.store(keys.with_new_primary())
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE_NAME]


def test_failed_store_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FileProvider(tmp_path / KEY_FILE_NAME)
    old = MasterKeys.first()
    provider.store(old)

    def broken_replace(*args: Any) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as patch, pytest.raises(OSError, match="disk full"):
        patch.setattr(keys_module.os, "replace", broken_replace)
        provider.store(old.with_new_primary())
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE_NAME]
    loaded = provider.load()
    assert loaded is not None and _same(loaded, old)


def test_store_survives_a_stale_temp_file(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE_NAME
    stale = tmp_path / f".{KEY_FILE_NAME}.{os.getpid()}.tmp"
    stale.write_text("left by a crash")
    keys = MasterKeys.first()
    FileProvider(path).store(keys)
    loaded = FileProvider(path).load()
    assert loaded is not None and loaded.primary == keys.primary
    assert {k: v.reveal() for k, v in loaded.keys.items()} == {
        k: v.reveal() for k, v in keys.keys.items()
    }
    assert stale.read_text() == "left by a crash"  # another writer's file is not ours to take


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert FileProvider(tmp_path / "absent.json").load() is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666, 0o601])
def test_permissive_mode_is_refused(tmp_path: Path, mode: int) -> None:
    path = _write(tmp_path / KEY_FILE_NAME, _doc(), mode)
    with pytest.raises(KeyProviderError, match="0600") as caught:
        FileProvider(path).load()
    assert f"{mode:04o}" in str(caught.value)
    assert _b64(KEY_A) not in str(caught.value)


def test_owner_read_only_mode_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path / KEY_FILE_NAME, _doc(), 0o400)
    loaded = FileProvider(path).load()
    assert loaded is not None and loaded.keys["kek-1"].reveal() == KEY_A


@pytest.mark.parametrize("dangling", [False, True])
def test_symlink_is_refused(tmp_path: Path, dangling: bool) -> None:
    target = _write(tmp_path / "real.json", _doc())
    if dangling:
        target.unlink()
    link = tmp_path / KEY_FILE_NAME
    link.symlink_to(target)
    with pytest.raises(KeyProviderError, match="is a symlink"):
        FileProvider(link).load()


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE_NAME).mkdir()
    with pytest.raises(KeyProviderError, match="not a regular file"):
        FileProvider(tmp_path / KEY_FILE_NAME).load()


def test_file_owned_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As any user: the file is ours, so we make ourselves someone else (no root needed)."""
    path = _write(tmp_path / KEY_FILE_NAME, _doc())
    monkeypatch.setattr(os, "getuid", lambda: path.stat().st_uid + 1)
    with pytest.raises(KeyProviderError, match="not owned by the current user"):
        FileProvider(path).load()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_doc(**{"kek-1": _b64(KEY_A[:31])}), "32 bytes, not 31"),
        (_doc(**{"kek-1": "%%%not-base64%%%"}), "not valid base64"),
        ("this is not json", "not a JSON key document"),
        ("", "not a JSON key document"),
        (_doc("kek-9"), "primary"),
        pytest.param(
            b"\xff\xfe not utf-8",
            "not a JSON key document",
            id="not-utf8",
        ),
    ],
)
def test_bad_file_contents_are_refused(tmp_path: Path, content: str | bytes, message: str) -> None:
    path = _write(tmp_path / KEY_FILE_NAME, content)
    with pytest.raises(KeyProviderError, match=message) as caught:
        FileProvider(path).load()
    assert str(path) in str(caught.value)


# --- EnvProvider --------------------------------------------------------------------------


def test_env_load(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = MasterKeys.first().with_new_primary()
    monkeypatch.setenv(ENV_KEYS, keys.dumps())
    loaded = EnvProvider().load()
    assert loaded is not None and _same(loaded, keys)


def test_env_empty_is_none_and_unset_keeps_what_was_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The document leaves the environment when read (no subprocess inherits it), so later
    reads in the process get it back; setting the variable empty clears it."""
    monkeypatch.setenv(ENV_KEYS, "")
    assert EnvProvider().load() is None
    monkeypatch.delenv(ENV_KEYS, raising=False)
    assert EnvProvider().load() is None
    keys = MasterKeys.first()
    monkeypatch.setenv(ENV_KEYS, keys.dumps())
    assert EnvProvider().load() is not None and ENV_KEYS not in os.environ
    loaded = EnvProvider().load()
    assert loaded is not None and _same(loaded, keys)
    monkeypatch.setenv(ENV_KEYS, "")
    assert EnvProvider().load() is None


def test_env_bad_document_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, _doc(**{"kek-1": _b64(KEY_A[:31])}))
    with pytest.raises(KeyProviderError, match=ENV_KEYS) as caught:
        EnvProvider().load()
    assert _b64(KEY_A[:31]) not in str(caught.value)


def test_env_store_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEYS, raising=False)
    with pytest.raises(KeyProviderError, match=ENV_KEYS):
        EnvProvider().store(MasterKeys.first())
    assert ENV_KEYS not in os.environ


# --- KeyringProvider ----------------------------------------------------------------------


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A secure-looking in-memory backend for the positive path."""

    priority = 10  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.entries[(service, username)]


class LowPriorityKeyring(MemoryKeyring):
    priority = 0.5  # type: ignore[assignment]


# keyring registers every backend class for discovery; keep ours out of other tests' way.
keyring.backend.KeyringBackend._classes.difference_update({MemoryKeyring, LowPriorityKeyring})


@pytest.fixture(autouse=True)
def restore_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring.core._keyring_backend)
    yield


INSECURE = [
    pytest.param(keyring.backends.fail.Keyring, id="fail"),
    pytest.param(keyring.backends.null.Keyring, id="null"),
    pytest.param(keyrings.alt.file.PlaintextKeyring, id="plaintext"),
    pytest.param(LowPriorityKeyring, id="low-priority"),
]


@pytest.mark.parametrize("backend", INSECURE)
def test_insecure_keyrings_are_refused(backend: type[keyring.backend.KeyringBackend]) -> None:
    keyring.set_keyring(backend())
    with pytest.raises(KeyProviderError, match="--key-provider file"):
        KeyringProvider("vault-1")


def test_priority_raised_from_the_environment_does_not_help(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEYRING_PROPERTY_PRIORITY", "10")
    backend = keyrings.alt.file.PlaintextKeyring()
    assert backend.priority == "10"
    keyring.set_keyring(backend)
    with pytest.raises(KeyProviderError, match="--key-provider file"):
        KeyringProvider("vault-1")


def _plaintext_subclass(name: str) -> keyring.backend.KeyringBackend:
    cls = type(name, (keyrings.alt.file.PlaintextKeyring,), {"priority": 10})
    keyring.backend.KeyringBackend._classes.discard(cls)
    return cls()  # type: ignore[no-any-return]


def test_plaintext_keyring_is_refused_by_name_whatever_its_priority() -> None:
    keyring.set_keyring(_plaintext_subclass("PlaintextKeyring"))
    with pytest.raises(KeyProviderError, match="--key-provider file"):
        KeyringProvider("vault-1")


def test_plaintext_keyring_subclass_is_refused() -> None:
    keyring.set_keyring(_plaintext_subclass("FastLocalKeyring"))
    with pytest.raises(KeyProviderError, match="--key-provider file"):
        KeyringProvider("vault-1")


def test_memory_keyring_round_trip() -> None:
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    provider = KeyringProvider("vault-1")
    assert provider.load() is None
    keys = MasterKeys.first().with_new_primary()
    provider.store(keys)
    assert list(backend.entries) == [("toolkit-vault", "master-keys:vault-1")]
    loaded = provider.load()
    assert loaded is not None and _same(loaded, keys)
    assert KeyringProvider("vault-2").load() is None
    assert "MemoryKeyring" in provider.where and "master-keys:vault-1" in provider.where


def test_keyring_entry_with_a_bad_document_is_refused() -> None:
    backend = MemoryKeyring()
    backend.entries[("toolkit-vault", "master-keys:vault-1")] = "garbage"
    keyring.set_keyring(backend)
    with pytest.raises(KeyProviderError, match="OS keyring"):
        KeyringProvider("vault-1").load()


@pytest.mark.parametrize(
    ("members", "secure"),
    [
        ([MemoryKeyring], True),
        ([MemoryKeyring, keyrings.alt.file.PlaintextKeyring], False),
        ([MemoryKeyring, LowPriorityKeyring], False),
        ([], False),
    ],
    ids=["memory", "memory+plaintext", "memory+low", "empty"],
)
def test_chainer_is_only_as_secure_as_its_weakest_member(
    monkeypatch: pytest.MonkeyPatch, members: list[type[MemoryKeyring]], secure: bool
) -> None:
    instances = [member() for member in members]
    monkeypatch.setattr(keyring.backend, "get_all_keyring", lambda: instances)
    keyring.set_keyring(ChainerBackend())
    if not secure:
        with pytest.raises(KeyProviderError, match="--key-provider file"):
            KeyringProvider("vault-1")
        return
    provider = KeyringProvider("vault-1")
    keys = MasterKeys.first()
    provider.store(keys)
    loaded = provider.load()
    assert loaded is not None and _same(loaded, keys)


def test_provider_for(tmp_path: Path) -> None:
    keyring.set_keyring(MemoryKeyring())
    file_provider = provider_for("file", tmp_path, "v")
    assert isinstance(file_provider, FileProvider)
    assert file_provider.path == tmp_path / KEY_FILE_NAME
    assert isinstance(provider_for("env", tmp_path, "v"), EnvProvider)
    assert isinstance(provider_for("keyring", tmp_path, "v"), KeyringProvider)
    with pytest.raises(KeyProviderError, match="unknown key provider"):
        provider_for("vault", tmp_path, "v")  # type: ignore[arg-type]


def test_secret_bytes_in_loaded_keys() -> None:
    keys = MasterKeys.loads(_doc(), "test")
    assert isinstance(keys.keys["kek-1"], SecretBytes)
    assert _b64(KEY_A) not in repr(keys.keys)
