"""Envelope encryption: the only module that touches `cryptography.hazmat`.

Key hierarchy: a master key in a key provider (`providers/`) wraps a few vault keys; the
vault keys (`KeyRing`) wrap one fresh data key (DEK) per stored config version and the
vault-wide keys; the DEK seals each secret value. Two constructions:

Values (and, before the hierarchy, DEKs under a master key) use a committing AEAD:

    envelope = FORMAT (1) || nonce (12) || commitment (32) || AES-256-GCM(ct || tag)
    commitment || enc_key = HKDF-SHA256(key, salt=nonce, info=LABEL)

Keys under a vault key use a key wrap that a rotation can move without rebuilding the
record it belongs to:

    wrapped = WRAP_FORMAT (1) || binding (32) || nonce (12) || commitment (32)
              || AES-256-GCM(wrap_key, nonce, key, aad = header || key id) (32 + 16)
    binding = SHA-256(context), the record the key belongs to (its ids, secret paths and a
              digest of its public half: all public)
    commitment || wrap_key = HKDF-SHA256(vault key, info=WRAP_LABEL), once per vault key

A reader recomputes the binding from the record and compares it, so a wrapped key opens
only for its own record; a rotation (`KeyRing.rewrap`) takes the binding from the wrapped
key itself (the AEAD authenticates it), so it never parses the record or opens a value.

Commitments are checked (constant time) before any decryption, so a ciphertext can open
under exactly one key; every failure is the one opaque `DecryptionError`. Callers see
`seal`/`unseal`, `KeyRing.wrap`/`unwrap`/`rewrap` and HMAC helpers.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from toolkit_vault.canonical import canonical_json, parse_json
from toolkit_vault.errors import DecryptionError, KeyProviderError
from toolkit_vault.sensitive import SecretBytes, SecretValue

__all__ = [
    "FORMAT_VERSION",
    "KEY_BYTES",
    "WRAPPED_BYTES",
    "WRAP_FORMAT",
    "KeyRing",
    "RecordContext",
    "RingMaterial",
    "SealedConfig",
    "SecretBytes",
    "SecretValue",
    "associated_data",
    "chain_hash",
    "derive_key",
    "fingerprint",
    "fingerprints_of",
    "internal_context",
    "key_check_value",
    "length_prefixed",
    "new_key",
    "open_config",
    "public_digest",
    "seal",
    "seal_config",
    "state_mac",
    "state_macs",
    "unseal",
]

FORMAT_VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12
DEK_ID_BYTES = 16
COMMIT_BYTES = 32
_HEADER = 1 + NONCE_BYTES + COMMIT_BYTES
_LABEL = b"toolkit-vault/v1/commit+enc"
_KCV_LABEL = b"toolkit-vault/v1/key-check-value"
_STATE_LABEL = b"toolkit-vault/v1/state-mac"
WRAP_FORMAT = 2
_WRAP_LABEL = b"toolkit-vault/v2/key-wrap"
_BINDING_LABEL = "toolkit-vault/v2/wrap-binding"
_BINDING, _NONCE, _COMMIT = slice(1, 33), slice(33, 45), slice(45, 77)  # of a key wrap
_WRAP_HEADER = 77
WRAPPED_BYTES = _WRAP_HEADER + KEY_BYTES + 16
# `KeyRing.reveal`: its keys, its primary key's id, its legacy keys
RingMaterial = tuple[dict[str, bytes], str, dict[str, bytes]]


def new_key() -> SecretBytes:
    return SecretBytes(os.urandom(KEY_BYTES))


_LENGTH = struct.Struct(">I").pack


def length_prefixed(data: bytes) -> bytes:
    """`data` after its length in 4 bytes, big-endian: the framing of every field the vault
    authenticates (here and in `store.integrity`), so no two field lists encode alike."""
    return _LENGTH(len(data)) + data


def associated_data(*fields: str | int) -> bytes:
    """Canonical, length-prefixed encoding of a record's context (no ambiguity by design)."""
    parts = []
    for field in fields:  # a loop, not a generator: `check` makes four of these a version
        data = str(field).encode()
        parts.append(_LENGTH(len(data)) + data)
    return b"".join(parts)


