"""What the store takes and gives back: drafts to append and versions as stored.

Kept apart from `storage` so the store's transactions read alone; these are plain values
(ciphertext as base64 text, wrapped keys as bytes), and never a key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault.canonical import parse_json
from toolkit_vault.crypto import RecordContext, SealedConfig, public_digest
from toolkit_vault.errors import DecryptionError, StoreError
from toolkit_vault.store.actions import AuditAction

__all__ = [
    "DETAILS_MAX_BYTES",
    "AuditDraft",
    "VersionDraft",
    "VersionRecord",
    "as_bytes",
    "bounded_details",
    "version_record",
]

DETAILS_MAX_BYTES = 16384  # an event's details as stored (ASCII JSON): the field callers size
LIST_MAX = 32  # items a list of an event's details keeps, the last a marker, once cut
TEXT_MAX = 200  # characters a string (or a key) of an event's details keeps, once cut
# Details the chain's state is read from (`ledger.ChainState`, `reconcile`): never cut.
STATE_KEYS = frozenset(
    {"status", "digest", "schema_digest", "name", "values", "principal_id", "role"}
    | {"expires_at", "key_id", "kek_id", "allowed_toolkits", "allowed_tools"}
)


@dataclass(frozen=True)
class AuditDraft:
    actor: str
    action: AuditAction
    session_id: str | None = None
    toolkit_name: str | None = None
    version: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, repr=False)
class VersionDraft:
    """A version to append; `sealed_secrets` maps pointer -> base64 envelope."""

    status: str
    message: str | None
    actor: str
    schema_digest: str
    public_config: dict[str, Any]
    secret_fingerprints: dict[str, str]
    sealed_secrets: dict[str, str] | None
    dek_id: str | None
    kek_id: str | None
    wrapped_dek: bytes | None

    @classmethod
    def of(
        cls,
        status: str,
        message: str | None,
        actor: str,
        schema_digest: str,
        public_config: dict[str, Any],
        sealed: SealedConfig,
        *,
        keep_ciphertext: bool = True,
    ) -> VersionDraft:
        """A draft from a sealed config; without ciphertext, only its fingerprints are kept."""
        envelopes = {p: base64.b64encode(e).decode() for p, e in sealed.envelopes.items()}
        keep = keep_ciphertext
        return cls(
            status,
            message,
            actor,
            schema_digest,
            public_config,
            sealed.fingerprints,
            envelopes if keep else None,
            sealed.dek_id if keep else None,
            sealed.kek_id if keep else None,
            sealed.wrapped_dek if keep else None,
        )

    def columns(
        self, session_id: str, toolkit_name: str, version: int, created_at: float
    ) -> dict[str, Any]:
        """The `config_versions` row this draft becomes."""
        return {
            "session_id": session_id,
            "toolkit_name": toolkit_name,
            "version": version,
            "status": self.status,
            "message": self.message,
            "actor": self.actor,
            "created_at": created_at,
            "schema_digest": self.schema_digest,
            "public_config": json.dumps(self.public_config),
            "secret_fingerprints": json.dumps(self.secret_fingerprints),
            "sealed_secrets": None
            if self.sealed_secrets is None
            else json.dumps(self.sealed_secrets),
            "dek_id": self.dek_id,
            "kek_id": self.kek_id,
            "wrapped_dek": self.wrapped_dek,
        }


@dataclass(frozen=True, repr=False)
class VersionRecord:
    session_id: str
    toolkit_name: str
    version: int
    status: str
    schema_digest: str
    public_config: dict[str, Any]
    sealed_secrets: dict[str, str] | None
    dek_id: str | None
    kek_id: str | None
    wrapped_dek: bytes | None
    damaged: bool = False  # a column no longer holds what the vault writes: edited by hand
    authentic: bool = True  # False: the row or its pointer failed `integrity` (see Store)

    def sealed(self) -> tuple[RecordContext, SealedConfig]:
        """The version's crypto context and sealed half, as `crypto.open_config` takes them;
        anything that cannot be read back as stored is the opaque `DecryptionError`. A
        version is only ever opened whole: one without a wrapped key has nothing to give."""
        if (
            self.damaged
            or not self.authentic
            or self.wrapped_dek is None
            or not isinstance(self.kek_id, str)
            or not isinstance(self.dek_id, str)
        ):
            raise DecryptionError
        try:
            envelopes = {  # `base64.b64decode(v, validate=True)` without its wrapper
                p: binascii.a2b_base64(v, strict_mode=True)
                for p, v in (self.sealed_secrets or {}).items()
            }
            bound = public_digest(self.public_config)
        except (ValueError, TypeError):
            raise DecryptionError from None
        fields = (self.session_id, self.toolkit_name, self.version, self.schema_digest)
        context = RecordContext(*fields, bound)
        return context, SealedConfig(self.dek_id, self.kek_id, self.wrapped_dek, envelopes, {})


def version_record(row: Any, *, authentic: bool = True) -> VersionRecord:
    """One version as stored. A row holding what the vault never writes (text where bytes
    belong, JSON that is not an object) is marked damaged, so it fails alone, at decryption,
    instead of raising for everyone who reads past it."""
    public, sealed = _json_object(row["public_config"]), _json_object(row["sealed_secrets"])
    wrapped = as_bytes(row["wrapped_dek"])
    return VersionRecord(
        session_id=row["session_id"],
        toolkit_name=row["toolkit_name"],
        version=row["version"],
        status=row["status"],
        schema_digest=row["schema_digest"],
        public_config=public or {},
        sealed_secrets=sealed,
        dek_id=row["dek_id"],
        kek_id=row["kek_id"],
        wrapped_dek=wrapped,
        damaged=public is None
        or (sealed is None and row["sealed_secrets"] is not None)
        or (wrapped is None and row["wrapped_dek"] is not None)
        or not isinstance(row["version"], int)
        or not isinstance(row["schema_digest"], str),
        authentic=authentic,
    )


def as_bytes(value: Any) -> bytes | None:
    """A BLOB column's value as bytes; None for NULL and for anything else SQLite was given."""
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None


