"""`restore`: put a verified backup into an empty database, as an audited operator step.

A restore is the one legitimate way old rows come back, and from inside the database it
looks exactly like the replay the witness refuses. So it is explicit:

1. the whole backup is verified first (`check`): MAC, chain, row MACs, every version;
2. the target database must be empty (migrated here if it has no tables); the rows go in
   within one transaction, hashed again as they are read and compared with what was
   verified before it commits (the file cannot change in between);
3. the backup must be this home's vault: a home whose record names another vault id is
   refused, always (one master key may serve several vaults, so a backup that opens is not
   yet this vault's). Moving a vault needs no flag: restore it into a new home, one that
   records nothing and has no witness;
4. the backup's chain must pass through the head the home's witness holds: its event at
   the witness's seq carries the same link MAC (keyed, in a chain just verified, so the
   same history up to there). A witness ahead of the backup (a newer state was seen here)
   or a backup whose event there differs (a fork: a copy restored elsewhere that kept
   writing, or another vault's chain) is refused unless the operator says
   `over_newer_witness`; the report and the restore's own audit event then name both heads
   and whether it was a fork;
5. the home's witness is reset on purpose to the backup's head, and its record names the
   database, the key provider and the vault id.

`--dry-run` does step 1 and says what would come back, and what would be lost: the events
the witness (and a non-empty target database) hold beyond the backup's head, or that the
backup is a fork (what the fork loses is not known from the home alone).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit_vault.backup.archive import BackupError, Reader
from toolkit_vault.backup.check import VerifyReport, open_backup, verify_stream
from toolkit_vault.backup.parsing import in_process
from toolkit_vault.bootstrap import open_provider, open_store
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.keys.hierarchy import VaultKeys
from toolkit_vault.keys.recovery import unseal
from toolkit_vault.settings import VaultSettings, write_record
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.snapshots import RestoreTarget, RowsRefused
from toolkit_vault.store.witness import WITNESS_NAME, Witness

__all__ = ["RestoreReport", "restore_backup"]


@dataclass(frozen=True)
class RestoreReport:
    dry_run: bool
    restored: bool
    backup: VerifyReport
    witness_seq: int | None  # the home's witness before the restore
    database_seq: int | None  # the target database's head before (None: empty)
    lost_events: dict[str, int] = field(default_factory=dict)  # action -> count, after the backup
    needs_over_newer_witness: bool = False
    database_empty: bool = True
    fork: bool = False  # the backup's chain does not pass through the witnessed head
    home_vault_id: str | None = None  # the vault the home records (None: records none)

    def as_json(self) -> dict[str, Any]:
        head = self.backup.header.head
        return {
            "dry_run": self.dry_run,
            "restored": self.restored,
            "backup": self.backup.as_json(),
            "backup_seq": None if head is None else head[0],
            "witness_seq": self.witness_seq,
            "database_seq": self.database_seq,
            "database_empty": self.database_empty,
            "lost_events": self.lost_events,
            "lost_event_count": self._lost_count(),
            "needs_over_newer_witness": self.needs_over_newer_witness,
            "fork": self.fork,
            "other_vault": self.other_vault,
        }

    @property
    def other_vault(self) -> bool:
        return self.home_vault_id not in (None, self.backup.header.vault_id)

    def _lost_count(self) -> int | None:
        if self.fork:
            return None  # the events since the fork point: not known from the home alone
        head = self.backup.header.head
        seq = 0 if head is None else head[0]
        newest = max(self.witness_seq or 0, self.database_seq or 0)
        return max(newest - seq, 0)


def restore_backup(
    path: Path,
    settings: VaultSettings,
    *,
    dry_run: bool = False,
    over_newer_witness: bool = False,
    actor: str = "operator",
    shares: list[str] | None = None,
) -> RestoreReport:
    """Restore `path` into the database and home `settings` name (see the module doc)."""
    witness = Witness(settings.home / WITNESS_NAME)
    try:
        heads = witness.read()
    except StoreError:
        heads = [(-1, b"", b"")]  # unreadable: only the explicit step restores over it
    newest = heads[0] if heads else None
    witness_seq = None if newest is None else newest[0]
    with open_backup(path) as handle:
        verified = verify_stream(Reader(handle), settings, shares, at_seq=witness_seq)
    if not verified.ok:
        raise BackupError(f"the backup does not verify: {verified.audit.get('message')}")
    header = verified.header
    backup_seq = 0 if header.head is None else header.head[0]
    # A witness within the backup's chain must hold the MAC the backup's event has there.
    fork = (
        newest is not None
        and 0 <= newest[0] <= backup_seq
        and (verified.mac_at is None or not hmac.compare_digest(verified.mac_at, newest[1]))
    )
    ahead = newest is not None and (newest[0] > backup_seq or newest[0] < 0 or fork)
    home_vault = _recorded_vault_id(settings)
    target = RestoreTarget(settings.database_url)
    try:
        state = target.state(backup_seq)
        database_seq, lost, empty = state.head, state.lost, state.empty
        report = RestoreReport(
            dry_run,
            False,
            verified,
            witness_seq,
            database_seq,
            lost,
            ahead,
            empty,
            fork,
            home_vault,
        )
        if dry_run:
            return report
        if not empty:
            raise VaultError(
                "the target database is not empty: restore into an empty database "
                "(a new one, or one emptied on purpose)"
            )
        if report.other_vault:
            raise VaultError(
                f"this home belongs to vault {home_vault}; the backup is of vault "
                f"{header.vault_id}, another vault: restore it into a new home (a directory "
                "holding only its master key), never over this one"
            )
        if fork and not over_newer_witness:
            raise VaultError(
                f"the backup is a fork: its chain does not pass through audit event "
                f"{witness_seq} this home witnessed (a copy restored elsewhere that kept "
                "writing, or another vault's); restoring it would undo what happened here since "
                "the fork, revocations and purges included; to do it on purpose, restore with "
                "--over-newer-witness (audited as a fork)"
            )
        if ahead and not over_newer_witness:
            raise VaultError(
                f"the vault home witnessed audit event {witness_seq}, newer than the backup's "
                f"{backup_seq}: restoring would lose what happened since; to do it on purpose, "
                "restore with --over-newer-witness (audited)"
            )
        target.migrate()
        with open_backup(path) as handle:
            reader = Reader(handle)

            def unchanged() -> None:
                if not hmac.compare_digest(reader.digest.digest(), verified.digest):
                    raise BackupError("the backup changed while it was being restored")

            _load(target, reader, unchanged)
    finally:
        target.close()
    over = over_newer_witness and ahead
    _settle_home(settings, verified, witness, witness_seq, over, fork, actor, shares)
    return dataclasses.replace(report, restored=True)


def _recorded_vault_id(settings: VaultSettings) -> str | None:
    """The vault id the home's record names (the settings given carry the backup's)."""
    try:
        record = json.loads(settings.record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise VaultError(f"{settings.record_path} is unreadable; restore it first") from None
    vault_id = record.get("vault_id") if isinstance(record, dict) else None
    return str(vault_id) if vault_id else None


def _load(target: RestoreTarget, reader: Reader, unchanged: Callable[[], None]) -> None:
    """Every row of the backup into the empty `target`, in one transaction that commits
    only when `unchanged()` holds once they are in (serial keys then continue after them)."""
    try:
        target.load(in_process(reader), unchanged=unchanged)
    except RowsRefused as exc:
        raise BackupError(f"the backup's rows do not load ({exc.reason})") from None


def _settle_home(
    settings: VaultSettings,
    verified: VerifyReport,
    witness: Witness,
    witness_seq: int | None,
    over_newer: bool,
    fork: bool,
    actor: str,
    shares: list[str] | None,
) -> None:
    """The home names the restored database; its witness is the backup's head, on purpose;
    the restore is the next event of the chain it brought back."""
    header = verified.header
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings.home.chmod(0o700)
    provider = open_provider(settings)
    if shares is not None and provider.status().current is None:
        provider.create_master_key()  # the backup's master key is lost: a new one
    record = dataclasses.replace(
        settings, vault_id=header.vault_id, key_options=provider.recorded_options()
    )
    write_record(record)
    if header.head is not None:
        witness.put(header.head)
    store = open_store(dataclasses.replace(record, initialized=True))
    try:
        if shares is not None:  # the restored vault keys move under the new master key
            unseal(store, shares, provider, actor=actor)
        VaultKeys(store, provider).open()
        details = {
            "backup_seq": None if header.head is None else header.head[0],
            "backup_created_at": header.created_at,
            "source": header.source,
            "witness_seq": witness_seq,
            "over_newer_witness": over_newer,
            "fork": fork,
        }
        store.record_attempt(AuditDraft(actor, AuditAction.BACKUP_RESTORED, details=details))
        if store.witness is not None:
            store.witness.flush()
        if (failure := store.state_failure()) is not None:
            raise VaultError(f"the restored vault is not believed: {failure}")
    finally:
        store.close_watch()
        store.close()
