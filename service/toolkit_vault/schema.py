"""Toolkit config schemas: refuse hostile ones, validate configs, split out the secrets.

A toolkit's JSON Schema is untrusted input, so it is bounded and audited before anything
runs it: no remote `$ref`, no `$ref` loop that never consumes the config, regexes in RE2
(linear time) only. Each config is validated by a validator compiled once per schema
digest, then split into a public half (stored in clear for history) and a map of JSON
pointer -> secret value (each encrypted). The split fails closed: a property that no
`properties` names is a secret.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import re2
import referencing.jsonschema
import rfc8785
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from toolkit_vault.errors import ConfigInvalid, SchemaRefused

__all__ = [
    "CompiledSchema",
    "canonical_json",
    "check_sealable",
    "compile_schema",
    "merge_secrets",
    "schema_digest",
]

MAX_SCHEMA_BYTES = 256 * 1024
MAX_DEPTH = 64  # nested JSON containers, in schemas and in configs
MAX_PROPERTIES = 2_000
MAX_ENUM = 1_000
MAX_OBJECTS = 5_000  # the 2020-12 meta-schema check costs ~0.5 ms per subschema
MAX_DETAILS = 50
MAX_CONFIG_VALUES = 100_000  # values in one config, counted in every object and array
MAX_SECRETS = 1_000  # secret values in one config: each is sealed and fingerprinted
MEMO_ENTRIES = 256  # split's memo, per compiled schema (see CompiledSchema._plan)
MEMO_WIDTH = 64  # subschemas one memo entry may hold
MEMO_NAME = 64  # characters of a property name one memo entry may hold
DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DRAFT7_DIALECT = "http://json-schema.org/draft-07/schema"
INVALID = "config does not match the toolkit schema"

# Keywords whose value holds subschemas: one, a list, or (the _MAPS) a name -> schema map.
_SUBSCHEMA_KEYWORDS = (
    "$defs", "definitions", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf", "not",
    "if", "then", "else", "items", "prefixItems", "additionalItems", "contains",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip
_MAPS = frozenset(
    {"$defs", "definitions", "properties", "patternProperties", "dependentSchemas", "dependencies"}
)
# Applied to the same value as their parent: a loop through only these never ends.
_IN_PLACE = frozenset(
    {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"}
)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.never_capture = True  # a match is yes/no; group spans cost O(groups^2) memory


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """RE2 runs in linear time, so a hostile pattern cannot stall validation."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError("does not match pattern")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if _regex(pattern).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's version matches patternProperties with `re`; this one uses RE2."""
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [_regex(pattern) for pattern in schema.get("patternProperties", {})]
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


def _identity(value: Any) -> bytes:
    """JSON equality as bytes (1 == 1.0, true != 1). Numbers JCS refuses fall back to repr,
    which may miss a duplicate but never invents one."""
    try:
        return canonical_json(value)
    except (ValueError, TypeError):
        return repr(value).encode()


def _is_re2(instance: object) -> bool:
    """`format: regex` via RE2: Python's `re` parser recurses out of the stack on "((((...".
    Not cached: these strings come from configs."""
    if isinstance(instance, str):
        re2.compile(instance, _RE2_OPTIONS)
    return True


class _Dialect(NamedTuple):
    validator: type[Validator]
    specification: referencing.Specification[Any]
    formats: FormatChecker
    keywords: tuple[str, ...]  # the subschema keywords its meta-schema checks


def _dialect(base: Any, specification: Any, unchecked: set[str]) -> _Dialect:
    keywords = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "required": _required,
        "uniqueItems": _unique_items,
    }
    formats = FormatChecker(formats=())
    formats.checkers = {**base.FORMAT_CHECKER.checkers, "regex": (_is_re2, re2.error)}
    return _Dialect(
        extend(base, keywords),  # type: ignore[no-untyped-call]
        specification,
        formats,
        tuple(k for k in _SUBSCHEMA_KEYWORDS if k not in unchecked),
    )


_DIALECTS = {
    DEFAULT_DIALECT: _dialect(
        Draft202012Validator, referencing.jsonschema.DRAFT202012, {"additionalItems"}
    ),
    DRAFT7_DIALECT: _dialect(
        Draft7Validator,
        referencing.jsonschema.DRAFT7,
        {"$defs", "dependentSchemas", "prefixItems", "unevaluatedItems"}
        | {"unevaluatedProperties", "contentSchema"},
    ),
}


