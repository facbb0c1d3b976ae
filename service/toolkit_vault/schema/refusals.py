"""What a toolkit's schema is refused for, and its validator: the half of compiling that
runs jsonschema (`compiled` imports this module at the first compile, so a process that
only lists toolkits never loads jsonschema, referencing and the format checkers: about
0.1 s of a CLI command, issue 53).

A toolkit's JSON Schema is untrusted input, so it is bounded (values.py) and audited
before anything runs it: no remote `$ref`, no `$ref` loop that never consumes the config,
no `$id` or dynamic reference that would move resolution past the audit, regexes the vault
can run with their ECMA-262 meaning (patterns.py), formats it really checks (formats.py),
no keyword the dialect would silently ignore (dialects.py). Each refusal names the
construct, its JSON pointer and what to write instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from toolkit_vault.errors import SchemaRefused
from toolkit_vault.schema.dialects import (
    CONTENT,
    DEFAULT_DIALECT,
    DIALECTS,
    DRAFT7_DIALECT,
    IN_PLACE,
    MAPS,
    Dialect,
)
from toolkit_vault.schema.formats import ANNOTATIONS, FORMATS
from toolkit_vault.schema.patterns import PatternError, compile_pattern
from toolkit_vault.schema.values import escape, pointer

__all__ = ["Checked", "check_schema"]


class Checked:
    """A schema that passed every check: its root (without `$schema`), each `$ref`
    resolved, whether it is draft-07, and its validator."""

    def __init__(
        self, root: dict[str, Any], refs: dict[str, Any], draft7: bool, validator: Validator
    ) -> None:
        self.root, self.refs, self.draft7, self.validator = root, refs, draft7, validator


def check_schema(schema: dict[str, Any]) -> Checked:
    """Refuse what the vault would not run as written (raises SchemaRefused); else the
    checked schema and its validator."""
    uri = schema.get("$schema", DEFAULT_DIALECT)
    if not isinstance(uri, str) or uri.removesuffix("#") not in DIALECTS:
        raise SchemaRefused(
            "schema $schema must be JSON Schema draft 2020-12 or draft-07, the two "
            "dialects the vault runs"
        )
    dialect = DIALECTS[uri.removesuffix("#")]
    check = dialect.validator.check_schema
    try:
        check(schema, format_checker=dialect.meta_formats)  # type: ignore[call-arg]
    except SchemaError as error:
        raise _meta_error(error, dialect) from None
    if schema.get("type") != "object":
        raise SchemaRefused('schema root must declare "type": "object"')
    # With no $schema anywhere, jsonschema's evolve() keeps our RE2 class even at "#".
    root = {key: value for key, value in schema.items() if key != "$schema"}
    registry: Registry[Any] = Registry(retrieve=_never_retrieve)  # type: ignore[call-arg]
    resolver = registry.resolver_with_root(dialect.specification.create_resource(root))
    refs = _audit(root, resolver, dialect)
    validator = dialect.validator(root, registry=registry, format_checker=dialect.formats)
    return Checked(root, refs, dialect.uri == DRAFT7_DIALECT, validator)


def _never_retrieve(uri: str) -> Resource[Any]:
    """Registry hook: a schema never makes the vault fetch anything."""
    raise LookupError(f"remote $ref refused: {uri}")


def _children(
    node: Mapping[str, Any], where: str, keywords: tuple[str, ...]
) -> Iterator[tuple[Mapping[str, Any], str, bool]]:
    """(subschema, its pointer, applies in place) for every object subschema under node."""
    for keyword in keywords:
        value = node.get(keyword)
        if keyword in MAPS and isinstance(value, Mapping):
            found = [(f"/{keyword}/{escape(key)}", child) for key, child in value.items()]
        elif isinstance(value, list):
            found = [(f"/{keyword}/{index}", child) for index, child in enumerate(value)]
        else:
            found = [(f"/{keyword}", value)]
        for suffix, child in found:
            if isinstance(child, Mapping):
                yield child, where + suffix, keyword in IN_PLACE


def _check_pattern(pattern: str, where: str) -> None:
    try:
        compile_pattern(pattern)
    except PatternError as error:
        raise SchemaRefused(
            f"schema pattern at {where!r} {error.reason}: rewrite it without that construct"
        ) from None


def _check_node(node: Mapping[str, Any], where: str, dialect: Dialect, *, root: bool) -> None:
    """Refuse what would escape the audit (a `$schema` or `$id` below the root makes
    jsonschema switch validator class or base URI; dynamic refs resolve at run time) and
    what the vault would not do as written: a pattern it cannot run, a format it does not
    check, a keyword the dialect ignores."""
    if not root and "$schema" in node:
        raise SchemaRefused(
            f"schema has $schema below the root at {where!r}: a schema has one dialect, "
            "declared at its root; remove this one"
        )
    if not root and "$id" in node and not str(node["$id"]).startswith("#"):
        raise SchemaRefused(
            f"schema has a nested $id at {where + '/$id'!r}: every $ref resolves against the "
            f"root; remove it and refer to this subschema as {'#' + where!r}"
        )
    for keyword in ("$dynamicRef", "$recursiveRef"):
        if keyword in node:
            raise SchemaRefused(
                f"schema uses dynamic references at {where + '/' + keyword!r}: they resolve "
                "while validating, past the audit of every $ref; use a local '$ref' instead"
            )
    for keyword, hint in dialect.foreign.items():
        if keyword in node:
            name = "draft-07" if dialect.uri == DRAFT7_DIALECT else "draft 2020-12"
            raise SchemaRefused(
                f"schema uses {keyword!r} at {where!r}, which {name} does not define and so "
                f"would ignore: {hint}"
            )
    for keyword, checked in CONTENT.items():
        if dialect.content and keyword in node and node[keyword] != checked:
            raise SchemaRefused(
                f"schema {keyword} {node[keyword]!r} at {where + '/' + keyword!r} is not one the "
                f"vault checks, and draft-07 asserts it: use {checked!r}, or declare "
                '"$schema": "https://json-schema.org/draft/2020-12/schema", where it is an '
                "annotation"
            )
    value = node.get("format")
    if isinstance(value, str) and value not in FORMATS and value not in ANNOTATIONS:
        raise SchemaRefused(
            f"schema format {value!r} at {where + '/format'!r} is not one the vault checks, "
            f"and it never ignores a format: use one of {', '.join(sorted(FORMATS))}, or "
            "describe the value with 'pattern'"
        )
    if isinstance(node.get("pattern"), str):
        _check_pattern(node["pattern"], where + "/pattern")
    if isinstance(node.get("patternProperties"), Mapping):
        for key in node["patternProperties"]:
            _check_pattern(key, f"{where}/patternProperties/{escape(key)}")


def _refuse_cycles(edges: dict[int, list[int]]) -> None:
    """A `$ref` loop through in-place keywords only would recurse forever on any config."""
    state: dict[int, bool] = {}  # False: on the current path, True: finished
    for start in edges:
        if start in state:
            continue
        state[start] = False
        path = [(start, iter(edges[start]))]
        while path:
            node, pending = path[-1]
            child = next(pending, None)
            if child is None:
                state[node] = True
                path.pop()
            elif state.get(child) is False:
                raise SchemaRefused(
                    "schema has a $ref cycle that never descends into the config (only "
                    "through allOf, anyOf, oneOf, not, if/then/else or dependencies): let "
                    "the recursion pass through 'properties' or 'items'"
                )
            elif child not in state:
                state[child] = False
                path.append((child, iter(edges[child])))


# (last pointer token, type of the refused value) -> what 2020-12 calls it
_META_HINTS: dict[tuple[str, Any], str] = {
    ("items", list): "an array under 'items' is draft-07's tuple form: 2020-12 calls it "
    "'prefixItems'",
    ("$id", str): "a '#name' $id is draft-07's anchor: 2020-12 writes '$anchor': 'name'",
}


def _meta_error(error: SchemaError, dialect: Dialect) -> SchemaRefused:
    where, keyword = pointer(error.absolute_path), error.validator
    message = f"schema is invalid at {where!r} (meta-schema keyword {keyword!r})"
    token = error.absolute_path[-1] if error.absolute_path else ""
    hint = _META_HINTS.get((str(token), type(error.instance)))
    if dialect.uri == DEFAULT_DIALECT and hint:
        message += ": " + hint
    return SchemaRefused(message)


def _audit(root: Mapping[str, Any], resolver: Any, dialect: Dialect) -> dict[str, Any]:
    """Check every subschema; return each `$ref` resolved, for `split`.

    A `$ref` must land on a subschema this walk reaches (so the meta-schema checked it)
    and, with that, the walk covers everything the validator can ever run.
    """
    refs: dict[str, Any] = {}
    edges: dict[int, list[int]] = {}
    used: dict[str, str] = {}
    stack: list[tuple[Mapping[str, Any], str]] = [(root, "")]
    while stack:
        node, where = stack.pop()
        _check_node(node, where, dialect, root=node is root)
        used.update((keyword, where) for keyword in node if keyword not in used)
        children = list(_children(node, where, dialect.keywords))
        edges[id(node)] = [id(child) for child, _, in_place in children if in_place]
        stack.extend((child, path) for child, path, _ in reversed(children))
        if "$ref" not in node:
            continue
        ref, at = node["$ref"], where + "/$ref"
        if not ref.startswith("#"):
            raise SchemaRefused(
                f"schema $ref at {at!r} is not local (must start '#'): the vault never "
                "fetches a schema; copy the one it names into '$defs' (draft-07: "
                "'definitions') and refer to it as '#/$defs/<name>'"
            )
        try:
            refs[ref] = resolver.lookup(ref).contents
        except Unresolvable:
            raise SchemaRefused(
                f"schema $ref at {at!r} does not resolve: nothing in this schema is at {ref!r}"
            ) from None
        if isinstance(refs[ref], Mapping):
            edges[id(node)].append(id(refs[ref]))
    if "unevaluatedProperties" in used and "patternProperties" in used:
        raise SchemaRefused(
            "schema combines unevaluatedProperties (at "
            f"{used['unevaluatedProperties']!r}) with patternProperties (at "
            f"{used['patternProperties']!r}): jsonschema would match those patterns with "
            "Python's re, not the vault's engine; use additionalProperties instead"
        )
    for ref, target in refs.items():
        if not (isinstance(target, bool) or id(target) in edges):
            hint = ""
            if dialect.uri == DRAFT7_DIALECT and "$defs" in ref:
                hint = ": draft-07 has no '$defs', put the subschema under 'definitions'"
            raise SchemaRefused(
                f"schema $ref {ref!r} does not point at a subschema (one the dialect's "
                f"keywords reach, so that it was checked){hint}"
            )
    _refuse_cycles(edges)
    return refs
