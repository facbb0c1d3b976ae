"""The vault's SQLite connections bind bytes, None and bools past the adaptation protocol
(`store.database._bind_as_given`): each is stored as the driver stored it before, a
subclass of bytes still binds as a blob, and the driver's own types are untouched."""

from __future__ import annotations

import sqlite3

import toolkit_vault.store.database  # noqa: F401 (registers the adapters)


class _Blob(bytes):
    pass


def test_bytes_none_and_bools_bind_as_they_always_did() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (v)")
    values = [b"\x00\xff", _Blob(b"ab"), None, True, False, 7, 1.5, "text", bytearray(b"x")]
    db.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    stored = db.execute("SELECT typeof(v), v FROM t ORDER BY rowid").fetchall()
    assert stored == [
        ("blob", b"\x00\xff"),
        ("blob", b"ab"),
        ("null", None),
        ("integer", 1),
        ("integer", 0),
        ("integer", 7),
        ("real", 1.5),
        ("text", "text"),
        ("blob", b"x"),
    ]
