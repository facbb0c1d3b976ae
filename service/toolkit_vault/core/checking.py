"""`check`'s versions, after what the last check decrypted: its mark (`store.verified`,
kind `check`) names the last config version's row id it reached, that row's MAC and how
many rows it had up to there. A check without `full` believes the mark only when its MAC
holds under the audit key and the table still agrees (the same MAC at that id, no row
missing up to it), and then opens only the versions written since; otherwise it says why
and opens every one. The mark also names the vault key records as they were (a digest): a
key rotation since, which rewraps every version, makes the next check whole. A check whose
versions all open leaves a new mark. Rows before the mark are not opened again: one edited
since is found by `check --full` (SECURITY.md).

May import: audit, keys, store, crypto, errors.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.audit.verify import AuditReport, verify_audit_chain
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.keys.keystore import read_vault_keys
from toolkit_vault.keys.version_check import RingFor, TallyAsRead, check_store
from toolkit_vault.store.chain import CHAIN_START, Signer
from toolkit_vault.store.data_keys import count_versions
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.storage import Store
from toolkit_vault.store.verified import (
    CHECK,
    Mark,
    MarkRefused,
    mark_path,
    read_mark,
    version_link,
    versions_to,
    write_mark,
)

__all__ = ["check_all", "check_versions"]

Start = Callable[[int], Callable[[int], None]]


def check_versions(
    store: Store,
    ring_for: RingFor,
    audit_key: SecretBytes,
    start: Start | None = None,
    *,
    full: bool = False,
    chain: ChainState | None = None,
) -> dict[str, Any]:
    """`check_store` over the versions after the last check's mark (every one when `full`
    or when the mark is not believed), and the new mark when all of them open. The result
    says which: `since_id` (0: all), `mark_refused`. `chain`: the state the verified chain
    makes, when the caller walked it (None: the store's, as followed)."""
    sign = partial(crypto.chain_hash, audit_key)
    path = mark_path(store, CHECK)
    mark: Mark | None = None
    refused: str | None = None
    if not full:
        try:
            mark = read_mark(path, CHECK, sign)
        except MarkRefused as exc:
            refused = str(exc)
        if mark is not None and (why := _disbelieved(store, mark)) is not None:
            mark, refused = None, why
    since = 0 if mark is None else int(mark.body["last_id"])
    result = check_store(store, ring_for, start, since, chain)
    _leave_mark(store, sign, result)
    result["since_id"] = since
    result["mark_refused"] = refused
    result["full"] = mark is None
    return result


def check_all(
    store: Store,
    ring_for: RingFor,
    audit_key: SecretBytes,
    recovery: SecretBytes | None,
    start: Start | None = None,
) -> tuple[dict[str, Any], AuditReport]:
    """A full `check` in one pass: the full audit verification, whose reconciliation reads
    and MACs every version row in its snapshot, hands each row on to be opened there
    (`TallyAsRead`), so a version is read and MACed once, not once here and again there.
    When the walk breaks, the versions are opened as `check_versions` does (read again)."""

    def begin(chain: ChainState | None) -> Callable[[Row, bool], None] | None:
        versions = count_versions(store)
        see = opened.begin(chain, versions)
        if see is not None and start is not None:
            opened.advance = start(versions)
        return see

    with TallyAsRead(ring_for) as opened:
        audit = verify_audit_chain(store, audit_key, recovery=recovery, full=True, versions=begin)
        if opened.tally is None:
            return check_versions(store, ring_for, audit_key, start, full=True), audit
        result = opened.result()
    _leave_mark(store, partial(crypto.chain_hash, audit_key), result)
    result.update(since_id=0, mark_refused=None, full=True)
    return result, audit


def _leave_mark(store: Store, sign: Signer, result: dict[str, Any]) -> None:
    """The check's mark, when every version it read opened (the next check starts after
    the last of them); `result` loses its `last_id`."""
    last_id = int(result.pop("last_id"))
    if not result["failed"] and last_id and (link := version_link(store, last_id)) is not None:
        body = {"last_id": last_id, "count": versions_to(store, last_id), "keys": _keys(store)}
        write_mark(mark_path(store, CHECK), Mark(CHECK, 0, link, time.time(), body), sign)


def _disbelieved(store: Store, mark: Mark) -> str | None:
    """Why the versions no longer agree with a check's mark; None when they do."""
    try:
        last_id, count = int(mark.body["last_id"]), int(mark.body["count"])
    except (KeyError, TypeError, ValueError):
        return "its header is unreadable"
    if last_id <= 0 or mark.link == CHAIN_START:
        return "it names no version"
    stored = version_link(store, last_id)
    if stored is None or stored != mark.link:
        return f"the version row {last_id} it reached was deleted or rewritten"
    if versions_to(store, last_id) != count:
        return f"versions up to row {last_id} were deleted or added"
    if mark.body.get("keys") != _keys(store):
        return "the vault's keys changed since (a rotation rewraps every version)"
    return None


def _keys(store: Store) -> str:
    """A digest of the vault key records as stored: a rotation of the master key or of a
    vault key changes it, and every version is then opened again."""
    digest = hashlib.sha256()
    for record in sorted(read_vault_keys(store), key=lambda r: r.key_id):
        wrapped = (record.wrapped_key or b"").hex()
        digest.update(
            f"{record.key_id}|{wrapped}|{record.is_active}|{record.retired_at}\n".encode()
        )
    return digest.hexdigest()
