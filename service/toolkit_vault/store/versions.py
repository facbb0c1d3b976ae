"""Config versions: appended (append-only, the current pointer moved by compare-and-set)
and read back authenticated against the verified chain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Any, cast, overload

from sqlalchemy import Connection

from toolkit_vault.errors import (
    PrincipalEnded,
    StoreError,
    ToolkitNotFound,
    VaultError,
    VersionMoved,
)
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.chain import head_link, verified_end
from toolkit_vault.store.chain_word import chain_word
from toolkit_vault.store.integrity import POINTERS, VERSIONS
from toolkit_vault.store.ledger import LIVE, ChainState, Ledger, StateUnknown
from toolkit_vault.store.links import ChainLinks, _write_link
from toolkit_vault.store.records import AuditDraft, VersionDraft, VersionRecord, version_record
from toolkit_vault.store.scopes import principal_of
from toolkit_vault.store.statements import (
    _CURRENT_POINTERS,
    _CURRENT_VERSIONS,
    _FOLLOW_AND_POINTERS,
    _IMPORTED,
    _INSERT_POINTER,
    _INSERT_VERSION,
    _MOVE_POINTER,
    _PG_APPEND,
    _PRINCIPAL_STANDING,
    _VERSION_ROW,
    _VERSIONS_BY_SCOPE,
    _WRITE_STATE,
)
from toolkit_vault.store.transactions import (
    _AHEAD,
    _IMPORTS_AHEAD,
    _WRITTEN,
    _moved_one,
    _pointer_moved,
    _wrote,
)

Source = tuple[str, int]  # where a session's config of a toolkit comes from: (scope id, version)
_ENDED = {
    "revoked": "this principal's token was revoked while the request ran: nothing was stored",
    "expired": "this principal's token expired while the request ran: nothing was stored",
    "removed": "this principal was removed while the request ran: nothing was stored",
}

log = logging.getLogger(__name__)


class ConfigVersions(ChainLinks):
    """The `Store`'s config versions: `append_version`, and the current ones read back."""

    @overload
    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int: ...

    @overload
    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        then: Callable[[int], None],
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int | None: ...

    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        then: Callable[[int], None] | None = None,
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int | None:
        """Append the next version (built for its number) and, if live, make it current;
        `then(version)` once it is committed (and the write may be left to commit:
        `transact`). `imported`: the package digest of the imported toolkit the config was
        validated against; nothing is written unless it is still the one imported under
        `toolkit_name` (`_check_imported`). `after`: the version the caller read as current
        and built on; nothing is written (VersionMoved) unless it is still the last and
        still current: a version appended since, or a purge, stands. `waiting`: the version
        that waits for a person's config (an intake link's); nothing is written unless it
        is still the last and not purged (`_check_waiting`). `principal`: the principal the
        write acts for; nothing is written (PrincipalEnded, with a `configure_refused`
        event) unless its token is still neither revoked nor expired (`_principal_ended`).

        `build(version, primary_kek_id)` is called again with a new number when another
        writer took the previous one, because every envelope is bound to its version
        number; it learns the store's active vault key inside the transaction, so a writer
        whose ring predates a rotation can rewrap under the new key before it commits.
        """

        def work(conn: Connection) -> int | PrincipalEnded:
            if principal is not None and (ended := self._principal_ended(conn, principal)):
                why = {"reason": type(ended).__name__, "token": ended.message}
                action = AuditAction.CONFIGURE_REFUSED
                self.audit(conn, AuditDraft(principal, action, session_id, toolkit_name, None, why))
                return PrincipalEnded(_ENDED[ended.message])  # the refusal's event commits
            if imported is not None:
                self._check_imported(conn, toolkit_name, imported)
            key = {"session_id": session_id, "toolkit_name": toolkit_name}
            pointer = {"key_session": session_id, "key_toolkit": toolkit_name}
            state = self._write_state(conn, {**key, **pointer})
            latest, primary, current, chain_end = state[0], state[1], state[2], state[3:]
            if after is not None or waiting is not None:  # the chain's word, not the rows'
                word = self._chain_word(conn, session_id, toolkit_name, chain_end)
                if after is not None:
                    _check_current(word, session_id, toolkit_name, after, int(latest), current)
                if waiting is not None:
                    _check_waiting(word, session_id, toolkit_name, waiting, int(latest))
            if primary is None:
                raise StoreError("the store has no active vault key: run `toolkit-vault init`")
            version = int(latest) + 1
            draft = build(version, primary)
            now = time.time()
            row = draft.columns(session_id, toolkit_name, version, now)
            row["mac"] = self.mac(VERSIONS, row)
            details = {"status": draft.status, "changed": sorted(draft.secret_fingerprints)}
            if principal_of(session_id) is not None:
                details["scope"] = "principal"
            event, head = self._link(
                AuditDraft(draft.actor, audit_action, session_id, toolkit_name, version, details),
                chain_end,
            )
            target = {"session_id": session_id, "toolkit_name": toolkit_name, "version": version}
            move = {**pointer, "expected": current, "new_version": version, "now": now}
            move["pointer_mac"] = self.mac(POINTERS, target)
            live = draft.status in LIVE
            if conn.dialect.name == "postgresql" and head["new_seq"] > 1:
                pointer_write = ("insert" if current is None else "update") if live else None
                params = {f"v_{k}": v for k, v in row.items()}
                params |= {f"e_{k}": v for k, v in event.items()}
                _moved_one(conn, _PG_APPEND[pointer_write](conn, params | head | move))
                _wrote(conn, event)
                _appended(conn, (session_id, toolkit_name), version, primary, current, live)
                return version
            _INSERT_VERSION(conn, row)
            if live:
                if current is None:
                    _INSERT_POINTER(conn, move)
                elif _MOVE_POINTER(conn, move).rowcount != 1:
                    raise _pointer_moved()
            _write_link(conn, event, head)
            return version

        def told(result: int | PrincipalEnded) -> None:
            if isinstance(result, PrincipalEnded):
                raise result  # the refusal's event committed; the caller hears the refusal
            if then is not None:
                then(result)

        if after is not None or waiting is not None:
            with suppress(StateUnknown):  # raised again in the write, which stores nothing
                self.chain_state()  # followed now: the write reads only the events since
        # keyed: its group may read its state ahead and pipeline it (`_appends_pipelined`);
        # with no `then`, nothing is left to commit (the caller waits for the version)
        key = (session_id, toolkit_name)
        result = self.transact(work, None if then is None else told, key)
        if isinstance(result, PrincipalEnded):
            raise result
        return cast("int | None", result)

    @staticmethod
    def _principal_ended(conn: Connection, principal_id: str) -> PrincipalEnded | None:
        """(In the write's transaction, under the chain's lock.) Whether the principal's
        token was revoked or expired since its request was let in, or the principal removed:
        a revocation commits its event under the same lock, so it is either seen here or
        ordered after this write. The message is the audit event's word for it."""
        row = _PRINCIPAL_STANDING(conn, {"principal_id": principal_id}).fetchone()
        if row is None:
            return PrincipalEnded("removed")
        if row[0] is not None:
            return PrincipalEnded("revoked")
        if row[1] is not None and time.time() >= row[1]:
            return PrincipalEnded("expired")
        return None

    def _check_imported(self, conn: Connection, toolkit_name: str, digest: str) -> None:
        """(In an append's write transaction.) The package `digest` is still the one imported
        under `toolkit_name` (as its group read it ahead, or read now), or nothing is written.

        A process brings its registry in line with the chain before each configure of an
        imported toolkit (`Vault.toolkit`); this closes the moment between that and the
        write, in which another process may remove the toolkit: the version would otherwise
        become current after its removal, and so configured again by a later import of the
        name. Writes are serialized (SQLite's lock, PostgreSQL's advisory lock, held since
        before the group read ahead), so a removal is either committed before this reads or
        waits for the configure and then ends it."""
        ahead = conn.info.get(_IMPORTS_AHEAD)
        if ahead is not None and toolkit_name in ahead:
            found = ahead[toolkit_name]
        else:
            row = _IMPORTED(conn, {"toolkit_name": toolkit_name}).fetchone()
            found = None if row is None else row[0]
        if found is None:
            raise ToolkitNotFound("toolkit not found")
        if found != digest:
            raise VaultError(
                f"toolkit {toolkit_name!r} was imported again meanwhile: nothing stored"
            )

    def _chain_word(
        self, conn: Connection, scope: str, toolkit: str, chain_end: Sequence[Any]
    ) -> ChainState:
        """(In an append's write transaction.) What the verified chain says of (scope,
        toolkit) at the end this write extends (`chain_word`); StoreError, as any write on
        a chain that cannot be believed, when it cannot be."""
        if self._ledger is None or self._sign is None:
            raise StoreError("the audit key is not loaded")
        end = verified_end(chain_end, self._sign)
        try:
            return chain_word(
                conn, self._ledger, self._sign, self._placeholder, end, scope, toolkit
            )
        except StateUnknown as exc:
            raise StoreError(str(exc)) from None

    def _write_state(self, conn: Connection, params: dict[str, Any]) -> Sequence[Any]:
        """An append's `_WRITE_STATE`: read, or as its group read it ahead (or as the
        group's last append to the same key left it: `_appended`), then with the chain's
        end at the last event this transaction wrote (under the chain's lock, as
        `audit_many` follows its own links). Any other write reads."""
        ahead = conn.info.get(_AHEAD)
        key = (params["session_id"], params["toolkit_name"])
        found: Sequence[Any] | None = None if ahead is None else ahead.get(key)
        if found is None or self._sign is None:
            state: Sequence[Any] = _WRITE_STATE(conn, params).fetchone()
            return state
        written = conn.info.get(_WRITTEN)
        if not written:
            return found
        seq, mac = written[-1]["seq"], written[-1]["mac"]
        return (*found[:3], seq, mac, head_link(self._sign, seq, mac), seq, mac)

    def record_attempt(self, draft: AuditDraft) -> None:
        """Audit a refused attempt (unknown toolkit, invalid config) that stored nothing else."""
        self.transact(lambda conn: self.audit(conn, draft))

    def effective_pointers(self, session_id: str, scope_id: str) -> dict[str, Source]:
        """Per toolkit, where the session's config comes from: its own current version, else
        the one of `scope_id` (its principal's). Pointers as stored: `effective_versions`
        authenticates what is opened."""
        return _effective(session_id, self.fetch(_CURRENT_POINTERS, (session_id, scope_id)))

    def effective_sources(
        self, session_id: str, scope_id: str
    ) -> tuple[dict[str, Source], ChainState | None]:
        """`effective_pointers` and the chain's state, followed in the same read (one
        transaction); None for the state when nothing stored can be believed."""
        if self._placeholder != "?" and self._ledger is not None:
            return self._sources_in_one_statement(session_id, scope_id, self._ledger)
        sql = _CURRENT_POINTERS.replace("?", self._placeholder)
        with self.read() as conn:
            try:
                state: ChainState | None = self.chain_state(conn)
            except StateUnknown:
                state = None
            rows = conn.exec_driver_sql(sql, (session_id, scope_id)).all()
        return _effective(session_id, rows), state

    def _sources_in_one_statement(
        self, session_id: str, scope_id: str, ledger: Ledger
    ) -> tuple[dict[str, Source], ChainState | None]:
        """PostgreSQL: `effective_sources` as one statement in autocommit (`fetch`), one
        snapshot, one round trip where a transaction took four (a list's read, each time
        another write moved the commit mark: a mixed load's lists are mostly these)."""
        mark = self._followed_by(None)
        if ledger.seq == 0 and ledger.failure is None:  # a first walk: in batches
            with suppress(StateUnknown):  # the ledger says why; the state below is None
                self.chain_state()
        witness = self.witnessed()  # before the read, as `chain_state` takes it
        after = ledger.seq
        rows = self.fetch(_FOLLOW_AND_POINTERS, (after, session_id, scope_id))
        if ledger.failure is None:
            self._take_rows(ledger, witness, after, [r for r in rows if r[0] != 2], mark)
        try:
            state: ChainState | None = ledger.require()
        except StateUnknown:
            state = None
        return _effective(session_id, [(r[5], r[6], r[7]) for r in rows if r[0] == 2]), state

    def effective_versions(self, session_id: str, scope_id: str) -> dict[str, VersionRecord]:
        """The current version each toolkit of the session resolves to (`effective_pointers`),
        as `current_versions` reads and authenticates it."""
        found: dict[str, VersionRecord] = {}
        for record in self.current_versions(session_id, scope_id):
            if record.session_id == session_id or record.toolkit_name not in found:
                found[record.toolkit_name] = record
        chain = self._ledger.state if self._ledger is not None else None
        for name, record in found.items():
            own = chain is not None and chain.pointer(session_id, name) is not None
            if record.session_id != session_id and own:
                # The chain says the session has its own config: its pointer was deleted,
                # and the principal's must not stand in for it.
                log.warning("%s of session %s: its own pointer is gone; refused", name, session_id)
                found[name] = replace(record, authentic=False)
        return found

    def current_versions(self, *scope_ids: str) -> list[VersionRecord]:
        """The current version of every toolkit configured in these scopes (sessions or
        principal scopes), each marked `authentic` only when its row and its pointer carry
        valid MACs and the pointer names the version the verified audit chain makes
        current (a pointer put back from an older copy, after a purge or a newer version,
        is not believed; see `ledger`)."""
        for attempt in (1, 2):
            with self.read() as conn:
                try:
                    state: ChainState | None = self.chain_state(conn, force=attempt == 2)
                except StateUnknown as exc:
                    log.error("stored configs are not believed: %s", exc)
                    state = None
                rows = conn.execute(_CURRENT_VERSIONS, {"scopes": list(scope_ids)}).all()
            records = [self._checked(row, state) for row in rows]
            if state is None or all(r.authentic for r in records):
                break  # else once more, after following the chain in the rows' snapshot
        for record in records:
            if not record.authentic:
                log.warning(
                    "%s of scope %s fails its integrity or freshness check; not initialized",
                    record.toolkit_name,
                    record.session_id,
                )
        return records

    def _checked(self, row: Any, state: ChainState | None) -> VersionRecord:
        mapping = row._mapping
        pointer = {
            "session_id": row.session_id,
            "toolkit_name": row.toolkit_name,
            "version": row.pointer_version,
            "mac": row.pointer_mac,
        }
        authentic = (
            state is not None
            and state.pointer(row.session_id, row.toolkit_name) == row.version
            and self.authentic(VERSIONS, mapping)
            and self.authentic(POINTERS, pointer)
        )
        return version_record(mapping, authentic=authentic)

    def version_if_latest(self, scope: str, toolkit: str, version: int) -> VersionRecord | None:
        """A version, only if it is authentic and the last one the verified chain wrote
        for (scope, toolkit) (an intake link's pending version: one edited, deleted or
        followed by another is refused); its status `purged` when the chain purged it,
        whatever its row says (a row put back after the purge)."""
        with self.read() as conn:
            state = self.chain_state(conn)
            key = {"session_id": scope, "toolkit_name": toolkit, "version": version}
            row = conn.execute(_VERSION_ROW, key).first()
        if state.last_version(scope, toolkit) != version or row is None:
            return None
        if not self.authentic(VERSIONS, row._mapping):
            log.warning("%s v%s of scope %s fails its integrity check", toolkit, version, scope)
            return None
        record = version_record(row._mapping)
        if state.was_purged(scope, toolkit, version):  # the chain's word, not the column's
            return replace(record, status="purged")
        return record

    def pointers_at_once(self, session_id: str, scope_id: str) -> dict[str, Source] | None:
        """`effective_pointers`, read only if it needs no wait (SQLite: one `SELECT` on the
        watching connection, which never waits for a lock), so it may run on an event loop;
        PostgreSQL: the pointers the ledger's state makes current, while it is current
        without a read (`chain_state_at_once`). None when it cannot be read so (a lock held,
        anything odd)."""
        if self.notices is not None:
            state = self.chain_state_at_once()
            if state is None:
                return None
            scopes = (scope_id, session_id)
            return {
                name: (scope, version)
                for scope in scopes
                for name, version in state.pointers.get(scope, {}).items()
            }
        rows = self._on_watch(_CURRENT_POINTERS, (session_id, scope_id))
        return None if rows is None else _effective(session_id, rows)

    def versions_by_scope(self) -> dict[str, int]:
        """How many config versions each kind of scope holds (for `check`)."""
        with self.read() as conn:
            total, principals = conn.execute(_VERSIONS_BY_SCOPE).one()
        return {"session": int(total) - int(principals), "principal": int(principals)}


