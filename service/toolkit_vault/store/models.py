"""The database schema (SQLAlchemy 2.0 models); Alembic migrations are generated from it.

Nothing here holds a plaintext secret: config versions carry the public half of a config
in clear, and the secret half only as envelopes, a wrapped data key and HMAC fingerprints.
Times are Unix epoch seconds, like the wire protocol's `ts`. Rows whose meaning matters
carry `mac` (see `integrity`): a row without a valid one is not believed.

Key ids (`kek_id` columns) name a vault key (`vk-N`, `vault_keys`); before the key
hierarchy (schema 0003) they named a master key directly (`kek-N`, `master_keys`), and
`init` moves such rows to a vault key (`keyupgrade`).

Tables are SQLAlchemy Core tables, not ORM mappings: the store only ever executes
statements on a `Connection` and never loads objects, and the ORM (`sqlalchemy.orm` and the
mapping of these classes) was about a fifth of every CLI command's start (issue 53). Each
class names one table and keeps the spelling the ORM gave it: its columns as attributes
(`PrincipalRow.name`), its `Table` as `__table__`, and the class itself where SQLAlchemy
takes a table (`select(AuditEvent)`, `insert(PrincipalRow)`). A column is NOT NULL unless
it says `nullable=True`, as `Mapped[...]` without `None` said.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.sql.elements import KeyedColumnElement

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


# What a column read from a table class is to a type checker. SQLAlchemy 2.1 types a
# `Column` read from a class as `Never` (it would have `table.c.name`); as a keyed column
# element it compares, orders and selects with its Python type, as the ORM's attribute did.
ColumnOf = KeyedColumnElement


class Base:
    """One table: a subclass declares `__tablename__`, its columns as attributes (named by
    the attribute) and `__table_args__`; the `Table` is made in `metadata` as it is defined."""

    metadata: ClassVar[MetaData] = MetaData(naming_convention=NAMING)
    __tablename__: ClassVar[str]
    __table__: ClassVar[Table]
    __table_args__: ClassVar[tuple[Any, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        columns = [value for value in vars(cls).values() if isinstance(value, Column)]
        for key, column in vars(cls).items():
            if isinstance(column, Column):
                column.name = column.key = key
        cls.__table__ = Table(cls.__tablename__, cls.metadata, *columns, *cls.__table_args__)

    @classmethod
    def __clause_element__(cls) -> Table:
        """What SQLAlchemy uses where the class stands for its table."""
        return cls.__table__


# A chain position or a version row's id: 64-bit on PostgreSQL (a busy vault passes 2**31
# events in weeks); SQLite's INTEGER is 64-bit, and only INTEGER PRIMARY KEY is its rowid.
_BIG = BigInteger().with_variant(Integer(), "sqlite")


def _mac() -> ColumnOf[bytes]:
    """`integrity.RowAuthenticator`'s MAC; NULL only until an upgraded vault backfills it."""
    return Column(LargeBinary(32), nullable=True)


class VaultKey(Base):
    """A vault key: the middle of the key hierarchy, stored only wrapped by the key
    provider's master key (the blob's public header names that master key). One is active:
    new data keys are wrapped under it. Retired keys keep their record, not their key."""

    __tablename__ = "vault_keys"
    key_id: ColumnOf[str] = Column(String(64), primary_key=True)
    wrapped_key: ColumnOf[bytes] = Column(LargeBinary, nullable=True)
    is_active: ColumnOf[bool] = Column(Boolean, default=False, nullable=False)
    created_at: ColumnOf[float] = Column(Float, nullable=False)
    retired_at: ColumnOf[float] = Column(Float, nullable=True)
    mac: ColumnOf[bytes] = _mac()


class MasterKey(Base):
    """A master key (KEK) of a vault made before the key hierarchy, when it wrapped data
    keys itself: its id and key check value, never the key. Read by the upgrade that moves
    its data keys to a vault key; nothing writes here any more."""

    __tablename__ = "master_keys"
    kek_id: ColumnOf[str] = Column(String(64), primary_key=True)
    check_value: ColumnOf[bytes] = Column(LargeBinary(16), nullable=False)
    is_primary: ColumnOf[bool] = Column(Boolean, default=False, nullable=False)
    created_at: ColumnOf[float] = Column(Float, nullable=False)
    retired_at: ColumnOf[float] = Column(Float, nullable=True)
    mac: ColumnOf[bytes] = _mac()


