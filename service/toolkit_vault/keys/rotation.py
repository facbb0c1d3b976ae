"""Key rotation on both layers, and the decrypt check.

**Master key** (`rotate_master_key`, `keys rotate`): the provider makes a new master key
(or new key material), then every live vault key is unwrapped and wrapped again under it,
in one audited transaction. It touches the few vault key rows only, so it takes the same
time at a thousand versions and at a million. Rerun after a crash: a vault key still under
an older master key than the provider's current one is finished without rotating again.

**Vault key** (`rotate_vault_key`, `keys rotate --vault-key`), a resumable state machine
driven by what is stored, so a killed run is finished by running it again and never adds a
second new key:

1. when nothing is left to move, a new vault key is wrapped by the provider and made
   active, in one audited transaction; from then on every writer wraps under it (writers
   with an older ring reload the keys);
2. the vault-wide keys, then every data key not under the active vault key, are rewrapped
   in batches: the key only (`KeyRing.rewrap`), never a value, each row written back by
   compare-and-set on its wrapped key as read. `check` is what proves values still open.

Only wrapped keys change: envelopes, fingerprints, history and row MACs keep their identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, func, select

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing, internal_context
from toolkit_vault.errors import DecryptionError, KeyProviderError, VaultError
from toolkit_vault.keys.keystore import (
    add_vault_key,
    internal_keys,
    next_key_id,
    rewrap_internal_keys,
    set_wrapped_keys,
    vault_key_context,
    verified_vault_keys,
)
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.keys.recovery import cover_vault_key
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.models import ConfigVersion, InternalKey
from toolkit_vault.store.records import AuditDraft, version_record
from toolkit_vault.store.storage import Store

__all__ = [
    "MasterRotationReport",
    "RotationReport",
    "check_store",
    "pending_rewraps",
    "rotate_master_key",
    "rotate_vault_key",
    "version_batches",
    "write_rewraps",
]

Progress = Callable[[int], None]
RingFor = Callable[..., KeyRing]  # key ids -> a ring holding them (`Vault.ring_for`)


@dataclass
class MasterRotationReport:
    master_key: str
    previous: list[str]
    rotated_in_provider: bool
    vault_keys: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": "master",
            "master_key": self.master_key,
            "previous": self.previous,
            "rotated_in_provider": self.rotated_in_provider,
            "vault_keys_rewrapped": self.vault_keys,
        }


def rotate_master_key(store: Store, provider: KeyProvider) -> MasterRotationReport:
    """Rotate the master key and rewrap every live vault key under the new one."""
    live = [r for r in verified_vault_keys(store) if r.live]
    current = provider.status().current
    behind = [r for r in live if r.master_key != current]
    rotated = not behind  # all under the current key: rotate; else finish the last rotation
    if rotated:
        current = provider.rotate()
    moves = []
    for record in live:
        assert record.wrapped_key is not None
        context = vault_key_context(record.key_id)
        try:
            key = provider.unwrap(record.wrapped_key, context)
        except DecryptionError:
            raise KeyProviderError(
                f"vault key {record.key_id} does not open with {provider.where}; nothing was "
                "changed (run `toolkit-vault check`)"
            ) from None
        moves.append((record.key_id, record.wrapped_key, provider.wrap(key, context)))
    previous = sorted({str(r.master_key) for r in live} - {str(current)})
    details = {"master_key": current, "previous": previous, "vault_keys": len(moves)}

    def work(conn: Connection) -> None:
        set_wrapped_keys(conn, moves)
        store.audit(conn, AuditDraft("operator", AuditAction.MASTER_KEY_ROTATED, details=details))

    store.retrying(work)
    return MasterRotationReport(str(current), previous, rotated, [m[0] for m in moves])


@dataclass
class RotationReport:
    primary: str
    previous: list[str]
    resumed: bool
    rewrapped: int = 0
    internal_rewrapped: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": "vault-key",
            "primary": self.primary,
            "previous": self.previous,
            "resumed": self.resumed,
            "rewrapped": self.rewrapped,
            "internal_rewrapped": self.internal_rewrapped,
            "failed": self.failed,
        }


def _not_under(active: str) -> Any:
    return ConfigVersion.kek_id.is_not(None) & (ConfigVersion.kek_id != active)


def pending_rewraps(store: Store, active: str) -> int:
    """Wrapped keys (data keys and vault-wide keys) not under the active vault key."""
    with store.read() as conn:
        versions = conn.execute(select(func.count()).where(_not_under(active))).scalar_one()
        internal = conn.execute(
            select(func.count()).where(InternalKey.kek_id != active)
        ).scalar_one()
    return int(versions) + int(internal)


def _any_pending(store: Store, active: str) -> bool:
    with store.read() as conn:
        found = conn.execute(select(ConfigVersion.id).where(_not_under(active)).limit(1)).first()
        inner = conn.execute(select(InternalKey.name).where(InternalKey.kek_id != active)).first()
    return found is not None or inner is not None


def rotate_vault_key(
    store: Store,
    provider: KeyProvider,
    ring: KeyRing,
    *,
    batch_size: int = 500,
    start: Callable[[int], Progress] | None = None,
) -> RotationReport:
    """Make a new vault key active and rewrap every wrapped key under it; rerun to resume.

    One pass of keyset-paginated batches is enough: once the new key is active, every write
    transaction (they are serialized) wraps under it, and rows written before it committed
    are in the store when the pass begins (rows appended meanwhile come after, by id). A
    writer that could not reach the provider to load the new key keeps the old one: its rows
    are found by the next run, and `keys retire` refuses the old key until then."""
    records = verified_vault_keys(store)
    live = [r.key_id for r in records if r.live]
    active = next(r.key_id for r in records if r.is_active and r.live)
    resumed = _any_pending(store, active)
    report = RotationReport(active, [], resumed)
    if not resumed:
        new_id, key = next_key_id(r.key_id for r in records), crypto.new_key()
        wrapped = provider.wrap(key, vault_key_context(new_id))
        ring, active = ring.with_keys({new_id: key}, new_id), new_id
        moves = _internal_moves(store, ring)

        def work(conn: Connection) -> None:  # the vault-wide keys move with the new key
            add_vault_key(store, conn, new_id, wrapped, actor="operator")
            cover_vault_key(conn, ring, new_id, key)  # the recovery shares cover it too
            rewrap_internal_keys(conn, moves)

        store.retrying(work)
        report.primary, report.internal_rewrapped = new_id, len(moves)
    if active not in ring or ring.primary_id != active:
        raise VaultError(f"vault key {active} is not loaded; run the rotation again")
    report.previous = sorted(k for k in live if k != active)
    moves = _internal_moves(store, ring)
    if moves:
        store.retrying(partial(rewrap_internal_keys, moves=moves))
        report.internal_rewrapped += len(moves)
    advance = start(pending_rewraps(store, active)) if start else None
    _rewrap_versions(store, ring, batch_size, report, advance)
    details = {"active": active, "rewrapped": report.rewrapped, "failed": len(report.failed)}
    store.retrying(
        lambda conn: store.audit(
            conn, AuditDraft("operator", AuditAction.VAULT_KEY_ROTATED, details=details)
        )
    )
    return report


def _internal_moves(store: Store, ring: KeyRing) -> list[tuple[str, str, bytes, str, bytes]]:
    """The vault-wide keys not under the active vault key, rewrapped (values unchanged)."""
    return [
        (name, key_id, wrapped, *ring.rewrap(key_id, wrapped, internal_context(name)))
        for name, (key_id, wrapped) in internal_keys(store).items()
        if key_id != ring.primary_id
    ]


_REWRAP_COLUMNS = (ConfigVersion.id, ConfigVersion.kek_id, ConfigVersion.wrapped_dek)


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


def _rewrap_versions(
    store: Store, ring: KeyRing, batch_size: int, report: RotationReport, advance: Progress | None
) -> int:
    """One pass over the data keys not under the active vault key. A data key is read with
    its id and wrap only: the wrap carries its record's binding, so the row is not parsed."""
    done = 0
    for rows in version_batches(store, _not_under(ring.primary_id), batch_size, _REWRAP_COLUMNS):
        updates = []
        moved = ring.rewrap_many([(key_id, wrapped) for _, key_id, wrapped in rows])
        for (row_id, key_id, wrapped), new in zip(rows, moved, strict=True):
            if new is None:
                report.failed.append(_where(store, row_id))
            else:
                updates.append((row_id, key_id, wrapped, *new))
        if updates:
            store.retrying(partial(write_rewraps, updates=updates))
        done += len(updates)
        report.rewrapped += len(updates)
        if advance:
            advance(len(rows))
    return done


