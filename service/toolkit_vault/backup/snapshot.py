"""`backup create`: one consistent snapshot of a running vault, written whole or not at all.

Every table is read inside one read transaction (`store.snapshots.snapshot`): on SQLite
(WAL) a deferred BEGIN pins the snapshot at its first read, so the writer thread and other
processes carry on committing and the backup sees none of it; on PostgreSQL a REPEATABLE
READ, READ ONLY transaction does the same. The audit head is read in that snapshot, so
the chain in the file ends exactly where its head says, and every configure accepted before
the snapshot is in it once.

The file is written as a file with no name yet (`files.atomic_writer`: 0600 from its
creation), fsynced, and only then named: a process killed at any point before leaves no
file at all, neither a half one nor a whole one under a temporary name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit_vault.backup.archive import Header, Writer, backup_key
from toolkit_vault.bootstrap import open_provider, open_store
from toolkit_vault.errors import VaultError
from toolkit_vault.files import atomic_writer
from toolkit_vault.keys.hierarchy import VaultKeys
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.snapshots import TABLES, snapshot

__all__ = ["BackupReport", "create_backup"]


@dataclass(frozen=True)
class BackupReport:
    path: str
    bytes: int
    rows: dict[str, int]
    head_seq: int | None
    source: str
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "bytes": self.bytes,
            "rows": self.rows,
            "head_seq": self.head_seq,
            "source": self.source,
            "seconds": round(self.seconds, 3),
        }


def create_backup(settings: VaultSettings, path: Path) -> BackupReport:
    """Snapshot the vault `settings` name into `path` (replaced atomically, 0600)."""
    started = time.monotonic()
    provider = open_provider(settings)
    store = open_store(settings)
    try:
        _, internal = VaultKeys(store, provider).open()
        if (failure := store.state_failure()) is not None:
            raise VaultError(
                f"the vault's state is not believed, so it is not backed up: {failure}"
            )
        key = backup_key(internal["state"])
        path = path.absolute()
        try:
            with atomic_writer(path) as handle:
                with snapshot(store) as seen:
                    head = seen.head
                    header = Header(
                        created_at=time.time(),
                        schema_revision=seen.schema_revision,
                        source=seen.source,
                        vault_id=settings.vault_id,
                        key_provider=settings.key_provider,
                        key_options=dict(provider.recorded_options()),
                        head=head,
                        tables={name: list(columns) for name, columns in TABLES.items()},
                    )
                    writer = Writer(handle, header)
                    for table, row in seen.rows():
                        writer.row(table, row)
                writer.finish(key)
        except OSError as exc:
            raise VaultError(f"cannot write a backup in {path.parent}: {exc.strerror}") from None
        size = path.stat().st_size
    finally:
        store.close_watch()
        store.close()
    return BackupReport(
        str(path),
        size,
        writer.rows,
        None if head is None else head[0],
        header.source,
        time.monotonic() - started,
    )
