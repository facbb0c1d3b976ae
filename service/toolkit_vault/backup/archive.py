"""The backup file: JSON lines, versioned, authenticated under a key only the vault holds.

```
{"format": "toolkit-vault-backup", "version": 1, "created_at": ..., "schema_revision":
 "0006", "source": "sqlite", "vault_id": ..., "key_provider": "file", "key_options": {},
 "head": {"seq": 42, "mac": "<hex>", "head_mac": "<hex>"},
 "tables": {"vault_keys": ["key_id", ...], ...}}              line 1: the header
{"t": "vault_keys", "r": ["vk-1", "<base64>", true, ...]}      one line per row, as stored
...
{"rows": {"vault_keys": 1, ...}, "mac": "<hex>"}               the last line: the trailer
```

Rows are the database's rows as stored: ciphertext stays ciphertext, wrapped keys stay
wrapped, every row MAC and chain link is kept, so nothing is decrypted to make a backup
and the restored rows verify exactly as they did. Binary columns are base64; text, numbers
(Python's float repr round-trips exactly) and booleans are JSON. Tables come in dependency
order (a row's foreign key names a row already loaded), each ordered by primary key.

`mac` = HMAC-SHA256(backup key, LABEL || SHA-256(every byte before the trailer line) ||
canonical rows count), with backup key = HKDF(state key, "backup"). The state key is the
vault-wide key that signs rows; the backup itself carries it only wrapped (by a vault key,
itself wrapped by the master key). So only someone who can unwrap the backup's own vault
keys (the master key, or K recovery shares) can check a backup, and no one without them
can forge or edit one: a changed, added, removed or reordered byte, a truncated file (no
trailer) and a backup of a vault under another master key all fail. (A backup of another
vault under the same master key is that vault's genuine backup and verifies: `restore`
tells whose it is, from the home's record and witness.) The state key never changes
(rotations rewrap it), so a backup stays verifiable as long as its vault keys open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from binascii import a2b_base64
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import IO, Any, Protocol

import orjson

from toolkit_vault import crypto
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.store.snapshots import binary_columns

__all__ = [
    "FORMAT",
    "VERSION",
    "BackupError",
    "Header",
    "Reader",
    "Writer",
    "backup_key",
    "decode_row",
    "encode_row",
]

FORMAT = "toolkit-vault-backup"
VERSION = 1
LABEL = b"toolkit-vault/backup/v1\x00"
MAX_LINE = 64 * 1024 * 1024  # a row is far smaller; a longer line is not a backup


class BackupError(VaultError):
    """A file that is not a backup this vault can believe (never says more than why)."""


def backup_key(state_key: SecretBytes) -> SecretBytes:
    return crypto.derive_key(state_key, "backup")


def _mac(key: SecretBytes, digest: bytes, rows: Mapping[str, int]) -> bytes:
    counts = json.dumps(dict(rows), sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key.reveal(), LABEL + digest + counts, hashlib.sha256).digest()


@dataclass(frozen=True)
class Header:
    created_at: float
    schema_revision: str
    source: str
    vault_id: str
    key_provider: str
    key_options: dict[str, str]
    head: tuple[int, bytes, bytes] | None
    tables: dict[str, list[str]]

    def as_json(self) -> dict[str, Any]:
        head = None
        if self.head is not None:
            seq, mac, head_mac = self.head
            head = {"seq": seq, "mac": mac.hex(), "head_mac": head_mac.hex()}
        return {
            "format": FORMAT,
            "version": VERSION,
            "created_at": self.created_at,
            "schema_revision": self.schema_revision,
            "source": self.source,
            "vault_id": self.vault_id,
            "key_provider": self.key_provider,
            "key_options": self.key_options,
            "head": head,
            "tables": self.tables,
        }

    @classmethod
    def parse(cls, data: Any) -> Header:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BackupError("not a toolkit-vault backup")
        if data.get("version") != VERSION:
            raise BackupError(f"backup format version {data.get('version')!r} is not known")
        try:
            head = data["head"]
            parsed_head = (
                None
                if head is None
                else (int(head["seq"]), bytes.fromhex(head["mac"]), bytes.fromhex(head["head_mac"]))
            )
            tables = {str(k): [str(c) for c in v] for k, v in data["tables"].items()}
            return cls(
                float(data["created_at"]),
                str(data["schema_revision"]),
                str(data["source"]),
                str(data["vault_id"]),
                str(data["key_provider"]),
                {str(k): str(v) for k, v in data["key_options"].items()},
                parsed_head,
                tables,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BackupError("the backup's header is malformed") from None


@cache
def _binary(table: str) -> list[bool]:
    return binary_columns(table)


def encode_row(table: str, row: Any) -> list[Any]:
    """A row of `table` (its values as `store.snapshots.TABLES` orders the columns) as JSON."""
    return [
        base64.b64encode(value).decode() if binary and value is not None else value
        for value, binary in zip(row, _binary(table), strict=True)
    ]


def decode_row(table: str, values: list[Any]) -> tuple[Any, ...]:
    """A row of `table` as read from a backup line: its values as `store.snapshots.TABLES`
    orders the columns, bytes decoded (strict base64: a stray character refuses the row)."""
    width, binary = _shape(table)
    if len(values) != width:
        raise BackupError(f"a {table} row has {len(values)} columns, not {width}")
    if not binary:
        return tuple(values)
    row = list(values)
    for index in binary:  # only the binary columns: the rest stay as read
        value = row[index]
        if value is None:
            continue
        if type(value) is not str:  # (a line's JSON: a string is never a subclass)
            raise BackupError(f"a {table} row is malformed")
        try:
            row[index] = a2b_base64(value, strict_mode=True)
        except ValueError:
            raise BackupError(f"a {table} row is malformed") from None
    return tuple(row)


@cache
def _shape(table: str) -> tuple[int, tuple[int, ...]]:
    """`table`'s column count and the indexes of its binary columns (one lookup a row)."""
    flags = _binary(table)
    return len(flags), tuple(i for i, binary in enumerate(flags) if binary)


