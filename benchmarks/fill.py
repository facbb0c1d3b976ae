"""Bulk-create stored state directly, as configure would have written it (fast, not timed)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import insert

from toolkit_vault import crypto
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import RecordContext
from toolkit_vault.store.integrity import POINTERS, SESSIONS, VERSIONS
from toolkit_vault.store.models import ConfigVersion, CurrentConfig, SessionRow
from toolkit_vault.store.records import VersionDraft

from .toolkit import bench_config

__all__ = ["fill_sessions", "fill_versions", "public_and_secrets"]

CHUNK = 2000


def public_and_secrets(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    config = bench_config(n)
    secrets = {"/api_key": config.pop("api_key"), "/password": config.pop("password")}
    return config, secrets


def _version_row(
    vault: Vault, session_id: str, toolkit: str, version: int, n: int
) -> dict[str, Any]:
    digest = vault.registry.get(toolkit).schema.digest
    public, secrets = public_and_secrets(n)
    context = RecordContext(session_id, toolkit, version, digest, crypto.public_digest(public))
    sealed = crypto.seal_config(vault.ring, vault._fingerprint_key, context, secrets)
    draft = VersionDraft.of(
        "ok", "Toolkit configured successfully", "local", digest, public, sealed
    )
    row = draft.columns(session_id, toolkit, version, time.time())
    return {**row, "mac": vault.store.mac(VERSIONS, row)}


def _session_row(vault: Vault, session_id: str, created_at: float) -> dict[str, Any]:
    row = {"session_id": session_id, "principal_id": "local", "created_at": created_at}
    return {**row, "mac": vault.store.mac(SESSIONS, row)}


def _pointer_row(vault: Vault, version: dict[str, Any]) -> dict[str, Any]:
    row = {k: version[k] for k in ("session_id", "toolkit_name", "version")}
    return {**row, "updated_at": 0.0, "mac": vault.store.mac(POINTERS, row)}


def _chunks(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def fill_sessions(vault: Vault, sessions: int, toolkits: list[str], prefix: str = "s") -> None:
    """`sessions` sessions, each with one current sealed version of every toolkit listed."""
    names = [f"{prefix}-{n:06d}" for n in range(sessions)]
    with vault.store.engine.begin() as conn:
        for start in range(0, sessions, CHUNK):
            conn.execute(
                insert(SessionRow),
                [_session_row(vault, s, time.time()) for s in names[start : start + CHUNK]],
            )
        rows = (
            _version_row(vault, s, t, 1, i)
            for i, (s, t) in enumerate((s, t) for s in names for t in toolkits)
        )
        for chunk in _chunks(rows):
            conn.execute(insert(ConfigVersion), chunk)
            conn.execute(insert(CurrentConfig), [_pointer_row(vault, r) for r in chunk])


def fill_versions(vault: Vault, count: int, per_session: int = 100) -> None:
    """`count` sealed versions of `bench`, `per_session` versions in each of a few sessions."""
    sessions = [f"r-{n:06d}" for n in range((count + per_session - 1) // per_session)]
    with vault.store.engine.begin() as conn:
        conn.execute(
            insert(SessionRow),
            [_session_row(vault, s, 0.0) for s in sessions],
        )
        rows = (
            _version_row(vault, sessions[n // per_session], "bench", n % per_session + 1, n)
            for n in range(count)
        )
        for chunk in _chunks(rows):
            conn.execute(insert(ConfigVersion), chunk)