class InternalKey(Base):
    """Vault-wide keys (fingerprint, audit, state) stored wrapped by a vault key (`kek_id`),
    rewrapped with the data keys when the vault key rotates; their values never change."""

    __tablename__ = "internal_keys"
    name: ColumnOf[str] = Column(String(32), primary_key=True)
    kek_id: ColumnOf[str] = Column(String(64), nullable=False)
    wrapped_key: ColumnOf[bytes] = Column(LargeBinary, nullable=False)


class RecoveryKey(Base):
    """A vault key wrapped by the recovery key of `keys recovery init`, whose only copies
    are the shares people hold: the way back to the vault keys when the master key is
    lost. The wrap is bound to its vault key id and share set (`keys.recovery`)."""

    __tablename__ = "recovery_keys"
    key_id: ColumnOf[str] = Column(String(64), primary_key=True)
    set_id: ColumnOf[str] = Column(String(64), nullable=False)
    wrapped_key: ColumnOf[bytes] = Column(LargeBinary, nullable=False)
    created_at: ColumnOf[float] = Column(Float, nullable=False)


class PrincipalRow(Base):
    """Who acts: an agent, operator or auditor; tokens are stored hashed."""

    __tablename__ = "principals"
    principal_id: ColumnOf[str] = Column(String(64), primary_key=True)
    name: ColumnOf[str] = Column(String(200), unique=True, nullable=False)
    role: ColumnOf[str] = Column(String(16), nullable=False)
    token_hash: ColumnOf[str] = Column(String(128), unique=True, nullable=True)
    created_at: ColumnOf[float] = Column(Float, nullable=False)
    revoked_at: ColumnOf[float] = Column(Float, nullable=True)
    expires_at: ColumnOf[float] = Column(Float, nullable=True)  # None: never
    mac: ColumnOf[bytes] = _mac()


class SessionRow(Base):
    """An A2E session, owned by exactly one principal."""

    __tablename__ = "sessions"
    session_id: ColumnOf[str] = Column(String(64), primary_key=True)
    principal_id: ColumnOf[str] = Column(
        ForeignKey("principals.principal_id"), index=True, nullable=False
    )
    created_at: ColumnOf[float] = Column(Float, nullable=False)
    mac: ColumnOf[bytes] = _mac()


class ConfigVersion(Base):
    """One append-only config version of a (session, toolkit)."""

    __tablename__ = "config_versions"
    __table_args__ = (UniqueConstraint("session_id", "toolkit_name", "version"),)
    id: ColumnOf[int] = Column(_BIG, primary_key=True, autoincrement=True)
    session_id: ColumnOf[str] = Column(ForeignKey("sessions.session_id"), nullable=False)
    toolkit_name: ColumnOf[str] = Column(String(200), nullable=False)
    version: ColumnOf[int] = Column(Integer, nullable=False)
    status: ColumnOf[str] = Column(String(16), nullable=False)
    message: ColumnOf[str] = Column(Text, nullable=True)
    actor: ColumnOf[str] = Column(String(64), nullable=False)
    created_at: ColumnOf[float] = Column(Float, nullable=False)
    schema_digest: ColumnOf[str] = Column(String(80), nullable=False)
    public_config: ColumnOf[str] = Column(Text, nullable=False)
    secret_fingerprints: ColumnOf[str] = Column(Text, nullable=False)
    sealed_secrets: ColumnOf[str] = Column(Text, nullable=True)
    dek_id: ColumnOf[str] = Column(String(64), nullable=True)
    kek_id: ColumnOf[str] = Column(String(64), nullable=True, index=True)
    wrapped_dek: ColumnOf[bytes] = Column(LargeBinary, nullable=True)
    mac: ColumnOf[bytes] = _mac()


class CurrentConfig(Base):
    """The current version pointer of a (session, toolkit); moved by compare-and-set."""

    __tablename__ = "current_configs"
    session_id: ColumnOf[str] = Column(ForeignKey("sessions.session_id"), primary_key=True)
    toolkit_name: ColumnOf[str] = Column(String(200), primary_key=True)
    version: ColumnOf[int] = Column(Integer, nullable=False)
    updated_at: ColumnOf[float] = Column(Float, nullable=False)
    mac: ColumnOf[bytes] = _mac()


class ImportedToolkitRow(Base):
    """A toolkit definition imported from public MCP metadata (`toolkits import`); no value."""

    __tablename__ = "imported_toolkits"
    name: ColumnOf[str] = Column(String(200), primary_key=True)
    definition: ColumnOf[str] = Column(Text, nullable=False)
    package_digest: ColumnOf[str] = Column(String(80), nullable=False)
    strategy: ColumnOf[str] = Column(String(32), nullable=False)
    format: ColumnOf[str] = Column(String(32), nullable=False)
    imported_at: ColumnOf[float] = Column(Float, nullable=False)
    actor: ColumnOf[str] = Column(String(64), nullable=False)
    mac: ColumnOf[bytes] = _mac()


