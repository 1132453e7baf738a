"""Kimi's JSON schema dialect (MFJS) as Moonshot's own validator, walle, defines it.

One checker, two levels, used by the schema compiler's tests and by the simulator:

- ``strict``: what Moonshot's server enforces ("the most permissive level required by Moonshot AI
  server", MoonshotAI/walle README). Unknown keywords (``format``, ``oneOf``...) pass unchecked.
- ``ultra``: walle's default and most thorough level. Adds: only MFJS keywords, only the keywords
  of the node's type, ``$defs``/``$id`` at the root only, nothing but ``description``/``title``
  beside ``$ref``/``anyOf``, no ``description``/``title`` both on an ``anyOf`` parent and a branch
  (or both beside a ``$ref`` and in its target), ranges that make sense, no duplicates in
  ``required`` or type lists, no empty property names.

Rules and messages follow MoonshotAI/walle ``docs/walle.md`` (the rule table) and its validator's
behaviour; limits are walle's defaults (``conf.go``, :data:`DEFAULT_LIMITS`). Where ``walle.md``
and the validator differ, the validator wins: ``walle.md`` asks every subschema to name its
``type`` and quotes older, smaller limits (100 properties, 5 levels, 10 anyOf items, 500 enum
values); walle's validator accepts an untyped subschema and applies the limits below.

Like walle, the checker stops at the first problem and reports it in walle's (and Kimi's) form:
``At path 'properties.a': when using anyOf, type should be defined in anyOf items instead of the
parent schema``; the root is ``root``, an ``anyOf`` branch is ``anyOf`` (walle's paths carry the
branch index, ``anyOf{0}``, which its messages drop outside "invalid path: ..."). Where walle
visits map keys in an unspecified order, this checker visits them sorted (keyword checks) or in
document order (properties), so with several problems it may name another one first.

The schema is judged as walle's Go code sees it (``gojson``): numbers as ``float64`` (sizes
count them as Go writes them; an integer beyond ``float64`` is a JSON parse error, as is a
nesting deeper than Go's decoder reads, :data:`MAX_NESTING`). Like walle, nesting through
``items``, ``anyOf`` and ``additionalProperties`` does not count toward the depth limit, which
counts ``properties`` levels only.

Since walle looks a node up again by its path when it checks ``enum``, ``required``, ``$ref``
and ``anyOf``, and reads a path part with ``{`` and ``}`` as an ``anyOf{index}``, a property or
``$defs`` name with both braces (``a{b}``) fails that lookup: such a node with one of those four
keywords is refused with ``invalid path``.

It never raises: every pass is iterative (the recursive rules of walle's reference pass run on
an explicit stack), so a schema thousands of levels deep is judged, not crashed on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator
from typing import Any, TypeVar

from ..exceptions import ConfigurationError

# walle's levels, reserved names and size limits are Kimi rules: they live in the Kimi profile.
from ..kimi import (
    BRACED_NAME,
    DEFAULT_LIMITS,
    LEVELS,
    RESERVED_PROPERTY_NAMES,
    Level,
    SchemaLimits,
)
from .gojson import MAX_NESTING, decode_problem, go_value, schema_size

__all__ = [
    "DEFAULT_LIMITS",
    "JSON_TYPES",
    "LEVELS",
    "MAX_NESTING",
    "RESERVED_PROPERTY_NAMES",
    "Level",
    "SchemaLimits",
    "check_schema",
    "first_problem",
    "schema_size",
]

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

_COMMON = frozenset({"description", "title"})  # allowed beside $ref / anyOf
_ROOT_ONLY = frozenset({"$defs", "$id"})
_SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "items",
        "enum",
        "required",
        "anyOf",
        "description",
        "$defs",
        "$ref",
        "title",
        "$id",
        "default",
        "maxLength",
        "minLength",
        "maximum",
        "minimum",
        "maxItems",
        "minItems",
        "pattern",  # accepted for strings, though walle lists it as "future"
    }
)
_NUMBER_KEYWORDS = _COMMON | {"type", "minimum", "maximum", "enum", "default"}
#: ultra: the keywords each type may carry (walle model.go's per-type lists).
_TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    "object": _COMMON
    | {"type", "properties", "required", "additionalProperties", "$ref", "anyOf", "default"},
    "array": _COMMON | {"type", "items", "minItems", "maxItems", "$ref", "default"},
    "string": _COMMON | {"type", "minLength", "maxLength", "pattern", "enum", "default"},
    "number": _NUMBER_KEYWORDS,
    "integer": _NUMBER_KEYWORDS,
    "boolean": _COMMON | {"type", "enum", "default"},
    "null": _COMMON | {"type", "enum", "default"},
}
_ENUM_PARTNERS = frozenset({"string", "integer", "number", "boolean"})

Path = tuple[str, ...]
#: One step of the main walk: (what to do, node, path, properties depth, braced name above).
_Step = tuple[str, Any, Path, int, bool]
#: walle's messages print an anyOf branch's path part ``anyOf{i}`` as ``anyOf``.
_BRANCH_INDEX = re.compile(r"anyOf\{[^}]+\}")


class _Unparsable(Exception):
    """walle cannot decode the schema's JSON text (a message not tied to a path)."""


