"""Toolkit config schemas: what a toolkit author writes is what the vault enforces.

- `compiled`: refuse a schema the vault would not run as written, compile the rest once
  per digest, validate configs;
- `dialects`: draft 2020-12 and draft-07 as the vault runs them;
- `patterns`, `charsets`: ECMA-262 regexes translated for RE2 (linear time);
- `formats`: the formats the vault asserts, each really checked;
- `split`: a valid config's public half and secret values, and the inverse;
- `values`: bounds, I-JSON and digests of untrusted values (canonical JSON itself is
  `toolkit_vault.canonical`, re-exported here).
"""

from toolkit_vault.canonical import canonical_json
from toolkit_vault.schema.compiled import CompiledSchema, compile_schema, output_check
from toolkit_vault.schema.split import MAX_SECRETS, check_sealable, merge_secrets
from toolkit_vault.schema.values import schema_digest

__all__ = [
    "MAX_SECRETS",
    "CompiledSchema",
    "canonical_json",
    "check_sealable",
    "compile_schema",
    "merge_secrets",
    "output_check",
    "schema_digest",
]
