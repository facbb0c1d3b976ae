"""The database schema (SQLAlchemy 2.0 models); Alembic migrations are generated from it.

Nothing here holds a plaintext secret: config versions carry the public half of a config
in clear, and the secret half only as envelopes, a wrapped data key and HMAC fingerprints.
Times are Unix epoch seconds, like the wire protocol's `ts`. Rows whose meaning matters
carry `mac` (see `integrity`): a row without a valid one is not believed.

Key ids (`kek_id` columns) name a vault key (`vk-N`, `vault_keys`); before the key
hierarchy (schema 0003) they named a master key directly (`kek-N`, `master_keys`), and
`init` moves such rows to a vault key (`keyupgrade`).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from toolkit_vault.versions import SCHEMA_REVISION

__all__ = [
    "SCHEMA_REVISION",
    "AuditCheckpoint",
    "AuditEvent",
    "AuditHead",
    "Base",
    "CallChainHead",
    "CallRecordRow",
    "ConfigVersion",
    "CurrentConfig",
    "ImportedToolkitRow",
    "InternalKey",
    "MasterKey",
    "PrincipalRow",
    "RecoveryKey",
    "RefreshLease",
    "SessionRow",
    "VaultKey",
]


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


# A chain position or a version row's id: 64-bit on PostgreSQL (a busy vault passes 2**31
# events in weeks); SQLite's INTEGER is 64-bit, and only INTEGER PRIMARY KEY is its rowid.
_BIG = BigInteger().with_variant(Integer(), "sqlite")


def _mac() -> Mapped[bytes | None]:
    """`integrity.RowAuthenticator`'s MAC; NULL only until an upgraded vault backfills it."""
    return mapped_column(LargeBinary(32), nullable=True)


class VaultKey(Base):
    """A vault key: the middle of the key hierarchy, stored only wrapped by the key
    provider's master key (the blob's public header names that master key). One is active:
    new data keys are wrapped under it. Retired keys keep their record, not their key."""

    __tablename__ = "vault_keys"
    key_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    wrapped_key: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    is_active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    retired_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    mac: Mapped[bytes | None] = _mac()


class MasterKey(Base):
    """A master key (KEK) of a vault made before the key hierarchy, when it wrapped data
    keys itself: its id and key check value, never the key. Read by the upgrade that moves
    its data keys to a vault key; nothing writes here any more."""

    __tablename__ = "master_keys"
    kek_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    check_value: Mapped[bytes] = mapped_column(LargeBinary(16))
    is_primary: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    retired_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    mac: Mapped[bytes | None] = _mac()


class InternalKey(Base):
    """Vault-wide keys (fingerprint, audit, state) stored wrapped by a vault key (`kek_id`),
    rewrapped with the data keys when the vault key rotates; their values never change."""

    __tablename__ = "internal_keys"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    kek_id: Mapped[str] = mapped_column(String(64))
    wrapped_key: Mapped[bytes] = mapped_column(LargeBinary)


class RecoveryKey(Base):
    """A vault key wrapped by the recovery key of `keys recovery init`, whose only copies
    are the shares people hold: the way back to the vault keys when the master key is
    lost. The wrap is bound to its vault key id and share set (`keys.recovery`)."""

    __tablename__ = "recovery_keys"
    key_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    set_id: Mapped[str] = mapped_column(String(64))
    wrapped_key: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)