class _Problem(Exception):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def text(self) -> str:
        if not self.path:
            return f"At path 'root': {self.message}"
        where = _BRANCH_INDEX.sub("anyOf", ".".join(self.path))
        return f"At path '{where}': {self.message}"


def check_schema(
    schema: Any, level: Level = "ultra", limits: SchemaLimits = DEFAULT_LIMITS
) -> list[str]:
    """The problem walle reports for ``schema`` at ``level`` (``[]`` when it is valid).

    Like walle, the check stops at the first problem, so the list has at most one item, in
    walle's form ``At path '<path>': <message>``.
    """
    if level not in LEVELS:
        raise ConfigurationError(f"level must be one of {LEVELS}, got {level!r}")
    try:
        _Walle(schema, level, limits).run()
    except _Problem as problem:
        return [problem.text()]
    except _Unparsable as problem:
        return [str(problem)]
    return []


def first_problem(
    schema: Any, level: Level = "ultra", limits: SchemaLimits = DEFAULT_LIMITS
) -> str | None:
    """The problem walle reports for ``schema`` at ``level``, or None when it is valid."""
    problems = check_schema(schema, level, limits)
    return problems[0] if problems else None


def _depth_message(limits: SchemaLimits) -> str:
    return f"schema depth exceeds maximum limit of {limits.max_depth}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _braced(name: str) -> bool:
    """walle reads a path part with both braces as ``anyOf{index}`` (``kimi.BRACED_NAME``)."""
    return "{" in name and BRACED_NAME.search(name) is not None


def _non_finite(schema: Any) -> bool:
    """Whether a number of the schema is NaN or infinite (iterative)."""
    stack: list[Any] = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