# The compare-and-set of a rewrap, sent to the driver as is (one executemany per batch):
# through SQLAlchemy's Core, processing each row's parameters cost as much as its crypto
# (benchmarks/rotation.py).
_REWRAP = (
    "UPDATE config_versions SET kek_id = ?, wrapped_dek = ? "
    "WHERE id = ? AND kek_id = ? AND wrapped_dek = ?"
)


Rewrap = tuple[int, str, bytes, str, bytes]  # row id, old key, old wrapped, new key, new wrapped


def write_rewraps(conn: Connection, updates: list[Rewrap]) -> None:
    """Each row moved only if it still holds the key id and wrapped key it was read with
    (benchmarks/rotation.py sends the same statement for its I/O-only floor)."""
    sql = _REWRAP if conn.dialect.paramstyle == "qmark" else _REWRAP.replace("?", "%s")
    conn.exec_driver_sql(sql, [(nk, nw, i, ok, ow) for i, ok, ow, nk, nw in updates])


def _where(store: Store, row_id: int) -> dict[str, Any]:
    """Which version a row id is (rotation reads ids and wraps only; a failure is rare)."""
    with store.read() as conn:
        row = conn.execute(select(ConfigVersion).where(ConfigVersion.id == row_id)).one()
    return _named(row)


def _named(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "session_id": row.session_id,
        "toolkit_name": row.toolkit_name,
        "version": row.version,
    }


