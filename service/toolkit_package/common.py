"""Scalar types and the frozen base shared by the package model and its role exports.

Every integer is bounded to the I-JSON range so RFC 8785 canonicalization (and with it the
payload digest) is always defined; every string has a length bound so hostile metadata stays
small.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool

__all__ = ["ContractRef", "Count", "Digest", "Frozen", "Ident", "Millis", "Name", "Text", "Version"]

Name = Annotated[str, Field(min_length=1, max_length=256)]
Text = Annotated[str, Field(max_length=4096)]
Ident = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")]
Version = Annotated[str, Field(pattern=r"^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$")]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
Millis = Annotated[int, Field(ge=1, le=86_400_000, strict=True)]
Count = Annotated[int, Field(ge=0, le=2**53 - 1, strict=True)]


class Frozen(BaseModel):
    """Immutable, and unknown fields are refused rather than silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ContractRef(Frozen):
    name: Name
    version: Version
    optional: StrictBool = False
