"""The two JSON Schema dialects the vault runs, and what it changes in jsonschema's.

Draft 2020-12 (the default) and draft-07 run on jsonschema's validators with the keywords
that touch regexes or cost more than linear time replaced: patterns go through
patterns.py (ECMA-262 meaning, RE2's linear time), `uniqueItems` compares canonical forms,
`required` reports each missing property at its own pointer. `format` is asserted with
formats.py's checkers. Under 2020-12 the draft-07 keyword `dependencies` is honoured as
draft-07 defines it, as the 2020-12 meta-schema still describes it; under draft-07 the
content keywords assert, as that draft allows (base64 and JSON only, see CONTENT). The
keywords a dialect would silently ignore although an author clearly meant them are listed
in FOREIGN, for compiled.py to refuse with a hint.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any, NamedTuple

import referencing.jsonschema
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend

from toolkit_vault.canonical import canonical_json
from toolkit_vault.schema.formats import format_checker
from toolkit_vault.schema.patterns import compile_pattern

__all__ = ["DEFAULT_DIALECT", "DIALECTS", "DRAFT7_DIALECT", "FOREIGN", "Dialect"]

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DRAFT7_DIALECT = "http://json-schema.org/draft-07/schema"
_TO_2020 = 'or declare "$schema": "https://json-schema.org/draft/2020-12/schema"'
_TO_7 = 'or declare "$schema": "http://json-schema.org/draft-07/schema#"'
# dialect -> keyword the other dialect defines -> what to write instead.
FOREIGN = {
    DEFAULT_DIALECT: {
        "additionalItems": f"give the remaining elements' schema in 'items' {_TO_7}",
    },
    DRAFT7_DIALECT: {
        "prefixItems": f"give 'items' an array of schemas {_TO_2020}",
        "dependentSchemas": f"use 'dependencies' {_TO_2020}",
        "dependentRequired": f"use 'dependencies' {_TO_2020}",
        "unevaluatedProperties": f"use 'additionalProperties' {_TO_2020}",
        "unevaluatedItems": f"use 'additionalItems' {_TO_2020}",
        "minContains": _TO_2020.removeprefix("or "),
        "maxContains": _TO_2020.removeprefix("or "),
        "$anchor": f"""name the subschema with "$id": "#name" {_TO_2020}""",
    },
}
# The content a draft-07 schema may assert (2020-12 makes these keywords annotations).
CONTENT = {"contentEncoding": "base64", "contentMediaType": "application/json"}
# Keywords whose value holds subschemas: one, a list, or (the MAPS) a name -> schema map.
SUBSCHEMA_KEYWORDS = (
    "$defs", "definitions", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf", "not",
    "if", "then", "else", "items", "prefixItems", "additionalItems", "contains",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip
MAPS = frozenset(
    {"$defs", "definitions", "properties", "patternProperties", "dependentSchemas", "dependencies"}
)
# Applied to the same value as their parent: a loop through only these never ends.
IN_PLACE = frozenset(
    {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"}
)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield ValidationError("does not match pattern")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if compile_pattern(pattern).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's version matches patternProperties with `re`; this one uses RE2."""
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [compile_pattern(pattern) for pattern in schema.get("patternProperties", {})]
    for key in instance:
        if key in named or any(pattern.search(key) for pattern in patterns):
            continue
        if validator.is_type(additional, "object"):
            yield from validator.descend(instance[key], additional, path=key)
        elif additional is False:
            yield ValidationError("additional property not allowed", path=[key])


def _required(
    validator: Any, required: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """Report each missing property at its own pointer, so no message parsing is needed."""
    if validator.is_type(instance, "object"):
        for name in required:
            if name not in instance:
                yield ValidationError("required property missing", path=[name])


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema compares arrays of objects pairwise, O(n^2); compare canonical forms."""
    if (
        unique
        and validator.is_type(instance, "array")
        and len({_identity(item) for item in instance}) < len(instance)
    ):
        yield ValidationError("array items are not unique")


def _decoded(instance: str, encoding: Any) -> bytes | None:
    try:
        if encoding is None:
            return instance.encode()
        return base64.b64decode(instance, validate=True)  # CONTENT allows only base64
    except ValueError:
        return None


def _content_encoding(
    validator: Any, encoding: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _decoded(instance, encoding) is None:
        yield ValidationError("content is not base64")


def _content_media_type(
    validator: Any, media: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """Draft-07 content assertion, for CONTENT's one media type, application/json."""
    if not validator.is_type(instance, "string"):
        return
    content = _decoded(instance, schema.get("contentEncoding"))
    if content is None:
        return  # contentEncoding reports it
    try:
        json.loads(content.decode(), parse_constant=_not_json)
    except (ValueError, RecursionError):
        yield ValidationError("content is not JSON")


def _not_json(name: str) -> None:
    raise ValueError(name)


def _identity(value: Any) -> bytes:
    """JSON equality as bytes (1 == 1.0, true != 1). Numbers JCS refuses fall back to repr,
    which may miss a duplicate but never invents one."""
    try:
        return canonical_json(value)
    except (ValueError, TypeError):
        return repr(value).encode()


class Dialect(NamedTuple):
    uri: str
    validator: type[Validator]
    specification: referencing.Specification[Any]
    formats: FormatChecker  # every format, for configs
    meta_formats: FormatChecker  # all but `regex`: compiled.py checks patterns itself
    keywords: tuple[str, ...]  # the subschema keywords its meta-schema checks
    foreign: dict[str, str]
    content: bool  # whether contentEncoding and contentMediaType assert (CONTENT)


def _dialect(uri: str, base: Any, specification: Any, unchecked: set[str], **extra: Any) -> Dialect:
    """`extra`: keywords the vault adds to this dialect's validator."""
    keywords = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "required": _required,
        "uniqueItems": _unique_items,
        **extra,
    }
    return Dialect(
        uri,
        extend(base, keywords),  # type: ignore[no-untyped-call]
        specification,
        format_checker(),
        format_checker(regex=False),
        tuple(k for k in SUBSCHEMA_KEYWORDS if k not in unchecked),
        FOREIGN[uri],
        "contentEncoding" in extra,
    )


DIALECTS = {
    DEFAULT_DIALECT: _dialect(
        DEFAULT_DIALECT,
        Draft202012Validator,
        referencing.jsonschema.DRAFT202012,
        {"additionalItems"},
        dependencies=Draft7Validator.VALIDATORS["dependencies"],
    ),
    DRAFT7_DIALECT: _dialect(
        DRAFT7_DIALECT,
        Draft7Validator,
        referencing.jsonschema.DRAFT7,
        {"$defs", "dependentSchemas", "prefixItems", "unevaluatedItems"}
        | {"unevaluatedProperties", "contentSchema"},
        contentEncoding=_content_encoding,
        contentMediaType=_content_media_type,
    ),
}