def check_store(
    store: Store, ring_for: RingFor, start: Callable[[int], Progress] | None = None
) -> dict[str, Any]:
    """Decrypt-verify every stored version in memory (MAC, commitment, AAD, JSON); reveal
    nothing. A version whose row fails its MAC counts as failed without being opened. Each
    batch asks `ring_for` the key ids it names, so a ring rotated elsewhere is reloaded."""
    counts = {"intact": 0, "failed": 0, "no_ciphertext": 0}
    failed: list[dict[str, Any]] = []
    try:
        chain: ChainState | None = store.chain_state()
    except StateUnknown:
        chain = None  # the audit part of `check` says why
    with store.read() as conn:
        total = conn.execute(select(func.count()).select_from(ConfigVersion)).scalar_one()
    advance = start(int(total)) if start else None
    for rows in version_batches(store, ConfigVersion.id > 0, 1000):
        ring = ring_for(*{row.kek_id for row in rows if isinstance(row.kek_id, str)})
        for row in rows:
            reason = None
            if not store.authentic(VERSIONS, row._mapping):
                reason = "fails its integrity check"
            elif (
                chain is not None
                and row.status != "purged"
                and chain.was_purged(row.session_id, row.toolkit_name, row.version)
            ):
                reason = "was purged (the audit chain says so); its row was put back"
            elif row.wrapped_dek is None:
                counts["no_ciphertext"] += 1
                continue
            else:
                try:
                    context, sealed = version_record(row._mapping).sealed()
                    crypto.open_config(ring, context, sealed)
                except DecryptionError:
                    reason = "does not decrypt"
            if reason is None:
                counts["intact"] += 1
                continue
            counts["failed"] += 1
            if len(failed) < 100:
                failed.append({**_named(row), "reason": reason})
        if advance:
            advance(len(rows))
    return {"versions": int(total), **counts, "failed_versions": failed}
