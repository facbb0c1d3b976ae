"""The local providers' key document, unchanged from `keys.py` so keys move between them:

    {"format": 1, "primary": "kek-2", "keys": {"kek-1": "<base64>", "kek-2": "<base64>"}}

Parsing refuses anything else with a message naming where the document came from and never
its content. Nothing here ever invents a key on a failed load.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolkit_vault.crypto import KEY_BYTES, SecretBytes, new_key

__all__ = ["DocumentError", "KeyDocument"]

_KEK_ID = re.compile(r"kek-([0-9]{1,9})", re.ASCII)


class DocumentError(ValueError):
    """The document is malformed; the message says how, never what it holds."""


@dataclass(frozen=True, repr=False)
class KeyDocument:
    """The key document, parsed; keys stay in `SecretBytes`."""

    primary: str
    keys: dict[str, SecretBytes]

    def __repr__(self) -> str:
        return f"KeyDocument(primary={self.primary!r}, ids={sorted(self.keys)})"

    @classmethod
    def first(cls) -> KeyDocument:
        return cls("kek-1", {"kek-1": new_key()})

    def with_new_primary(self, taken: Iterable[str] = ()) -> KeyDocument:
        """Add a fresh key, numbered past every id here and in `taken`."""
        numbers = [int(m[1]) for k in (*self.keys, *taken) if (m := _KEK_ID.fullmatch(k))]
        kek_id = f"kek-{max(numbers, default=0) + 1}"
        return KeyDocument(kek_id, {**self.keys, kek_id: new_key()})

    def without(self, kek_id: str) -> KeyDocument:
        if kek_id == self.primary:
            raise DocumentError(f"{kek_id} is the primary master key and cannot be removed")
        if kek_id not in self.keys:
            raise DocumentError(f"master key {kek_id} is not there")
        return KeyDocument(self.primary, {k: v for k, v in self.keys.items() if k != kek_id})

    def dumps(self) -> str:
        keys = {k: base64.b64encode(v.reveal()).decode() for k, v in sorted(self.keys.items())}
        return json.dumps({"format": 1, "primary": self.primary, "keys": keys}, indent=2)

    @classmethod
    def loads(cls, text: str | bytes) -> KeyDocument:
        try:
            doc: Any = json.loads(text)
        except ValueError:  # includes UnicodeDecodeError
            raise DocumentError("is not a JSON key document") from None
        if not isinstance(doc, dict) or type(doc.get("format")) is not int or doc["format"] != 1:
            raise DocumentError("is not a version 1 key document")
        primary, raw = doc.get("primary"), doc.get("keys")
        if not isinstance(primary, str) or not isinstance(raw, dict) or primary not in raw:
            raise DocumentError("must name a primary key among its keys")
        keys: dict[str, SecretBytes] = {}
        for kek_id, encoded in raw.items():
            if not 0 < len(kek_id.encode()) < 256 or not kek_id.isprintable():
                raise DocumentError("has a key id that is empty, too long or unprintable")
            try:
                key = base64.b64decode(str(encoded), validate=True)
            except ValueError:  # binascii.Error, or non-ASCII text
                raise DocumentError(f"key {kek_id} is not valid base64") from None
            if len(key) != KEY_BYTES:
                raise DocumentError(f"key {kek_id} must be {KEY_BYTES} bytes, not {len(key)}")
            keys[kek_id] = SecretBytes(key)
        return cls(primary, keys)
