"""`pkcs11`: the master keys are AES-256 keys generated on a PKCS#11 token (an HSM) and
never leave it: sensitive, never extractable. The token encrypts the vault's 32-byte keys
with AES-GCM, the wrap context as associated data, under a fresh 96-bit IV per wrap.

Master keys share the label `key_label` and are told apart by their PKCS#11 id, `kek-N`;
the highest N is current, so rotation is one atomic step on the token (generate the next
key). The PIN comes from an environment variable (removed from the environment once read)
or a 0600 file, never from the database. A session is opened per call (the vault asks the
token only at start and at rotation, and a token that restarted is simply found again);
calls to one token take turns within a process, because PKCS#11 login is per process.

`import pkcs11` below is the python-pkcs11 library (absolute imports), not this module.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolkit_vault.crypto import KEY_BYTES, SecretBytes
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers.base import (
    Context,
    KeyProvider,
    ProviderSettings,
    ProviderStatus,
    checked_key,
    pack_blob,
    take_env_secret,
    unpack_blob,
    wrap_aad,
)
from toolkit_vault.keys.providers.file import read_private_file

__all__ = ["PIN_ENV", "SCHEME", "Pkcs11Provider"]

SCHEME = "pkcs11"
PIN_ENV = "TOOLKIT_VAULT_PKCS11_PIN"
_IV_BYTES = 12
_KEK_ID = re.compile(r"kek-([0-9]{1,9})", re.ASCII)
# What a token answers to a blob that does not open (SoftHSM2: CKR_GENERAL_ERROR on a tag
# mismatch); met only after the key was found, so it says nothing about the token itself.
_OPAQUE = (
    "DataInvalid",
    "DataLenRange",
    "EncryptedDataInvalid",
    "EncryptedDataLenRange",
    "FunctionFailed",
    "GeneralError",
    "MechanismParamInvalid",
)


_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_lock = threading.Lock()


def _token_lock(module: str, token_label: str) -> threading.Lock:
    """One lock per token in this process. PKCS#11 login is per application, not per
    session: closing a logged-in session logs every session of the process out, and a
    second login fails. So this process's calls to one token take turns."""
    with _locks_lock:
        return _locks.setdefault((module, token_label), threading.Lock())