def _json_object(text: Any) -> dict[str, Any] | None:
    try:
        value = parse_json(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def bounded_details(details: Mapping[str, Any]) -> str:
    """An event's details as the chain stores them: JSON of at most `DETAILS_MAX_BYTES`.

    An agent sizes some of them (a config's field names in `changed`, a refusal's
    `errors`, a credential check's message), and every event is signed, stored, sent to
    each audit device and exported: an unbounded one stalls all of them. Details that fit
    are kept as they are. Else every detail but those the chain's state is read from
    (`STATE_KEYS`) is cut, the same way each time and marked: a string or key past
    `TEXT_MAX` characters keeps its start and ends in "...", a list past `LIST_MAX` items
    keeps its first ones and ends in "...N more" (a top-level list's full length in
    `<key>_count`); the version stored still holds every field name. Details still too
    long (state an operator made that big) refuse the write: StoreError, nothing stored."""
    text = json.dumps(details)
    if len(text) <= DETAILS_MAX_BYTES:
        return text
    cut: dict[str, Any] = {}
    for key, value in details.items():
        if key in STATE_KEYS:
            cut[key] = value
            continue
        cut[_cut(str(key))] = _cut(value)
        if isinstance(value, list | tuple) and len(value) > LIST_MAX:
            cut[f"{_cut(str(key))}_count"] = len(value)
    shorter = json.dumps(cut)
    if len(shorter) > DETAILS_MAX_BYTES:
        raise StoreError(
            f"this write's audit event would hold {len(shorter)} bytes of details, more than "
            f"the {DETAILS_MAX_BYTES} an event may: nothing was written"
        )
    return shorter


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TEXT_MAX else value[: TEXT_MAX - 3] + "..."
    if isinstance(value, list | tuple):
        items = [_cut(item) for item in value[:LIST_MAX]]
        if len(value) > LIST_MAX:
            items[-1] = f"...{len(value) - LIST_MAX + 1} more"
        return items
    if isinstance(value, Mapping):
        return {_cut(str(key)): _cut(item) for key, item in value.items()}
    return value
