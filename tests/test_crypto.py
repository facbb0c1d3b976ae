"""Envelope encryption: known-answer vectors, tamper resistance, context binding, secret types.

`tests/vectors/envelope.json` and `envelope_invalid.json` were generated once by a throwaway
script that called `seal(..., nonce_source=lambda n: fixed_nonce)` and also rebuilt every
envelope from the construction documented in `crypto.py` with hand-written HKDF (RFC 5869)
and AES-GCM; `test_envelope_matches_documented_construction` keeps that cross-check here, so
the vectors pin the wire format rather than whatever the code happened to produce.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st

from toolkit_vault import crypto
from toolkit_vault.crypto import (
    KeyRing,
    RecordContext,
    SealedConfig,
    SecretBytes,
    SecretValue,
    associated_data,
    chain_hash,
    fingerprint,
    key_check_value,
    new_key,
    open_config,
    seal,
    seal_config,
    unseal,
)
from toolkit_vault.errors import DecryptionError, KeyProviderError

VECTORS_DIR = Path(__file__).parent / "vectors"
VECTORS = json.loads((VECTORS_DIR / "envelope.json").read_text(encoding="utf-8"))
INVALID = json.loads((VECTORS_DIR / "envelope_invalid.json").read_text(encoding="utf-8"))

CANARY = "tkv-CANARY-5b1e0c9d"
KEY = SecretBytes(bytes(range(100, 132)))
OTHER_KEY = SecretBytes(bytes(range(200, 232)))
AAD = associated_data(1, "sess-1", "github", 7, "/token", "sha256:abc", "dek-1")
HEADER = 1 + 12 + 32


def _fixed(nonce: bytes) -> Callable[[int], bytes]:
    def source(size: int) -> bytes:
        assert size == len(nonce) == 12
        return nonce

    return source


def _plaintext(vector: dict[str, Any]) -> bytes:
    if "plaintext_hex" in vector:
        return bytes.fromhex(vector["plaintext_hex"])
    return str(vector["plaintext_utf8"]).encode()


def _hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm, counter = okm + block, counter + 1
    return okm[:length]


def _assert_opaque(error: DecryptionError, *secrets: bytes | str) -> None:
    assert str(error) == "decryption failed"
    assert error.message == "decryption failed"
    assert error.args == ("decryption failed",)
    assert error.details == []
    assert error.__cause__ is None
    assert error.__suppress_context__ or error.__context__ is None
    for secret in secrets:
        text = secret.hex() if isinstance(secret, bytes) else secret
        assert text not in str(error) and text not in repr(error)


def _rejects(key: SecretBytes, envelope: bytes, aad: bytes = AAD) -> None:
    with pytest.raises(DecryptionError) as caught:
        unseal(key, envelope, aad)
    _assert_opaque(caught.value, CANARY)


@pytest.fixture(scope="module")
def envelope() -> bytes:
    return seal(KEY, CANARY.encode(), AAD)


# --- known-answer vectors ---------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=lambda v: v["description"])
def test_envelope_vector(vector: dict[str, Any]) -> None:
    key = SecretBytes(bytes.fromhex(vector["key"]))
    aad = associated_data(*vector["aad_fields"])
    assert aad.hex() == vector["aad"]
    sealed = seal(key, _plaintext(vector), aad, nonce_source=_fixed(bytes.fromhex(vector["nonce"])))
    assert sealed.hex() == vector["envelope"]
    assert unseal(key, bytes.fromhex(vector["envelope"]), aad) == _plaintext(vector)


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=lambda v: v["description"])
def test_envelope_matches_documented_construction(vector: dict[str, Any]) -> None:
    key, nonce = bytes.fromhex(vector["key"]), bytes.fromhex(vector["nonce"])
    okm = _hkdf_sha256(key, nonce, b"toolkit-vault/v1/commit+enc", 64)
    header = bytes([crypto.FORMAT_VERSION]) + nonce + okm[:32]
    body = AESGCM(okm[32:]).encrypt(
        nonce, _plaintext(vector), header + bytes.fromhex(vector["aad"])
    )
    assert (header + body).hex() == vector["envelope"]


@pytest.mark.parametrize("vector", VECTORS["key_check_value"], ids=lambda v: v["key"][:8])
def test_key_check_value_vector(vector: dict[str, str]) -> None:
    assert key_check_value(SecretBytes(bytes.fromhex(vector["key"]))).hex() == vector["kcv"]


@pytest.mark.parametrize("vector", VECTORS["fingerprint"], ids=lambda v: v["pointer"] or "root")
def test_fingerprint_vector(vector: dict[str, str]) -> None:
    key = SecretBytes(bytes.fromhex(vector["key"]))
    value = vector["canonical_value_utf8"].encode()
    assert fingerprint(key, vector["scope"], vector["pointer"], value) == vector["fingerprint"]


def test_chain_hash_vectors_link_up() -> None:
    previous = b""
    for vector in VECTORS["chain_hash"]:
        assert vector["previous"] == previous.hex()
        key = SecretBytes(bytes.fromhex(vector["key"]))
        previous = chain_hash(key, previous, vector["payload_utf8"].encode())
        assert previous.hex() == vector["link"]


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c["description"])
def test_invalid_vector(case: dict[str, Any]) -> None:
    key = SecretBytes(bytes.fromhex(case["key"]))
    with pytest.raises(DecryptionError) as caught:
        unseal(key, bytes.fromhex(case["envelope"]), associated_data(*case["aad_fields"]))
    _assert_opaque(caught.value)


def test_seal_draws_a_fresh_nonce_each_time() -> None:
    first, second = seal(KEY, b"same", AAD), seal(KEY, b"same", AAD)
    assert first[1:13] != second[1:13]
    assert first != second
    assert unseal(KEY, first, AAD) == unseal(KEY, second, AAD) == b"same"


# --- invalid envelopes --------------------------------------------------------------------


def test_every_flipped_byte_is_rejected(envelope: bytes) -> None:
    for position in range(len(envelope)):
        for mask in (0x01, 0x80, 0xFF):
            tampered = bytearray(envelope)
            tampered[position] ^= mask
            _rejects(KEY, bytes(tampered))


def test_every_truncation_is_rejected(envelope: bytes) -> None:
    for length in range(len(envelope)):
        _rejects(KEY, envelope[:length])


@pytest.mark.parametrize("extra", [b"\x00", b"\xff"])
def test_extension_by_one_byte_is_rejected(envelope: bytes, extra: bytes) -> None:
    _rejects(KEY, envelope + extra)


@pytest.mark.parametrize("version", [0, 2, 255])
def test_other_format_versions_are_rejected(envelope: bytes, version: int) -> None:
    _rejects(KEY, bytes([version]) + envelope[1:])


def test_wrong_key_is_rejected(envelope: bytes) -> None:
    _rejects(OTHER_KEY, envelope)


@pytest.mark.parametrize(
    "aad",
    [
        b"",
        AAD + b"\x00",
        AAD[:-1],
        associated_data(1, "sess-1", "github", 7, "/other", "sha256:abc", "dek-1"),
        associated_data(1, "sess-2", "github", 7, "/token", "sha256:abc", "dek-1"),
        associated_data(1, "sess-1", "github", 8, "/token", "sha256:abc", "dek-1"),
    ],
    ids=["empty", "extended", "truncated", "pointer", "session", "version"],
)
def test_wrong_associated_data_is_rejected(envelope: bytes, aad: bytes) -> None:
    _rejects(KEY, envelope, aad)


# --- key commitment -----------------------------------------------------------------------


class _SpyAESGCM:
    """Stands in for AESGCM inside `crypto`; fails the test if decrypt is reached when armed."""

    armed = False
    decrypts = 0

    def __init__(self, key: bytes) -> None:
        self._inner = AESGCM(key)

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes | None) -> bytes:
        return self._inner.encrypt(nonce, data, aad)

    def decrypt(self, nonce: bytes, data: bytes, aad: bytes | None) -> bytes:
        if type(self).armed:
            pytest.fail("AES-GCM decrypt ran before the key commitment was rejected")
        type(self).decrypts += 1
        return self._inner.decrypt(nonce, data, aad)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> type[_SpyAESGCM]:
    monkeypatch.setattr(_SpyAESGCM, "armed", False)
    monkeypatch.setattr(_SpyAESGCM, "decrypts", 0)
    monkeypatch.setattr(crypto, "AESGCM", _SpyAESGCM)
    return _SpyAESGCM


def test_spy_sees_decrypt_of_a_valid_envelope(spy: type[_SpyAESGCM]) -> None:
    sealed = seal(KEY, CANARY.encode(), AAD)
    assert unseal(KEY, sealed, AAD) == CANARY.encode()
    assert spy.decrypts == 1


@pytest.mark.parametrize(
    "position",
    [0, 1, 12, 13, HEADER - 1],
    ids=["format", "nonce0", "nonce11", "commit0", "commit31"],
)
def test_header_tampering_fails_before_decrypt(spy: type[_SpyAESGCM], position: int) -> None:
    tampered = bytearray(seal(KEY, CANARY.encode(), AAD))
    tampered[position] ^= 0x01
    spy.armed = True
    _rejects(KEY, bytes(tampered))


def test_wrong_key_fails_before_decrypt(spy: type[_SpyAESGCM]) -> None:
    sealed = seal(KEY, CANARY.encode(), AAD)
    spy.armed = True
    _rejects(OTHER_KEY, sealed)


def test_commitment_is_the_hkdf_tag_of_the_key(envelope: bytes) -> None:
    expected = _hkdf_sha256(KEY.reveal(), envelope[1:13], b"toolkit-vault/v1/commit+enc", 32)
    assert envelope[13:HEADER] == expected


# --- associated data ----------------------------------------------------------------------


def _decode_fields(data: bytes) -> list[str]:
    fields, offset = [], 0
    while offset < len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        fields.append(data[offset + 4 : offset + 4 + size].decode())
        offset += 4 + size
    assert offset == len(data)
    return fields


def test_associated_data_is_length_prefixed() -> None:
    assert associated_data("ab", "c") != associated_data("a", "bc")
    assert associated_data("a", "") != associated_data("a")
    assert associated_data("", "") != associated_data("")
    assert associated_data() == b""
    assert associated_data("ab", "c") == b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"


def test_associated_data_renders_ints_as_decimal() -> None:
    assert associated_data(42) == b"\x00\x00\x00\x0242"
    assert associated_data(-7, 0) == b"\x00\x00\x00\x02-7\x00\x00\x00\x010"
    assert associated_data(1, "x") == associated_data("1", "x")
    assert associated_data(10**20) == struct.pack(">I", 21) + b"1" + b"0" * 20


@given(st.lists(st.text(), max_size=8))
def test_associated_data_decodes_back_to_its_fields(fields: list[str]) -> None:
    assert _decode_fields(associated_data(*fields)) == fields


@given(st.binary(max_size=2048), st.lists(st.one_of(st.text(), st.integers()), max_size=8))
def test_unseal_inverts_seal(plaintext: bytes, fields: list[str | int]) -> None:
    aad = associated_data(*fields)
    sealed = seal(KEY, plaintext, aad)
    assert len(sealed) == HEADER + len(plaintext) + 16
    assert unseal(KEY, sealed, aad) == plaintext


# --- configs: seal_config / open_config / rewrap_config -----------------------------------

SECRETS: dict[str, Any] = {
    "/token": CANARY,
    "/nested": {"a": [1, {"b": None}], "ü": "ẞ", "flag": True},
    "/list": [1, "two", 3.5, False],
    "/number": 42,
    "/float": -0.25,
    "/unicode": "пароль 🔑",
    "/empty": "",
}
CONTEXT = RecordContext("sess-1", "github", 3, "sha256:abc")


def _ring(*ids: str, primary: str | None = None) -> KeyRing:
    keys = {kek_id: SecretBytes(hashlib.sha256(kek_id.encode()).digest()) for kek_id in ids}
    return KeyRing(keys, primary or ids[-1])


@pytest.fixture
def ring() -> KeyRing:
    return _ring("kek-1")


@pytest.fixture
def fp_key() -> SecretBytes:
    return SecretBytes(b"\x42" * 32)


@pytest.fixture
def sealed(ring: KeyRing, fp_key: SecretBytes) -> SealedConfig:
    return seal_config(ring, fp_key, CONTEXT, SECRETS)


def _opened(values: dict[str, SecretValue]) -> dict[str, Any]:
    return {pointer: value.reveal() for pointer, value in values.items()}


def _refuses(ring: KeyRing, context: RecordContext, sealed: SealedConfig) -> None:
    with pytest.raises(DecryptionError) as caught:
        open_config(ring, context, sealed)
    _assert_opaque(caught.value, CANARY)


def test_config_round_trip(ring: KeyRing, sealed: SealedConfig) -> None:
    opened = open_config(ring, CONTEXT, sealed)
    assert all(isinstance(value, SecretValue) for value in opened.values())
    assert _opened(opened) == SECRETS
    assert sealed.kek_id == "kek-1"
    assert set(sealed.envelopes) == set(sealed.fingerprints) == set(SECRETS)
    assert all(CANARY.encode() not in envelope for envelope in sealed.envelopes.values())


def test_config_fingerprints_cover_the_canonical_value(
    sealed: SealedConfig, fp_key: SecretBytes
) -> None:
    for pointer, value in SECRETS.items():
        expected = fingerprint(fp_key, CONTEXT.scope, pointer, rfc8785.dumps(value))
        assert sealed.fingerprints[pointer] == expected


def test_each_config_version_gets_its_own_dek(ring: KeyRing, fp_key: SecretBytes) -> None:
    first = seal_config(ring, fp_key, CONTEXT, SECRETS)
    second = seal_config(ring, fp_key, CONTEXT, SECRETS)
    assert first.dek_id != second.dek_id
    assert first.wrapped_dek != second.wrapped_dek
    assert first.fingerprints == second.fingerprints


def test_a_sealed_config_draws_its_key_and_every_nonce_fresh_from_one_read(
    ring: KeyRing, fp_key: SecretBytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`seal_config` slices the DEK, its id and the nonces out of one read of the random
    source (each read costs a busy server a GIL hand-over): no slice may serve twice."""
    reads: list[bytes] = []

    def urandom(size: int) -> bytes:
        reads.append(os.urandom(size))
        return reads[-1]

    monkeypatch.setattr(crypto, "os", SimpleNamespace(urandom=urandom))
    sealed = seal_config(ring, fp_key, CONTEXT, SECRETS)
    nonces = [sealed.wrapped_dek[33:45], *(e[1:13] for e in sealed.envelopes.values())]
    assert len(reads) == 1
    assert len(set(nonces)) == len(nonces) == 1 + len(SECRETS)
    assert all(nonce in reads[0] for nonce in nonces)
    dek_id = bytes.fromhex(sealed.dek_id)
    assert dek_id in reads[0]
    assert not any(nonce in dek_id for nonce in nonces)
    assert open_config(ring, CONTEXT, sealed).keys() == SECRETS.keys()