class PrincipalRow(Base):
    """Who acts: an agent, operator or auditor; tokens are stored hashed."""

    __tablename__ = "principals"
    principal_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str | None] = mapped_column(String(128), unique=True, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: never
    mac: Mapped[bytes | None] = _mac()


class SessionRow(Base):
    """An A2E session, owned by exactly one principal."""

    __tablename__ = "sessions"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal_id: Mapped[str] = mapped_column(ForeignKey("principals.principal_id"), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    mac: Mapped[bytes | None] = _mac()


class ConfigVersion(Base):
    """One append-only config version of a (session, toolkit)."""

    __tablename__ = "config_versions"
    __table_args__ = (UniqueConstraint("session_id", "toolkit_name", "version"),)
    id: Mapped[int] = mapped_column(_BIG, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.session_id"))
    toolkit_name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    actor: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    schema_digest: Mapped[str] = mapped_column(String(80))
    public_config: Mapped[str] = mapped_column(Text)
    secret_fingerprints: Mapped[str] = mapped_column(Text)
    sealed_secrets: Mapped[str | None] = mapped_column(Text, nullable=True)
    dek_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    kek_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    wrapped_dek: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    mac: Mapped[bytes | None] = _mac()


class CurrentConfig(Base):
    """The current version pointer of a (session, toolkit); moved by compare-and-set."""

    __tablename__ = "current_configs"
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.session_id"), primary_key=True)
    toolkit_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)
    mac: Mapped[bytes | None] = _mac()


class ImportedToolkitRow(Base):
    """A toolkit definition imported from public MCP metadata (`toolkits import`); no value."""

    __tablename__ = "imported_toolkits"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    definition: Mapped[str] = mapped_column(Text)
    package_digest: Mapped[str] = mapped_column(String(80))
    strategy: Mapped[str] = mapped_column(String(32))
    format: Mapped[str] = mapped_column(String(32))
    imported_at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    mac: Mapped[bytes | None] = _mac()


class AuditEvent(Base):
    """A link of the audit chain: `mac` = HMAC(audit key, previous mac || this event)."""

    __tablename__ = "audit_events"
    seq: Mapped[int] = mapped_column(_BIG, primary_key=True, autoincrement=False)
    ts: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    toolkit_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    details: Mapped[str] = mapped_column(Text)
    mac: Mapped[bytes] = mapped_column(LargeBinary(32))


Index(  # a version's configure event, in one lookup (`audit verify` joins on it)
    "ix_audit_events_session", AuditEvent.session_id, AuditEvent.toolkit_name, AuditEvent.version
)
Index("ix_audit_events_action", AuditEvent.action, AuditEvent.seq)  # one kind of event, in order


class AuditHead(Base):
    """The chain's authenticated end (one row, id 1), written with every event.

    `head_mac` = HMAC(audit key, head domain || seq || mac): without it, deleting the last
    events would leave a shorter chain that still verifies.
    """

    __tablename__ = "audit_head"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(_BIG)
    mac: Mapped[bytes] = mapped_column(LargeBinary(32))
    head_mac: Mapped[bytes] = mapped_column(LargeBinary(32))


class CallRecordRow(Base):
    """A link of one process's call chain (`call_chains`): `mac` = HMAC(audit key, previous
    mac || this record, naming its chain). `id` is where it was written among all records,
    the order listings page in; (`chain`, `seq`) is its place in its own chain."""

    __tablename__ = "call_records"
    id: Mapped[int] = mapped_column(_BIG, primary_key=True, autoincrement=True)
    chain: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(_BIG)
    ts: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    toolkit_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    details: Mapped[str] = mapped_column(Text)
    mac: Mapped[bytes] = mapped_column(LargeBinary(32))
    __table_args__ = (UniqueConstraint("chain", "seq"),)


class CallChainHead(Base):
    """A call chain's authenticated end, moved with each of its batches: `head_mac` =
    HMAC(audit key, call head domain || chain || seq || mac). The main chain's anchors
    (`calls_anchored` events) vouch for it up to their seq; this row for the rest."""

    __tablename__ = "call_chains"
    chain: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[float] = mapped_column(Float)
    seq: Mapped[int] = mapped_column(_BIG)
    mac: Mapped[bytes] = mapped_column(LargeBinary(32))
    head_mac: Mapped[bytes] = mapped_column(LargeBinary(32))


class RefreshLease(Base):
    """Who asks an OAuth server for a (scope, toolkit)'s next token set, until when, and how
    its last tries went (`leases`). Taken by compare-and-set, so one process of all asks
    while the others wait for the version it appends; held outside any write transaction.
    No MAC: a database writer can only make a refresh wait, back off or happen twice."""

    __tablename__ = "refresh_leases"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    toolkit_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)  # the version the holder read
    holder: Mapped[str | None] = mapped_column(String(64), nullable=True)
    expires_at: Mapped[float] = mapped_column(Float)  # the lease's end (a killed holder's)
    failures: Mapped[int] = mapped_column(Integer)  # consecutive tries the server failed
    retry_at: Mapped[float] = mapped_column(Float)  # no try before (backing off)


class AuditCheckpoint(Base):
    """The state the chain makes at event `seq` (`checkpoints`), so a process can follow
    the chain from there instead of from its first event. `mac` is the chain's link at
    `seq`; `checkpoint_mac` = HMAC(audit key, checkpoint domain || seq || mac || SHA-256 of
    `state`); the home's checkpoint record names the newest one by seq and digest."""

    __tablename__ = "audit_checkpoints"
    seq: Mapped[int] = mapped_column(_BIG, primary_key=True, autoincrement=False)
    mac: Mapped[bytes] = mapped_column(LargeBinary(32))
    state: Mapped[bytes] = mapped_column(LargeBinary)
    checkpoint_mac: Mapped[bytes] = mapped_column(LargeBinary(32))
    created_at: Mapped[float] = mapped_column(Float)