def _derive(key: bytes, nonce: bytes) -> tuple[bytes, bytes]:
    okm = HKDF(hashes.SHA256(), COMMIT_BYTES + KEY_BYTES, salt=nonce, info=_LABEL).derive(key)
    return okm[:COMMIT_BYTES], okm[COMMIT_BYTES:]


def seal(
    key: SecretBytes,
    plaintext: bytes,
    aad: bytes,
    *,
    nonce_source: Callable[[int], bytes] = os.urandom,
) -> bytes:
    """Encrypt `plaintext` under `key`, bound to `aad`. `nonce_source` exists for vectors."""
    nonce = nonce_source(NONCE_BYTES)
    if len(nonce) != NONCE_BYTES or len(key) != KEY_BYTES:
        raise ValueError("seal needs a 96-bit nonce and a 256-bit key")
    commitment, enc_key = _derive(key.reveal(), nonce)
    header = bytes([FORMAT_VERSION]) + nonce + commitment
    return header + AESGCM(enc_key).encrypt(nonce, plaintext, header + aad)


def unseal(key: SecretBytes, envelope: bytes, aad: bytes) -> bytes:
    """Check format and commitment, then decrypt; any failure is `DecryptionError`."""
    if len(envelope) < _HEADER + 16 or envelope[0] != FORMAT_VERSION:
        raise DecryptionError
    nonce, commitment = envelope[1 : 1 + NONCE_BYTES], envelope[1 + NONCE_BYTES : _HEADER]
    expected, enc_key = _derive(key.reveal(), nonce)
    if not hmac.compare_digest(expected, commitment):
        raise DecryptionError
    try:
        return AESGCM(enc_key).decrypt(nonce, envelope[_HEADER:], envelope[:_HEADER] + aad)
    except InvalidTag:
        raise DecryptionError from None


def key_check_value(key: SecretBytes) -> bytes:
    """A public value that identifies a key without revealing it (stored in the database)."""
    return hmac.new(key.reveal(), _KCV_LABEL, hashlib.sha256).digest()[:16]


def fingerprint(
    key: SecretBytes, scope: Iterable[str], pointer: str, canonical_value: bytes
) -> str:
    """HMAC of (scope, path, value) for auditors: equal iff the value is unchanged, nothing
    more. The scope (session, toolkit) keeps equality inside one config's history: the same
    value elsewhere has another fingerprint, so one tenant's history is no oracle for
    another's secrets."""
    mac = hmac.new(key.reveal(), associated_data(*scope, pointer), hashlib.sha256)
    mac.update(canonical_value)
    return mac.hexdigest()


def chain_hash(key: SecretBytes, previous: bytes, payload: bytes) -> bytes:
    """One link of the audit chain: HMAC(key, previous link || payload)."""
    return hmac.digest(key.reveal(), previous + payload, "sha256")  # one-shot: OpenSSL's


def state_mac(key: SecretBytes, encoded_row: bytes) -> bytes:
    """The MAC that makes a stored row believable (see `integrity`): HMAC-SHA256 under the
    state key, which the database holds only wrapped by a master key."""
    return hmac.digest(key.reveal(), _STATE_LABEL + encoded_row, "sha256")


def state_macs(key: SecretBytes) -> Callable[[bytes], bytes]:
    """`state_mac` under one key, for many rows: the HMAC keyed (and fed the label) once,
    each row's MAC computed on a copy of it (`check` and `audit verify` MAC every row)."""
    keyed = hmac.new(key.reveal(), _STATE_LABEL, hashlib.sha256)

    def mac(encoded_row: bytes) -> bytes:
        copy = keyed.copy()
        copy.update(encoded_row)
        return copy.digest()

    return mac


def derive_key(key: SecretBytes, label: str) -> SecretBytes:
    """An independent subkey for one purpose (HKDF-SHA256), so one stored key serves several
    uses without any two sharing a key."""
    info = b"toolkit-vault/v1/subkey/" + label.encode()
    return SecretBytes(HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=info).derive(key.reveal()))