def test_wire_layout_of_wrapped_dek_and_values(sealed: SealedConfig) -> None:
    """Pin the binding's field order of DESIGN.md and the key wrap's layout, independently
    of `RecordContext`'s and `KeyRing`'s helpers."""
    vault_key = hashlib.sha256(b"kek-1").digest()
    paths = hashlib.sha256(associated_data(*sorted(sealed.envelopes))).hexdigest()
    fields = (1, "dek", "sess-1", "github", 3, "sha256:abc", sealed.dek_id, paths, "")
    binding = hashlib.sha256(associated_data("toolkit-vault/v2/wrap-binding", *fields)).digest()
    okm = HKDF(hashes.SHA256(), 64, salt=None, info=b"toolkit-vault/v2/key-wrap").derive(vault_key)
    blob = sealed.wrapped_dek
    assert (blob[0], blob[1:33], blob[45:77], len(blob)) == (2, binding, okm[:32], 125)
    dek = AESGCM(okm[32:]).decrypt(blob[33:45], blob[77:], blob[:77] + associated_data("kek-1"))
    value_aad = associated_data(1, "sess-1", "github", 3, "/token", "sha256:abc", sealed.dek_id)
    assert unseal(SecretBytes(dek), sealed.envelopes["/token"], value_aad) == rfc8785.dumps(CANARY)


