"""Data keys as stored: each config version's wrapped DEK, read in batches and moved by
compare-and-set, and every version read back for `check`.

A rotation or an upgrade reads a batch (the row id, the vault key id and the wrapped key:
the wrap carries its record's binding, so the row is not parsed), rewraps it in memory
(`keys`: the crypto is never here) and writes it back with `move_data_keys`, each row only
if it still holds the key id and wrapped key it was read with. Batches are keyset
paginated, so memory stays flat at any size.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, select

from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.models import ConfigVersion
from toolkit_vault.store.records import VersionRecord, version_record
from toolkit_vault.store.storage import Store

__all__ = [
    "DataKey",
    "Rewrap",
    "ScannedVersion",
    "VersionName",
    "count_versions",
    "data_key_batches",
    "move_data_keys",
    "move_data_keys_rolled_back",
    "not_under",
    "scan_versions",
    "version_batches",
    "version_name",
    "version_rows",
    "write_rewraps",
]

DataKey = tuple[int, str, bytes]  # row id, vault key id, wrapped key
Rewrap = tuple[int, str, bytes, str, bytes]  # row id, old key, old wrapped, new key, new wrapped


def not_under(active: str) -> ColumnElement[bool]:
    """Versions holding a data key wrapped under another key than `active`."""
    return ConfigVersion.kek_id.is_not(None) & (ConfigVersion.kek_id != active)


def version_batches(
    store: Store, where: Any, batch_size: int, columns: tuple[Any, ...] = (ConfigVersion,)
) -> Iterator[list[Any]]:
    """Keyset-paginated batches of versions (whole rows, or `columns`, which must start
    with the id): memory stays flat at any size."""
    last_id = 0
    while True:
        with store.read() as conn:
            rows = conn.execute(
                select(*columns)
                .where(where, ConfigVersion.id > last_id)
                .order_by(ConfigVersion.id)
                .limit(batch_size)
            ).all()
        if not rows:
            return
        last_id = rows[-1].id
        yield list(rows)


_REWRAP_COLUMNS = (ConfigVersion.id, ConfigVersion.kek_id, ConfigVersion.wrapped_dek)


def data_key_batches(
    store: Store, batch_size: int, *, not_under_key: str | None = None, under: str | None = None
) -> Iterator[list[DataKey]]:
    """Batches of data keys (id, key id and wrap only) not under `not_under_key`, or under
    `under`."""
    where: ColumnElement[bool] = ConfigVersion.kek_id.is_not(None)
    if not_under_key is not None:
        where = not_under(not_under_key)
    if under is not None:
        where = where & (ConfigVersion.kek_id == under)
    yield from version_batches(store, where, batch_size, _REWRAP_COLUMNS)


# The compare-and-set of a rewrap, sent to the driver as is (one executemany per batch):
# through SQLAlchemy's Core, processing each row's parameters cost as much as its crypto
# (benchmarks/rotation.py).
_REWRAP = (
    "UPDATE config_versions SET kek_id = ?, wrapped_dek = ? "
    "WHERE id = ? AND kek_id = ? AND wrapped_dek = ?"
)


def write_rewraps(conn: Connection, updates: list[Rewrap]) -> None:
    """Each row moved only if it still holds the key id and wrapped key it was read with
    (benchmarks/rotation.py sends the same statement for its I/O-only floor)."""
    sql = _REWRAP if conn.dialect.paramstyle == "qmark" else _REWRAP.replace("?", "%s")
    conn.exec_driver_sql(sql, [(nk, nw, i, ok, ow) for i, ok, ow, nk, nw in updates])


def move_data_keys(store: Store, updates: list[Rewrap]) -> None:
    """Write a batch of rewrapped data keys in one write transaction (`write_rewraps`)."""
    store.transact(lambda conn: write_rewraps(conn, updates))


def move_data_keys_rolled_back(store: Store, updates: list[Rewrap]) -> None:
    """Write a batch as `move_data_keys` would, then roll it back: a dry run's measure."""
    with store.engine.connect().execution_options(vault_write=True) as conn:
        transaction = conn.begin()
        try:
            write_rewraps(conn, updates)
        finally:
            transaction.rollback()


@dataclass(frozen=True)
class VersionName:
    """Which version a row is, as reports name it."""

    id: int
    session_id: str
    toolkit_name: str
    version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "toolkit_name": self.toolkit_name,
            "version": self.version,
        }


def version_name(store: Store, row_id: int) -> VersionName:
    """Which version a row id is (rotation reads ids and wraps only; a failure is rare)."""
    with store.read() as conn:
        row = conn.execute(select(ConfigVersion).where(ConfigVersion.id == row_id)).one()
    return VersionName(row.id, row.session_id, row.toolkit_name, row.version)


@dataclass(frozen=True, repr=False)
class ScannedVersion:
    """A version as stored, with its row id; `authentic` when its MAC was checked and holds
    (None: not checked); `no_ciphertext` when its row holds no wrapped key at all."""

    row_id: int
    record: VersionRecord
    authentic: bool | None
    no_ciphertext: bool

    @property
    def name(self) -> VersionName:
        r = self.record
        return VersionName(self.row_id, r.session_id, r.toolkit_name, r.version)


def scan_versions(
    store: Store,
    batch_size: int,
    *,
    under: Collection[str] | None = None,
    authenticate: bool = False,
    after: int = 0,
) -> Iterator[list[ScannedVersion]]:
    """Batches of whole versions (all, or those whose data key is under a key of `under`;
    with a row id past `after`), each checked against its MAC when `authenticate`."""
    where = ConfigVersion.id > after
    if under is not None:
        where = and_(where, ConfigVersion.kek_id.in_(sorted(under)))
    for rows in version_batches(store, where, batch_size):
        yield [
            scanned(row._mapping, store.authentic(VERSIONS, row._mapping) if authenticate else None)
            for row in rows
        ]


def version_rows(
    store: Store, batch_size: int, *, after: int = 0
) -> Iterator[list[tuple[Mapping[str, Any], bool]]]:
    """Batches of whole version rows (by column) with a row id past `after`, each with
    its MAC's verdict: what `check` opens."""
    for rows in version_batches(store, ConfigVersion.id > after, batch_size):
        yield [(row._mapping, store.authentic(VERSIONS, row._mapping)) for row in rows]


def scanned(row: Any, authentic: bool | None) -> ScannedVersion:
    """A whole version row (by column) as `ScannedVersion`, its MAC's verdict given."""
    return ScannedVersion(row["id"], version_record(row), authentic, row["wrapped_dek"] is None)


def count_versions(store: Store, after: int = 0) -> int:
    """How many versions have a row id past `after`."""
    with store.read() as conn:
        counted = select(func.count()).where(ConfigVersion.id > after)
        return int(conn.execute(counted).scalar_one())
