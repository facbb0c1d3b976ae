"""Values a process must hold but never show: key material and decrypted config values.

Their repr, str, pickle and equality reveal nothing (SECURITY.md, "Leaks through the
interfaces"); `reveal()` is the one deliberate, greppable way to use what they hold. Kept
apart from `crypto` (which re-exports them), whose idea is the envelope encryption.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["SecretBytes", "SecretValue"]


class _Hidden:
    """Holds a sensitive value; repr, str, pickle and equality never reveal it."""

    __slots__ = ("_value",)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be pickled")


class SecretBytes(_Hidden):
    """Key material. `reveal()` is the deliberate, greppable way to use it."""

    def __init__(self, value: bytes) -> None:
        self._value = bytes(value)

    def reveal(self) -> bytes:
        return bytes(self._value)

    def __len__(self) -> int:
        return len(self._value)


class SecretValue(_Hidden):
    """A decrypted config value (any JSON value) on its way to a toolkit's initialize."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def reveal(self) -> Any:
        return self._value