def test_envelope_moved_to_another_pointer_fails(ring: KeyRing, sealed: SealedConfig) -> None:
    moved = {**sealed.envelopes, "/number": sealed.envelopes["/token"]}
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, envelopes=moved))
    swapped = {
        **sealed.envelopes,
        "/token": sealed.envelopes["/unicode"],
        "/unicode": sealed.envelopes["/token"],
    }
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, envelopes=swapped))


@pytest.mark.parametrize(
    "change",
    [
        {"session_id": "sess-2"},
        {"toolkit_name": "gitlab"},
        {"version": 4},
        {"schema_digest": "sha256:abd"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_config_opened_in_another_context_fails(
    ring: KeyRing, sealed: SealedConfig, change: dict[str, Any]
) -> None:
    _refuses(ring, dataclasses.replace(CONTEXT, **change), sealed)


def test_envelope_moved_to_another_row_fails(ring: KeyRing, fp_key: SecretBytes) -> None:
    other_context = dataclasses.replace(CONTEXT, session_id="sess-2")
    mine = seal_config(ring, fp_key, CONTEXT, {"/token": CANARY})
    for context in (CONTEXT, other_context):
        theirs = seal_config(ring, fp_key, context, {"/token": "theirs"})
        planted = dataclasses.replace(theirs, envelopes={"/token": mine.envelopes["/token"]})
        _refuses(ring, context, planted)
        assert _opened(open_config(ring, context, theirs)) == {"/token": "theirs"}


def test_swapped_dek_id_fails(ring: KeyRing, fp_key: SecretBytes, sealed: SealedConfig) -> None:
    other = seal_config(ring, fp_key, CONTEXT, {"/token": "other"})
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, dek_id=other.dek_id))
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, dek_id="00" * 16))


