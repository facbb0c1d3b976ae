"""Master key operations: status, rotation (rewrap), retirement, and the decrypt check.

Rotation is a resumable state machine driven entirely by what is stored, so a killed run
is finished by running it again and never adds a second new key:

1. the provider gets the new key first (a crash here leaves an unused key, nothing else);
2. the store records it and makes it primary, in one audited transaction; from then on
   every writer wraps under it (writers with an older ring reload the keys);
3. every wrapped key not under the primary is rewrapped in batches; each row is fully
   decrypted in memory first and is written back only by compare-and-set on its old
   wrapped key, so a row is never written unless it could be read, nor written twice.

Only wrapped keys change: envelopes, fingerprints and history keep their identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, update

from . import crypto
from .crypto import KeyRing, RecordContext, SealedConfig, internal_context
from .errors import DecryptionError, KeyProviderError, VaultError
from .integrity import MASTER_KEYS, VERSIONS
from .keys import KeyProvider
from .models import ConfigVersion, InternalKey, MasterKey
from .records import AuditDraft, version_record
from .storage import Store

__all__ = ["RotationReport", "check_store", "key_status", "retire_key", "rotate_keys"]

Progress = Callable[[int], None]


def key_status(store: Store, provider: KeyProvider) -> list[dict[str, Any]]:
    """Every KEK the store knows: primary, retired, wrapped keys it protects, in provider."""
    held = provider.load()
    with store.read() as conn:
        by_kek = (
            select(ConfigVersion.kek_id, func.count())
            .where(ConfigVersion.kek_id.is_not(None))
            .group_by(ConfigVersion.kek_id)
        )
        counts: dict[str | None, int] = {k: n for k, n in conn.execute(by_kek)}
        by_internal = select(InternalKey.kek_id, func.count()).group_by(InternalKey.kek_id)
        internal: dict[str, int] = {k: n for k, n in conn.execute(by_internal)}
    return [
        {
            "kek_id": row.kek_id,
            "primary": row.is_primary,
            "created_at": row.created_at,
            "retired_at": row.retired_at,
            "wrapped_keys": counts.get(row.kek_id, 0) + internal.get(row.kek_id, 0),
            "in_provider": held is not None and row.kek_id in held.keys,
        }
        for row in store.master_keys()
    ]


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
            "primary": self.primary,
            "previous": self.previous,
            "resumed": self.resumed,
            "rewrapped": self.rewrapped,
            "internal_rewrapped": self.internal_rewrapped,
            "failed": self.failed,
        }


def pending_rewraps(store: Store, primary: str) -> int:
    with store.read() as conn:
        versions = conn.execute(
            select(func.count()).where(
                ConfigVersion.kek_id.is_not(None), ConfigVersion.kek_id != primary
            )
        ).scalar_one()
        internal = conn.execute(
            select(func.count()).where(InternalKey.kek_id != primary)
        ).scalar_one()
    return int(versions) + int(internal)


def rotate_keys(
    store: Store,
    provider: KeyProvider,
    *,
    batch_size: int = 500,
    start: Callable[[int], Progress] | None = None,
) -> RotationReport:
    """Make a new KEK primary and rewrap everything under it; rerun to resume."""
    keys = provider.load()
    if keys is None:
        raise KeyProviderError(f"no master key found in {provider.where}")
    known = store.master_keys()
    live = {row.kek_id: row for row in known if row.retired_at is None}
    db_primary = next(k for k, row in live.items() if row.is_primary)
    resumed = True
    if keys.primary in live and pending_rewraps(store, db_primary) == 0:
        if provider.name == "env":
            raise KeyProviderError(
                "the env key provider is read-only: add a new key to the document in "
                "TOOLKIT_VAULT_MASTER_KEYS and make it primary, then run keys rotate"
            )
        keys, resumed = keys.with_new_primary(taken=[row.kek_id for row in known]), False
        provider.store(keys)
    target = keys.primary if keys.primary not in live else db_primary
    missing = [k for k in live if k not in keys.keys]
    if missing:
        raise KeyProviderError(f"master key {missing[0]} is missing from {provider.where}")
    ring = KeyRing({k: keys.keys[k] for k in {*live, target}}, target)
    if target not in live:
        _make_primary(store, ring, target)
    report = RotationReport(target, sorted(k for k in live if k != target), resumed)
    report.internal_rewrapped = _rewrap_internal(store, ring)
    advance = start(pending_rewraps(store, target)) if start else None
    while True:  # another pass picks up rows that writers with an old ring added meanwhile
        done = _rewrap_versions(store, ring, batch_size, report, advance)
        if done == 0:
            break
    store.retrying(
        lambda conn: store.audit(
            conn,
            AuditDraft(
                "operator",
                "keys_rotated",
                details={
                    "primary": target,
                    "rewrapped": report.rewrapped,
                    "failed": len(report.failed),
                },
            ),
        )
    )
    return report


def _make_primary(store: Store, ring: KeyRing, kek_id: str) -> None:
    def work(conn: Connection) -> None:
        for row in conn.execute(select(MasterKey).where(MasterKey.is_primary.is_(True))).all():
            _update_key_record(store, conn, row, is_primary=False)
        record = {
            "kek_id": kek_id,
            "check_value": ring.check_value(kek_id),
            "is_primary": True,
            "created_at": time.time(),
            "retired_at": None,
        }
        conn.execute(insert(MasterKey).values(**record, mac=store.mac(MASTER_KEYS, record)))
        store.audit(conn, AuditDraft("operator", "kek_added", details={"kek_id": kek_id}))

    store.retrying(work)


def _update_key_record(store: Store, conn: Connection, row: Any, **changes: Any) -> None:
    """Change a master-key record and sign it again; only a record as read is changed."""
    record = {**row._mapping, **changes}
    conn.execute(
        update(MasterKey)
        .where(MasterKey.kek_id == row.kek_id, MasterKey.mac == row.mac)
        .values(**changes, mac=store.mac(MASTER_KEYS, record))
    )


def _rewrap_internal(store: Store, ring: KeyRing) -> int:
    """Rewrap the fingerprint and audit keys (their values never change) in one transaction."""
    moved = []
    for name, (kek_id, wrapped) in store.internal_keys().items():
        if kek_id != ring.primary_id:
            key = ring.unwrap(kek_id, wrapped, internal_context(name))
            moved.append((name, kek_id, *ring.wrap(key, internal_context(name))))

    def work(conn: Connection) -> None:
        for name, old_kek, new_kek, new_wrapped in moved:
            conn.execute(
                update(InternalKey)
                .where(InternalKey.name == name, InternalKey.kek_id == old_kek)
                .values(kek_id=new_kek, wrapped_key=new_wrapped)
            )

    if moved:
        store.retrying(work)
    return len(moved)


def _sealed(row: Any) -> tuple[RecordContext, SealedConfig]:
    return version_record(row._mapping).sealed()


def version_batches(store: Store, where: Any, batch_size: int) -> Iterator[list[Any]]:
    """Keyset-paginated batches of encrypted versions: memory stays flat at any size."""
    last_id = 0
    while True:
        with store.read() as conn:
            rows = conn.execute(
                select(ConfigVersion)
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
    done = 0
    failed_ids = {f["id"] for f in report.failed}
    where = ConfigVersion.kek_id.is_not(None) & (ConfigVersion.kek_id != ring.primary_id)
    for rows in version_batches(store, where, batch_size):
        updates = []
        for row in rows:
            if row.id in failed_ids:
                continue
            try:
                context, sealed = _sealed(row)
                rewrapped = crypto.rewrap_config(ring, context, sealed)
            except DecryptionError:
                report.failed.append(_where(row))
                continue
            old = (sealed.kek_id, sealed.wrapped_dek)  # as read: the compare-and-set's guard
            updates.append((row.id, *old, rewrapped.kek_id, rewrapped.wrapped_dek))
        if updates:
            store.retrying(partial(write_rewraps, updates=updates))
        done += len(updates)
        report.rewrapped += len(updates)
        if advance:
            advance(len(rows))
    return done


# Built once and sent as one executemany per batch: building an UPDATE per row cost more
# than the row's crypto (benchmarks/rotation.py).
_REWRAP = (
    update(ConfigVersion)
    .where(
        ConfigVersion.id == bindparam("row_id"),
        ConfigVersion.kek_id == bindparam("old_kek"),
        ConfigVersion.wrapped_dek == bindparam("old_wrapped"),
    )
    .values(kek_id=bindparam("new_kek"), wrapped_dek=bindparam("new_wrapped"))
)


Rewrap = tuple[int, str, bytes, str, bytes]  # row id, old kek, old wrapped, new kek, new wrapped


def write_rewraps(conn: Connection, updates: list[Rewrap]) -> None:
    """One executemany of the prebuilt compare-and-set `UPDATE` (benchmarks/rotation.py
    sends the same statement for its I/O-only floor)."""
    conn.execute(
        _REWRAP,
        [
            {"row_id": i, "old_kek": ok, "old_wrapped": ow, "new_kek": nk, "new_wrapped": nw}
            for i, ok, ow, nk, nw in updates
        ],
    )


def _where(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "session_id": row.session_id,
        "toolkit_name": row.toolkit_name,
        "version": row.version,
    }


def retire_key(store: Store, provider: KeyProvider, kek_id: str) -> dict[str, Any]:
    """Retire a KEK nothing uses any more: recorded in the store, then removed from the provider."""
    rows = {row.kek_id: row for row in store.master_keys()}
    row = rows.get(kek_id)
    if row is None:
        raise VaultError(f"the store has no master key {kek_id}")
    if row.is_primary:
        raise VaultError(f"{kek_id} is the primary master key; rotate first")
    in_use = next(s["wrapped_keys"] for s in key_status(store, provider) if s["kek_id"] == kek_id)
    if in_use:
        raise VaultError(
            f"{kek_id} still protects {in_use} wrapped keys: run `toolkit-vault keys rotate`"
        )

    def work(conn: Connection) -> None:
        _update_key_record(store, conn, row, retired_at=time.time())
        store.audit(conn, AuditDraft("operator", "kek_retired", details={"kek_id": kek_id}))

    if row.retired_at is None:
        store.retrying(work)
    keys = provider.load()
    removed = False
    if keys is not None and kek_id in keys.keys:
        if provider.name == "env":
            return {"kek_id": kek_id, "retired": True, "removed_from_provider": False}
        provider.store(keys.without(kek_id))
        removed = True
    return {"kek_id": kek_id, "retired": True, "removed_from_provider": removed}


def check_store(
    store: Store, ring: KeyRing, start: Callable[[int], Progress] | None = None
) -> dict[str, Any]:
    """Decrypt-verify every stored version in memory (MAC, commitment, AAD, JSON); reveal
    nothing. A version whose row fails its MAC counts as failed without being opened."""
    counts = {"intact": 0, "failed": 0, "no_ciphertext": 0}
    failed: list[dict[str, Any]] = []
    with store.read() as conn:
        total = conn.execute(select(func.count()).select_from(ConfigVersion)).scalar_one()
    advance = start(int(total)) if start else None
    for rows in version_batches(store, ConfigVersion.id > 0, 1000):
        for row in rows:
            reason = None
            if not store.authentic(VERSIONS, row._mapping):
                reason = "fails its integrity check"
            elif row.wrapped_dek is None:
                counts["no_ciphertext"] += 1
                continue
            else:
                try:
                    context, sealed = _sealed(row)
                    crypto.open_config(ring, context, sealed)
                except DecryptionError:
                    reason = "does not decrypt"
            if reason is None:
                counts["intact"] += 1
                continue
            counts["failed"] += 1
            if len(failed) < 100:
                failed.append({**_where(row), "reason": reason})
        if advance:
            advance(len(rows))
    return {"versions": int(total), **counts, "failed_versions": failed}
