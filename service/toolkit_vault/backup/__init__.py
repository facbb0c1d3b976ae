"""Backups and restores: a consistent, authenticated snapshot of the vault, and its return.

`archive` is the file format (JSON lines, versioned, a MAC under a key derived from the
vault's state key); `snapshot` writes one from a running vault (`backup create`); `check`
verifies one without touching the live vault (`backup verify`); `restore` puts one into an
empty database as an audited operator step that resets the home's witness on purpose.
Their statements (the snapshot's read, the bulk load, the target's state) are
`store.snapshots`; nothing here speaks SQL. docs/backup-and-recovery.md is the operator's procedure.

May import: `bootstrap` and everything below it (it opens stores and key providers as the
operator's commands do); only `cli` imports it.
"""

from toolkit_vault.backup.archive import BackupError
from toolkit_vault.backup.check import VerifyReport, resolve_settings, verify_backup
from toolkit_vault.backup.restore import RestoreReport, restore_backup
from toolkit_vault.backup.snapshot import BackupReport, create_backup

__all__ = [
    "BackupError",
    "BackupReport",
    "RestoreReport",
    "VerifyReport",
    "create_backup",
    "resolve_settings",
    "restore_backup",
    "verify_backup",
]
