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
from typing import Any

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
from .dialect_base import (
    _COMMON,
    _ROOT_ONLY,
    JSON_TYPES,
    Path,
    _is_number,
    _Problem,
    _Unparsable,
)
from .dialect_keywords import _Keywords
from .dialect_refs import _DefDepths, _References
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
#: One step of the main walk: (what to do, node, path, properties depth, braced name above).
_Step = tuple[str, Any, Path, int, bool]


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


class _Walle(_Keywords, _References):
    """One validation run: walle's passes over the schema, in walle's order (the keyword checks
    in ``dialect_keywords``, the reference pass in ``dialect_refs``)."""

    def __init__(self, root: Any, level: Level, limits: SchemaLimits) -> None:
        self.root = root
        self.ultra = level == "ultra"
        self.limits = limits
        self.refs: dict[str, None] = {}
        self.total_properties = 0
        self.max_depth = 0
        self.def_depths: _DefDepths | None = None
        self.braced = False  # the node being checked lies under a braced name

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
