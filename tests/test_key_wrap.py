"""The key wrap under vault keys (`KeyRing`, format 2): known answers, tampering, binding,
commitment, and the rewrap that moves a key without its record or its values.

`tests/vectors/key_wrap.json` was generated once from the construction documented in
`crypto.py` with `cryptography`'s HKDF and AES-GCM directly (not through `KeyRing`), so the
vectors pin the wire format rather than whatever the code happens to produce.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolkit_vault.crypto import WRAPPED_BYTES, KeyRing, SecretBytes, new_key
from toolkit_vault.errors import DecryptionError

VECTORS = json.loads((Path(__file__).parent / "vectors" / "key_wrap.json").read_text())["vectors"]
CONTEXT = (1, "dek", "sess-1", "github", 3, "sha256:abc", "dek-1", "paths", "public")


def _fixed(nonce: bytes) -> Callable[[int], bytes]:
    return lambda size: nonce[:size]


def _ring(vector: dict[str, Any]) -> KeyRing:
    return KeyRing(
        {vector["key_id"]: SecretBytes(bytes.fromhex(vector["vault_key"]))}, vector["key_id"]
    )


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["key_id"])
def test_key_wrap_vector(vector: dict[str, Any]) -> None:
    ring, context = _ring(vector), tuple(vector["context"])
    key = SecretBytes(bytes.fromhex(vector["key"]))
    nonce = bytes.fromhex(vector["nonce"])
    key_id, wrapped = ring.wrap(key, context, nonce_source=_fixed(nonce))
    assert (key_id, wrapped.hex()) == (vector["key_id"], vector["wrapped"])
    assert ring.unwrap(key_id, bytes.fromhex(vector["wrapped"]), context).reveal() == key.reveal()


@pytest.fixture
def wrapped() -> tuple[KeyRing, bytes, bytes]:
    ring = KeyRing({"vk-1": new_key()}, "vk-1")
    key = new_key()
    return ring, ring.wrap(key, CONTEXT)[1], key.reveal()


def test_every_flipped_byte_and_every_cut_is_refused(wrapped: tuple[KeyRing, bytes, bytes]) -> None:
    ring, blob, _ = wrapped
    assert len(blob) == WRAPPED_BYTES
    for at in range(len(blob)):
        changed = blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1 :]
        for attempt in (
            lambda changed=changed: ring.unwrap("vk-1", changed, CONTEXT),
            lambda changed=changed: ring.rewrap("vk-1", changed),
        ):
            with pytest.raises(DecryptionError):
                attempt()
    for cut in range(len(blob)):
        with pytest.raises(DecryptionError):
            ring.unwrap("vk-1", blob[:cut], CONTEXT)
    with pytest.raises(DecryptionError):
        ring.unwrap("vk-1", blob + b"\x00", CONTEXT)


def test_a_wrap_opens_only_for_its_record_and_its_key(
    wrapped: tuple[KeyRing, bytes, bytes],
) -> None:
    ring, blob, key = wrapped
    assert ring.unwrap("vk-1", blob, CONTEXT).reveal() == key
    for other in (CONTEXT[:-1], (*CONTEXT[:-1], "other"), (*CONTEXT, "")):
        with pytest.raises(DecryptionError):
            ring.unwrap("vk-1", blob, other)
    both = KeyRing({"vk-1": new_key(), "vk-2": new_key()}, "vk-2")
    for key_id in ("vk-2", "vk-9"):  # another key, and none: refused before decrypting
        with pytest.raises(DecryptionError):
            both.unwrap(key_id, blob, CONTEXT)
    same_key_other_id = KeyRing({"vk-2": SecretBytes(bytes(32))}, "vk-2")
    copy = KeyRing({"vk-1": SecretBytes(bytes(32))}, "vk-1")
    _, under_vk1 = copy.wrap(SecretBytes(key), CONTEXT)
    with pytest.raises(DecryptionError):  # the key id is bound too
        same_key_other_id.unwrap("vk-2", under_vk1, CONTEXT)


def test_rewrap_keeps_the_record_binding_and_moves_to_the_active_key() -> None:
    old = new_key()
    first = KeyRing({"vk-1": old}, "vk-1")
    key = new_key()
    _, blob = first.wrap(key, CONTEXT)
    second = first.with_keys({"vk-2": new_key()}, "vk-2")
    key_id, moved = second.rewrap("vk-1", blob)
    assert key_id == "vk-2" and moved[1:33] == blob[1:33]  # the same record's binding
    assert second.unwrap("vk-2", moved, CONTEXT).reveal() == key.reveal()
    with pytest.raises(DecryptionError):
        second.unwrap("vk-2", moved, (*CONTEXT[:-1], "other"))
    only_new = KeyRing({"vk-2": SecretBytes(second._keys["vk-2"].reveal())}, "vk-2")
    assert only_new.unwrap("vk-2", moved, CONTEXT).reveal() == key.reveal()
    with pytest.raises(DecryptionError):  # the old key is not needed, and not enough
        only_new.unwrap("vk-1", blob, CONTEXT)


def test_a_batch_rewrap_gives_each_key_its_own_nonce_and_refuses_what_does_not_open() -> None:
    """`rewrap_many` (a rotation's batch) reads its nonces in one call: each key still gets
    its own (a nonce used twice under one AES-GCM key would leak both), each moved key opens
    for its own record only, and a tampered or unknown wrap comes back None, alone."""
    first = KeyRing({"vk-1": new_key()}, "vk-1")
    keys = [new_key() for _ in range(50)]
    contexts = [(*CONTEXT[:-1], f"record-{n}") for n in range(50)]
    wrapped = [first.wrap(key, context) for key, context in zip(keys, contexts, strict=True)]
    tampered = bytearray(wrapped[7][1])
    tampered[-1] ^= 1
    wrapped[7] = ("vk-1", bytes(tampered))
    wrapped.append(("vk-9", wrapped[0][1]))
    second = first.with_keys({"vk-2": new_key()}, "vk-2")
    moved = second.rewrap_many(wrapped)
    assert moved[7] is None and moved[50] is None
    opened = [(n, m) for n, m in enumerate(moved[:50]) if m is not None]
    assert len(opened) == 49 and all(key_id == "vk-2" for _, (key_id, _) in opened)
    assert len({blob[33:45] for _, (_, blob) in opened}) == 49  # the nonces, all different
    for n, (_, blob) in opened:
        assert second.unwrap("vk-2", blob, contexts[n]).reveal() == keys[n].reveal()
        with pytest.raises(DecryptionError):
            second.unwrap("vk-2", blob, contexts[(n + 1) % 50])


def test_the_ring_never_shows_or_pickles_a_key() -> None:
    canary = b"tkv-canary-vault-key-0123456789!"
    ring = KeyRing({"vk-1": SecretBytes(canary)}, "vk-1")
    assert repr(ring) == "KeyRing(ids=['vk-1'], primary='vk-1')"
    assert canary.hex() not in repr(ring.__dict__.keys())
    with pytest.raises(TypeError):
        pickle.dumps(ring)
    with pytest.raises(TypeError):
        ring.wrap(canary, CONTEXT)  # type: ignore[arg-type]


class _SpyAead:
    """Counts decryptions: a wrap whose commitment or binding is wrong must never get one."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0

    def decrypt(self, *args: Any) -> bytes:
        self.calls += 1
        result: bytes = self.real.decrypt(*args)
        return result

    def encrypt(self, *args: Any) -> bytes:
        result: bytes = self.real.encrypt(*args)
        return result


def test_commitment_and_binding_are_checked_before_decrypting(
    wrapped: tuple[KeyRing, bytes, bytes],
) -> None:
    ring, blob, key = wrapped
    spy = _SpyAead(ring._wrappers["vk-1"].aead)
    ring._wrappers["vk-1"].aead = spy
    assert ring.unwrap("vk-1", blob, CONTEXT).reveal() == key and spy.calls == 1
    for at in [*range(1, 33), *range(45, 77)]:  # the binding, then the commitment
        changed = blob[:at] + bytes([blob[at] ^ 0x80]) + blob[at + 1 :]
        with pytest.raises(DecryptionError):
            ring.unwrap("vk-1", changed, CONTEXT)
    with pytest.raises(DecryptionError):
        ring.unwrap("vk-1", blob, (*CONTEXT, "moved"))
    assert spy.calls == 1
