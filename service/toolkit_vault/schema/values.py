"""Untrusted JSON values, schemas and configs alike: bounds, I-JSON, canonical form.

Before any recursive or costly code sees a schema or a config, one iterative pass checks
its depth and size, and that canonical JSON (RFC 8785) can carry every value in it: the
vault digests schemas and the public half of a config with it, and seals each secret in
it. Pointers (RFC 6901) are built only for the answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonpointer

from toolkit_vault.canonical import canonical_digest, canonical_json
from toolkit_vault.errors import SchemaRefused

__all__ = [
    "canonical_schema",
    "check_bounds",
    "escape",
    "pointer",
    "pointer_tokens",
    "schema_digest",
    "unfit",
]

MAX_SCHEMA_BYTES = 256 * 1024
MAX_DEPTH = 64  # nested JSON containers, in schemas and in configs
MAX_PROPERTIES = 2_000
MAX_ENUM = 1_000
MAX_OBJECTS = 5_000  # the 2020-12 meta-schema check's cost grows with every subschema
MAX_CONFIG_VALUES = 100_000  # values in one config, counted in every object and array
_SAFE_INTEGER = 2**53 - 1  # I-JSON (RFC 7493), and so RFC 8785, carries no larger integer
_SCALARS = frozenset({str, int, float, bool, type(None)})
_NOT_JSON_FIX = {
    "an integer beyond 2**53": "canonical JSON (RFC 8785), which digests schemas, cannot "
    "carry it exactly: write a float (e.g. 1.8446744073709552e+19) or a bound within 2**53",
    "a number that is not finite": "JSON has no NaN or infinity: leave the keyword out",
    "a string with a lone surrogate": "I-JSON (RFC 7493) forbids it: write the character whole",
}


def escape(token: str | int) -> str:
    """One RFC 6901 reference token (array indices too)."""
    return jsonpointer.escape(str(token))


def pointer(path: Iterable[str | int]) -> str:
    return "".join("/" + escape(token) for token in path)


def pointer_tokens(pointer: str) -> list[str]:
    """A pointer's reference tokens, unescaped (`/a~1b/0` -> `a/b`, `0`); an index stays
    text, since only the value it points into says whether it is one."""
    return [jsonpointer.unescape(raw) for raw in pointer.split("/")[1:]]


def _containers(value: Any) -> Iterator[tuple[Any, int, str]]:
    """(container, depth, pointer) for every object and array, without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[tuple[str | int, Any]] = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            continue
        yield node, depth, where
        stack.extend((child, depth + 1, f"{where}/{escape(key)}") for key, child in children)


def _not_i_json(value: Any) -> str | None:
    """What makes a scalar (or an object key) one that canonical JSON cannot carry."""
    kind = type(value)
    if kind is str:
        if value.isascii():
            return None
        try:
            value.encode()
        except UnicodeEncodeError:
            return "a string with a lone surrogate"
        return None
    if kind is int:
        return None if -_SAFE_INTEGER <= value <= _SAFE_INTEGER else "an integer beyond 2**53"
    if kind is float:
        return None if math.isfinite(value) else "a number that is not finite"
    if value is None or kind is bool:
        return None
    return f"a Python {kind.__name__}"


def _json_problem(value: Any, max_depth: int, max_values: int) -> tuple[str, str] | None:
    """(pointer, problem) where `value` first nests deeper than max_depth ("maxDepth"),
    holds more than max_values values in all ("maxValues"), or holds a value or key that
    canonical JSON (RFC 8785) cannot carry (what it is). One pass, no recursion; the
    pointer is built only for the answer."""
    Entry = tuple[Any, int, Any]  # (container, depth, (parent entry, key) or None)
    values = 0
    stack: list[Entry] = []
    if isinstance(value, Mapping | list):
        stack.append((value, 1, None))
    elif (what := _not_i_json(value)) is not None:
        return "", what
    while stack:
        entry = stack.pop()
        node, depth, _ = entry
        problem = "maxDepth" if depth > max_depth else None
        values += len(node)
        problem = problem or ("maxValues" if values > max_values else None)
        is_map = isinstance(node, Mapping)
        for key, child in (node.items() if is_map else enumerate(node)) if not problem else ():
            if is_map and (type(key) is not str or _not_i_json(key)):
                problem = "an object key that is not JSON text"  # named by its object's pointer
                break
            kind = type(child)
            if (
                kind is dict
                or kind is list
                or (kind not in _SCALARS and isinstance(child, Mapping))
            ):
                stack.append((child, depth + 1, (entry, key)))
            elif (problem := _not_i_json(child)) is not None:
                entry = (child, 0, (entry, key))
                break
        if problem is not None:
            path = []
            while entry[2] is not None:
                entry, key = entry[2]
                path.append(key)
            return pointer(reversed(path)), problem
    return None


def unfit(config: Any) -> tuple[str, str] | None:
    """(pointer, keyword) where a config nests too deep, holds too many values (a 1 MiB
    message can carry 100,000, each costly to validate or seal) or holds one canonical
    JSON cannot carry (the store digests the public half and seals each secret with it)."""
    found = _json_problem(config, MAX_DEPTH, MAX_CONFIG_VALUES)
    if found is None or found[1] in ("maxDepth", "maxValues"):
        return found
    return found[0], "i-json"


def check_bounds(schema: Mapping[str, Any]) -> None:
    """Refuse oversized schemas before any recursive or costly code sees them."""
    objects = properties = 0
    for node, depth, where in _containers(schema):
        if depth > MAX_DEPTH:
            raise SchemaRefused(f"schema nests deeper than {MAX_DEPTH} levels at {where!r}")
        if isinstance(node, Mapping):
            objects += 1
            if isinstance(node.get("properties"), Mapping):
                properties += len(node["properties"])
            if isinstance(node.get("enum"), list) and len(node["enum"]) > MAX_ENUM:
                raise SchemaRefused(f"schema has an enum longer than {MAX_ENUM} entries")
        if properties > MAX_PROPERTIES:
            raise SchemaRefused(f"schema declares more than {MAX_PROPERTIES} properties")
        if objects > MAX_OBJECTS:
            raise SchemaRefused(f"schema has more than {MAX_OBJECTS} JSON objects")


def schema_digest(schema: Mapping[str, Any]) -> str:
    return canonical_digest(schema)


def canonical_schema(schema: Mapping[str, Any]) -> bytes:
    """A schema's canonical bytes, or SchemaRefused naming the first value that canonical
    JSON cannot carry, where it is and what to write instead."""
    try:
        return canonical_json(schema)
    except (ValueError, TypeError):
        found = _json_problem(schema, MAX_DEPTH, MAX_CONFIG_VALUES)
        where, what = found if found else ("", "a value")
        fix = _NOT_JSON_FIX.get(what, "a schema holds only JSON objects, arrays and scalars")
        raise SchemaRefused(f"schema is not plain JSON: {what} at {where!r}; {fix}") from None
