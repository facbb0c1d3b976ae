"""A submitted form back into a config, and what a form shows: values and errors.

Pure, like `forms`. An empty input leaves its field out; what cannot be read is an error
naming the field's pointer and a keyword, never the text typed. A secret field is never
given a value to show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from toolkit_vault.transports.web.forms import Field, leaves

__all__ = ["error_text", "field_error", "initial_values", "parse_form", "place_errors", "prefilled"]

_MESSAGES = {
    "required": "This field is required.",
    "type": "This value has the wrong type.",
    "enum": "Choose one of the listed values.",
    "const": "Choose the listed value.",
    "pattern": "This value does not match the required pattern.",
    "format": "This value does not have the required format.",
    "minimum": "This number is too small.",
    "exclusiveMinimum": "This number is too small.",
    "maximum": "This number is too large.",
    "exclusiveMaximum": "This number is too large.",
    "multipleOf": "This number is not an allowed step.",
    "minLength": "This value is too short.",
    "maxLength": "This value is too long.",
    "minItems": "Enter more items.",
    "maxItems": "Enter fewer items.",
    "uniqueItems": "Items must not repeat.",
    "additionalProperties": "This section holds a field the toolkit does not accept.",
    "json": "This is not valid JSON.",
    "i-json": "This value cannot be stored (it is not plain JSON).",
}


def _finite_number(text: str) -> int | float:
    value: int | float = int(text) if text.lstrip("-").isdigit() else float(text)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(text)
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)


def _scalar(kind: str, raw: str) -> Any:
    """Raises ValueError (never quoting the value) when `raw` is not of `kind`."""
    if kind == "text":
        return raw
    if kind == "integer":
        return int(raw.strip())
    if kind == "number":
        return _finite_number(raw.strip())
    if kind == "boolean":
        return {"true": True, "false": False}[raw.strip().lower()] if raw else None
    raise ValueError(kind)


def _leaf(field: Field, raw: str, errors: list[dict[str, str]]) -> Any:
    try:
        if field.kind == "enum":
            return field.values[int(raw)]
        if field.kind == "json":
            return json.loads(raw, parse_constant=_refuse_constant)
        if field.kind == "list":
            lines = [line.strip() for line in raw.splitlines()]
            items = []
            for index, line in enumerate(line for line in lines if line):
                try:
                    items.append(_scalar(field.item_kind, line))
                except (ValueError, KeyError):
                    errors.append({"pointer": f"{field.pointer}/{index}", "keyword": "type"})
            return items
        return _scalar(field.kind, raw)
    except (ValueError, KeyError, IndexError, RecursionError):
        keyword = {"enum": "enum", "json": "json"}.get(field.kind, "type")
        errors.append({"pointer": field.pointer, "keyword": keyword})
        return None


def parse_form(
    fields: Sequence[Field], form: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(config, errors): an empty input leaves its field out; errors name pointer and
    keyword only, as the A2E error does, never the submitted text."""
    errors: list[dict[str, str]] = []
    return _parse(fields, form, errors), errors


def _parse(
    fields: Sequence[Field], form: Mapping[str, str], errors: list[dict[str, str]]
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for field in fields:
        name = field.path[-1]
        if field.kind == "group":
            section = _parse(field.children, form, errors)
            if section or field.required:
                config[name] = section
            continue
        raw = form.get(field.pointer, "")
        if raw == "" and field.kind == "boolean" and (field.required or field.default is True):
            config[name] = False  # an unticked checkbox sends nothing: it means false
            continue
        if raw == "":
            continue
        value = _leaf(field, raw, errors)
        if value is not None and value != []:
            config[name] = value
    return config


# -- values shown in a form, and errors placed beside their fields -------------------------


def _shown(field: Field, value: Any) -> str | None:
    if field.kind == "enum":
        for index, option in enumerate(field.values):
            if option == value and type(option) is type(value):
                return str(index)
        return None
    if field.kind == "boolean":
        return {True: "true", False: "false"}.get(value) if isinstance(value, bool) else None
    if field.kind == "list" and isinstance(value, list):
        return "\n".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    if field.kind == "text" and isinstance(value, str):
        return value
    if field.kind in ("number", "integer") and isinstance(value, int | float):
        return json.dumps(value)
    return None


def initial_values(fields: Sequence[Field], config: Mapping[str, Any]) -> dict[str, str]:
    """pointer -> the text a public input starts with: the config's value, else the
    schema's default. Secret inputs get nothing, ever."""
    shown: dict[str, str] = {}
    for field in leaves(fields):
        if field.secret:
            continue
        node: Any = config
        for token in field.path:
            node = node.get(token) if isinstance(node, Mapping) else None
        text = _shown(field, node) if node is not None else None
        if text is None and field.default is not None:
            text = _shown(field, field.default)
        if text is not None:
            shown[field.pointer] = text
    return shown


def error_text(keyword: str) -> str:
    return _MESSAGES.get(keyword, "This value is not valid.")


def field_error(field: Field, details: Sequence[Mapping[str, Any]]) -> str:
    """One clear sentence for a field, whatever number of faults the schema found: the
    first that is not about a missing value, else "Enter <label>"."""
    if not details:
        return ""
    other = [
        d for d in details if d.get("keyword") != "required" or d.get("pointer") != field.pointer
    ]
    if not other:
        return f"Enter {field.label}." if field.kind != "group" else "Fill in this section."
    detail = other[0]
    if detail.get("keyword") == "required":
        return "A field of this section is required."
    text = error_text(str(detail.get("keyword", "")))
    where = str(detail.get("pointer", ""))
    return text if where == field.pointer else f"{text} (item {where[len(field.pointer) + 1 :]})"


def _is_url(field: Field, text: str) -> bool:
    return field.input_type == "url" or "://" in text or text.startswith("//")


def prefilled(fields: Sequence[Field], config: Mapping[str, Any]) -> list[tuple[Field, str]]:
    """The public values the agent chose (kept in the intake version), URLs first: a person
    sees at once if an agent pointed an endpoint at a server of its own."""
    found: list[tuple[Field, str]] = []
    for field in leaves(fields):
        node: Any = config
        for token in field.path:
            node = node.get(token) if isinstance(node, Mapping) else None
        if node is None or field.secret:
            continue
        text = _shown(field, node)
        if text is None:
            continue
        if field.kind == "enum":
            text = field.options[int(text)]
        found.append((field, text))
    return sorted(found, key=lambda pair: not _is_url(*pair))


def place_errors(
    fields: Sequence[Field], details: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, list[Mapping[str, Any]]], list[Mapping[str, Any]]]:
    """Each detail at the deepest field whose pointer is its pointer or a prefix of it
    (`/tags/2` goes to `/tags`); the rest (the config's root, say) for the whole form."""
    pointers = sorted(_all_pointers(fields), key=len, reverse=True)
    placed: dict[str, list[Mapping[str, Any]]] = {}
    unplaced: list[Mapping[str, Any]] = []
    for detail in details:
        pointer = str(detail.get("pointer", ""))
        owner = next((p for p in pointers if pointer == p or pointer.startswith(p + "/")), None)
        if owner is None:
            unplaced.append(detail)
        else:
            placed.setdefault(owner, []).append(detail)
    return placed, unplaced


def _all_pointers(fields: Sequence[Field]) -> Iterator[str]:
    for field in fields:
        yield field.pointer
        yield from _all_pointers(field.children)
