"""Compiling a toolkit's schema: refuse what the vault would not run as written.

A toolkit's JSON Schema is untrusted input, so it is bounded (values.py) and audited
before anything runs it: no remote `$ref`, no `$ref` loop that never consumes the config,
no `$id` or dynamic reference that would move resolution past the audit, regexes the vault
can run with their ECMA-262 meaning (patterns.py), formats it really checks (formats.py),
no keyword the dialect would silently ignore (dialects.py). Each refusal names the
construct, its JSON pointer and what to write instead (refusals.py, which also builds
the validator: the only module here that loads jsonschema, at the first compile). A config
is then validated by a validator compiled once per schema digest, and split (split.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.schema.split import INVALID, SecretSplit
from toolkit_vault.schema.values import (
    MAX_SCHEMA_BYTES,
    canonical_schema,
    check_bounds,
    pointer,
    unfit,
)
from toolkit_vault.schema.verify_spec import VerifySpec, read_verify

__all__ = ["CompiledSchema", "compile_schema", "output_check"]

MAX_DETAILS = 50


class CompiledSchema:
    """A checked schema with its validator; build it through `compile_schema` (cached)."""

    def __init__(self, schema: dict[str, Any], digest: str) -> None:
        from toolkit_vault.schema.refusals import check_schema  # jsonschema: at first compile

        checked = check_schema(schema)
        self.digest = digest
        self.schema: Mapping[str, Any] = MappingProxyType(schema)
        self._splitter = SecretSplit(checked.root, checked.refs, draft7=checked.draft7)
        self.verify: VerifySpec | None = read_verify(checked.root, self._splitter.is_secret_at)
        self._validator = checked.validator

    def validate(self, config: Any) -> None:
        """Raise ConfigInvalid naming pointers and keywords only, never a submitted value."""
        if (problem := unfit(config)) is not None:
            where, keyword = problem
            raise ConfigInvalid(INVALID, details=[{"pointer": where, "keyword": keyword}])
        found = {
            (pointer(error.absolute_path), str(error.validator))
            for error in self._validator.iter_errors(config)
        }
        if found:
            details = [{"pointer": p, "keyword": k} for p, k in sorted(found)[:MAX_DETAILS]]
            raise ConfigInvalid(INVALID, details=details)

    def split(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(public, secrets): secrets maps RFC 6901 JSON pointer -> the value at that path.

        Validates first, so the split only ever runs on a config the schema describes.
        """
        self.validate(config)
        return self._splitter.split(config)

    def secret_pointers(self, config: Mapping[str, Any]) -> list[str]:
        return sorted(self.split(config)[1])

    def is_secret_at(self, path: Sequence[str | int]) -> bool:
        """Whether `split` would seal the value at `path` (see `SecretSplit.is_secret_at`)."""
        return self._splitter.is_secret_at(path)

    def public_half(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """`split`'s public half of a config missing only required fields (intake links)."""
        return self._splitter.public_half(config)

    def is_valid(self, instance: Any) -> bool:
        """Whether `instance` fits, on the same validator (RE2 for `pattern`): for what is
        not a config (`output_check`)."""
        return bool(self._validator.is_valid(instance))


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """Check the schema (raises SchemaRefused) and compile it once per schema digest."""
    if not isinstance(schema, Mapping):
        raise SchemaRefused("schema must be a JSON object")
    check_bounds(schema)
    canonical = canonical_schema(schema)
    if len(canonical) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"schema is larger than {MAX_SCHEMA_BYTES} bytes")
    return _compile("sha256:" + hashlib.sha256(canonical).hexdigest(), canonical)


def output_check(schema: Mapping[str, Any]) -> Callable[[Any], bool]:
    """How an imported server's structured result is held to its tool's output schema
    (`mcp_client.OutputSchemas`): the schema is the server's own text, so it is refused and
    compiled as a config schema is (bounds, no remote `$ref`, RE2 for `pattern`), never run
    on Python's backtracking `re` on the loop thread every upstream session shares."""
    return compile_schema(schema).is_valid


@functools.lru_cache(maxsize=256)
def _compile(digest: str, canonical: bytes) -> CompiledSchema:
    """Built from the canonical bytes: a private copy the caller cannot mutate later."""
    return CompiledSchema(json.loads(canonical), digest)
