"""The store: ciphertext, wrapped keys and metadata in, the same out; no key ever.

`Store` is the one facade the rest of the vault holds. Its parts are one module each,
stacked as base classes, each over the ones it calls (a straight line, so no part imports
one above it and `import-linter`'s acyclic contract holds): `base` (the shared state, row
MACs), `marks` (commit marks), `transactions` (reads, writes, group commit), `following`
(the chain followed, the witness), `links` (chain appends), `versions` (config versions).
Mixins rather than composition: every part reads the same few fields (engine, keys, ledger,
witness) and calls the parts below it, so as one object they keep each method's body as it
was, and callers (and the modules beside this one that take a `Store`) see one class with
one set of methods. The SQL they send is in `statements`. This module makes the state
(`__init__`) and holds sessions and principal scopes.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

from sqlalchemy import Connection, Engine

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.call_chains import CallChain
from toolkit_vault.store.call_records import CallRecords, ExpectedCall
from toolkit_vault.store.chain import Signer
from toolkit_vault.store.checkpoints import CHECKPOINT_RECORD, Checkpoints
from toolkit_vault.store.integrity import PRINCIPALS, SESSIONS, RowAuthenticator
from toolkit_vault.store.ledger import Ledger
from toolkit_vault.store.notices import CommitNotices
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.statements import (
    _INSERT_PRINCIPAL,
    _INSERT_SESSION,
    _PG_BEGIN_WRITE,
    _PRINCIPAL_ID,
    _SESSION_ID,
    _SESSION_ROW,
)
from toolkit_vault.store.transactions import AuditSink, _busy_s
from toolkit_vault.store.versions import ConfigVersions, Source
from toolkit_vault.store.witness import Witness
from toolkit_vault.store.writer import Writer

__all__ = ["AuditSink", "Source", "Store"]

log = logging.getLogger(__name__)


class Store(ConfigVersions):
    """Repository over one engine. `sign` computes audit chain links and `rows` the MACs of
    authenticated rows; both hold keys the database only has wrapped (see `integrity`)."""

    def __init__(
        self,
        engine: Engine,
        sign: Signer | None = None,
        rows: RowAuthenticator | None = None,
        witness: Witness | None = None,
        audit_sink: AuditSink | None = None,
    ) -> None:
        self.engine = engine
        self._sign = sign
        self._rows = rows
        self.witness = witness
        self.audit_sink = audit_sink  # the audit devices: each write's events, in seq order
        self._ledger: Ledger | None = None if sign is None else Ledger(sign)
        self._followed_mark: int | None = None
        self._accepting_restore = False
        self.makes_witness = False  # `init`: a home without a witness gets one
        self._witness_verified: tuple[int, bytes, bytes] | None = None
        self._witness_looked_at: list[tuple[int, bytes, bytes]] | None = None  # `witnessed`
        # Named in the home, beside the witness (`checkpoints`); no home, no checkpoints.
        record = None if witness is None else witness.path.parent / CHECKPOINT_RECORD
        self.checkpoints = Checkpoints(record)
        # This process's writes queue for its writer thread, which commits them in groups
        # (`writer`), and a write of its own (`write`) waits on the same lock. SQLite: instead
        # of on its busy handler, which sleeps up to 100 ms between tries (and so gave
        # concurrent writers a p99 of seconds: BENCHMARKS.md); other processes queue on the
        # file. PostgreSQL: a group holds the chain's advisory lock once for all the writes
        # queued meanwhile, instead of each write taking it in a transaction of its own (its
        # throughput fell as connections rose: BENCHMARKS.md); other processes queue on it.
        self._writers = threading.RLock()
        self._writer = Writer(self._commit_group, self._again, self._writers, _busy_s)
        self.notices: CommitNotices | None = None  # PostgreSQL's commit mark, once `listen`ed
        self._notice_token = secrets.token_hex(8)  # tells this process's notices from others'
        self._pg_begin_write = _PG_BEGIN_WRITE.format(self._notice_token)
        self._placeholder = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        # The SQLite file a connection of the store's own watches (`_on_watch`); mode=rw: it
        # never creates a missing file. None: nothing to watch (PostgreSQL, in memory, URI).
        url = engine.url
        on_file = url.database not in (None, "", ":memory:") and not url.query
        self._watched: str | None = None
        if url.get_backend_name() == "sqlite" and on_file and url.database:
            self._watched = Path(url.database).resolve().as_uri() + "?mode=rw"
        self._watch: sqlite3.Connection | None = None
        self._watch_lock = threading.Lock()
        self.call_chain = CallChain(self)  # this process's call records' chain
        chain = self.call_chain
        self._calls = CallRecords(  # `record_call`
            chain.now, chain.leave, chain.append, self._writer.is_writer_thread
        )

    def set_keys(self, sign: Signer, rows: RowAuthenticator | None) -> None:
        self._sign, self._rows = sign, rows
        self._ledger, self._followed_mark = Ledger(sign), None

    def record_call(self, draft: AuditDraft, *, wait: bool = True) -> None:
        """Audit one tool call (`tools.call_audit.tool_called_draft`), in a batch with the
        calls that end meanwhile, on this process's call chain (`call_chains`): one write
        for them all, and never the main chain's lock (`call_records`). Returns once
        committed, raising StoreError when it was not; with `wait=False` at once (the
        record is committed soon after)."""
        self._calls.record(draft, wait=wait)

    def expect_call(self) -> ExpectedCall:
        """A call just began on a transport (`CallRecords.expect`): a batch of records
        waits a moment for its record; `end` it once answered."""
        return self._calls.expect()

    def call_under_way(self) -> AbstractContextManager[None]:
        """Around a call whose record this context will make: a batch waits a moment for
        it (`CallRecords.under_way`)."""
        return self._calls.under_way()

    def call_in_tool(self) -> AbstractContextManager[None]:
        """Around the tool of that call: no batch waits for it meanwhile."""
        return self._calls.in_tool()

    def call_signer(self) -> Signer | None:
        """What links the call chains: the audit key's, as the main chain's (`CallChain`)."""
        return self._sign

    def close(self) -> None:
        """Let a checkpoint being written finish, anchor this process's call chain (a clean
        shutdown), then close every pooled connection."""
        self.checkpoints.finish()
        self.call_chain.close()
        super().close()

    def ensure_principal(self, principal_id: str, name: str, role: str) -> None:
        """The tokenless principal of local transports (stdio), made once by `init`."""
        with self.read() as conn:
            found = conn.execute(_PRINCIPAL_ID, {"principal_id": principal_id}).first()
        if found is None:
            row = {
                "principal_id": principal_id,
                "name": name,
                "role": role,
                "token_hash": None,
                "created_at": time.time(),
                "revoked_at": None,
            }
            self.transact(
                lambda conn: conn.execute(
                    _INSERT_PRINCIPAL, {**row, "mac": self.mac(PRINCIPALS, row)}
                )
            )

    def create_session(self, session_id: str, principal_id: str) -> None:
        row = {"session_id": session_id, "principal_id": principal_id, "created_at": time.time()}

        def work(conn: Connection) -> None:
            conn.execute(_INSERT_SESSION, {**row, "mac": self.mac(SESSIONS, row)})
            self.audit(
                conn, AuditDraft(principal_id, AuditAction.SESSION_CREATED, session_id=session_id)
            )

        self.transact(work)

    def session_owned_by(self, session_id: str, principal_id: str) -> bool:
        """True only for a session row the vault wrote for this principal: a row whose owner
        was edited (or that was inserted by hand) fails its MAC and owns nothing."""
        with self.read() as conn:
            row = conn.execute(_SESSION_ROW, {"session_id": session_id}).first()
        if row is None or row.principal_id != principal_id:
            return False
        if not self.authentic(SESSIONS, row._mapping):
            log.warning("session %s fails its integrity check; refused", session_id)
            return False
        return True

    def ensure_scope(self, scope_id: str, principal_id: str) -> None:
        """The `sessions` row of a principal scope, made (and audited like a session) on its
        first use; a concurrent maker's row is taken as is."""
        row = {"session_id": scope_id, "principal_id": principal_id, "created_at": time.time()}

        def work(conn: Connection) -> None:
            found = conn.execute(_SESSION_ID, {"session_id": scope_id}).first()
            if found is None:
                conn.execute(_INSERT_SESSION, {**row, "mac": self.mac(SESSIONS, row)})
                details = {"scope": "principal"}
                made = AuditDraft(
                    principal_id, AuditAction.SESSION_CREATED, scope_id, details=details
                )
                self.audit(conn, made)

        self.transact(work)
