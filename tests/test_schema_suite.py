"""The official JSON Schema Test Suite, run through the vault's own schema path.

Every case of the vendored draft2020-12 and draft7 files (core, `optional/`,
`optional/format/`; see tests/fixtures/json-schema-test-suite/SOURCE.md) goes the way a
toolkit registration and a configure go: `compile_schema`, then `split` (which validates
first), `check_sealable` and `canonical_json` of what would be stored, and `merge_secrets`,
which must give back exactly the config that went in. Each case ends in one of:

- agree: the vault accepts what the suite calls valid, or rejects what it calls invalid;
- refused: `compile_schema` refused the schema, with a reason naming what and where;
- false reject: the suite calls it valid and the vault rejects it (details name the keyword);
- false accept: the suite calls it invalid and the vault stores it. Must never happen.

A crash (any other exception), a round trip that changes the config, a refusal without
a recognised reason or an attempt to open a network connection fails the test.

The vault requires `"type": "object"` at a schema's root. A suite schema that does not
declare it runs as the one required property `v` of an object schema (its root `$schema`
and `$id` moved up to that wrapper, its local `$ref`s "#..." rewritten to "#/properties/v...",
so each still lands where it did), and each case's data becomes `{"v": data}`. The wrapper
adds nothing the suite's schema does not say, so every verdict is the suite's own.

Run this file with Python to print the counts table kept in docs/schemas.md.
"""

from __future__ import annotations

import copy
import json
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.schema import canonical_json, check_sealable, compile_schema, merge_secrets

SUITE = Path(__file__).parent / "fixtures" / "json-schema-test-suite"
SCHEMAS_PAGE = Path(__file__).parent.parent / "docs" / "schemas.md"
DRAFTS = {
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
    "draft7": "http://json-schema.org/draft-07/schema#",
}
DIRECTORIES = ("", "optional/", "optional/format/")
OUTCOMES = ("agree", "refused", "false reject", "false accept", "crash")
# Every refusal names its class with one of these (each is tested on its own in
# tests/test_schema.py and tests/test_schema_refusals.py), and a pointer or a name.
REASONS = {
    "remote $ref": "is not local",
    "nested $id": "has a nested $id",
    "dynamic reference": "uses dynamic references",
    "unresolvable $ref": "does not resolve",
    "$ref outside the audit": "does not point at a subschema",
    "$ref cycle": "$ref cycle",
    "unchecked format": "is not one the vault checks",
    "pattern the engine cannot run": "linear-time engine cannot run",
    "pattern too large": "too large for the vault's regex engine",
    "pattern not ECMA-262": "is not an ECMA-262 regex",
    "not plain JSON": "is not plain JSON: ",
    "keyword the dialect ignores": "does not define and so would ignore",
    "meta-schema": "(meta-schema keyword",
    "root not an object schema": 'root must declare "type": "object"',
    "$schema below the root": "$schema below the root",
    "unevaluatedProperties with patternProperties": "combines unevaluatedProperties",
    "other dialect": "must be JSON Schema draft 2020-12 or draft-07",
}
# Keywords whose values are data, not schemas: a "$ref" inside them is not a reference.
_DATA = frozenset({"const", "enum", "default", "examples"})
# Keywords whose value maps names (never keywords) to schemas.
_NAME_MAPS = frozenset(
    {"$defs", "definitions", "properties", "patternProperties", "dependentSchemas"}
    | {"dependencies"}  # its arrays of names hold no $ref, so rewriting leaves them alone
)


@dataclass(frozen=True)
class Case:
    draft: str
    directory: str
    file: str
    group: str
    description: str
    outcome: str
    reason: str


