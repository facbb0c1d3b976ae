"""The secret split: a validated config into a public half and its secret values.

The public half is stored in clear for history; each secret value is sealed on its own,
under its JSON pointer. The split fails closed: a property that no `properties` names
(admitted through `patternProperties` or `additionalProperties`) is a secret, and so is
anything a secret marker touches, wherever in-place keywords (`allOf`, `$ref`, `if`, ...)
put it. `merge_secrets` is the inverse. compiled.py validates a config before it gets here.

Every secret value found is registered for redaction (`logs.register_secrets`) the moment
it is split, before anything uses it: a credential check's request, a plugin or a library
may log it long before it is stored, and a refused one is never stored at all.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from toolkit_vault.canonical import canonical_json
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.logs import register_secrets
from toolkit_vault.schema.patterns import compile_pattern
from toolkit_vault.schema.values import escape, pointer_tokens

__all__ = ["INVALID", "MAX_SECRETS", "SecretSplit", "check_sealable", "merge_secrets"]

INVALID = "config does not match the toolkit schema"
MAX_DETAILS = 50
MAX_SECRETS = 1_000  # secret values in one config: each is sealed and fingerprinted
MEMO_ENTRIES = 256  # the memo, per compiled schema (see SecretSplit._plan)
MEMO_WIDTH = 64  # subschemas one memo entry may hold
MEMO_NAME = 64  # characters of a property name one memo entry may hold


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
    """Store a plan unless the memo is full or the entry too wide (see SecretSplit._plan)."""
    if width <= MEMO_WIDTH and len(memo) < MEMO_ENTRIES:
        memo[key] = plan


class SecretSplit:
    """Splits configs of one compiled schema; `refs` maps each `$ref` to its target."""

    def __init__(self, root: Mapping[str, Any], refs: Mapping[str, Any], *, draft7: bool):
        self._root = root
        self._refs = refs
        self._draft7 = draft7
        # Keywords whose map values apply in place when their property is present.
        self._dependent = ("dependencies",) if draft7 else ("dependentSchemas", "dependencies")
        self._plans: dict[tuple[int, ...], _Plan] = {}
        self._members: dict[tuple[tuple[int, ...], str], _Plan] = {}

    def split(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(public, secrets) of a config the schema has validated. A secret array element
        leaves `None` in the public half, keeping indices stable."""
        plan = self._plan([self._root])
        if plan.secret:
            register_secrets([config])
            return {}, {"": copy.deepcopy(dict(config))}
        secrets: dict[str, Any] = {}
        public = self._split(config, plan, "", secrets)
        register_secrets(secrets.values())
        if len(secrets) > MAX_SECRETS:
            details = [{"pointer": list(secrets)[MAX_SECRETS], "keyword": "maxSecrets"}]
            raise ConfigInvalid(INVALID, details=details)
        return public, secrets

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
            register_secrets([config])
            return {}
        dropped: dict[str, Any] = {}
        public: dict[str, Any] = self._split(config, plan, "", dropped)
        register_secrets(dropped.values())
        return public

    def _split(self, value: Any, plan: _Plan, pointer: str, secrets: dict[str, Any]) -> Any:
        if isinstance(value, Mapping):
            public: dict[str, Any] = {}
            for key, item in value.items():
                path = f"{pointer}/{escape(key)}"
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
            for keyword in self._dependent:
                stack.extend(node.get(keyword, {}).values())
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
            matched = [s for p, s in patterns.items() if compile_pattern(p).search(key)]
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
            *parents, last = pointer_tokens(pointer)
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