class Digest(Protocol):
    """What `Reader.digest` is: the running SHA-256, or its result (`_Digested`)."""

    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...

    def copy(self) -> Digest: ...


class _Digested:
    """A digest another process computed; nothing more is hashed into it."""

    def __init__(self, value: bytes) -> None:
        self._value = value

    def update(self, data: bytes, /) -> None:
        raise TypeError("the rows were read already")

    def digest(self) -> bytes:
        return self._value

    def copy(self) -> _Digested:
        return self


class Writer:
    """Writes a backup line by line, hashing what it writes; `finish` adds the trailer."""

    def __init__(self, handle: IO[bytes], header: Header) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.rows: dict[str, int] = dict.fromkeys(header.tables, 0)
        self._line(header.as_json())

    def _line(self, payload: Any) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        self.digest.update(data)
        self.handle.write(data)

    def row(self, table: str, row: Any) -> None:
        self._line({"t": table, "r": encode_row(table, row)})
        self.rows[table] += 1

    def finish(self, key: SecretBytes) -> None:
        mac = _mac(key, self.digest.digest(), self.rows)
        self.handle.write(json.dumps({"rows": self.rows, "mac": mac.hex()}).encode() + b"\n")


class Reader:
    """Reads a backup: `header`, then `rows()` (table name, values) while hashing them,
    then `check(key)` against the trailer. Nothing read is believed before `check` holds."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.digest: Digest = hashlib.sha256()
        self.counts: dict[str, int] = {}
        self.trailer: dict[str, Any] | None = None
        first = self._next()
        if first is None:
            raise BackupError("the backup is empty")
        self.header = Header.parse(self._json(first))
        self.first = first  # the header line, as read (`parsing`'s child skips its length)
        self.digest.update(first)

    def finished(
        self, trailer: dict[str, Any] | None, counts: dict[str, int], digest: bytes
    ) -> None:
        """What reading the rows found, when another process read them for this one
        (`parsing`): the trailer, the row counts and the digest of every line before it."""
        self.trailer, self.counts, self.digest = trailer, counts, _Digested(digest)

    def _next(self) -> bytes | None:
        line = self.handle.readline(MAX_LINE + 1)
        if not line:
            return None
        if not line.endswith(b"\n"):
            raise BackupError("the backup is truncated")
        return line

    @staticmethod
    def _json(line: bytes) -> Any:
        """One line's JSON value (UTF-8, as `Writer` writes it; its newline after it).

        orjson: `backup verify` parses every row (issue 53). It reads what `json` wrote
        from a vault's rows to the same values; what no stored row holds it refuses (a lone
        surrogate, NaN) or reads otherwise (an integer beyond 64 bits, as a float), and the
        trailer's MAC refuses any file the vault did not write."""
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BackupError("the backup holds a line that is not JSON") from None

    def rows(self) -> Iterator[tuple[str, list[Any]]]:
        """Each row line's (table, values), hashed as read; the trailer kept for `check`.
        `backup verify` reads every line here (issue 53): the line's reads and checks are
        those of `_next` and `_json`, written out in one loop."""
        readline, update, loads = self.handle.readline, self.digest.update, orjson.loads
        tables, counts = self.header.tables, self.counts
        while line := readline(MAX_LINE + 1):
            if line[-1] != 10:  # b"\n"
                raise BackupError("the backup is truncated")
            try:
                data = loads(line)
            except orjson.JSONDecodeError:
                raise BackupError("the backup holds a line that is not JSON") from None
            if type(data) is dict and "mac" in data:  # (orjson: a dict is never a subclass)
                self.trailer = data
                if self._next() is not None:
                    raise BackupError("the backup has lines after its end")
                return
            update(line)
            if type(data) is not dict or type(values := data.get("r")) is not list:
                raise BackupError("the backup holds a line that is not a row")
            table = data.get("t")
            if table not in tables:
                raise BackupError(f"the backup holds a row of an unknown table {table!r}")
            counts[table] = counts.get(table, 0) + 1
            yield table, values
        raise BackupError("the backup is truncated (it has no end)")

    def check(self, key: SecretBytes) -> None:
        """The whole file as written by the vault that holds `key`, or BackupError."""
        trailer = self.trailer
        if trailer is None:
            raise BackupError("the backup is truncated (it has no end)")
        try:
            claimed = bytes.fromhex(str(trailer["mac"]))
            rows = {str(k): int(v) for k, v in trailer["rows"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BackupError("the backup's end is malformed") from None
        expected = _mac(key, self.digest.digest(), rows)
        if not hmac.compare_digest(claimed, expected):
            raise BackupError(
                "the backup fails its MAC: it was edited, or it belongs to another vault"
            )
        if any(self.counts.get(name, 0) != count for name, count in rows.items()):
            raise BackupError("the backup's row counts do not match its end")