def _never_retrieve(uri: str) -> Resource[Any]:
    """Registry hook: a schema never makes the vault fetch anything."""
    raise LookupError(f"remote $ref refused: {uri}")


def _escape(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _pointer(path: Iterable[str | int]) -> str:
    return "".join("/" + _escape(token) for token in path)


def _containers(value: Any) -> Iterator[tuple[Any, int, str]]:
    """(container, depth, pointer) for every object and array, without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, pointer = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[tuple[str | int, Any]] = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            continue
        yield node, depth, pointer
        stack.extend((child, depth + 1, f"{pointer}/{_escape(key)}") for key, child in children)


def _oversized(config: Any) -> tuple[str, str] | None:
    """(pointer, keyword) where a config first nests too deep or holds too many values: a
    1 MiB message can carry 100,000 values, and validating or sealing each one costs."""
    values = 0
    for node, depth, pointer in _containers(config):
        if depth > MAX_DEPTH:
            return pointer, "maxDepth"
        values += len(node)
        if values > MAX_CONFIG_VALUES:
            return pointer, "maxValues"
    return None


def _check_bounds(schema: Mapping[str, Any]) -> None:
    """Refuse oversized schemas before any recursive or costly code sees them."""
    objects = properties = 0
    for node, depth, pointer in _containers(schema):
        if depth > MAX_DEPTH:
            raise SchemaRefused(f"schema nests deeper than {MAX_DEPTH} levels at {pointer!r}")
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


def _children(
    node: Mapping[str, Any], where: str, keywords: tuple[str, ...]
) -> Iterator[tuple[Mapping[str, Any], str, bool]]:
    """(subschema, its pointer, applies in place) for every object subschema under node."""
    for keyword in keywords:
        value = node.get(keyword)
        if keyword in _MAPS and isinstance(value, Mapping):
            found = [(f"/{keyword}/{_escape(key)}", child) for key, child in value.items()]
        elif isinstance(value, list):
            found = [(f"/{keyword}/{index}", child) for index, child in enumerate(value)]
        else:
            found = [(f"/{keyword}", value)]
        for suffix, child in found:
            if isinstance(child, Mapping):
                yield child, where + suffix, keyword in _IN_PLACE


def _check_node(node: Mapping[str, Any], where: str, *, root: bool) -> None:
    """Refuse what would escape the audit: a `$schema` or `$id` below the root makes
    jsonschema switch validator class (dropping RE2) or base URI, and dynamic refs resolve
    at run time. (Regexes were checked by the meta-schema's `format: regex`, in RE2.)"""
    if not root and "$schema" in node:
        raise SchemaRefused(f"schema has $schema below the root at {where!r}")
    if not root and "$id" in node and not str(node["$id"]).startswith("#"):
        raise SchemaRefused(f"schema has a nested $id at {where!r}")
    if "$dynamicRef" in node or "$recursiveRef" in node:
        raise SchemaRefused(f"schema uses dynamic references at {where!r}")


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
                raise SchemaRefused("schema has a $ref cycle that never descends into the config")
            elif child not in state:
                state[child] = False
                path.append((child, iter(edges[child])))


def _is_marked(node: Mapping[str, Any]) -> bool:
    return (
        node.get("writeOnly") is True
        or node.get("x-secret") is True
        or node.get("sensitive") is True
        or node.get("format") == "password"
    )


class _Plan(NamedTuple):
    """What `split` needs to know about a value the subschemas `schemas` apply to."""

    key: tuple[int, ...]  # the ids of `schemas`
    schemas: tuple[Any, ...]  # held, so no id in `key` can be reused
    secret: bool
    applied: tuple[Mapping[str, Any], ...]  # _closure(schemas, faithful=True)


def _remember(memo: dict[Any, _Plan], key: Any, plan: _Plan, width: int) -> None:
    """Store a plan unless the memo is full or the entry too wide (see CompiledSchema._plan)."""
    if width <= MEMO_WIDTH and len(memo) < MEMO_ENTRIES:
        memo[key] = plan


class CompiledSchema:
    """A checked schema with its validator; build it through `compile_schema` (cached)."""

    def __init__(self, schema: dict[str, Any], digest: str) -> None:
        uri = schema.get("$schema", DEFAULT_DIALECT)
        if not isinstance(uri, str) or uri.removesuffix("#") not in _DIALECTS:
            raise SchemaRefused("schema $schema must be JSON Schema draft 2020-12 or draft-07")
        dialect = _DIALECTS[uri.removesuffix("#")]
        check = dialect.validator.check_schema
        try:
            check(schema, format_checker=dialect.formats)  # type: ignore[call-arg]
        except SchemaError as error:
            where, keyword = _pointer(error.absolute_path), error.validator
            raise SchemaRefused(
                f"schema is invalid at {where!r} (meta-schema keyword {keyword!r})"
            ) from None
        if schema.get("type") != "object":
            raise SchemaRefused('schema root must declare "type": "object"')
        # With no $schema anywhere, jsonschema's evolve() keeps our RE2 class even at "#".
        root = {key: value for key, value in schema.items() if key != "$schema"}
        registry: Registry[Any] = Registry(retrieve=_never_retrieve)  # type: ignore[call-arg]
        resolver = registry.resolver_with_root(dialect.specification.create_resource(root))
        self.digest = digest
        self.schema: Mapping[str, Any] = MappingProxyType(schema)
        self._root = root
        self._draft7 = uri.removesuffix("#") == DRAFT7_DIALECT
        self._refs = self._audit(root, resolver, dialect.keywords)
        self._plans: dict[tuple[int, ...], _Plan] = {}
        self._members: dict[tuple[tuple[int, ...], str], _Plan] = {}
        self._validator = dialect.validator(root, registry=registry, format_checker=dialect.formats)

    @staticmethod
    def _audit(root: Mapping[str, Any], resolver: Any, keywords: tuple[str, ...]) -> dict[str, Any]:
        """Check every subschema; return each `$ref` resolved, for `split`.

        A `$ref` must land on a subschema this walk reaches (so the meta-schema checked it)
        and, with that, the walk covers everything the validator can ever run.
        """
        refs: dict[str, Any] = {}
        edges: dict[int, list[int]] = {}
        used: set[str] = set()
        stack: list[tuple[Mapping[str, Any], str]] = [(root, "")]
        while stack:
            node, where = stack.pop()
            _check_node(node, where, root=node is root)
            used.update(node)
            children = list(_children(node, where, keywords))
            edges[id(node)] = [id(child) for child, _, in_place in children if in_place]
            stack.extend((child, path) for child, path, _ in reversed(children))
            if "$ref" not in node:
                continue
            ref = node["$ref"]
            if not ref.startswith("#"):
                raise SchemaRefused(f"schema $ref at {where!r} is not local (must start '#')")
            try:
                refs[ref] = resolver.lookup(ref).contents
            except Unresolvable:
                raise SchemaRefused(f"schema $ref at {where!r} does not resolve") from None
            if isinstance(refs[ref], Mapping):
                edges[id(node)].append(id(refs[ref]))
        if {"unevaluatedProperties", "patternProperties"} <= used:
            raise SchemaRefused("schema combines unevaluatedProperties with patternProperties")
        for ref, target in refs.items():
            if not (isinstance(target, bool) or id(target) in edges):
                raise SchemaRefused(f"schema $ref {ref!r} does not point at a subschema")
        _refuse_cycles(edges)
        return refs

    def validate(self, config: Any) -> None:
        """Raise ConfigInvalid naming pointers and keywords only, never a submitted value."""
        if (oversized := _oversized(config)) is not None:
            pointer, keyword = oversized
            raise ConfigInvalid(INVALID, details=[{"pointer": pointer, "keyword": keyword}])
        found = {
            (_pointer(error.absolute_path), str(error.validator))
            for error in self._validator.iter_errors(config)
        }
        if found:
            details = [{"pointer": p, "keyword": k} for p, k in sorted(found)[:MAX_DETAILS]]
            raise ConfigInvalid(INVALID, details=details)

    def split(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(public, secrets): secrets maps RFC 6901 JSON pointer -> the value at that path.

        Validates first, so the split only ever runs on a config the schema describes. A
        secret array element leaves `None` in the public half, keeping indices stable.
        """
        self.validate(config)
        plan = self._plan([self._root])
        if plan.secret:
            return {}, {"": copy.deepcopy(dict(config))}
        secrets: dict[str, Any] = {}
        public = self._split(config, plan, "", secrets)
        if len(secrets) > MAX_SECRETS:
            details = [{"pointer": list(secrets)[MAX_SECRETS], "keyword": "maxSecrets"}]
            raise ConfigInvalid(INVALID, details=details)
        return public, secrets

    def secret_pointers(self, config: Mapping[str, Any]) -> list[str]:
        return sorted(self.split(config)[1])

    def is_secret_at(self, path: Sequence[str | int]) -> bool:
        """Whether `split` seals a value at `path` (a str is a property, an int an array
        index), from the same plans: a form marks as secret exactly what `split` seals."""
        plan = self._plan([self._root])
        for token in path:
            if plan.secret:
                return True
            if isinstance(token, int):
                plan = self._plan(self._item_schemas(plan.applied, token))
                continue
            child = self._member(plan, token)
            if child is None:
                return True
            plan = child
        return plan.secret

    def public_half(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """`split`'s public half, for a config an intake link will complete: the caller has
        validated it and found only missing required fields. Secrets in it are dropped."""
        plan = self._plan([self._root])
        if plan.secret:
            return {}
        public: dict[str, Any] = self._split(config, plan, "", {})
        return public

    def _split(self, value: Any, plan: _Plan, pointer: str, secrets: dict[str, Any]) -> Any:
        if isinstance(value, Mapping):
            public: dict[str, Any] = {}
            for key, item in value.items():
                path = f"{pointer}/{_escape(key)}"
                child = self._member(plan, key)
                if child is None or child.secret:
                    secrets[path] = copy.deepcopy(item)
                else:
                    public[key] = self._split(item, child, path, secrets)
            return public
        if isinstance(value, list):
            elements: list[Any] = []
            for index, item in enumerate(value):
                path = f"{pointer}/{index}"
                child = self._plan(self._item_schemas(plan.applied, index))
                if child.secret:
                    secrets[path] = copy.deepcopy(item)
                    elements.append(None)
                else:
                    elements.append(self._split(item, child, path, secrets))
            return elements
        return value

    def _plan(self, schemas: Sequence[Any]) -> _Plan:
        """`_closure` and `_is_secret` of `schemas`, memoized by the identity of its nodes.

        Why a memo: a schema splits config after config, and recomputing these for the same
        nodes was most of the cost of `split`. The nodes are this schema's own (held through
        `_root`, and by each plan) and never mutated after compile, so their ids are stable.
        Keys are node ids, never array indices, but a hostile schema can still reach
        exponentially many node sets: so entries are capped in number and in size, and past
        the cap a plan is computed afresh, as before the memo. Each store is one assignment
        of an immutable plan, safe for concurrent callers.
        """
        key = tuple(map(id, schemas))
        plan = self._plans.get(key)
        if plan is None:
            applied = tuple(self._closure(schemas, faithful=True))
            plan = _Plan(key, tuple(schemas), self._is_secret(schemas), applied)
            _remember(self._plans, key, plan, len(key) + len(applied))
        return plan

    def _member(self, plan: _Plan, name: str) -> _Plan | None:
        """The plan for property `name`, None if no `properties` declares it (so a secret).

        Memoized like `_plan`, and only for declared names: config keys are chosen by the
        caller, so an undeclared one must never take a memo entry.
        """
        child = self._members.get((plan.key, name))
        if child is None:
            subschemas = self._property_schemas(plan.applied, name)
            if subschemas is None:
                return None
            child = self._plan(subschemas)
            if len(name) <= MEMO_NAME:
                width = len(plan.key) + len(child.key) + len(child.applied)
                _remember(self._members, (plan.key, name), child, width)
        return child

    def _closure(self, schemas: Iterable[Any], *, faithful: bool) -> list[Mapping[str, Any]]:
        """Every subschema applied in place to the same value, `$ref` cycles cut.

        faithful=True mirrors the validator (draft-07 ignores a `$ref`'s siblings) and so
        decides which properties are declared; faithful=False also looks at such siblings,
        for secret markers, where seeing more can only hide more.
        """
        out: list[Mapping[str, Any]] = []
        seen: set[int] = set()
        stack = list(schemas)
        while stack:
            node = stack.pop()
            if not isinstance(node, Mapping) or id(node) in seen:
                continue
            seen.add(id(node))
            if "$ref" in node:
                stack.append(self._refs[node["$ref"]])
                if faithful and self._draft7:
                    continue
            out.append(node)
            for keyword in ("allOf", "anyOf", "oneOf"):
                stack.extend(node.get(keyword, ()))
            stack.extend(node.get(keyword) for keyword in ("if", "then", "else"))
            stack.extend(
                node.get("dependencies" if self._draft7 else "dependentSchemas", {}).values()
            )
        return out

    def _is_secret(self, schemas: Iterable[Any]) -> bool:
        return any(_is_marked(node) for node in self._closure(schemas, faithful=False))

    @staticmethod
    def _property_schemas(applied: Iterable[Mapping[str, Any]], key: str) -> list[Any] | None:
        """Every subschema the validator applies to property `key`; None if none names it."""
        named: list[Any] = []
        others: list[Any] = []
        for node in applied:
            patterns = node.get("patternProperties", {})
            matched = [sub for pattern, sub in patterns.items() if _regex(pattern).search(key)]
            if key in node.get("properties", {}):
                named.append(node["properties"][key])
            elif not matched and "additionalProperties" in node:
                others.append(node["additionalProperties"])
            others.extend(matched)
        return named + others if named else None

    def _item_schemas(self, applied: Iterable[Mapping[str, Any]], index: int) -> list[Any]:
        """Every subschema the validator applies to element `index` (`contains`: to all)."""
        found: list[Any] = [node["contains"] for node in applied if "contains" in node]
        for node in applied:
            items = node.get("items")
            prefix = items if self._draft7 else node.get("prefixItems")
            if isinstance(prefix, list) and index < len(prefix):
                found.append(prefix[index])
            elif isinstance(items, list):  # draft-07 tuple form, past its end
                found.extend([node["additionalItems"]] if "additionalItems" in node else [])
            elif items is not None:
                found.append(items)
            elif not self._draft7 and "unevaluatedItems" in node:
                found.append(node["unevaluatedItems"])
        return found


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON; raises rfc8785.CanonicalizationError (a ValueError)."""
    encoded: bytes = rfc8785.dumps(value)
    return encoded


def schema_digest(schema: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(schema)).hexdigest()


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """Check the schema (raises SchemaRefused) and compile it once per schema digest."""
    if not isinstance(schema, Mapping):
        raise SchemaRefused("schema must be a JSON object")
    _check_bounds(schema)
    try:
        canonical = canonical_json(schema)
    except (ValueError, TypeError):
        raise SchemaRefused("schema is not plain JSON") from None
    if len(canonical) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"schema is larger than {MAX_SCHEMA_BYTES} bytes")
    return _compile("sha256:" + hashlib.sha256(canonical).hexdigest(), canonical)


@functools.lru_cache(maxsize=256)
def _compile(digest: str, canonical: bytes) -> CompiledSchema:
    """Built from the canonical bytes: a private copy the caller cannot mutate later."""
    return CompiledSchema(json.loads(canonical), digest)


def check_sealable(secrets: Mapping[str, Any]) -> None:
    """Refuse secret values canonical JSON (RFC 8785) cannot carry: NaN, infinity, an
    integer beyond 2**53, a lone surrogate. They could be neither sealed nor fingerprinted,
    and the canonicalizer's own error message quotes the value."""
    bad = []
    for pointer, value in secrets.items():
        try:
            canonical_json(value)
        except (ValueError, TypeError):
            bad.append(pointer)
    if bad:
        details = [{"pointer": p, "keyword": "i-json"} for p in sorted(bad)[:MAX_DETAILS]]
        raise ConfigInvalid(INVALID, details=details)


def merge_secrets(public: Mapping[str, Any], secrets: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of split: merge_secrets(*s.split(c)) == c for every valid c."""
    merged: Any = copy.deepcopy(dict(public))
    for pointer in sorted(secrets):
        value = copy.deepcopy(secrets[pointer])
        if pointer == "":
            merged = value
            continue
        try:
            if not pointer.startswith("/"):
                raise ValueError(pointer)
            *parents, last = (
                t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")
            )
            parent = merged
            for part in parents:
                parent = parent[_index(parent, part)]
            parent[_index(parent, last)] = value
        except (KeyError, IndexError, TypeError, ValueError):
            details = [{"pointer": pointer, "keyword": "merge"}]
            raise ConfigInvalid(
                "a secret does not fit the public config", details=details
            ) from None
    if not isinstance(merged, dict):
        raise ConfigInvalid(
            "merged config is not an object", details=[{"pointer": "", "keyword": "type"}]
        )
    return merged


def _index(container: Any, part: str) -> str | int:
    """A list index must be canonical digits and already present (split left None there)."""
    if not isinstance(container, list):
        return part
    if not (part.isascii() and part.isdigit()) or (part != "0" and part.startswith("0")):
        raise ValueError(part)
    if int(part) >= len(container):
        raise IndexError(part)
    return int(part)
