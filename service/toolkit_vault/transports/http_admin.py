"""The admin API under `/v1/`: what `history`, `audit verify`, `keys status` and `check`
print, as JSON, for the roles allowed to see it. Each route is a thin shell over one service
function, run in a worker thread; `create_app` mounts these routes with its role checks
(`Guards`), so a new admin route is a function here, not another closure inside the app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from toolkit_vault.access.principals import Principal
from toolkit_vault.audit.history import history, parse_time
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import KeyProviderError, VaultError
from toolkit_vault.keys.admin import key_status
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.transports.refusals import Refused

__all__ = ["Guards", "admin_routes"]

SINCE_UNREADABLE = "since: use epoch seconds or ISO 8601 (2026-01-31 or 2026-01-31T12:00:00Z)"


@dataclass(frozen=True)
class Guards:
    """What an admin route needs from the app: the vault and its key provider, the worker
    threads that run the synchronous service API, and the role checks (FastAPI
    dependencies answering the request's `Principal`, or refusing it)."""

    vault: Vault
    provider: KeyProvider
    in_thread: Callable[..., Awaitable[Any]]
    as_auditor: Callable[..., Awaitable[Principal]]
    as_operator: Callable[..., Awaitable[Principal]]


class HistoryOut(BaseModel):
    versions: list[dict[str, Any]]


class KeysOut(BaseModel):
    provider: dict[str, Any]
    master_keys: list[dict[str, Any]]
    vault_keys: list[dict[str, Any]]
    keys: list[dict[str, Any]]


def admin_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    vault, in_thread = guards.vault, guards.in_thread

    @router.get("/v1/history", response_model=HistoryOut)
    async def v1_history(
        session: str | None = Query(default=None, max_length=200),
        toolkit: str | None = Query(default=None, max_length=200),
        since: str | None = Query(default=None, max_length=64),
        _: Principal = Depends(guards.as_auditor),
    ) -> HistoryOut:
        """Config versions: public config and secret fingerprints only (`history --json`)."""
        try:
            since_ts = parse_time(since) if since else None
        except VaultError:  # its message repeats the text: a problem's detail never does
            details = [{"pointer": "/query/since", "keyword": "format"}]
            raise Refused(422, "INVALID_MESSAGE", SINCE_UNREADABLE, details=details) from None
        versions = await in_thread(history, vault.store, session, toolkit, since_ts)
        return HistoryOut(versions=versions)

    @router.get("/v1/audit/verify")
    async def v1_audit_verify(_: Principal = Depends(guards.as_auditor)) -> dict[str, Any]:
        """Walk the audit chain (as `audit verify --json`)."""
        report = await in_thread(vault.verify_audit)
        verified: dict[str, Any] = report.as_json()
        return verified

    @router.get("/v1/keys/status", response_model=KeysOut)
    async def v1_keys_status(_: Principal = Depends(guards.as_operator)) -> KeysOut:
        """Both key layers: master keys and vault keys (as `keys status --json`)."""
        return KeysOut(**await in_thread(key_status, vault.store, guards.provider))

    @router.get("/v1/check")
    async def v1_check(
        full: bool = False, _: Principal = Depends(guards.as_operator)
    ) -> dict[str, Any]:
        """Decrypt-verify the stored versions in memory (as `check --json`: those since the
        last check's mark, every one with `?full=true`): operators only, as it decrypts."""
        try:
            result: dict[str, Any] = await in_thread(partial(vault.check, full=full))
        except KeyProviderError as exc:  # a vault key made elsewhere, the provider down
            raise Refused(503, "RUNTIME_ERROR", exc.message) from None
        return result

    return router
