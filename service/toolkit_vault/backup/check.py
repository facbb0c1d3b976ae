"""`backup verify`: believe a backup only once its MAC, its chain and every version hold.

The file is loaded, as it is, into a scratch SQLite database in a private temporary
directory (never the live vault's), its vault keys are unwrapped with the key provider (or
the error names the master keys it needs), and then the same checks the live vault runs:
the file's MAC under the backup key, the audit chain walked to its head and every
authenticated table reconciled with it (`audit.verify`), every row MAC and every version
decrypted in memory (`keys.version_check`'s verdicts: each version opened as the
reconciliation reads and MACs it, not read and MACed again; on every core). Nothing
decrypted is kept or shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from toolkit_vault.audit.verify import verify_audit_chain
from toolkit_vault.backup import parsing
from toolkit_vault.backup.archive import BackupError, Header, Reader, backup_key
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.hierarchy import VaultKeys
from toolkit_vault.keys.keystore import read_vault_keys
from toolkit_vault.keys.recovery import open_with_shares
from toolkit_vault.keys.version_check import TallyAsRead, check_store
from toolkit_vault.settings import EnvSettings, VaultSettings, load_settings
from toolkit_vault.store import snapshots
from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.models import SCHEMA_REVISION
from toolkit_vault.store.snapshots import (
    RowsRefused,
    audit_head,
    event_mac,
    scratch_store,
)
from toolkit_vault.store.storage import Store

__all__ = [
    "VerifyReport",
    "load_rows",
    "open_backup",
    "resolve_settings",
    "scratch_store",
    "verify_backup",
    "verify_stream",
]


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    header: Header
    digest: bytes  # SHA-256 of the body the MAC covers (restore compares what it loads)
    rows: dict[str, int]
    versions: dict[str, int]
    failed_versions: list[dict[str, Any]] = field(default_factory=list)
    audit: dict[str, Any] = field(default_factory=dict)
    master_keys: list[str] = field(default_factory=list)
    mac_at: bytes | None = None  # the link MAC of the event at the seq asked for (`at_seq`)

    def as_json(self) -> dict[str, Any]:
        header = self.header
        return {
            "ok": self.ok,
            "format_version": 1,
            "created_at": header.created_at,
            "source": header.source,
            "schema_revision": header.schema_revision,
            "head_seq": None if header.head is None else header.head[0],
            "key_provider": header.key_provider,
            "master_keys": self.master_keys,
            "rows": self.rows,
            "versions": self.versions,
            "failed_versions": self.failed_versions,
            "audit": self.audit,
        }


def resolve_settings(
    header: Header,
    key_provider: str | None = None,
    key_options: dict[str, str] | None = None,
    *,
    trust_header: bool = False,
) -> VaultSettings:
    """Where the backup's master key is: the flags, else the home's record or environment.
    Never the backup's own word alone: a forged backup could name a key its forger holds
    (a KMS endpoint of theirs, a key file of theirs) and would then verify under it; the
    header's record is only suggested to the operator, to state with flags
    (`trust_header`: the provider is not used, as when shares open the backup)."""
    settings = load_settings(key_provider, key_options)
    named = EnvSettings.from_environment().key_provider
    if key_provider is None and not settings.initialized and named is None:
        if not trust_header:
            options = "".join(f" --key-option {k}={v}" for k, v in header.key_options.items())
            raise BackupError(
                "this home records no key provider: say where the backup's master key is "
                f"(the backup names --key-provider {header.key_provider}{options}; check it "
                "before you rely on it)"
            )
        settings = load_settings(header.key_provider, header.key_options)
    return dataclasses.replace(settings, vault_id=header.vault_id)


def load_rows(reader: Reader, store: Store) -> None:
    """Insert every row of the backup into `store`'s empty tables, in the file's order; a
    row the database refuses (a duplicate, a dangling key) refuses the backup. A large
    file's lines are parsed by a child process meanwhile (`parsing`)."""
    try:
        snapshots.load_rows(store, parsing.decoded_rows(reader))
    except RowsRefused as exc:
        raise BackupError(f"the backup's rows do not load ({exc.reason})") from None


def verify_backup(
    path: Path, settings: VaultSettings, shares: list[str] | None = None
) -> VerifyReport:
    """Check the backup at `path` with the master key `settings` names (or, when the master
    key is lost, K recovery shares); raises BackupError when it cannot be believed at all,
    else reports what each check found."""
    with open_backup(path) as handle:
        reader = Reader(handle)
        return verify_stream(reader, settings, shares)


@contextmanager
def open_backup(path: Path) -> Iterator[IO[bytes]]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        yield handle


def verify_stream(
    reader: Reader,
    settings: VaultSettings,
    shares: list[str] | None = None,
    *,
    at_seq: int | None = None,
) -> VerifyReport:
    """Verify the backup `reader` reads; with `at_seq`, the report also holds the link MAC
    of the backup's event at that seq (None: it has none), which `restore` compares with
    the home's witness: the same MAC there, in a verified chain, is the same history."""
    header = reader.header
    if header.schema_revision != SCHEMA_REVISION:
        raise BackupError(
            f"the backup is of schema revision {header.schema_revision}; this release reads "
            f"{SCHEMA_REVISION}: verify or restore it with the release that made it"
        )
    with scratch_store() as store:
        load_rows(reader, store)
        internal, ring, masters = _open_keys(store, settings, shares)
        reader.check(backup_key(internal["state"]))
        count = reader.counts.get(VERSIONS, 0)  # whether workers are worth starting
        with TallyAsRead(lambda *_ids: ring) as opened:  # each version, as reconcile reads it
            audit = verify_audit_chain(
                store,
                internal["audit"],
                recovery=internal.get("recovery"),
                versions=lambda chain: opened.begin(chain, count),
            )
            _same_head(store, header)
            mac_at = None if at_seq is None else event_mac(store, at_seq)
            if opened.tally is not None:
                result = opened.result()
            else:  # the walk broke: the versions read again, held to the store's state
                result = check_store(store, lambda *_ids: ring, chain=audit.chain_state)
    versions = {k: result[k] for k in ("versions", "intact", "failed", "no_ciphertext")}
    return VerifyReport(
        ok=audit.ok and not result["failed"],
        header=header,
        digest=reader.digest.digest(),
        rows=dict(reader.counts),
        versions=versions,
        failed_versions=result["failed_versions"],
        audit=audit.as_json(),
        master_keys=masters,
        mac_at=mac_at,
    )


def _open_keys(
    store: Store, settings: VaultSettings, shares: list[str] | None
) -> tuple[dict[str, Any], Any, list[str]]:
    records = read_vault_keys(store)
    masters = sorted({r.master_key for r in records if r.live and r.master_key})
    if shares is not None:
        recovered = open_with_shares(store, shares)
        return recovered.internal, recovered.ring, masters
    provider = open_provider(settings)
    try:
        ring, internal = VaultKeys(store, provider).open()
    except VaultError as exc:
        needed = ", ".join(masters) or "none recorded"
        raise BackupError(
            f"the backup's vault keys do not open with key provider {provider.name} "
            f"({provider.where}): it needs master key {needed} ({exc.message})"
        ) from None
    return internal, ring, masters


def _same_head(store: Store, header: Header) -> None:
    claimed = None if header.head is None else header.head[:2]
    if audit_head(store) != claimed:
        raise BackupError("the backup's header names another audit head than its rows")