def _check_current(
    word: ChainState, scope: str, toolkit: str, after: int, latest: int, current: Any
) -> None:
    """`after` is still the last version and the current one, as the chain says (the rows
    must agree too). A pointer row put back after a purge deleted it would otherwise let a
    refresh that was under way when the purge landed store its token set again."""
    if not (latest == current == after) or not (
        word.last_version(scope, toolkit) == after and word.pointer(scope, toolkit) == after
    ):
        raise VersionMoved(f"{toolkit}: version {after} is no longer current")


def _check_waiting(word: ChainState, scope: str, toolkit: str, waiting: int, latest: int) -> None:
    """`waiting` is still the last version and not purged, as the chain says (the rows'
    last version must agree too). A purge keeps a shredded version's number, so the number
    alone would let a config typed (or a token exchanged) while the purge landed make the
    toolkit configured again; and the version's `status` column is the database's word: a
    pending intake row put back after the purge would pass it."""
    if latest != waiting or word.last_version(scope, toolkit) != waiting:
        raise VersionMoved(f"{toolkit}: a version was written after {waiting}")
    if word.was_purged(scope, toolkit, waiting):
        raise VersionMoved(f"{toolkit}: version {waiting} was purged", purged=True)


def _effective(session_id: str, rows: Iterable[Sequence[Any]]) -> dict[str, Source]:
    """Per toolkit, the session's own pointer, else its principal's (`_CURRENT_POINTERS`)."""
    found: dict[str, Source] = {}
    for scope, name, version in rows:
        if scope == session_id or name not in found:
            found[name] = (scope, version)
    return found


def _appended(
    conn: Connection, key: tuple[str, str], version: int, primary: str, current: Any, live: bool
) -> None:
    """In a group read ahead: the key's state after this append, for the next one to it."""
    ahead = conn.info.get(_AHEAD)
    if ahead is not None and key in ahead:
        ahead[key] = (version, primary, version if live else current)