class _Wrapper:
    """One vault key, ready to wrap: its commitment, AES-GCM object and key id's associated
    data, derived once (a rotation wraps many keys in a row)."""

    __slots__ = ("aead", "commitment", "key_aad")

    def __init__(self, key_id: str, key: SecretBytes) -> None:
        okm = HKDF(hashes.SHA256(), COMMIT_BYTES + KEY_BYTES, salt=None, info=_WRAP_LABEL)
        derived = okm.derive(key.reveal())
        self.commitment = derived[:COMMIT_BYTES]
        self.aead = AESGCM(derived[COMMIT_BYTES:])
        self.key_aad = associated_data(key_id)


def _binding(context: Iterable[str | int]) -> bytes:
    return hashlib.sha256(associated_data(_BINDING_LABEL, *context)).digest()


class KeyRing:
    """The vault keys by id, one active (`primary_id`); loaded once, validated at
    construction. `legacy` holds the master keys of a vault made before the key hierarchy,
    which wrapped DEKs themselves (the committing envelope, the context in its associated
    data): they only unwrap, until the upgrade has moved what they wrapped."""

    def __init__(
        self,
        keys: Mapping[str, SecretBytes],
        primary: str,
        legacy: Mapping[str, SecretBytes] | None = None,
    ) -> None:
        for key_id, key in {**(legacy or {}), **keys}.items():
            if not isinstance(key, SecretBytes) or len(key) != KEY_BYTES:
                raise KeyProviderError(f"key {key_id} is not {KEY_BYTES * 8} bits")
        if primary not in keys:
            raise KeyProviderError(f"active vault key {primary} is not loaded")
        self._keys = dict(keys)
        self._wrappers = {key_id: _Wrapper(key_id, key) for key_id, key in keys.items()}
        self._legacy = {k: v for k, v in (legacy or {}).items() if k not in keys}
        self.primary_id = primary

    def __repr__(self) -> str:
        return f"KeyRing(ids={self.ids}, primary={self.primary_id!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("KeyRing cannot be pickled")

    def reveal(self) -> RingMaterial:
        """The ring's keys as bytes: the deliberate, greppable way they leave it, only to a
        worker process of this one over a pipe the two alone hold (`keys.opening`)."""
        return (
            {key_id: key.reveal() for key_id, key in self._keys.items()},
            self.primary_id,
            {key_id: key.reveal() for key_id, key in self._legacy.items()},
        )

    @classmethod
    def revealed(cls, material: RingMaterial) -> KeyRing:
        """The ring `reveal` gave (in the worker process)."""
        keys, primary, legacy = material
        held = {k: SecretBytes(v) for k, v in keys.items()}
        return cls(held, primary, {k: SecretBytes(v) for k, v in legacy.items()})

    @property
    def ids(self) -> list[str]:
        return sorted([*self._keys, *self._legacy])

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys or key_id in self._legacy

    def check_value(self, key_id: str) -> bytes:
        return key_check_value(self._keys.get(key_id) or self._legacy[key_id])

    def with_keys(self, keys: Mapping[str, SecretBytes], primary: str) -> KeyRing:
        """This ring plus `keys` (vault keys loaded since), with `primary` active."""
        return KeyRing({**self._keys, **keys}, primary, self._legacy)

    def wrap(
        self,
        key: SecretBytes,
        context: Iterable[str | int],
        *,
        nonce_source: Callable[[int], bytes] = os.urandom,
    ) -> tuple[str, bytes]:
        """Wrap a key under the active vault key, bound to its record's `context`."""
        if not isinstance(key, SecretBytes):
            raise TypeError("only keys held in SecretBytes are wrapped")
        return self._wrap(key.reveal(), _binding(context), nonce_source(NONCE_BYTES))

    def _wrap(self, key: bytes, binding: bytes, nonce: bytes) -> tuple[str, bytes]:
        key_id = self.primary_id
        wrapper = self._wrappers[key_id]
        if len(nonce) != NONCE_BYTES or len(key) != KEY_BYTES:
            raise ValueError("a key wrap takes a 256-bit key and a 96-bit nonce")
        header = bytes([WRAP_FORMAT]) + binding + nonce + wrapper.commitment
        return key_id, header + wrapper.aead.encrypt(nonce, key, header + wrapper.key_aad)

    def unwrap(self, key_id: str, wrapped: bytes, context: Iterable[str | int]) -> SecretBytes:
        """The key wrapped for this record (`context`), or `DecryptionError`."""
        if key_id in self._legacy:
            aad = associated_data("wrap", *context, key_id)
            key = unseal(self._legacy[key_id], wrapped, aad)
            if len(key) != KEY_BYTES:
                raise DecryptionError
            return SecretBytes(key)
        return SecretBytes(self._unwrap(key_id, wrapped, _binding(context)))

    def _unwrap(self, key_id: str, wrapped: bytes, binding: bytes | None) -> bytes:
        """Check format, binding (when the record is known) and commitment, then decrypt."""
        wrapper = self._wrappers.get(key_id)
        if (
            wrapper is None
            or not isinstance(wrapped, bytes)
            or len(wrapped) != WRAPPED_BYTES
            or wrapped[0] != WRAP_FORMAT
        ):
            raise DecryptionError
        if binding is not None and not hmac.compare_digest(wrapped[_BINDING], binding):
            raise DecryptionError
        if not hmac.compare_digest(wrapped[_COMMIT], wrapper.commitment):
            raise DecryptionError
        header = wrapped[:_WRAP_HEADER]
        try:
            return wrapper.aead.decrypt(
                wrapped[_NONCE], wrapped[_WRAP_HEADER:], header + wrapper.key_aad
            )
        except InvalidTag:
            raise DecryptionError from None

    def rewrap(
        self, key_id: str, wrapped: bytes, context: Iterable[str | int] | None = None
    ) -> tuple[str, bytes]:
        """Move a wrapped key to the active vault key, bound to the same record: unwrap and
        wrap the key only, never what it encrypts. A key wrapped by a vault key carries its
        record's binding, so no `context` is needed; a legacy master key's needs it."""
        if key_id in self._legacy:
            if context is None:
                raise DecryptionError
            return self.wrap(self.unwrap(key_id, wrapped, context), context)
        key = self._unwrap(key_id, wrapped, None if context is None else _binding(context))
        return self._wrap(key, wrapped[_BINDING], os.urandom(NONCE_BYTES))

    def rewrap_many(
        self, wrapped_keys: Sequence[tuple[str, bytes]]
    ) -> list[tuple[str, bytes] | None]:
        """`rewrap` of many keys wrapped by vault keys, None for each one that does not open:
        a rotation's batch, with one read of the random source for all its nonces."""
        nonces = os.urandom(NONCE_BYTES * len(wrapped_keys))
        moved: list[tuple[str, bytes] | None] = []
        for n, (key_id, wrapped) in enumerate(wrapped_keys):
            try:
                key = self._unwrap(key_id, wrapped, None)
            except DecryptionError:
                moved.append(None)
                continue
            nonce = nonces[n * NONCE_BYTES : (n + 1) * NONCE_BYTES]
            moved.append(self._wrap(key, wrapped[_BINDING], nonce))
        return moved