def test_swapped_wrapped_dek_fails(
    ring: KeyRing, fp_key: SecretBytes, sealed: SealedConfig
) -> None:
    for context in (CONTEXT, dataclasses.replace(CONTEXT, version=4)):
        other = seal_config(ring, fp_key, context, {"/token": "other"})
        _refuses(ring, CONTEXT, dataclasses.replace(sealed, wrapped_dek=other.wrapped_dek))
        whole_key = dataclasses.replace(sealed, dek_id=other.dek_id, wrapped_dek=other.wrapped_dek)
        _refuses(ring, CONTEXT, whole_key)


def test_wrong_or_unknown_kek_id_fails(fp_key: SecretBytes) -> None:
    ring = _ring("kek-1", "kek-2", primary="kek-1")
    sealed = seal_config(ring, fp_key, CONTEXT, SECRETS)
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, kek_id="kek-2"))
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, kek_id="kek-9"))


# Values are sealed as RFC 8785 JSON, which is UTF-8: JSON in another encoding is refused too.
@pytest.mark.parametrize("plaintext", [b"\xff not json", '"pw"'.encode("utf-16")])
def test_value_that_is_not_json_fails_opaquely(
    ring: KeyRing, sealed: SealedConfig, plaintext: bytes
) -> None:
    wrap_context = CONTEXT.wrap_context(sealed.dek_id, sealed.envelopes)
    dek = ring.unwrap(sealed.kek_id, sealed.wrapped_dek, wrap_context)
    garbage = seal(dek, plaintext, CONTEXT.value_aad(sealed.dek_id, "/token"))
    envelopes = {**sealed.envelopes, "/token": garbage}
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, envelopes=envelopes))