class AuditEvent(Base):
    """A link of the audit chain: `mac` = HMAC(audit key, previous mac || this event)."""

    __tablename__ = "audit_events"
    seq: ColumnOf[int] = Column(_BIG, primary_key=True, autoincrement=False)
    ts: ColumnOf[float] = Column(Float, nullable=False)
    actor: ColumnOf[str] = Column(String(64), nullable=False)
    action: ColumnOf[str] = Column(String(32), nullable=False)
    session_id: ColumnOf[str] = Column(String(64), nullable=True)
    toolkit_name: ColumnOf[str] = Column(String(200), nullable=True)
    version: ColumnOf[int] = Column(Integer, nullable=True)
    details: ColumnOf[str] = Column(Text, nullable=False)
    mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)


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
    id: ColumnOf[int] = Column(Integer, primary_key=True, autoincrement=False)
    seq: ColumnOf[int] = Column(_BIG, nullable=False)
    mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)
    head_mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)


class CallRecordRow(Base):
    """A link of one process's call chain (`call_chains`): `mac` = HMAC(audit key, previous
    mac || this record, naming its chain). `id` is where it was written among all records,
    the order listings page in; (`chain`, `seq`) is its place in its own chain."""

    __tablename__ = "call_records"
    id: ColumnOf[int] = Column(_BIG, primary_key=True, autoincrement=True)
    chain: ColumnOf[str] = Column(String(64), nullable=False)
    seq: ColumnOf[int] = Column(_BIG, nullable=False)
    ts: ColumnOf[float] = Column(Float, nullable=False)
    actor: ColumnOf[str] = Column(String(64), nullable=False)
    action: ColumnOf[str] = Column(String(32), nullable=False)
    session_id: ColumnOf[str] = Column(String(64), nullable=True)
    toolkit_name: ColumnOf[str] = Column(String(200), nullable=True)
    version: ColumnOf[int] = Column(Integer, nullable=True)
    details: ColumnOf[str] = Column(Text, nullable=False)
    mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)
    __table_args__ = (UniqueConstraint("chain", "seq"),)


class CallChainHead(Base):
    """A call chain's authenticated end, moved with each of its batches: `head_mac` =
    HMAC(audit key, call head domain || chain || seq || mac). The main chain's anchors
    (`calls_anchored` events) vouch for it up to their seq; this row for the rest."""

    __tablename__ = "call_chains"
    chain: ColumnOf[str] = Column(String(64), primary_key=True)
    started_at: ColumnOf[float] = Column(Float, nullable=False)
    seq: ColumnOf[int] = Column(_BIG, nullable=False)
    mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)
    head_mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)


class RefreshLease(Base):
    """Who asks an OAuth server for a (scope, toolkit)'s next token set, until when, and how
    its last tries went (`leases`). Taken by compare-and-set, so one process of all asks
    while the others wait for the version it appends; held outside any write transaction.
    No MAC: a database writer can only make a refresh wait, back off or happen twice."""

    __tablename__ = "refresh_leases"
    session_id: ColumnOf[str] = Column(String(64), primary_key=True)
    toolkit_name: ColumnOf[str] = Column(String(200), primary_key=True)
    version: ColumnOf[int] = Column(Integer, nullable=False)  # the version the holder read
    holder: ColumnOf[str] = Column(String(64), nullable=True)
    expires_at: ColumnOf[float] = Column(
        Float, nullable=False
    )  # the lease's end (a killed holder's)
    failures: ColumnOf[int] = Column(Integer, nullable=False)  # consecutive tries the server failed
    retry_at: ColumnOf[float] = Column(Float, nullable=False)  # no try before (backing off)


class AuditCheckpoint(Base):
    """The state the chain makes at event `seq` (`checkpoints`), so a process can follow
    the chain from there instead of from its first event. `mac` is the chain's link at
    `seq`; `checkpoint_mac` = HMAC(audit key, checkpoint domain || seq || mac || SHA-256 of
    `state`); the home's checkpoint record names the newest one by seq and digest."""

    __tablename__ = "audit_checkpoints"
    seq: ColumnOf[int] = Column(_BIG, primary_key=True, autoincrement=False)
    mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)
    state: ColumnOf[bytes] = Column(LargeBinary, nullable=False)
    checkpoint_mac: ColumnOf[bytes] = Column(LargeBinary(32), nullable=False)
    created_at: ColumnOf[float] = Column(Float, nullable=False)
