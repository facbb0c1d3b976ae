"""Stored envelopes tampered with at the database level: the opaque error, never a value.

tests/test_crypto.py flips, truncates and extends envelopes in memory, and tests/test_vault.py
moves ciphertext between sessions, versions and fields in the database. This adds what an
attacker with write access to the database can do besides: every byte of a stored wrapped
key and envelope flipped in place, truncation, extension, a downgraded or unknown format
byte, broken base64 and JSON, pointers dropped or added, ciphertext swapped between two
toolkits of one session (same version, same schema: only the toolkit name differs), rows
relabelled to another toolkit or session. Every time: the session still resumes, the toolkit
is reported not configured, no plugin sees a value, `check` counts the failure.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from adversarial_support import AGENT, line
from click.testing import CliRunner
from sqlalchemy import select, update

from toolkit_vault.cli import main
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import FORMAT_VERSION, WRAP_FORMAT, new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.keys.version_check import check_store
from toolkit_vault.store.models import ConfigVersion, CurrentConfig
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource

from tkv_test_plugins import SecretiveToolkit

CANARY_A = "tkv-canary-tamper-a-31c9"
CANARY_A2 = "tkv-canary-tamper-a2-77e0"
CANARY_B = "tkv-canary-tamper-b-0b54"
CANARIES = (CANARY_A, CANARY_A2, CANARY_B)
COLUMNS = ("sealed_secrets", "wrapped_dek", "dek_id", "kek_id", "schema_digest", "public_config")


class SecondSecretive(SecretiveToolkit):
    """Another toolkit with the very same schema: only the toolkit name tells them apart."""

    definition: ClassVar[dict[str, Any]] = {
        **SecretiveToolkit.definition,
        "name": "secretive2",
        "alias": "sec2",
    }


def config(api_key: str) -> dict[str, Any]:
    return {
        "endpoint": "https://api.example.test",
        "api_key": api_key,
        "auth": {"user": "alice", "password": api_key + "-pw"},
        "tokens": ["public-looking", api_key + "-tok"],
    }


class Stored:
    """Session A: secretive and secretive2; session B: secretive. Each one version."""

    def __init__(self, vault: Vault) -> None:
        vault.registry.register(SecondSecretive, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
        self.vault = vault
        self.session_a = self._configure([("secretive", CANARY_A), ("secretive2", CANARY_A2)])
        self.session_b = self._configure([("secretive", CANARY_B)])
        with vault.store.engine.connect() as db:
            rows = db.execute(select(ConfigVersion)).all()
        self.rows = {(r.session_id, r.toolkit_name): r for r in rows}
        self.canary = {
            (self.session_a, "secretive"): CANARY_A,
            (self.session_a, "secretive2"): CANARY_A2,
            (self.session_b, "secretive"): CANARY_B,
        }
        assert len(self.rows) == 3 and all(r.status == "ok" for r in rows)

    def _configure(self, configs: list[tuple[str, str]]) -> str:
        conn = connect(self.vault, AGENT)
        hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
        session: str = json.loads(conn.handle_raw(line(hello))[0])["session_id"]
        for toolkit, key in configs:
            request = {"type": "toolkit/configure/req", "toolkit_name": toolkit}
            out = json.loads(conn.handle_raw(line({**request, "config": config(key)}))[0])
            assert out["status"] == "ok", out
        conn.close()
        return session

    def row(self, session: str, toolkit: str) -> Any:
        return self.rows[(session, toolkit)]

    def set(self, row: Any, **values: Any) -> None:
        with self.vault.store.engine.begin() as db:
            db.execute(update(ConfigVersion).where(ConfigVersion.id == row.id).values(**values))

    def restore(self, row: Any) -> None:
        self.set(row, **{column: getattr(row, column) for column in COLUMNS})

    def fresh(self) -> Vault:
        """The vault as a process that has just started sees it (nothing initialized yet)."""
        return Vault(self.vault.store, self.vault.ring, new_key(), self.vault.registry)

    def resume(self, session: str) -> tuple[list[dict[str, Any]], dict[str, bool]]:
        """Resume the session in a new process: (events, configured per toolkit)."""
        conn = connect(self.fresh(), AGENT)
        hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
        response, *events = (json.loads(out) for out in conn.handle_raw(line(hello)))
        assert response["type"] == "handshake/resp" and response["session_id"] == session
        listed = json.loads(conn.handle_raw(line({"type": "toolkit/list/req"}))[0])
        conn.close()
        text = json.dumps([events, listed])
        assert not any(canary in text for canary in CANARIES)
        return events, {t["name"]: t["configured"] for t in listed["toolkits"]}

    def assert_refused(self, session: str, toolkit: str) -> None:
        """The tampered version never decrypts, never reaches a plugin, and says nothing;
        the session still opens and its intact toolkits are initialized as before."""
        SecretiveToolkit.received.clear()
        events, configured = self.resume(session)
        assert configured[toolkit] is False
        assert [(e["toolkit_name"], e["configured"], e["message"]) for e in events] == [
            (toolkit, False, "stored config failed its integrity check")
        ]
        intact = sorted(c for (s, t), c in self.canary.items() if s == session and t != toolkit)
        assert sorted(r["api_key"] for r in SecretiveToolkit.received) == intact
        record = next(
            r for r in self.vault.store.current_versions(session) if r.toolkit_name == toolkit
        )
        with pytest.raises(DecryptionError) as caught:
            self.fresh().decrypt(record)
        error = caught.value
        assert (str(error), error.details, error.__cause__) == ("decryption failed", [], None)
        assert error.__suppress_context__ or error.__context__ is None


@pytest.fixture
def stored(vault: Vault) -> Iterator[Stored]:
    SecretiveToolkit.received.clear()
    yield Stored(vault)
    SecretiveToolkit.received.clear()


def _envelopes(row: Any) -> dict[str, bytes]:
    return {p: base64.b64decode(v) for p, v in json.loads(row.sealed_secrets).items()}


def _sealed(envelopes: dict[str, bytes]) -> str:
    return json.dumps({p: base64.b64encode(e).decode() for p, e in envelopes.items()})


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_every_byte_of_the_stored_wrapped_key_and_envelope(stored: Stored) -> None:
    row = stored.row(stored.session_a, "secretive")
    wrapped = bytes(row.wrapped_dek)
    for at in range(len(wrapped)):
        stored.set(row, wrapped_dek=_flip(wrapped, at))
        stored.assert_refused(stored.session_a, "secretive")
    stored.restore(row)
    envelopes = _envelopes(row)
    target = envelopes["/api_key"]
    for at in range(len(target)):
        stored.set(row, sealed_secrets=_sealed({**envelopes, "/api_key": _flip(target, at)}))
        stored.assert_refused(stored.session_a, "secretive")
    stored.restore(row)
    _, configured = stored.resume(stored.session_a)
    assert configured == {"filesystem": False, "secretive": True, "secretive2": True}


Mutation = Callable[[Stored], tuple[str, str, dict[str, Any]]]


def _on_a(**values: Any) -> Mutation:
    return lambda s: (s.session_a, "secretive", values)


def _envelope_edit(edit: Callable[[bytes], bytes], pointer: str = "/api_key") -> Mutation:
    def mutate(s: Stored) -> tuple[str, str, dict[str, Any]]:
        envelopes = _envelopes(s.row(s.session_a, "secretive"))
        envelopes[pointer] = edit(envelopes[pointer])
        return s.session_a, "secretive", {"sealed_secrets": _sealed(envelopes)}

    return mutate


def _wrapped_edit(edit: Callable[[bytes], bytes]) -> Mutation:
    def mutate(s: Stored) -> tuple[str, str, dict[str, Any]]:
        return (
            s.session_a,
            "secretive",
            {"wrapped_dek": edit(bytes(s.row(s.session_a, "secretive").wrapped_dek))},
        )

    return mutate


def _map_edit(edit: Callable[[dict[str, str]], Any]) -> Mutation:
    def mutate(s: Stored) -> tuple[str, str, dict[str, Any]]:
        sealed = json.loads(s.row(s.session_a, "secretive").sealed_secrets)
        return s.session_a, "secretive", {"sealed_secrets": json.dumps(edit(sealed))}

    return mutate


def _swap_toolkits(columns: tuple[str, ...]) -> Mutation:
    """secretive2's ciphertext into secretive's row: same session, version and schema."""

    def mutate(s: Stored) -> tuple[str, str, dict[str, Any]]:
        source = s.row(s.session_a, "secretive2")
        return s.session_a, "secretive", {c: getattr(source, c) for c in columns}

    return mutate


def _downgrade(data: bytes, version: int, current: int = FORMAT_VERSION) -> bytes:
    assert data[0] == current
    return bytes([version]) + data[1:]


MUTATIONS: dict[str, Mutation] = {
    "wrapped truncated to nothing": _wrapped_edit(lambda b: b""),
    "wrapped truncated to its header": _wrapped_edit(lambda b: b[:45]),
    "wrapped without its tag": _wrapped_edit(lambda b: b[:-16]),
    "wrapped one byte short": _wrapped_edit(lambda b: b[:-1]),
    "wrapped extended by a byte": _wrapped_edit(lambda b: b + b"\x00"),
    "wrapped extended by a block": _wrapped_edit(lambda b: b + bytes(16)),
    "wrapped format 0": _wrapped_edit(lambda b: _downgrade(b, 0, WRAP_FORMAT)),
    "wrapped format 1": _wrapped_edit(lambda b: _downgrade(b, 1, WRAP_FORMAT)),
    "wrapped format 3": _wrapped_edit(lambda b: _downgrade(b, 3, WRAP_FORMAT)),
    "envelope truncated to nothing": _envelope_edit(lambda b: b""),
    "envelope one byte short": _envelope_edit(lambda b: b[:-1]),
    "envelope extended": _envelope_edit(lambda b: b + b"\x00"),
    "envelope format 0": _envelope_edit(lambda b: _downgrade(b, 0)),
    "envelope format 255": _envelope_edit(lambda b: _downgrade(b, 255)),
    "nested envelope flipped": _envelope_edit(lambda b: _flip(b, len(b) - 1), "/tokens/1"),
    "envelope not base64": _map_edit(lambda m: {**m, "/api_key": "!" + m["/api_key"][1:]}),
    "envelope not a string": _map_edit(lambda m: {**m, "/api_key": 7}),
    "pointer dropped": _map_edit(lambda m: {k: v for k, v in m.items() if k != "/tokens/1"}),
    "pointer added": _map_edit(lambda m: {**m, "/extra": m["/api_key"]}),
    "envelopes swapped": _map_edit(
        lambda m: {**m, "/api_key": m["/auth/password"], "/auth/password": m["/api_key"]}
    ),
    "sealed not an object": _map_edit(lambda m: list(m.values())),
    "sealed not JSON": _on_a(sealed_secrets="{not json"),
    "sealed emptied": _on_a(sealed_secrets="{}"),
    "wrapped key removed": _on_a(wrapped_dek=None),
    "key id removed": _on_a(kek_id=None),
    "data key id changed": _on_a(dek_id="0" * 32),
    "data key id removed": _on_a(dek_id=None),
    "schema digest changed": _on_a(schema_digest="sha256:" + "0" * 64),
    "public config not JSON": _on_a(public_config="{not json"),
    "public config not an object": _on_a(public_config="[]"),
    "public config no longer fits its secrets": _on_a(public_config='{"tokens": "x"}'),
    "ciphertext of another toolkit": _swap_toolkits(("sealed_secrets", "wrapped_dek", "dek_id")),
    "wrapped key of another toolkit": _swap_toolkits(("wrapped_dek", "dek_id")),
    "envelopes of another toolkit": _swap_toolkits(("sealed_secrets",)),
}


def test_tampered_versions_are_refused(stored: Stored) -> None:
    for name, mutate in MUTATIONS.items():
        session, toolkit, values = mutate(stored)
        row = stored.row(session, toolkit)
        stored.set(row, **values)
        try:
            stored.assert_refused(session, toolkit)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
        stored.restore(row)
    _, configured = stored.resume(stored.session_a)
    assert configured == {"filesystem": False, "secretive": True, "secretive2": True}


def _relabel(stored: Stored, row: Any, session: str, toolkit: str) -> None:
    """Move a whole row, and the current pointer with it, to another (session, toolkit)."""
    with stored.vault.store.engine.begin() as db:
        db.execute(
            update(CurrentConfig)
            .where(
                CurrentConfig.session_id == row.session_id,
                CurrentConfig.toolkit_name == row.toolkit_name,
            )
            .values(session_id=session, toolkit_name=toolkit)
        )
        db.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == row.id)
            .values(session_id=session, toolkit_name=toolkit)
        )
    old = (row.session_id, row.toolkit_name)
    stored.rows[(session, toolkit)] = stored.rows.pop(old)
    stored.canary[(session, toolkit)] = stored.canary.pop(old)


@pytest.mark.parametrize("move", ["toolkit", "session"])
def test_rows_moved_to_another_toolkit_or_session(stored: Stored, move: str) -> None:
    if move == "toolkit":
        moved = stored.row(stored.session_b, "secretive")
    else:
        moved = stored.row(stored.session_a, "secretive2")
    _relabel(stored, moved, stored.session_b, "secretive2")
    stored.assert_refused(stored.session_b, "secretive2")


def test_check_reports_tampering_and_nothing_else(stored: Stored) -> None:
    row = stored.row(stored.session_a, "secretive")
    stored.set(row, wrapped_dek=_flip(bytes(row.wrapped_dek), 50))
    stored.set(
        stored.row(stored.session_b, "secretive"),
        **{"sealed_secrets": _sealed(_envelopes(stored.row(stored.session_a, "secretive2")))},
    )
    result = check_store(stored.vault.store, stored.vault.ring_for)
    assert (result["versions"], result["intact"], result["failed"]) == (3, 1, 2)
    done = CliRunner().invoke(main, ["check", "--json"])
    assert done.exit_code == 1
    reported = json.loads(done.stdout)
    assert reported["failed"] == 2
    assert sorted((v["session_id"], v["version"]) for v in reported["failed_versions"]) == sorted(
        [(stored.session_a, 1), (stored.session_b, 1)]
    )
    assert done.stderr.strip() == "toolkit-vault: error: 2 stored versions failed their check"
    for canary in CANARIES:
        assert canary not in done.stdout + done.stderr


def test_an_edited_public_field_is_refused(stored: Stored) -> None:
    """Whoever can write the database must not point a stored credential at another
    endpoint: the wrapped data key is bound to a digest of the public half."""
    row = stored.row(stored.session_a, "secretive")
    public = json.loads(row.public_config)
    stored.set(row, public_config=json.dumps({**public, "endpoint": "https://evil.test"}))
    stored.assert_refused(stored.session_a, "secretive")
