"""Form fields from a toolkit's JSON Schema (`formdata` reads a submitted form back).

Pure: no I/O, no web framework. Every input is named by its field's JSON pointer, so the
validation details of the A2E error (pointers and keywords) land beside the input they
name. Which fields are secret is asked of the compiled schema (`is_secret`), the very rule
that decides what `split` seals; a secret field gets a password input that is never given
a value, and a part of the schema no plain input can express becomes a JSON input, secret
by default (fail closed: its contents may be undeclared, hence secret, properties).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolkit_package.labels import readable
from toolkit_vault.schema.values import pointer, pointer_tokens

__all__ = ["Field", "build_fields", "leaves", "readable"]

Kind = Literal["group", "text", "number", "integer", "boolean", "enum", "list", "json"]
IsSecret = Callable[[Sequence[str | int]], bool]
MAX_GROUP_DEPTH = 8
MAX_REF_HOPS = 16
_SCALARS: dict[str, Kind] = {
    "string": "text",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
}
_COMBINERS = ("anyOf", "oneOf", "allOf", "not", "if", "patternProperties", "$dynamicRef")
_INPUT_TYPES = {"email": "email", "uri": "url", "iri": "url", "date": "date"}


def _order(properties: Mapping[str, Any]) -> list[str]:
    """The declared order: `x-order` (a number) first, then the schema's property order."""

    def key(item: tuple[int, str]) -> tuple[float, int]:
        raw = properties[item[1]]
        order = raw.get("x-order") if isinstance(raw, Mapping) else None
        if isinstance(order, int | float) and not isinstance(order, bool):
            return (float(order), item[0])
        return (math.inf, item[0])

    return [name for _, name in sorted(enumerate(properties), key=key)]


@dataclass(frozen=True)
class Field:
    """One input (or, for `group`, a fieldset of them) named by its JSON pointer."""

    pointer: str
    path: tuple[str, ...]
    label: str
    kind: Kind
    required: bool
    secret: bool
    help: str = ""
    hints: tuple[str, ...] = ()
    input_type: str = "text"
    attrs: tuple[tuple[str, str], ...] = ()  # min, max, step, minlength, maxlength
    options: tuple[str, ...] = ()  # enum: labels; the submitted value is the index
    values: tuple[Any, ...] = ()  # enum: the values those labels stand for
    item_kind: str = ""  # list: the kind of each line
    default: Any = None
    children: tuple[Field, ...] = ()


def _resolve(root: Mapping[str, Any], node: Any) -> Mapping[str, Any] | None:
    """Follow local `$ref`s (their siblings win); None when one cannot be followed here."""
    for _ in range(MAX_REF_HOPS):
        if not isinstance(node, Mapping):
            return None
        ref = node.get("$ref")
        if ref is None:
            return node
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return None
        target: Any = root
        for token in pointer_tokens(ref[1:]):
            target = target.get(token) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            return None
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return None


def _type(node: Mapping[str, Any]) -> str | None:
    declared = node.get("type")
    if isinstance(declared, list):
        others = [t for t in declared if t != "null"]
        return others[0] if len(others) == 1 else None
    return declared if isinstance(declared, str) else None


def _kind(node: Mapping[str, Any], depth: int) -> Kind:
    if any(keyword in node for keyword in _COMBINERS):
        return "json"
    if "const" in node or (isinstance(node.get("enum"), list) and node["enum"]):
        return "enum"
    declared = _type(node)
    if declared == "object":
        has_properties = isinstance(node.get("properties"), Mapping)
        return "group" if has_properties and depth < MAX_GROUP_DEPTH else "json"
    if declared == "array":
        items = node.get("items")
        if not isinstance(items, Mapping) or _type(items) not in _SCALARS:
            return "json"
        special = ("enum", "const", "$ref", *_COMBINERS)
        return "json" if "prefixItems" in node or any(k in items for k in special) else "list"
    return _SCALARS.get(declared or "", "json")


