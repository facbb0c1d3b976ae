"""A conformance test mixin that every key provider runs against itself.

    from toolkit_vault.keys.providers.testing import ProviderConformance

    class TestMyProvider(ProviderConformance):
        def make_provider(self) -> KeyProvider: ...     # holds a current master key
        def make_unreachable(self) -> KeyProvider: ...  # same kind, its medium out of reach

Like keyring's backend test suite: what the vault assumes of a provider, as tests. Plain
asserts and no pytest import, so a third-party provider can run it under any runner.
Every provider made by one test must reach the same master keys (the same medium).
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from toolkit_vault.crypto import SecretBytes, new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.providers.base import (
    Context,
    KeyProvider,
    ProviderError,
    blob_header,
    unpack_blob,
)

__all__ = ["CANARY", "CONTEXT", "ProviderConformance"]

CANARY = b"tkv-canary-vault-key-32-bytes-!!"
CONTEXT: Context = (1, "vault-key", "vk-0001", 7)
_WRONG_CONTEXTS: list[Context] = [
    (1, "vault-key", "vk-0001", 8),
    (1, "vault-key", "vk-0002", 7),
    (1, "vault-key", "vk-0001"),
    (1, "vault-key", "vk-0001", 7, ""),
    (7, "vk-0001", "vault-key", 1),
    (1, "vault-keyvk-0001", "", 7),
    (2, "vault-key", "vk-0001", 7),
]


def _canary_forms() -> list[str]:
    return [
        CANARY.decode(),
        CANARY.hex(),
        base64.b64encode(CANARY).decode(),
        repr(CANARY),
        CANARY[:16].hex(),
    ]


def assert_no_canary(text: str) -> None:
    for form in _canary_forms():
        assert form not in text, "key material shows in a message, repr or log line"


def _refused(action: Callable[[], Any]) -> BaseException:
    try:
        action()
    except (DecryptionError, ProviderError) as exc:
        return exc
    raise AssertionError("a blob that must not open was unwrapped")


def assert_opaque(action: Callable[[], Any]) -> None:
    """The one opaque error, with nothing chained that a traceback could print."""
    exc = _refused(action)
    assert type(exc) is DecryptionError, f"expected DecryptionError, got {exc!r}"
    assert str(exc) == "decryption failed"
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


def assert_names_provider(exc: BaseException, provider: str) -> None:
    assert isinstance(exc, ProviderError), f"expected ProviderError, got {exc!r}"
    assert f"key provider {provider}" in str(exc), str(exc)
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
    assert_no_canary(str(exc))


class _Collect(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def captured_logs() -> Iterator[list[logging.LogRecord]]:
    """Every log record of every logger at DEBUG, as if an operator turned logging up."""
    handler = _Collect(logging.DEBUG)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


class ProviderConformance:
    rotates: ClassVar[bool] = True  # False: rotate() must refuse with a clear error

    def make_provider(self) -> KeyProvider:
        raise NotImplementedError

    def make_unreachable(self) -> KeyProvider:
        raise NotImplementedError

    def test_round_trip(self) -> None:
        provider, key = self.make_provider(), new_key()
        blob = provider.wrap(key, CONTEXT)
        assert isinstance(blob, bytes) and key.reveal() not in blob
        opened = provider.unwrap(blob, CONTEXT)
        assert isinstance(opened, SecretBytes) and opened.reveal() == key.reveal()

    def test_another_instance_unwraps(self) -> None:
        key = new_key()
        blob = self.make_provider().wrap(key, CONTEXT)
        assert self.make_provider().unwrap(blob, CONTEXT).reveal() == key.reveal()

    def test_blob_header_names_the_current_master_key(self) -> None:
        provider = self.make_provider()
        status = provider.status()
        assert status.provider == provider.name and status.where == provider.where
        assert status.current is not None and status.current in status.key_ids
        assert blob_header(provider.wrap(new_key(), CONTEXT))[1] == status.current

    def test_wrong_context_is_refused(self) -> None:
        provider = self.make_provider()
        blob = provider.wrap(new_key(), CONTEXT)
        for other in _WRONG_CONTEXTS:
            assert_opaque(lambda other=other: provider.unwrap(blob, other))  # type: ignore[misc]

    def test_tampered_blob_is_refused_with_one_opaque_error(self) -> None:
        provider = self.make_provider()
        blob = provider.wrap(new_key(), CONTEXT)
        header = len(blob) - len(unpack_blob(blob)[2])
        for at in range(len(blob)):
            changed = blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1 :]
            if at >= header:  # the payload: only ever the opaque error
                assert_opaque(lambda changed=changed: provider.unwrap(changed, CONTEXT))  # type: ignore[misc]
            else:  # the public header: opaque, or a clear word that the key id is unknown
                _refused(lambda changed=changed: provider.unwrap(changed, CONTEXT))  # type: ignore[misc]
        for cut in sorted({0, 1, 4, header - 1, header, header + 1, len(blob) - 1}):
            assert_opaque(lambda cut=cut: provider.unwrap(blob[:cut], CONTEXT))  # type: ignore[misc]
        assert_opaque(lambda: provider.unwrap(blob + b"\x00", CONTEXT))

    def test_unreachable_gives_a_clear_error_naming_the_provider(self) -> None:
        good = self.make_provider()
        blob = good.wrap(new_key(), CONTEXT)
        actions: list[Callable[[KeyProvider], Any]] = [
            lambda p: p.wrap(new_key(), CONTEXT),
            lambda p: p.unwrap(blob, CONTEXT),
        ]
        for action in actions:
            try:
                action(self.make_unreachable())
            except Exception as exc:
                assert_names_provider(exc, good.name)
            else:
                raise AssertionError("an unreachable provider answered")

    def test_no_key_material_in_repr_str_pickle_errors_or_logs(self) -> None:
        with captured_logs() as records:
            provider = self.make_provider()
            blob = provider.wrap(SecretBytes(CANARY), CONTEXT)
            opened = provider.unwrap(blob, CONTEXT)
            texts = [repr(provider), str(provider), repr(provider.status()), repr(opened)]
            actions: list[Callable[[], Any]] = [
                lambda: provider.unwrap(blob, (*CONTEXT, "moved")),
                lambda: provider.unwrap(blob[:-1], CONTEXT),
                lambda: self.make_unreachable().unwrap(blob, CONTEXT),
            ]
            for action in actions:
                try:
                    action()
                except Exception as exc:
                    texts += [str(exc), repr(exc)]
        assert opened.reveal() == CANARY
        texts += [record.getMessage() for record in records]
        texts += [repr(record.args) for record in records]
        for text in texts:
            assert_no_canary(text)
        for thing in (provider, opened):
            try:
                pickle.dumps(thing)
            except TypeError:
                pass
            else:
                raise AssertionError(f"{type(thing).__name__} can be pickled")

    def test_many_wraps_and_unwraps_are_consistent(self) -> None:
        provider = self.make_provider()
        pairs = [(new_key(), (*CONTEXT, index)) for index in range(40)]
        blobs = [provider.wrap(key, context) for key, context in pairs]
        assert len(set(blobs)) == len(blobs)
        again = provider.wrap(*pairs[0])
        assert again != blobs[0], "wrapping twice must not repeat a blob (fresh IV or nonce)"
        for (key, context), blob in zip([pairs[0], *pairs], [again, *blobs], strict=True):
            assert provider.unwrap(blob, context).reveal() == key.reveal()
        assert_opaque(lambda: provider.unwrap(blobs[1], pairs[0][1]))

    def test_wrap_takes_only_keys_and_contexts(self) -> None:
        provider, key = self.make_provider(), new_key()
        bad: list[tuple[Any, Any]] = [
            (key.reveal(), CONTEXT),
            (SecretBytes(bytes(16)), CONTEXT),
            (key, list(CONTEXT)),
            (key, ()),
            (key, (True,)),
            (key, (1.5,)),
        ]
        for wrapped, context in bad:
            try:
                provider.wrap(wrapped, context)
            except TypeError:
                pass
            else:
                raise AssertionError(f"wrap accepted {type(wrapped).__name__}, {context!r}")

    def test_rotation_keeps_old_blobs_readable(self) -> None:
        provider, key = self.make_provider(), new_key()
        if not self.rotates:
            try:
                provider.rotate()
            except ProviderError as exc:
                assert_names_provider(exc, provider.name)
                return
            raise AssertionError("rotate() must refuse on a medium that cannot rotate")
        old, before = provider.wrap(key, CONTEXT), provider.status()
        current = provider.rotate()
        after = provider.status()
        assert after.current == current and set(before.key_ids) <= set(after.key_ids)
        fresh = provider.wrap(key, CONTEXT)
        assert blob_header(fresh)[1] == current
        for reader in (provider, self.make_provider()):
            assert reader.unwrap(old, CONTEXT).reveal() == key.reveal()
            assert reader.unwrap(fresh, CONTEXT).reveal() == key.reveal()

    def test_create_refuses_when_a_master_key_exists(self) -> None:
        provider = self.make_provider()
        before = provider.status()
        try:
            provider.create_master_key()
        except ProviderError as exc:
            assert_names_provider(exc, provider.name)
        else:
            raise AssertionError("create_master_key() replaced or added to existing keys")
        assert provider.status() == before
