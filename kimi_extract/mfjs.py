"""The rules of Kimi's strict JSON schema dialect ("Moonshot Flavored JSON Schema", MFJS).

One checker, used by the schema compiler's tests and by the simulator (which answers a schema that
breaks a rule with Kimi's 400). Problems are reported in Kimi's own form, e.g.
``At path 'properties.x': type is not defined`` (MoonshotAI/kimi-cli issues 1595 and 2061).

Rules (KIMI-NOTES.md, MoonshotAI/walle docs/mfjs-spec.md):

- the root is ``type: object``;
- every object has ``additionalProperties: false`` and lists every property in ``required``;
- every schema names its ``type`` (one of the JSON types), except a ``$ref`` and the parent of an
  ``anyOf``, which carries no ``type``; each ``anyOf`` item carries its own ``type`` (or is a
  ``$ref`` to a definition that does);
- ``$defs`` only at the root; ``$ref`` only to ``#/$defs/<name>`` that exists, with nothing beside
  it but ``description``;
- none of the unsupported keywords in ``FORBIDDEN_KEYWORDS``;
- an ``enum``'s values all share one type, the schema's ``type``;
- arrays say what their ``items`` are.
"""

from __future__ import annotations

from typing import Any

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

FORBIDDEN_KEYWORDS = frozenset(
    {
        "title",
        "$comment",
        "format",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "prefixItems",
        "unevaluatedItems",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "discriminator",
        "uniqueItems",
        "$schema",
        "const",
    }
)

ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "anyOf",
        "$ref",
        "$defs",
        "description",
    }
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_schema(schema: Any) -> list[str]:
    """Return every MFJS rule the schema breaks, each as ``At path '<path>': <problem>``.

    An empty list means the schema is valid in Kimi's strict mode.
    """
    problems: list[str] = []
    if not isinstance(schema, dict):
        return ["At path '': schema must be an object"]
    defs = schema.get("$defs", {})
    if not isinstance(defs, dict):
        problems.append("At path '$defs': $defs must be an object")
        defs = {}
    if schema.get("type") != "object":
        problems.append("At path '': the root schema must be of type object")
    checker = _Checker(defs, problems)
    checker.walk(schema, "", root=True)
    for name, sub in defs.items():
        checker.walk(sub, f"$defs.{name}", root=False)
    return problems


def first_problem(schema: Any) -> str | None:
    """The first rule the schema breaks, or None."""
    problems = check_schema(schema)
    return problems[0] if problems else None


class _Checker:
    def __init__(self, defs: dict[str, Any], problems: list[str]) -> None:
        self.defs = defs
        self.problems = problems

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"At path '{path}': {message}")

    def ref_type(self, ref: str) -> str | None:
        name = ref.removeprefix("#/$defs/")
        target = self.defs.get(name)
        return target.get("type") if isinstance(target, dict) else None

    def walk(self, node: Any, path: str, *, root: bool, in_any_of: bool = False) -> None:
        if not isinstance(node, dict):
            self.add(path, "schema must be an object")
            return
        for key in node:
            if key in FORBIDDEN_KEYWORDS:
                self.add(path, f"keyword '{key}' is not supported")
            elif key not in ALLOWED_KEYWORDS:
                self.add(path, f"unknown keyword '{key}'")
        if "$defs" in node and not root:
            self.add(path, "$defs is only allowed at the root")
        if "$ref" in node:
            self.check_ref(node, path)
            return
        has_any_of = "anyOf" in node
        node_type = node.get("type")
        if has_any_of:
            if "type" in node:
                self.add(
                    path,
                    "when using anyOf, type should be defined in anyOf items instead of the "
                    "parent schema",
                )
            items = node["anyOf"]
            if not isinstance(items, list) or not items:
                self.add(path, "anyOf must be a non-empty array")
                return
            for index, item in enumerate(items):
                self.walk(item, _join(path, f"anyOf.{index}"), root=False, in_any_of=True)
            return
        if node_type is None:
            self.add(path, "type is not defined")
            return
        if not isinstance(node_type, str) or node_type not in JSON_TYPES:
            self.add(path, f"type must be one of {sorted(JSON_TYPES)}, got {node_type!r}")
            return
        if "enum" in node:
            self.check_enum(node["enum"], node_type, path)
        if node_type == "object":
            self.check_object(node, path)
        elif node_type == "array":
            if "items" not in node:
                self.add(path, "items is not defined for array")
            else:
                self.walk(node["items"], _join(path, "items"), root=False)
        for key in ("properties", "required", "additionalProperties", "items"):
            if key in node and node_type not in ("object", "array"):
                self.add(path, f"keyword '{key}' is not allowed for type {node_type}")

    def check_ref(self, node: dict[str, Any], path: str) -> None:
        ref = node["$ref"]
        extra = sorted(set(node) - {"$ref", "description"})
        if extra:
            self.add(path, f"conflicting keywords found after $ref expansion: {extra}")
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            self.add(path, f"$ref must point to '#/$defs/<name>', got {ref!r}")
        elif ref.removeprefix("#/$defs/") not in self.defs:
            self.add(path, f"$ref {ref!r} does not exist")
        elif self.ref_type(ref) is None and "anyOf" not in self.defs[ref.removeprefix("#/$defs/")]:
            self.add(path, f"$ref {ref!r} points to a schema whose type is not defined")

    def check_enum(self, values: Any, node_type: str, path: str) -> None:
        if not isinstance(values, list) or not values:
            self.add(path, "enum must be a non-empty array")
            return
        types = {_json_type(v) for v in values}
        if node_type == "number":
            types = {"number" if t == "integer" else t for t in types}
        if len(types) > 1:
            self.add(path, f"enum values must all have the same type, got {sorted(types)}")
        elif types != {node_type}:
            self.add(path, f"enum values of type {types.pop()} do not match type {node_type}")

    def check_object(self, node: dict[str, Any], path: str) -> None:
        props = node.get("properties")
        if props is None:
            self.add(path, "properties is not defined for object")
            props = {}
        elif not isinstance(props, dict):
            self.add(path, "properties must be an object")
            props = {}
        if node.get("additionalProperties") is not False:
            self.add(path, "additionalProperties must be false")
        required = node.get("required", [])
        if not isinstance(required, list):
            self.add(path, "required must be an array")
            required = []
        missing = [name for name in props if name not in required]
        if missing:
            self.add(path, f"every property must be required; not required: {missing}")
        unknown = [name for name in required if name not in props]
        if unknown:
            self.add(path, f"required names properties that do not exist: {unknown}")
        for name, sub in props.items():
            self.walk(sub, _join(path, f"properties.{name}"), root=False)


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