def internal_context(name: str) -> tuple[str | int, ...]:
    """The wrap context of a vault-wide key (fingerprint, audit, state), named by purpose."""
    return (FORMAT_VERSION, "internal", name)


@dataclass(frozen=True)
class RecordContext:
    """What a stored config version is: every envelope of the version is bound to it."""

    session_id: str
    toolkit_name: str
    version: int
    schema_digest: str
    public_digest: str = ""  # `public_digest(public config)`: the clear half is bound too

    def wrap_context(self, dek_id: str, pointers: Iterable[str]) -> tuple[str | int, ...]:
        """The wrapped DEK also covers the set of secret paths (none can be dropped unseen)
        and the public half of the config (an edited endpoint cannot receive the secrets)."""
        fields = (self.session_id, self.toolkit_name, self.version, self.schema_digest)
        paths = hashlib.sha256(associated_data(*sorted(pointers))).hexdigest()
        return (FORMAT_VERSION, "dek", *fields, dek_id, paths, self.public_digest)

    @property
    def scope(self) -> tuple[str, str]:
        """Whose history a fingerprint belongs to: equality is visible only inside it."""
        return (self.session_id, self.toolkit_name)

    def value_aad(self, dek_id: str, pointer: str) -> bytes:
        return self.value_aads(dek_id)(pointer)

    def value_aads(self, dek_id: str) -> Callable[[str], bytes]:
        """`value_aad` of each value of one version: the fields around its pointer encoded
        once (`associated_data` is its fields' encodings one after another, so these are
        the same bytes; `check` opens every value of every version)."""
        head = associated_data(FORMAT_VERSION, self.session_id, self.toolkit_name, self.version)
        tail = associated_data(self.schema_digest, dek_id)
        return lambda pointer: head + associated_data(pointer) + tail