def test_dropping_a_field_is_detected(ring: KeyRing, sealed: SealedConfig) -> None:
    fewer = dict(list(sealed.envelopes.items())[1:])
    _refuses(ring, CONTEXT, dataclasses.replace(sealed, envelopes=fewer))


def test_rewrap_moves_the_dek_to_the_new_primary(fp_key: SecretBytes) -> None:
    old_ring, new_ring = _ring("kek-1"), _ring("kek-1", "kek-2")
    sealed = seal_config(old_ring, fp_key, CONTEXT, SECRETS)
    key_id, wrapped = new_ring.rewrap(sealed.kek_id, sealed.wrapped_dek)  # no context needed
    rewrapped = dataclasses.replace(sealed, kek_id=key_id, wrapped_dek=wrapped)
    assert rewrapped.kek_id == "kek-2"
    assert rewrapped.wrapped_dek != sealed.wrapped_dek
    assert _opened(open_config(new_ring, CONTEXT, rewrapped)) == SECRETS
    retired = _ring("kek-2")
    assert _opened(open_config(retired, CONTEXT, rewrapped)) == SECRETS
    _refuses(retired, CONTEXT, sealed)
    _refuses(new_ring, dataclasses.replace(CONTEXT, version=4), rewrapped)  # still bound


@pytest.mark.parametrize("target", ["wrapped_dek", "key_id", "context"])
def test_rewrap_refuses_a_key_that_does_not_unwrap(fp_key: SecretBytes, target: str) -> None:
    old_ring, new_ring = _ring("kek-1"), _ring("kek-1", "kek-2")
    sealed = seal_config(old_ring, fp_key, CONTEXT, SECRETS)
    key_id, wrapped, context = sealed.kek_id, sealed.wrapped_dek, None
    if target == "wrapped_dek":
        wrapped = wrapped[:-1] + bytes([wrapped[-1] ^ 1])
    elif target == "key_id":
        key_id = "kek-9"
    else:  # a record given: the wrap must be bound to it
        context = dataclasses.replace(CONTEXT, version=99).wrap_context(
            sealed.dek_id, sealed.envelopes
        )
    with pytest.raises(DecryptionError) as caught:
        new_ring.rewrap(key_id, wrapped, context)
    _assert_opaque(caught.value, CANARY)