class _Walle:
    """One validation run: walle's passes over the schema, in walle's order."""

    def __init__(self, root: Any, level: Level, limits: SchemaLimits) -> None:
        self.root = root
        self.ultra = level == "ultra"
        self.limits = limits
        self.refs: dict[str, None] = {}
        self.total_properties = 0
        self.max_depth = 0
        self.def_depths: _DefDepths | None = None
        self.braced = False  # the node being checked lies under a braced name

    def fail(self, path: Path, message: str) -> _Problem:
        return _Problem(path, message)

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> None:
        root = self.root
        if not isinstance(root, dict):
            raise self.fail((), "schema must be a dict")
        if not root:
            return  # {} is ANY
        unparsable = decode_problem(root)
        if unparsable is not None:
            raise _Unparsable(unparsable)
        if _non_finite(root):
            raise self.fail((), "invalid number: NaN or Infinity not allowed")
        if schema_size(root) > self.limits.max_size:
            raise self.fail((), "schema exceeds maximum allowed size")
        self.def_depths = _DefDepths(self).compute()
        self.walk()
        if self.max_depth > self.limits.max_depth:
            raise self.fail((), _depth_message(self.limits))
        self.check_refs()

    # -- pass 1: every node, keyword by keyword (walle's TraverseSchema) ----------------------

    def walk(self) -> None:
        """Every node, depth first, with an explicit stack of (step, node, path, depth, braced).

        ``braced``: a property or ``$defs`` name on the node's path has both ``{`` and ``}``,
        so walle's lookup of the node by its path fails (see ``unreachable``).
        """
        stack: list[_Step] = [("visit", self.root, (), 0, False)]
        while stack:
            step, node, path, depth, braced = stack.pop()
            if step == "def":
                if not isinstance(node, dict):
                    raise self.fail(path[:-1], "$defs schema must be object")
                step = "visit"
            if step == "visit":
                stack.append(("body", node, path, depth, braced))
                self.enter(node, path, depth, braced, stack)
            else:
                self.braced = braced
                self.body(node, path, depth, braced, stack)

    def unreachable(self, path: Path, keyword: str) -> None:
        """walle re-reads the node at ``path`` before checking ``keyword`` (enum, required,
        $ref, anyOf), splitting a path part with braces as ``anyOf{index}``: under a braced
        name the lookup fails, "invalid path"."""
        if path and self.braced:
            raise self.fail((*path, keyword), f"invalid path: {'.'.join(path)}")

    def enter(
        self, node: dict[str, Any], path: Path, depth: int, braced: bool, stack: list[_Step]
    ) -> None:
        if depth > self.limits.max_depth:
            raise self.fail(path, _depth_message(self.limits))
        if self.ultra:
            unsupported = sorted(key for key in node if key not in _SUPPORTED)
            if unsupported:
                raise self.fail(path, f"unsupported keywords: {', '.join(unsupported)}")
        defs = node.get("$defs")
        if isinstance(defs, dict):
            for name in sorted(defs, reverse=True):
                inner = braced or _braced(name)
                stack.append(("def", defs[name], (*path, "$defs", name), depth, inner))

    def body(
        self, node: dict[str, Any], path: Path, depth: int, braced: bool, stack: list[_Step]
    ) -> None:
        if "type" in node:
            if "anyOf" in node:
                raise self.fail(
                    path,
                    "when using anyOf, type should be defined in anyOf items instead of the "
                    "parent schema",
                )
            if "$ref" in node:
                raise self.fail(
                    path,
                    "when using $ref, type should be defined in the referenced schema instead "
                    "of the parent schema",
                )
            kind = node["type"]
            if isinstance(kind, list) and len(kind) > 1 and "enum" in node:
                for item in kind:
                    if item in ("object", "array"):
                        raise self.fail(
                            path, f"type {item} is not allowed in combination with enum"
                        )
        self.type_and_keywords(node, path)
        for keyword in sorted(node):
            check = _KEYWORD_CHECKS.get(keyword)
            if check is not None:
                check(self, node, node[keyword], path)
        self.any_of_conflicts(node, path)
        self.max_depth = max(self.max_depth, depth)
        ref = node.get("$ref")
        if isinstance(ref, str):
            assert self.def_depths is not None
            self.max_depth = max(self.max_depth, depth + self.def_depths.depth_of(ref))
        children: list[_Step] = []
        props = node.get("properties")
        if isinstance(props, dict):
            self.total_properties += len(props)
            if self.total_properties > self.limits.max_properties:
                raise self.fail(
                    path,
                    f"total number of properties keys({self.total_properties}) across all "
                    f"objects exceeds maximum limit of {self.limits.max_properties}",
                )
            for name, sub in props.items():
                if isinstance(sub, dict):
                    inner = braced or _braced(name)
                    at = (*path, "properties", name)
                    children.append(("visit", sub, at, depth + 1, inner))
        if isinstance(node.get("items"), dict):
            children.append(("visit", node["items"], (*path, "items"), depth, braced))
        if isinstance(node.get("additionalProperties"), dict):
            extra = node["additionalProperties"]
            children.append(("visit", extra, (*path, "additionalProperties"), depth, braced))
        if isinstance(node.get("anyOf"), list):
            for index, branch in enumerate(node["anyOf"]):
                if isinstance(branch, dict):
                    at = (*path, f"anyOf{{{index}}}")
                    children.append(("visit", branch, at, depth, braced))
        stack.extend(reversed(children))

    def type_and_keywords(self, node: dict[str, Any], path: Path) -> None:
        if "type" not in node:
            return
        kind = node["type"]
        types: list[str] = []
        if isinstance(kind, str):
            if kind not in JSON_TYPES:
                raise self.fail(path, "invalid type")
            types = [kind]
        elif isinstance(kind, list):
            for item in kind:
                if not isinstance(item, str) or item not in JSON_TYPES:
                    raise self.fail(path, "invalid type in type array")
                types.append(item)
            if not types:
                raise self.fail(path, "type array cannot be empty")
        if len(types) > 1:
            enum_pair = False
            if len(types) == 2 and node.get("enum") is not None:
                if "object" in types or "array" in types:
                    raise self.fail(
                        path, "object and array cannot be used in combination with multiple types"
                    )
                enum_pair = True
            allowed_beside = _COMMON | {"type"} | (_ROOT_ONLY if not path else frozenset())
            for key in sorted(node):
                if key not in allowed_beside and not enum_pair:
                    raise self.fail(
                        path, f"keyword {key} is not allowed in combination with multiple types"
                    )
        if not types or not self.ultra:
            return
        if path:
            for key in sorted(node):
                if key in _ROOT_ONLY:
                    raise self.fail(path, f"keyword {key} must be at root level")
        allowed = set(_TYPE_KEYWORDS[types[0]])
        for other in types[1:]:
            allowed &= _TYPE_KEYWORDS[other]
        if not path:
            allowed |= _ROOT_ONLY
        invalid = sorted(key for key in node if key not in allowed)
        if invalid:
            raise self.fail(path, f"invalid keywords: {', '.join(invalid)}")
        if "minLength" in allowed:
            self.count_range(node, path, "minLength", "maxLength")
        if "minimum" in allowed:
            self.number_range(node, path, "integer" in types)
        if "minItems" in allowed:
            self.count_range(node, path, "minItems", "maxItems")

    def count_range(self, node: dict[str, Any], path: Path, low: str, high: str) -> None:
        for keyword in (low, high):
            value = node.get(keyword)
            if value is None:
                continue
            if not _is_number(value):
                raise self.fail(path, f"{keyword} must be an integer")
            if float(value) < 0:
                raise self.fail(path, f"{keyword} must be non-negative")
            if not float(value).is_integer():
                raise self.fail(path, "not a valid integer")
        least, most = node.get(low), node.get(high)
        if least is not None and most is not None and float(least) > float(most):
            raise self.fail(
                (*path, low),
                f"{low} ({go_value(node[low])}) cannot be greater than {high} "
                f"({go_value(node[high])})",
            )

    def number_range(self, node: dict[str, Any], path: Path, integer: bool) -> None:
        for keyword in ("minimum", "maximum"):
            value = node.get(keyword)
            if value is None:
                continue
            if not _is_number(value):
                what = "an integer" if integer else "a number"
                raise self.fail(path, f"{keyword} must be {what}")
            if integer and not float(value).is_integer():
                raise self.fail(path, "not a valid integer")
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None and float(low) > float(high):
            raise self.fail(
                path,
                f"minimum ({go_value(low)}) cannot be greater than maximum ({go_value(high)})",
            )

    def any_of_conflicts(self, node: dict[str, Any], path: Path) -> None:
        branches = node.get("anyOf")
        if not isinstance(branches, list):
            return
        outer = set(node) - {"anyOf"}
        for branch in branches:
            conflicts = self.conflicts(outer, branch)
            if conflicts:
                raise self.fail(
                    path,
                    f"conflicting keywords found in anyOf with parent: keywords "
                    f"({', '.join(conflicts)}) are defined on the parent schema and inside anyOf; "
                    "remove them from the parent or from anyOf branches",
                )

    def conflicts(self, outer: set[str], inner: dict[str, Any]) -> list[str]:
        """Keywords on both levels; description/title count only at ultra."""
        return sorted(k for k in inner if k in outer and (self.ultra or k not in _COMMON))

    # -- keyword checks (walle's keyword validators, run in sorted keyword order) -------------

    def check_type(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if isinstance(value, str):
            return
        if isinstance(value, list):
            if self.ultra and len(set(map(str, value))) != len(value):
                raise self.fail((*path, "type"), "duplicate types in type array")
            return
        raise self.fail(path, "type must be string or array of strings")

    def check_properties(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "properties")
        if not isinstance(value, dict):
            raise self.fail(where, "properties must be an object")
        for name, sub in value.items():
            if self.ultra and name == "":
                raise self.fail(where, "property name cannot be empty")
            if name in RESERVED_PROPERTY_NAMES:
                raise self.fail(
                    where, f"property name '{name}' is reserved for JSON Schema keywords"
                )
            if not isinstance(sub, dict):
                raise self.fail(where, f"property schema for '{name}' must be an object")

    def check_required(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "required")
        if not isinstance(value, list):
            raise self.fail(where, "required must be an array")
        if not value:
            return
        for name in value:
            if not isinstance(name, str):
                raise self.fail(where, "items in required array must be strings")
            if self.ultra and name == "":
                raise self.fail(where, "property names in required array cannot be empty")
        if self.ultra:
            seen: set[str] = set()
            for name in value:
                if name in seen:
                    raise self.fail(where, f"duplicate items in required array: {name}")
                seen.add(name)
        self.unreachable(path, "required")
        props = node.get("properties")
        if self.ultra:
            kind = node.get("type")
            if kind != "object" and kind != ["object"]:
                raise self.fail(where, "required keyword must be used with object")
            if not isinstance(props, dict):
                raise self.fail(where, "required specified but 'properties' keyword is missing")
        declared = props if isinstance(props, dict) else {}
        for name in value:
            if name not in declared:
                raise self.fail(where, f"required property '{name}' is not defined in properties")

    def check_enum(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "enum")
        if not isinstance(value, list):
            raise self.fail(where, "enum must be an array")
        if not value:
            raise self.fail(where, "enum array cannot be empty")
        if len(value) > self.limits.max_enum_items:
            raise self.fail(
                where, f"enum array cannot have more than {self.limits.max_enum_items} items"
            )
        self.unreachable(path, "enum")
        if "type" not in node:
            raise self.fail(path, "type is not defined")
        kind = node["type"]
        if isinstance(kind, str):
            types = [kind]
        elif isinstance(kind, list):
            if not all(isinstance(item, str) for item in kind):
                raise self.fail(path, "type array must be an array of strings")
            types = list(kind)
        else:
            raise self.fail(path, "invalid type value")
        if len(types) > 2 or (len(types) == 2 and "null" not in types):
            raise self.fail(
                path,
                "when type is array and enum is specified, currently only 2 types are "
                "supported, one must be null, and the other can be string/integer/number/boolean",
            )
        if len(types) == 2:
            other = next(t for t in types if t != "null") if types != ["null", "null"] else "null"
            if other not in _ENUM_PARTNERS:
                raise self.fail(path, f"invalid type combination with enum: {other} + null")
        for item in value:
            if not any(self.type_match(item, kind, where) for kind in types):
                raise self.fail(
                    where,
                    f"enum value ({go_value(item)}) does not match any type in [{' '.join(types)}]",
                )
        counted = {"string", "number", "integer"}
        if counted & set(types) and len(value) > self.limits.enum_string_check_threshold:
            total = sum(
                len(item.encode()) if isinstance(item, str) else len(go_value(item))
                for item in value
                if isinstance(item, str) or _is_number(item)
            )
            if total > self.limits.max_enum_string_length:
                raise self.fail(
                    where,
                    f"total string length of enum values ({total}) exceeds maximum limit of "
                    f"{self.limits.max_enum_string_length} characters when enum has more than "
                    f"{self.limits.enum_string_check_threshold} values",
                )

    def type_match(self, value: Any, kind: str, where: Path) -> bool:
        if kind == "string":
            return isinstance(value, str)
        if kind == "number":
            if not _is_number(value):
                raise self.fail(where, "not a valid number")
            return True
        if kind == "integer":
            if not _is_number(value) or not float(value).is_integer():
                raise self.fail(where, "not a valid integer")
            return True
        if kind == "boolean":
            return isinstance(value, bool)
        if kind == "null":
            return value is None
        if kind == "array":
            return isinstance(value, list)
        if kind == "object":
            return isinstance(value, dict)
        raise self.fail(where, "invalid type")

    def check_items(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, dict):
            raise self.fail((*path, "items"), "items must be an object")

    def check_ref(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "$ref")
        if not isinstance(value, str):
            raise self.fail(where, "$ref must be a string")
        if value == "#":
            self.refs[value] = None
            return
        if not value.startswith("#/$defs/"):
            raise self.fail(where, "references must start with #/$defs/")
        if value == "#/$defs/":
            raise self.fail(where, "definition name cannot be empty")
        if "$defs" not in self.root:
            raise self.fail(where, f"$defs not found for reference: {value}")
        self.unreachable(path, "$ref")
        if self.ultra:
            for key in sorted(node):
                if key != "$ref" and not (not path and key in _ROOT_ONLY) and key not in _COMMON:
                    raise self.fail(
                        path, f"keyword '{key}' is not allowed at the same level as $ref"
                    )
        self.refs[value] = None

    def check_description(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, str):
            raise self.fail((*path, "description"), "description must be a string")

    def check_any_of(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "anyOf")
        if not isinstance(value, list):
            raise self.fail(where, "anyOf must be an array")
        if not value or len(value) > self.limits.max_any_of_items:
            raise self.fail(where, f"anyOf must have 1-{self.limits.max_any_of_items} items")
        if not all(isinstance(branch, dict) for branch in value):
            raise self.fail(where, "schema in anyOf must be an object")
        self.unreachable(path, "anyOf")
        if self.ultra:
            for key in sorted(node):
                if key != "anyOf" and not (not path and key in _ROOT_ONLY) and key not in _COMMON:
                    raise self.fail(
                        path, f"keyword '{key}' is not allowed at the same level as anyOf"
                    )

    def check_additional(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, bool | dict):
            raise self.fail(
                (*path, "additionalProperties"),
                "additionalProperties must be a boolean or an object",
            )

    def check_defs(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "$defs")
        if not isinstance(value, dict):
            raise self.fail(where, "$defs must be an object")
        for name in sorted(value):
            if name == "":
                raise self.fail(where, "$defs property name cannot be empty")
            if "/" in name:
                raise self.fail(where, f"$defs property name '{name}' cannot contain '/' character")
            if not isinstance(value[name], dict):
                raise self.fail(where, f"$defs schema must be object: {name}")
            stack: list[tuple[dict[str, Any], Path]] = [(value[name], (*where, name))]
            while stack:
                current, at = stack.pop()
                for key, sub in current.items():
                    if "/" in key:
                        raise self.fail(
                            at[:-1], f"$defs property name '{key}' cannot contain '/' character"
                        )
                    if isinstance(sub, dict):
                        stack.append((sub, (*at, key)))
                    elif isinstance(sub, list):
                        stack.extend(
                            (item, (*at, f"{key}[{i}]"))
                            for i, item in enumerate(sub)
                            if isinstance(item, dict)
                        )

    def check_id(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail((*path, "$id"), "$id must be a string")

    def check_pattern(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail((*path, "pattern"), "pattern must be a string")

    # -- pass 2: references (walle's PostValidateRefs) ----------------------------------------

    def resolve(self, ref: str, path: Path = ()) -> dict[str, Any]:
        if ref == "#":
            return self.root
        if not ref.startswith("#/$defs/"):
            raise self.fail((*path, "$ref"), "only local references are supported")
        current: Any = self.root
        for part in ref[2:].split("/"):
            current = current.get(part) if isinstance(current, dict) else None
            if not isinstance(current, dict):
                raise self.fail(path, f"invalid $ref path: {ref}")
        return current

    def check_refs(self) -> None:
        for ref in self.refs:
            self.resolve(ref)
        try:
            needs_end = not self.terminates(self.root, set(), ())
        except _Problem:
            needs_end = True
        self.check_ref_sites(needs_end)

    def check_ref_sites(self, needs_end: bool) -> None:
        """Every ``$ref`` site, in document order (pre-order, on an explicit stack): its target
        in context, and, while no ancestor ends the recursion, that the target can end."""
        stack: list[tuple[dict[str, Any], bool, Path]] = [(self.root, needs_end, ())]
        while stack:
            node, needs_end, path = stack.pop()
            if "$ref" in node:
                expanded = self.expand(node, path)
                self.ref_context(node, expanded, path)
                if needs_end and not self.terminates(expanded, set(), path):
                    raise self.fail(
                        path, "detected infinite recursion without termination condition"
                    )
            children: list[tuple[dict[str, Any], bool, Path]] = []
            for key, value in node.items():
                if key == "$defs":
                    continue
                if isinstance(value, dict):
                    if key == "properties" and node.get("required") == []:
                        needs_end = False
                    elif key == "additionalProperties":
                        needs_end = False
                    children.append((value, needs_end, (*path, key)))
                elif isinstance(value, list) and key == "anyOf":
                    for index, branch in enumerate(value):
                        if isinstance(branch, dict):
                            children.append((branch, needs_end, (*path, f"anyOf{{{index}}}")))
            stack.extend(reversed(children))

    def expand(self, node: dict[str, Any], path: Path) -> dict[str, Any]:
        """The ``$ref``'s target; a chain of bare ``$ref`` defs is followed to its end."""
        ref = node["$ref"]
        if not isinstance(ref, str):
            raise self.fail((*path, "$ref"), "$ref must be a string")
        seen = {ref}
        current = dict(self.resolve(ref))
        kept: dict[str, Any] = {}
        layer, previous = ref, ""
        while isinstance(current.get("$ref"), str) or "$ref" in current:
            if any(key != "$ref" and key not in _COMMON for key in current):
                break
            following = current["$ref"]
            if not isinstance(following, str):
                raise self.fail((*path, "$ref"), "$ref must be a string")
            if following in seen:
                break
            seen.add(following)
            target = self.resolve(following)
            for key in current:
                if key not in _COMMON:
                    continue
                if key in kept:
                    if self.ultra:
                        outer = previous or layer
                        where = tuple(outer[2:].split("/")) if outer.startswith("#/") else path
                        raise self.fail(
                            where,
                            f'conflicting keywords found after $ref expansion: keyword "{key}" '
                            'appears at multiple levels in a chained "$ref"; keep it in only one '
                            "place",
                        )
                    continue
                kept[key] = current[key]
            previous, layer = layer, following
            current = dict(target)
        return {**current, **kept}

    def ref_context(self, parent: dict[str, Any], target: dict[str, Any], path: Path) -> None:
        outer = set(parent) - {"$ref"}
        clash = self.conflicts(outer, target)
        if clash:
            raise self.fail(
                path,
                f"conflicting keywords found after $ref expansion: keywords ({', '.join(clash)}) "
                'are defined both alongside "$ref" and in the referenced schema; remove the '
                "duplicates",
            )
        if ("type" in parent and "anyOf" in target) or ("type" in target and "anyOf" in parent):
            raise self.fail(
                path,
                "invalid schema after $ref expansion: (when using anyOf, type should be defined "
                "in anyOf items instead of the parent schema)",
            )
        branches = target.get("anyOf")
        if isinstance(branches, list):
            for branch in branches:
                if isinstance(branch, dict):
                    clash = self.conflicts(outer - {"anyOf"}, branch)
                    if clash:
                        raise self.fail(
                            path,
                            f"conflicting keywords found in anyOf after ref expansion: keywords "
                            f'({", ".join(clash)}) are defined alongside "$ref" and inside anyOf '
                            "in the referenced schema; define them in only one place",
                        )
        last = path[-1] if path else ""
        if (
            last in ("additionalProperties", "items")
            or last.startswith("anyOf")
            or (len(path) >= 2 and path[-2] == "properties")
            or len(path) <= 1
        ):
            return
        raise self.fail(path, "$ref is not allowed in this schema.")

    def terminates(self, node: dict[str, Any], seen: set[str], path: Path) -> bool:
        """Whether a value of ``node`` can be finite (walle's termination rule for refs)."""
        return _run(self._terminates(node, seen, path))

    def _terminates(self, node: dict[str, Any], seen: set[str], path: Path) -> _Recursion[bool]:
        """``terminates`` as a generator: each ``yield`` is a nested call (see ``_run``).

        ``path`` stays the ``$ref`` site's (nested calls do not extend it, so a chain thousands
        of levels deep holds no path per level); the messages below cannot be reached once the
        first pass has checked every property, branch and reference.
        """
        kind = node.get("type")
        checked = ""
        if isinstance(kind, str):
            if kind not in ("object", "array"):
                return True
            checked = kind
        elif isinstance(kind, list):
            for item in kind:
                if isinstance(item, str) and item not in ("object", "array"):
                    return True
                checked = str(item)
        if checked == "array":
            items = node.get("items")
            if not items:
                return True
            if isinstance(items, dict) and (yield self._terminates(items, seen, path)):
                return True
        if checked == "object":
            required = node.get("required")
            props = node.get("properties")
            if not required or not isinstance(props, dict) or not props:
                return True
            wanted = (
                set(r for r in required if isinstance(r, str))
                if isinstance(required, list)
                else set()
            )
            for name, sub in props.items():
                if not isinstance(sub, dict):
                    raise self.fail((*path, name), "property schema must be an object")
                if name in wanted and (yield self._terminates(sub, seen, path)):
                    return True
        branches = node.get("anyOf")
        if isinstance(branches, list):
            if not branches:
                return True
            reached: set[str] = set()
            for branch in branches:
                if not isinstance(branch, dict):
                    raise self.fail((*path, "anyOf"), "schema in anyOf must be an object")
                mine = set(seen)
                if (yield self._terminates(branch, mine, path)):
                    seen |= mine
                    return True
                reached |= mine
            seen |= reached
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                return False
            seen.add(ref)
            try:
                target = self.resolve(ref, path)
            except _Problem:
                raise self.fail(path, f"invalid $ref path: {ref}") from None
            return (yield self._terminates(target, seen, path))
        return not node


class _DefDepths:
    """walle's precomputed depth (nested ``properties`` levels) of each ``$defs`` entry.

    walle keys them by JSON-pointer-like text (``#/$defs/A``, ``#/$defs/A/properties/b``) that a
    ``$ref`` site looks up. Here a pointer is interned part by part as a number, so a chain
    thousands of levels deep costs no text per level. Results that did not depend on the refs
    already on the path are memoized, so a schema of many shared definitions stays linear.
    """

    def __init__(self, walle: _Walle) -> None:
        self.walle = walle
        self.ids: dict[tuple[int, str], int] = {}
        self.table: dict[int, int] = {}
        self.memo: dict[int, int] = {}

    def compute(self) -> _DefDepths:
        defs = self.walle.root.get("$defs")
        if isinstance(defs, dict):
            for name, sub in defs.items():
                if isinstance(sub, dict):
                    _run(self.measure(sub, self.pointer(f"#/$defs/{name}"), set()))
        return self

    def depth_of(self, ref: str) -> int:
        """The depth walle looks up for a ``$ref`` site (0 when it computed none)."""
        key = 0
        for part in ref.split("/"):
            found = self.ids.get((key, part))
            if found is None:
                return 0
            key = found
        return self.table.get(key, 0)

    def pointer(self, text: str, parent: int = 0) -> int:
        """The number of ``text`` (parts separated by ``/``) appended to ``parent``."""
        key = parent
        for part in text.split("/"):
            found = self.ids.get((key, part))
            if found is None:
                found = self.ids[(key, part)] = len(self.ids) + 1
            key = found
        return key

    def measure(
        self, node: dict[str, Any], where: int, seen: set[str]
    ) -> _Recursion[tuple[int, bool]]:
        """(depth, whether a ref was cut short because it was already on the path), as a
        generator for ``_run``."""
        if not node:
            return 0, False
        if where in self.memo:
            self.table[where] = self.memo[where]
            return self.memo[where], False
        self.table[where] = 0
        best, cut = 0, False
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                cut = True
            else:
                seen.add(ref)
                try:
                    target = self.walle.resolve(ref)
                except _Problem:
                    target = None
                if target is not None:
                    best, sub_cut = yield self.measure(target, self.pointer(ref), seen)
                    cut |= sub_cut
        props = node.get("properties")
        if isinstance(props, dict):
            level = 1
            for name, sub in props.items():
                if isinstance(sub, dict):
                    at = self.pointer(f"properties/{name}", where)
                    inner, sub_cut = yield self.measure(sub, at, set(seen))
                    level, cut = max(level, 1 + inner), cut | sub_cut
            best = max(best, level)
        branches = node.get("anyOf")
        if isinstance(branches, list):
            for index, branch in enumerate(branches):
                if isinstance(branch, dict):
                    at = self.pointer(f"anyOf/{index}", where)
                    inner, sub_cut = yield self.measure(branch, at, set(seen))
                    best, cut = max(best, inner), cut | sub_cut
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            at = self.pointer("additionalProperties", where)
            inner, sub_cut = yield self.measure(extra, at, set(seen))
            best, cut = max(best, inner), cut | sub_cut
        self.table[where] = best
        if not cut:
            self.memo[where] = best
        return best, cut


_T = TypeVar("_T")
#: A recursive function written as a generator: it yields the generator of each nested call
#: and receives that call's result (``_run`` drives it).
_Recursion = Generator["_Recursion[Any]", Any, _T]


def _run(call: _Recursion[_T]) -> _T:
    """Run a generator-coded recursion on an explicit stack (no Python recursion).

    An exception raised by any level propagates out, as it would through real recursion.
    """
    stack: list[_Recursion[Any]] = [call]
    result: Any = None
    while True:
        try:
            nested = stack[-1].send(result)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            result = stop.value
            continue
        stack.append(nested)
        result = None


_KEYWORD_CHECKS = {
    "type": _Walle.check_type,
    "properties": _Walle.check_properties,
    "required": _Walle.check_required,
    "enum": _Walle.check_enum,
    "items": _Walle.check_items,
    "$ref": _Walle.check_ref,
    "description": _Walle.check_description,
    "anyOf": _Walle.check_any_of,
    "additionalProperties": _Walle.check_additional,
    "$defs": _Walle.check_defs,
    "$id": _Walle.check_id,
    "pattern": _Walle.check_pattern,
}