@dataclass(frozen=True, repr=False)
class SealedConfig:
    """The encrypted half of a config version: only ciphertext, wrapped keys and HMACs."""

    dek_id: str
    kek_id: str
    wrapped_dek: bytes
    envelopes: dict[str, bytes]
    fingerprints: dict[str, str]


def public_digest(public: Any) -> str:
    """SHA-256 of the public half's canonical JSON (RFC 8785), for `RecordContext`."""
    return hashlib.sha256(canonical_json(public)).hexdigest()


def seal_config(
    ring: KeyRing,
    fingerprint_key: SecretBytes,
    context: RecordContext,
    secrets: Mapping[str, Any],
) -> SealedConfig:
    """Encrypt each secret value under a fresh DEK, wrapped by the active vault key.

    One read of the random source gives the DEK, its id and every nonce, each its own
    slice of it: every read releases the GIL, and a busy server pays for each release."""
    draw = io.BytesIO(os.urandom(KEY_BYTES + DEK_ID_BYTES + NONCE_BYTES * (1 + len(secrets))))
    dek, dek_id = SecretBytes(draw.read(KEY_BYTES)), draw.read(DEK_ID_BYTES).hex()
    kek_id, wrapped = ring.wrap(dek, context.wrap_context(dek_id, secrets), nonce_source=draw.read)
    envelopes: dict[str, bytes] = {}
    fingerprints: dict[str, str] = {}
    for pointer, value in secrets.items():
        plaintext = canonical_json(value)
        aad = context.value_aad(dek_id, pointer)
        envelopes[pointer] = seal(dek, plaintext, aad, nonce_source=draw.read)
        fingerprints[pointer] = fingerprint(fingerprint_key, context.scope, pointer, plaintext)
    return SealedConfig(dek_id, kek_id, wrapped, envelopes, fingerprints)


def open_config(
    ring: KeyRing, context: RecordContext, sealed: SealedConfig
) -> dict[str, SecretValue]:
    """Decrypt every secret of a version, or raise the opaque `DecryptionError`."""
    wrap_context = context.wrap_context(sealed.dek_id, sealed.envelopes)
    dek = ring.unwrap(sealed.kek_id, sealed.wrapped_dek, wrap_context)
    return _open_values(dek, context, sealed)


def fingerprints_of(
    ring: KeyRing, fingerprint_key: SecretBytes, context: RecordContext, sealed: SealedConfig
) -> dict[str, str]:
    """Open a version and fingerprint its values afresh (the upgrade that scoped them)."""
    wrap_context = context.wrap_context(sealed.dek_id, sealed.envelopes)
    dek = ring.unwrap(sealed.kek_id, sealed.wrapped_dek, wrap_context)
    found = {}
    for pointer, envelope in sealed.envelopes.items():
        plaintext = unseal(dek, envelope, context.value_aad(sealed.dek_id, pointer))
        found[pointer] = fingerprint(fingerprint_key, context.scope, pointer, plaintext)
    return found


def _open_values(
    dek: SecretBytes, context: RecordContext, sealed: SealedConfig
) -> dict[str, SecretValue]:
    values: dict[str, SecretValue] = {}
    value_aad = context.value_aads(sealed.dek_id)
    for pointer, envelope in sealed.envelopes.items():
        plaintext = unseal(dek, envelope, value_aad(pointer))
        try:  # sealed as RFC 8785 JSON, which is UTF-8
            values[pointer] = SecretValue(parse_json(plaintext.decode()))
        except ValueError:
            raise DecryptionError from None
    return values