def _rewrite_refs(node: Any) -> Any:
    """A copy of schema `node` with each local pointer `$ref` moved under /properties/v."""
    if isinstance(node, list):
        return [_rewrite_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            out[key] = "#/properties/v" + value[1:]
        elif key in _DATA:
            out[key] = copy.deepcopy(value)
        elif key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {name: _rewrite_refs(sub) for name, sub in value.items()}
        else:
            out[key] = _rewrite_refs(value)
    return out


def vault_form(schema: Any, draft: str) -> tuple[dict[str, Any], bool]:
    """(schema the vault can register, whether data must be wrapped as {"v": data})."""
    dialect = DRAFTS[draft]
    if isinstance(schema, dict) and schema.get("type") == "object":
        if draft == "draft7" and "$schema" not in schema:
            return {"$schema": dialect, **schema}, False
        return schema, False
    inner = _rewrite_refs(schema)
    wrapper: dict[str, Any] = {}
    if isinstance(inner, dict):
        for key in ("$schema", "$id"):
            if key in inner:
                wrapper[key] = inner.pop(key)
    if draft == "draft7":
        wrapper.setdefault("$schema", dialect)
    wrapper.update(
        {
            "type": "object",
            "properties": {"v": inner},
            "required": ["v"],
            "additionalProperties": False,
        }
    )
    return wrapper, True


def _exactly(a: Any, b: Any) -> bool:
    """JSON equality that also tells 1 from 1.0 and from True (`==` does not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_exactly(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_exactly, a, b))
    return bool(a == b)


def _configure(compiled: Any, config: Any) -> None:
    """What a configure does with a config before sealing, and the round trip check."""
    before = copy.deepcopy(config)
    public, secrets = compiled.split(config)
    check_sealable(secrets)
    canonical_json(public)  # what `crypto.public_digest` hashes and the store keeps
    merged = merge_secrets(public, secrets)
    assert _exactly(config, before), "split changed its input"
    assert _exactly(merged, config), "split and merge did not round-trip"


def refusal_class(message: str) -> str:
    """The class of a refusal; a message that names none fails the run."""
    found = [name for name, text in REASONS.items() if text in message]
    assert found, f"a refusal without a recognised reason: {message}"
    assert "'" in message or "$schema" in message, f"a refusal naming nothing: {message}"
    return found[0]


def _details(error: ConfigInvalid) -> str:
    assert error.details, "a rejection without details"
    return ",".join(sorted({d["keyword"] for d in error.details}))


def _outcomes(group: dict[str, Any], draft: str) -> Iterator[tuple[str, str]]:
    """(outcome, reason) for each test of one suite group, in order."""
    schema, wrapped = vault_form(group["schema"], draft)
    try:
        compiled = compile_schema(schema)
    except SchemaRefused as error:
        reason = f"{refusal_class(error.message)}: {error.message}"
        yield from (("refused", reason) for _ in group["tests"])
        return
    except Exception as error:
        yield from (("crash", repr(error)) for _ in group["tests"])
        return
    for test in group["tests"]:
        data = {"v": test["data"]} if wrapped else test["data"]
        try:
            _configure(compiled, data)
        except ConfigInvalid as error:
            yield ("false reject" if test["valid"] else "agree"), _details(error)
        except Exception as error:
            yield "crash", repr(error)
        else:
            yield ("agree" if test["valid"] else "false accept"), ""


def run_file(draft: str, directory: str, path: Path) -> Iterator[Case]:
    for group in json.loads(path.read_text(encoding="utf-8")):
        for test, (outcome, reason) in zip(group["tests"], _outcomes(group, draft), strict=True):
            yield Case(
                draft, directory, path.name, group["description"], test["description"],
                outcome, reason,
            )  # fmt: skip


def run_suite() -> list[Case]:
    cases: list[Case] = []
    for draft in DRAFTS:
        for directory in DIRECTORIES:
            for path in sorted((SUITE / draft / directory).glob("*.json")):
                cases.extend(run_file(draft, directory, path))
    return cases


def table(cases: list[Case]) -> str:
    """The Markdown table of counts per draft and directory, as kept in docs/schemas.md."""
    counts = Counter((c.draft, c.directory, c.outcome) for c in cases)
    rows = ["| draft | files | cases | " + " | ".join(OUTCOMES) + " |"]
    rows.append("|---|---|" + "---:|" * (1 + len(OUTCOMES)))
    for draft in DRAFTS:
        for directory in DIRECTORIES:
            numbers = [counts[draft, directory, outcome] for outcome in OUTCOMES]
            name = directory.rstrip("/") or "core"
            rows.append(f"| {draft} | {name} | {sum(numbers)} | " + " | ".join(map(str, numbers)))
            rows[-1] += " |"
    return "\n".join(rows)


@pytest.fixture(scope="module")
def suite_cases() -> list[Case]:
    attempts: list[Any] = []
    original = socket.socket.connect

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network access from the schema path")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        cases = run_suite()
        elapsed = time.perf_counter() - started
    finally:
        socket.socket.connect = original  # type: ignore[method-assign]
    assert attempts == []
    assert elapsed < 60, f"the suite took {elapsed:.1f} s"
    return cases


@pytest.mark.parametrize("outcome", ["false accept", "crash"])
def test_no_false_accepts_and_no_crashes(suite_cases: list[Case], outcome: str) -> None:
    wrong = [c for c in suite_cases if c.outcome == outcome]
    assert wrong == []


def test_every_case_ran(suite_cases: list[Case]) -> None:
    files = sum(1 for d in DRAFTS for sub in DIRECTORIES for _ in (SUITE / d / sub).glob("*.json"))
    assert files == 144
    assert len(suite_cases) == 3946


def test_schemas_page_keeps_the_counts(suite_cases: list[Case]) -> None:
    assert table(suite_cases) in SCHEMAS_PAGE.read_text(encoding="utf-8")


if __name__ == "__main__":
    found = run_suite()
    print(table(found))
    refused = Counter(c.reason.split(":")[0] for c in found if c.outcome == "refused")
    print("\nrefused cases by reason:")
    for reason, count in refused.most_common():
        print(f"  {count:4}  {reason}")
    if "-v" in sys.argv:
        for c in found:
            if c.outcome != "agree":
                print(
                    f"{c.outcome:12} {c.draft}/{c.directory}{c.file} | {c.group} | "
                    f"{c.description} | {c.reason}"
                )
