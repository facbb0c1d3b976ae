"""Sealing: a config's secret half sealed under the vault key ring, and a stored
version's config put together again (`crypto.seal_config`, `crypto.open_config`).

The ring is reloaded when the store names a vault key it lacks (`ring_for`): the one way
every process learns of a rotation made by another. Decrypted values are registered for
redaction before anything else sees them (`logs.register_secrets`).

May import: crypto, schema, logs, errors, store (version records).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, RecordContext, SealedConfig, SecretBytes
from toolkit_vault.errors import ConfigInvalid, DecryptionError, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.store.records import VersionRecord

__all__ = ["Sealing"]

log = logging.getLogger(__name__)


class Sealing:
    """The vault key ring and the fingerprint key, and what is sealed or opened with them."""

    def __init__(
        self,
        ring: KeyRing,
        fingerprint_key: SecretBytes,
        reload_keys: Callable[[KeyRing], KeyRing] | None = None,
    ) -> None:
        self.ring = ring
        self.fingerprint_key = fingerprint_key
        self._reload_keys = reload_keys
        self._lock = threading.Lock()

    def ring_for(self, *key_ids: str, strict: bool = False) -> KeyRing:
        """The key ring, reloaded first when the store names a vault key it lacks: the one
        way every process learns of a rotation made by another (decrypt, configure and
        `check` all ask here). A reload that cannot reach the key provider keeps the ring
        as it is (a version under the new key then fails alone), unless `strict`."""
        if all(key_id in self.ring for key_id in key_ids) or self._reload_keys is None:
            return self.ring
        with self._lock:
            if not all(key_id in self.ring for key_id in key_ids):
                try:
                    self.ring = self._reload_keys(self.ring)
                except VaultError as exc:
                    if strict:
                        raise
                    log.warning("key ring not reloaded: %s", exc.message)
        return self.ring

    def decrypt(self, record: VersionRecord) -> dict[str, Any]:
        """A stored version's whole config; raises the opaque DecryptionError."""
        context, sealed = record.sealed()
        secrets = crypto.open_config(self.ring_for(sealed.kek_id), context, sealed)
        register_secrets(v.reveal() for v in secrets.values())
        from toolkit_vault.schema import merge_secrets  # not at `audit verify`'s start

        try:
            return merge_secrets(record.public_config, {p: v.reveal() for p, v in secrets.items()})
        except ConfigInvalid:  # the public half was edited: the version cannot be put together
            raise DecryptionError from None

    def seal(
        self,
        scope_id: str,
        toolkit_name: str,
        version: int,
        digest: str,
        public: dict[str, Any],
        secrets: dict[str, Any],
        primary_kek: str,
    ) -> SealedConfig:
        """Seal a version's secret fields for (scope, toolkit, version), under the store's
        primary vault key (`primary_kek`, learnt in the write transaction)."""
        self.ring_for(primary_kek)
        bound = crypto.public_digest(public)
        return self.seal_bound(scope_id, toolkit_name, version, digest, bound, secrets)

    def seal_bound(
        self,
        scope_id: str,
        toolkit_name: str,
        version: int,
        digest: str,
        public_digest: str,
        secrets: dict[str, Any],
    ) -> SealedConfig:
        """Seal under the ring's primary key, bound to a public half's digest."""
        context = RecordContext(scope_id, toolkit_name, version, digest, public_digest)
        return crypto.seal_config(self.ring, self.fingerprint_key, context, secrets)