class Pkcs11Provider(KeyProvider):
    """Options: `module` (the token's PKCS#11 library), `token_label`, `key_label`
    (default `toolkit-vault`), and the PIN's source: `pin_file`, or `pin_env` (default
    `TOOLKIT_VAULT_PKCS11_PIN`)."""

    name = "pkcs11"
    option_names = ("module", "token_label", "key_label", "pin_env", "pin_file")

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        options = settings.options
        self.module = options.get("module", "")
        self.token_label = options.get("token_label", "")
        self.key_label = options.get("key_label") or "toolkit-vault"
        self.where = (
            f"PKCS#11 token {self.token_label!r} key {self.key_label!r} (module {self.module})"
        )
        if not self.module or not self.token_label:
            raise self.error("needs the module and token_label options")
        pin_file, pin_env = options.get("pin_file"), options.get("pin_env") or PIN_ENV
        if pin_file:
            data = read_private_file(
                Path(pin_file), lambda p: self.error(f"PIN file {pin_file} {p}")
            )
            pin = None if data is None else SecretBytes(data.rstrip(b"\r\n"))
        else:
            pin = take_env_secret(pin_env)
        if not pin:
            raise self.error(f"has no PIN: set {pin_env} or the pin_file option")
        self._pin = pin

    @contextmanager
    def _session(self, *, write: bool = False) -> Iterator[Any]:
        import pkcs11
        from pkcs11.exceptions import PKCS11Error

        try:
            library = pkcs11.lib(self.module)
        except PKCS11Error:
            raise self.error("cannot load the PKCS#11 module") from None
        try:
            with _token_lock(self.module, self.token_label):
                token = library.get_token(token_label=self.token_label)
                try:
                    session = token.open(user_pin=self._pin.reveal().decode(), rw=write)
                except pkcs11.UserAlreadyLoggedIn:  # login is per process: someone else's
                    session = token.open(rw=write)  # a session without login shares it
                with session:
                    yield session
        except pkcs11.NoSuchToken:
            raise self.error("the token is not there (no token with that label)") from None
        except (pkcs11.PinIncorrect, pkcs11.PinLocked, pkcs11.PinExpired) as exc:
            raise self.error(f"refused the PIN ({type(exc).__name__})") from None
        except PKCS11Error as exc:
            raise self.error(f"failed or is unreachable ({type(exc).__name__})") from None
        except UnicodeDecodeError:
            raise self.error("has a PIN that is not UTF-8") from None

    def _keys(self, session: Any) -> dict[str, Any]:
        from pkcs11 import Attribute, ObjectClass

        found = session.get_objects(
            {Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.LABEL: self.key_label}
        )
        keys: dict[str, Any] = {}
        for key in found:
            kek_id = bytes(key[Attribute.ID]).decode("utf-8", "replace")
            if _KEK_ID.fullmatch(kek_id):
                keys[kek_id] = key
        return keys

    def _current(self, keys: dict[str, Any]) -> str:
        if not keys:
            raise self.error(
                "holds no master key (restore it; `toolkit-vault init` creates one for a new "
                "vault only)"
            )
        return max(keys, key=_number)

    def wrap(self, key: SecretBytes, context: Context) -> bytes:
        from pkcs11 import Mechanism
        from pkcs11.mechanisms import GCMParams

        plaintext = checked_key(key).reveal()
        with self._session() as session:
            keys = self._keys(session)
            kek_id = self._current(keys)
            iv = os.urandom(_IV_BYTES)
            params = GCMParams(iv, wrap_aad(SCHEME, kek_id, context), 128)
            sealed = keys[kek_id].encrypt(
                plaintext, mechanism=Mechanism.AES_GCM, mechanism_param=params
            )
        return pack_blob(SCHEME, kek_id, iv + bytes(sealed))

    def unwrap(self, blob: bytes, context: Context) -> SecretBytes:
        from pkcs11 import Mechanism
        from pkcs11.mechanisms import GCMParams

        scheme, kek_id, payload = unpack_blob(blob)
        aad = wrap_aad(SCHEME, kek_id, context)
        if scheme != SCHEME:
            raise self.foreign(scheme)
        if len(payload) != _IV_BYTES + KEY_BYTES + 16:
            raise DecryptionError
        with self._session() as session:
            master = self._keys(session).get(kek_id)
            if master is None:
                raise self.error(f"master key {kek_id} is not on the token")
            params = GCMParams(payload[:_IV_BYTES], aad, 128)
            try:
                plaintext = bytes(
                    master.decrypt(
                        payload[_IV_BYTES:], mechanism=Mechanism.AES_GCM, mechanism_param=params
                    )
                )
            except Exception as exc:
                if type(exc).__name__ in _OPAQUE:
                    raise DecryptionError from None
                raise
        if len(plaintext) != KEY_BYTES:
            raise DecryptionError
        return SecretBytes(plaintext)

    def status(self) -> ProviderStatus:
        with self._session() as session:
            ids = tuple(sorted(self._keys(session), key=_number))
        return ProviderStatus(self.name, self.where, ids[-1] if ids else None, ids)

    def _generate(self, session: Any, kek_id: str) -> None:
        from pkcs11 import Attribute, KeyType

        template = {
            Attribute.TOKEN: True,
            Attribute.PRIVATE: True,
            Attribute.SENSITIVE: True,
            Attribute.EXTRACTABLE: False,
            Attribute.ENCRYPT: True,
            Attribute.DECRYPT: True,
            Attribute.WRAP: False,
            Attribute.UNWRAP: False,
            Attribute.SIGN: False,
            Attribute.VERIFY: False,
            Attribute.DERIVE: False,
        }
        session.generate_key(
            KeyType.AES,
            KEY_BYTES * 8,
            label=self.key_label,
            id=kek_id.encode(),
            store=True,
            template=template,
        )

    def create_master_key(self) -> str:
        with self._session(write=True) as session:
            held = self._keys(session)
            if held:
                ids = ", ".join(sorted(held, key=_number))
                raise self.error(f"already holds master keys ({ids}); rotate instead")
            self._generate(session, "kek-1")
        return "kek-1"

    def rotate(self) -> str:
        with self._session(write=True) as session:
            kek_id = f"kek-{_number(self._current(self._keys(session))) + 1}"
            self._generate(session, kek_id)
        return kek_id

    def retire(self, key_id: str) -> None:
        with self._session(write=True) as session:
            keys = self._keys(session)
            if key_id == self._current(keys):
                raise self.error(f"{key_id} is the current master key and cannot be removed")
            if key_id not in keys:
                raise self.error(f"master key {key_id} is not on the token")
            keys[key_id].destroy()


def _number(kek_id: str) -> int:
    match = _KEK_ID.fullmatch(kek_id)
    return int(match[1]) if match else 0
