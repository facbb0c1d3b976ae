"""Refresh leases: one process at a time asks an OAuth server for a (scope, toolkit)'s next
token set, and none holds the database while it does.

A token request may take seconds; made inside a write transaction it held every writer of
the vault (SQLite's one writer, PostgreSQL's chain lock) for as long. So the asker first
takes a lease (`claim`): a compare-and-set on one `refresh_leases` row in a short write
transaction, which every writer of every process takes in turn. It then asks outside any
transaction and appends the new version only if the one it read is still the last and
still current (the caller's compare-and-set, `Store.append_version`'s `after`). The
others find the lease held and wait for that version. A lease ends when its holder
`release`s it, or at `expires_at` (a killed holder's). The row also counts the server's
consecutive failures (`failed`) and says when the next try may be made, so a server that is
down is never asked in a loop; a purge drops it with what it shreds (`drop_leases`).

The row carries no MAC, and nothing it says can make a version stored: the append checks
the chain's word (`chain_word`), not this row. Its worst case is bounded instead (SECURITY.md,
"Freshness"): a row that claims a lease longer than the vault ever takes (`longest_lease`)
or a backoff longer than it ever sets (`longest_backoff`) is not believed, so one write
holds refreshes up no longer than the vault's own lease or backoff would; a writer who keeps
writing it can keep a refresh waiting (each initialization waits at most `WAIT_S` and is
told to try again), let two happen (one is stored), or, with a failure count, make the
next real failure of the server ask a person to connect again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, delete, insert, select, update

from toolkit_vault.store.models import RefreshLease
from toolkit_vault.store.storage import Store

__all__ = ["LONGEST_BACKOFF", "LONGEST_LEASE", "Claim", "RefreshLeases", "drop_leases"]

# What the vault itself writes at most (`core.oauth_refresh` passes its own: its LEASE_TTL,
# and RETRY_SPACING doubled up to the last failure before a person is asked).
LONGEST_LEASE = 60.0
LONGEST_BACKOFF = 240.0
# Added to both when judging a row: its writer's clock may read later than the reader's (the
# reader took its `now` before its transaction waited on the writer's; replicas' clocks).
LEEWAY = 30.0


@dataclass(frozen=True)
class Claim:
    """What `claim` found: `won` (the caller holds the lease and asks), else why not:
    another holds it, or the server failed `failures` times and is not asked before
    `retry_at`."""

    won: bool
    failures: int = 0
    retry_at: float = 0.0

    def backing_off(self, now: float) -> bool:
        return not self.won and self.retry_at > now


class RefreshLeases:
    def __init__(
        self,
        store: Store,
        *,
        longest_lease: float = LONGEST_LEASE,
        longest_backoff: float = LONGEST_BACKOFF,
    ) -> None:
        """`longest_lease`, `longest_backoff`: the longest the vault ever writes; a row
        claiming more was not written by it and is not believed (see the module)."""
        self.store = store
        self.longest_lease, self.longest_backoff = longest_lease, longest_backoff

    @staticmethod
    def _key(scope: str, toolkit: str) -> list[ColumnElement[bool]]:
        return [RefreshLease.session_id == scope, RefreshLease.toolkit_name == toolkit]

    def _row(self, conn: Connection, scope: str, toolkit: str) -> Row[Any] | None:
        return conn.execute(select(RefreshLease).where(*self._key(scope, toolkit))).first()

    def peek(self, scope: str, toolkit: str, version: int, holder: str, now: float) -> Claim:
        """`claim`'s answer as far as a read can tell, writing nothing: `won` means the
        lease looks free (a `claim` may take it)."""
        with self.store.read() as conn:
            row = self._row(conn, scope, toolkit)
        return self._judge(row, version, holder, now)

    def claim(
        self, scope: str, toolkit: str, version: int, holder: str, now: float, ttl: float
    ) -> Claim:
        """Take the lease for a refresh of `version` until `now + ttl`, unless another holds
        it or the server is being backed off; failures counted for an older version are
        forgotten (a person connected again since)."""

        def work(conn: Connection) -> Claim:
            row = self._row(conn, scope, toolkit)
            found = self._judge(row, version, holder, now)
            if not found.won:
                return found
            values = {"version": version, "holder": holder, "expires_at": now + ttl}
            values |= {"failures": found.failures, "retry_at": found.retry_at}
            if row is None:
                row_key = {"session_id": scope, "toolkit_name": toolkit}
                conn.execute(insert(RefreshLease).values(row_key | values))
            else:
                conn.execute(update(RefreshLease).where(*self._key(scope, toolkit)).values(values))
            return found

        claim: Claim = self.store.transact(work)
        return claim

    def release(self, scope: str, toolkit: str, holder: str) -> None:
        """The holder is done (the version appended, or not needed): the row goes, and with
        it the failures counted."""
        where = [*self._key(scope, toolkit), RefreshLease.holder == holder]
        self.store.transact(lambda conn: conn.execute(delete(RefreshLease).where(*where)))

    def failed(self, scope: str, toolkit: str, holder: str, now: float, spacing: float) -> int:
        """The holder's try failed (the server down): count it, give the lease up, and let
        nobody try again for `spacing` seconds, doubled with each failure in a row. Returns
        the failures in a row so far."""

        def work(conn: Connection) -> int:
            row = self._row(conn, scope, toolkit)
            if row is None or row.holder != holder:
                return 0  # the lease expired and another took it: its count stands
            failures = int(row.failures) + 1
            retry_at = now + spacing * 2 ** (failures - 1)
            values = {"holder": None, "expires_at": 0.0, "failures": failures}
            conn.execute(
                update(RefreshLease)
                .where(*self._key(scope, toolkit))
                .values(values | {"retry_at": retry_at})
            )
            return failures

        failures: int = self.store.transact(work)
        return failures

    def _judge(self, row: Row[Any] | None, version: int, holder: str, now: float) -> Claim:
        if row is None:
            return Claim(True)
        if row.version < version:  # a lease or count of an older version: moot
            return Claim(True)
        if row.version > version:  # the caller read a version since replaced: it waits
            return Claim(False, row.failures, 0.0)
        held = now < row.expires_at <= now + self.longest_lease + LEEWAY  # longer: not the vault's
        if row.holder not in (None, holder) and held:
            return Claim(False, row.failures, 0.0)
        if now < row.retry_at <= now + self.longest_backoff + LEEWAY:
            return Claim(False, row.failures, row.retry_at)
        return Claim(True, row.failures, min(row.retry_at, now))


def drop_leases(conn: Connection, scope: str, toolkit: str | None = None) -> None:
    """(In the caller's transaction.) Forget the leases of a scope (or of one toolkit in
    it): a purge's, whose connections no longer exist."""
    where = [RefreshLease.session_id == scope]
    if toolkit is not None:
        where.append(RefreshLease.toolkit_name == toolkit)
    conn.execute(delete(RefreshLease).where(*where))