def test_rewrap_moves_the_key_only_never_a_value(fp_key: SecretBytes) -> None:
    """A rotation moves data keys without opening values: one whose envelope is corrupt
    is moved as it is, and `open_config` (what `check` runs) still refuses it."""
    old_ring, new_ring = _ring("kek-1"), _ring("kek-1", "kek-2")
    sealed = seal_config(old_ring, fp_key, CONTEXT, SECRETS)
    envelope = bytearray(sealed.envelopes["/list"])
    envelope[-1] ^= 1
    broken = dataclasses.replace(sealed, envelopes={**sealed.envelopes, "/list": bytes(envelope)})
    key_id, wrapped = new_ring.rewrap(broken.kek_id, broken.wrapped_dek)
    _refuses(new_ring, CONTEXT, dataclasses.replace(broken, kek_id=key_id, wrapped_dek=wrapped))


# --- fingerprints -------------------------------------------------------------------------


SCOPE = ("session-1", "github")


def test_fingerprints_show_changed_or_unchanged_only(fp_key: SecretBytes) -> None:
    value = rfc8785.dumps(CANARY)
    base = fingerprint(fp_key, SCOPE, "/token", value)
    assert fingerprint(fp_key, SCOPE, "/token", value) == base
    assert fingerprint(fp_key, SCOPE, "/token", rfc8785.dumps(CANARY + "x")) != base
    assert fingerprint(fp_key, SCOPE, "/other", value) != base
    assert fingerprint(SecretBytes(b"\x43" * 32), SCOPE, "/token", value) != base
    assert fingerprint(fp_key, SCOPE, "/a", b"bc") != fingerprint(fp_key, SCOPE, "/ab", b"c")


def test_fingerprints_are_equal_only_within_one_history(fp_key: SecretBytes) -> None:
    """Another session or toolkit sees another fingerprint for the same value: no oracle."""
    value = rfc8785.dumps(CANARY)
    base = fingerprint(fp_key, SCOPE, "/token", value)
    assert fingerprint(fp_key, ("session-2", "github"), "/token", value) != base
    assert fingerprint(fp_key, ("session-1", "gitlab"), "/token", value) != base
    assert fingerprint(fp_key, ("session-1g", "ithub"), "/token", value) != base


def test_fingerprints_do_not_reveal_the_value(fp_key: SecretBytes) -> None:
    value = rfc8785.dumps(CANARY)
    result = fingerprint(fp_key, SCOPE, "/token", value)
    assert len(result) == 64 and int(result, 16) >= 0
    assert result != hashlib.sha256(value).hexdigest()
    assert result != hashlib.sha256(CANARY.encode()).hexdigest()
    assert result != hmac.new(fp_key.reveal(), value, hashlib.sha256).hexdigest()
    assert CANARY not in result and value.hex() not in result


def test_fingerprints_survive_kek_rotation(fp_key: SecretBytes) -> None:
    first = seal_config(_ring("kek-1"), fp_key, CONTEXT, SECRETS)
    second = seal_config(_ring("kek-7"), fp_key, CONTEXT, SECRETS)
    assert first.fingerprints == second.fingerprints


