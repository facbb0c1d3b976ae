"""Opening a stored config version in memory, the one way `check` does it: in this process,
or in a worker child (`python -m toolkit_vault.keys.opening`, fed by `version_check`).

A version is opened from its row as stored (`COLUMNS`): the record it makes
(`records.version_record`, which marks a damaged row), its sealed half, then every value
under its data key. Nothing opened is kept; the answer is only whether it opened.

A worker is handed the vault key ring once, on its stdin (a pipe only its parent holds;
again whenever the parent's ring grew), then batches of rows; it answers each batch with a
byte a row (`OPENS`, `FAILS`, or `RAISED` when opening raised anything but the opaque
`DecryptionError`: the parent then opens that row itself, so it raises there as it always
did). A key, a value or a plaintext never leaves it. SECURITY.md says why this shape.
"""

from __future__ import annotations

import operator
import os
import pickle
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.crypto import KeyRing
from toolkit_vault.errors import DecryptionError
from toolkit_vault.store.records import version_record

__all__ = ["COLUMNS", "FAILS", "OPENS", "RAISED", "opens", "sent", "serve"]

# the columns `records.version_record` reads: all a version's opening needs
COLUMNS = (
    "session_id",
    "toolkit_name",
    "version",
    "status",
    "schema_digest",
    "public_config",
    "sealed_secrets",
    "dek_id",
    "kek_id",
    "wrapped_dek",
)
FAILS, OPENS, RAISED = 0, 1, 2
_PICK = operator.itemgetter(*COLUMNS)


def opens(ring: KeyRing, row: Mapping[str, Any]) -> bool:
    """Whether the version `row` holds opens whole under `ring` (every value decrypted and
    parsed in memory, then dropped)."""
    try:
        context, sealed = version_record(row).sealed()
        crypto.open_config(ring, context, sealed)
    except DecryptionError:
        return False
    return True


def sent(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row's `COLUMNS` as a worker is sent them (a driver's memoryview of the wrapped key,
    the one binary column, as the bytes it views, which `version_record` reads alike)."""
    values: tuple[Any, ...] = _PICK(row)
    if type(values[-1]) is memoryview:
        values = (*values[:-1], bytes(values[-1]))
    return values


def _answers(ring: KeyRing, rows: Sequence[Sequence[Any]]) -> bytes:
    out = bytearray()
    for values in rows:
        try:
            out.append(OPENS if opens(ring, dict(zip(COLUMNS, values, strict=True))) else FAILS)
        except Exception:  # the parent opens it again, and it raises there
            out.append(RAISED)
    return bytes(out)


def serve() -> None:
    """A worker: (ring material or None, rows) until its stdin ends, each answered on
    stdout as its length in 4 bytes, then a byte a row. Only its parent writes to it."""
    given = sys.stdin.buffer
    ring: KeyRing | None = None
    while True:
        try:
            material, rows = pickle.load(given)  # noqa: S301 (its parent, over a pipe only it holds)
        except EOFError:
            return
        if material is not None:
            ring = KeyRing.revealed(material)
        assert ring is not None
        answer = _answers(ring, rows)
        data = len(answer).to_bytes(4, "big") + answer
        while data:
            data = data[os.write(1, data) :]


if __name__ == "__main__":
    serve()
