"""Config history for auditors: what changed, who changed it and when, without a secret.

History shows what changed, who changed it and when, without any secret: the public half
of each config as stored, and per secret path an HMAC fingerprint that is equal between
two versions of the same (session, toolkit) exactly when the value is (so "changed /
unchanged" shows, the value does not; the same value elsewhere fingerprints otherwise).
A purged version (`core.purge`) shows as its audit skeleton only: status `purged`, its
public half and fingerprints empty.

Both scopes (`scopes`) show alike: a principal's own configs are the versions of its scope
id. The reads are `store.history_queries`'; here they are said in the documented shape, and
times are written and read (`iso_time`, `parse_time`) for the trail and export too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from toolkit_vault.errors import VaultError
from toolkit_vault.store.history_queries import (
    HistoryFilter,
    StoredVersion,
    config_versions,
    principal_named,
    sessions_like,
)
from toolkit_vault.store.scopes import scope_of
from toolkit_vault.store.storage import Store

__all__ = ["find_principal", "history", "iso_time", "parse_time", "session_matches"]


def iso_time(epoch: float) -> str:
    """ISO 8601 in UTC with milliseconds, `Z` suffix: sortable and unambiguous."""
    text = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """`--since`: epoch seconds, or an ISO 8601 date or date-time (naive means UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise VaultError(
            f"cannot read {text!r} as a time: use epoch seconds or ISO 8601 "
            "(2026-01-31 or 2026-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def find_principal(store: Store, name_or_id: str) -> str:
    """A principal's id, by id or name (as `tokens revoke` takes it)."""
    found = principal_named(store, name_or_id)
    if found is None:
        raise VaultError(f"no principal named or with id {name_or_id!r}")
    return found


def session_matches(store: Store, typed: str, limit: int = 6) -> list[str]:
    """The session ids `typed` names, as the CLI reads them: the id itself, else every id
    it is a prefix of (at most `limit`; more than one is ambiguous)."""
    return sessions_like(store, typed, limit)


def history(
    store: Store,
    session: str | None = None,
    toolkit: str | None = None,
    since: float | None = None,
    principal: str | None = None,
) -> list[dict[str, Any]]:
    """Every stored config version, oldest first, in the documented `--json` shape;
    `principal` (id or name) keeps that principal's: its own and its sessions'."""
    if "\x00" in (session or "") + (toolkit or ""):
        return []  # PostgreSQL text cannot hold NUL, so no row matches: not even a lookup
    owner = None if principal is None else find_principal(store, principal)
    wanted = HistoryFilter(session=session, toolkit=toolkit, since=since, principal=owner)
    return [_entry(row) for row in config_versions(store, wanted)]


def _entry(row: StoredVersion) -> dict[str, Any]:
    """One version for auditors; a row edited into something unreadable shows as such
    (`damaged`) rather than stopping the whole history."""
    return {
        "session_id": row.session_id,
        "scope": scope_of(row.session_id),
        "principal_id": row.owner,
        "toolkit_name": row.toolkit_name,
        "version": row.version,
        "status": row.status,
        "message": row.message,
        "actor": row.actor,
        "time": iso_time(row.created_at),
        "ts": row.created_at,
        "schema_digest": row.schema_digest,
        "public_config": _object(row.public_config),
        "secret_fingerprints": _object(row.secret_fingerprints),
        "current": row.current_version == row.version,
    }


def _object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {"damaged": True}
    return value if isinstance(value, dict) else {"damaged": True}