def _hints(node: Mapping[str, Any]) -> tuple[str, ...]:
    found = []
    if isinstance(node.get("format"), str) and node["format"] != "password":
        found.append(f"format: {node['format']}")
    if isinstance(node.get("pattern"), str):
        found.append(f"pattern: {node['pattern']}")
    for keyword, words in (
        ("minimum", "at least"), ("maximum", "at most"),
        ("minLength", "characters at least"), ("maxLength", "characters at most"),
    ):  # fmt: skip
        if isinstance(node.get(keyword), int | float) and not isinstance(node[keyword], bool):
            found.append(f"{words} {node[keyword]}")
    return tuple(found)


def _attrs(node: Mapping[str, Any], kind: Kind) -> tuple[tuple[str, str], ...]:
    attrs = []
    if kind in ("number", "integer"):
        attrs.append(("step", "1" if kind == "integer" else "any"))
        for keyword, attr in (("minimum", "min"), ("maximum", "max")):
            value = node.get(keyword)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs.append((attr, json.dumps(value)))
    if kind == "text":
        for keyword, attr in (("minLength", "minlength"), ("maxLength", "maxlength")):
            if isinstance(node.get(keyword), int) and not isinstance(node[keyword], bool):
                attrs.append((attr, str(node[keyword])))
    return tuple(attrs)


def build_fields(schema: Mapping[str, Any], is_secret: IsSecret) -> tuple[Field, ...]:
    """The fields of a toolkit's config form in declared order (`x-order`, then property
    order), at each level the public fields first and the secret ones together after them."""
    root = _resolve(schema, schema)
    return _group(schema, root or {}, (), 0, is_secret)


def _group(
    root: Mapping[str, Any],
    node: Mapping[str, Any],
    path: tuple[str, ...],
    depth: int,
    is_secret: IsSecret,
) -> tuple[Field, ...]:
    properties = node.get("properties")
    required = node.get("required", [])
    fields = []
    declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    for name in _order(declared):
        child = _resolve(root, declared[name])
        here = (*path, name)
        kind = _kind(child, depth + 1) if child is not None else "json"
        child = child or {}
        if kind == "list" and (is_secret(here) or is_secret((*here, 0))):
            kind = "json"  # a secret list cannot be a visible textarea
        secret = kind == "json" or is_secret(here)
        enum = (child["enum"] if "enum" in child else [child["const"]]) if kind == "enum" else []
        fields.append(
            Field(
                pointer=pointer(here),
                path=here,
                label=_label(name, child),
                kind=kind,
                required=name in required,
                secret=secret and kind != "group",
                help=str(child.get("description") or ""),
                hints=_hints(child),
                input_type=_INPUT_TYPES.get(str(child.get("format")), "text"),
                attrs=_attrs(child, kind),
                options=tuple(v if isinstance(v, str) else json.dumps(v) for v in enum),
                values=tuple(enum),
                item_kind=_SCALARS.get(_type(child.get("items") or {}) or "", ""),
                default=child.get("default"),
                children=_group(root, child, here, depth + 1, is_secret) if kind == "group" else (),
            )
        )
    return tuple(sorted(fields, key=lambda field: field.secret))  # secret fields together, last


def _label(name: str, prop: Mapping[str, Any]) -> str:
    """The field's `title`, else its name made readable; a title that is only the raw input
    name an older import copied there (`SSL_MODE`, `--host`; an HTTP header's name is its
    own label) is made readable too."""
    title = prop.get("title")
    declared = prop.get("x-toolkit-input")
    raw = None
    if isinstance(declared, Mapping) and declared.get("kind") != "header":
        raw = declared.get("name")
    if isinstance(title, str) and title and title != raw:
        return title
    return readable(title if isinstance(title, str) and title else name)


def leaves(fields: Sequence[Field]) -> Iterator[Field]:
    for field in fields:
        if field.kind == "group":
            yield from leaves(field.children)
        else:
            yield field