# --- secret types and the key ring --------------------------------------------------------

SECRETS_OF_EACH_KIND = [
    pytest.param(lambda: SecretBytes(CANARY.encode()), id="SecretBytes"),
    pytest.param(lambda: SecretValue({"token": CANARY}), id="SecretValue"),
]


@pytest.mark.parametrize("make", SECRETS_OF_EACH_KIND)
def test_secrets_never_print(make: Callable[[], Any]) -> None:
    secret = make()
    renderings = [
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        "%s %r" % (secret, secret),  # noqa: UP031
        format(secret),
        repr([secret]),
        repr({"key": secret}),
    ]
    for text in renderings:
        assert CANARY not in text
        assert CANARY.encode().hex() not in text
        assert "<hidden>" in text
    with pytest.raises(TypeError):
        format(secret, "s")


@pytest.mark.parametrize("make", SECRETS_OF_EACH_KIND)
def test_secrets_cannot_be_pickled(make: Callable[[], Any]) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError):
            pickle.dumps(make(), protocol=protocol)


@pytest.mark.parametrize("make", SECRETS_OF_EACH_KIND)
def test_secret_equality_is_identity(make: Callable[[], Any]) -> None:
    first, second = make(), make()
    assert first == first
    assert first != second
    assert first != first.reveal()
    assert len({first, second}) == 2


def test_secret_bytes_copies_and_reveals() -> None:
    source = bytearray(CANARY.encode())
    secret = SecretBytes(source)
    source[0] ^= 0xFF
    assert secret.reveal() == CANARY.encode()
    assert isinstance(secret.reveal(), bytes)
    assert len(secret) == len(CANARY)


def test_new_key_is_random_256_bit() -> None:
    first, second = new_key(), new_key()
    assert len(first) == len(second) == 32
    assert first.reveal() != second.reveal()


def test_key_ring_repr_shows_ids_only() -> None:
    keys = {"kek-1": SecretBytes(b"\x01" * 32), "kek-2": SecretBytes(CANARY.encode().ljust(32))}
    ring = KeyRing(keys, "kek-2")
    text = repr(ring)
    assert "kek-1" in text and "kek-2" in text
    assert CANARY not in text and ("01" * 32) not in text and "AQEB" not in text
    assert ring.ids == ["kek-1", "kek-2"] and ring.primary_id == "kek-2"
    assert "kek-1" in ring and "kek-9" not in ring
    assert ring.check_value("kek-1") == key_check_value(keys["kek-1"])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="KeyRing cannot be pickled"):
            pickle.dumps(ring, protocol=protocol)


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_key_ring_refuses_wrong_key_length(size: int) -> None:
    with pytest.raises(KeyProviderError, match="kek-1"):
        KeyRing({"kek-1": SecretBytes(b"\x07" * size)}, "kek-1")


def test_key_ring_refuses_a_primary_it_does_not_hold() -> None:
    with pytest.raises(KeyProviderError, match="kek-2"):
        KeyRing({"kek-1": new_key()}, "kek-2")
    with pytest.raises(KeyProviderError):
        KeyRing({}, "kek-1")


def test_unwrap_refuses_a_wrapped_key_of_the_wrong_length() -> None:
    kek = SecretBytes(b"\x09" * 32)
    ring = KeyRing({"vk-1": new_key()}, "vk-1", legacy={"kek-1": kek})
    context = ("internal", "audit")
    short = seal(kek, b"\x00" * 16, associated_data("wrap", *context, "kek-1"))
    with pytest.raises(DecryptionError):
        ring.unwrap("kek-1", short, context)
    legacy = seal(kek, b"\x05" * 32, associated_data("wrap", *context, "kek-1"))
    assert ring.unwrap("kek-1", legacy, context).reveal() == b"\x05" * 32
    key_id, wrapped = ring.wrap(SecretBytes(b"\x05" * 32), context)
    assert key_id == "vk-1" and ring.unwrap(key_id, wrapped, context).reveal() == b"\x05" * 32
    with pytest.raises(DecryptionError):
        ring.unwrap(key_id, wrapped, ("internal", "fingerprint"))
    with pytest.raises(DecryptionError):
        ring.unwrap(key_id, wrapped[:-1], context)
