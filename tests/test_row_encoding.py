"""A row MAC's encoding: the inline path (`integrity._encode`) writes the very bytes the
field-by-field definition (`integrity._field`) does, for every value a row can hold, so a
stored MAC never changes with it (issue 53 made the inline path for speed)."""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy import update

from test_vault import configure, handshake, secret_config
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes, state_mac
from toolkit_vault.store.integrity import VERSIONS, RowAuthenticator, _encode, _field
from toolkit_vault.store.models import ConfigVersion


class _Word(enum.StrEnum):
    OK = "ok"


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(),
    st.binary().map(bytearray),
    st.binary().map(memoryview),
    st.just(_Word.OK),
    st.just(2**70),
)


def _outcome(work: Any) -> bytes | type[BaseException]:
    try:
        result: bytes = work()
        return result
    except (TypeError, UnicodeEncodeError) as exc:
        return type(exc)


@given(st.text(min_size=1, max_size=20), st.lists(_VALUES, max_size=12))
@example("t", ["\ud800"])  # a lone surrogate is refused either way
@example("t", [object()])  # a type no row holds is refused either way
def test_the_inline_encoding_is_the_definition(table: str, values: list[Any]) -> None:
    def defined() -> bytes:
        return table.encode() + b"".join(_field(value) for value in values)

    assert _outcome(lambda: _encode(table, tuple(values))) == _outcome(defined)


def test_a_row_mac_is_the_state_mac_of_its_encoding() -> None:
    key = SecretBytes(bytes(range(32)))
    row = {
        "session_id": "s",
        "toolkit_name": "t",
        "version": 3,
        "status": "ok",
        "message": None,
        "actor": "a",
        "created_at": 1.5,
        "schema_digest": "d",
        "public_config": "{}",
        "secret_fingerprints": None,
        "dek_id": "k",
        "wrapped_dek": b"w",
    }
    covered = ("s", "t", 3, "ok", None, "a", 1.5, "d", "{}", None, "k", True)
    authenticator = RowAuthenticator(key)
    assert authenticator.mac(VERSIONS, row) == state_mac(key, _encode(VERSIONS, covered))
    assert authenticator.verify(VERSIONS, {**row, "mac": authenticator.mac(VERSIONS, row)})


def test_a_version_purged_with_its_event_verifies_and_the_status_column_alone_does_not(
    vault: Vault,
) -> None:
    """`reconcile` asks for a version's purge event only when its row says purged (issue
    53): a purge made by the vault verifies; a live row marked purged by hand does not."""
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    conn2, other = handshake(vault)
    configure(conn2, "secretive", secret_config())
    vault.purge("operator", session)
    assert vault.verify_audit(full=True).ok
    with vault.store.engine.begin() as db:
        db.execute(
            update(ConfigVersion).where(ConfigVersion.session_id == other).values(status="purged")
        )
    report = vault.verify_audit(full=True)
    assert not report.ok and report.state_problem_count >= 1
